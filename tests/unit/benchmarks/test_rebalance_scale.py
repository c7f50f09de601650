"""The scale benchmark's pure parts: Range, request attribution, ownerless time (scale item 1)."""

from __future__ import annotations

from benchmarks.rebalance.scale import (
    FOUR_LETTER_PACKETS,
    Change,
    Counters,
    EventResult,
    Run,
    member_packets,
)
from harness.assignment import expected_range_of_topics


def test_scale_item1_range_over_two_topics_matches_kafkas_layout() -> None:
    threads = {"a": ["g_m2-0", "g_m1-0", "g_m1-1"], "b": ["g_m1-0"]}
    assert expected_range_of_topics(threads, {"a": 4, "b": 2}) == {
        ("a", 0): "g_m1-0", ("a", 1): "g_m1-0", ("a", 2): "g_m1-1", ("a", 3): "g_m2-0",
        ("b", 0): "g_m1-0", ("b", 1): "g_m1-0"}


def test_scale_item1_requests_are_the_members_not_the_brokers_or_the_observer() -> None:
    before = Counters(0.0, 1000, {1: 100, 2: 50, 10: 10})  # 1, 2: brokers/observer; 10: a member
    after = Counters(5.0, 1000 + 40 + 7 + 25 + 3 + FOUR_LETTER_PACKETS, {1: 140, 2: 57, 10: 35, 11: 3})
    # the rest (here 0) would be sessions closed in between: counted as members' (a member leaving)
    assert member_packets(before, after, {10, 11}) == 25 + 3


def test_scale_item1_ownerless_time_splits_moved_and_kept_partitions() -> None:
    run = Run.__new__(Run)
    run.partitions = {"t": 3}
    before = {("t", 0): "a-0", ("t", 1): "a-0", ("t", 2): "b-0"}
    after = {("t", 0): "a-0", ("t", 1): "c-0", ("t", 2): "b-0"}
    changes = [Change(10.5, 10.6, ("t", 1), None), Change(11.0, 11.1, ("t", 1), "c-0"),
               Change(10.2, 10.3, ("t", 2), None), Change(10.4, 10.5, ("t", 2), "b-0")]
    result = EventResult("join", "kafka", 2)
    run._ownerless(result, before, after, changes, 10.0, 12.0)
    assert result.moved == 1
    assert round(result.max_ownerless_s, 3) == 0.5
    assert round(result.ownerless_partition_s, 3) == 0.7
    assert round(result.kept_ownerless_s, 3) == 0.2  # partition 2 stayed with b but was released meanwhile
