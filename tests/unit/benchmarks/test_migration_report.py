"""The migration benchmark's figures on synthetic deliveries (pure arithmetic)."""

from __future__ import annotations

from typing import List

import pytest

from benchmarks.migration_report import Delivery, duplicates, figures, longest_gap, lost, overlaps, resolve, table


def run(member: str, partition: int, offsets: range, t0: float, step: float = 0.02) -> List[Delivery]:
    return [(t0 + i * step, member, partition, o) for i, o in enumerate(offsets)]


def test_a_clean_hand_over_is_a_gap_not_an_overlap_and_its_repeats_are_duplicates() -> None:
    # partition 0 moves from a to b at 1.0 s; b starts at 1.5 s from a commit 3 behind a's last delivery
    deliveries = run("a", 0, range(0, 50), 0.02) + run("b", 0, range(47, 100), 1.5)
    f = figures(deliveries, 0.0, 2.6, partitions=1)
    assert f["longest_undelivered_s"] == pytest.approx(0.5)
    assert f["partition"] == 0
    assert f["duplicates"] == 3
    assert f["overlap"] == 0 and f["overlap_examples"] == []
    assert f["delivered_by"] == {"a": 50, "b": 53}


def test_two_members_alternating_on_one_partition_are_an_overlap() -> None:
    # a and b both deliver partition 3 from offset 10, interleaved
    a = [(1.0 + 0.02 * i, "a", 3, 10 + i) for i in range(10)]
    b = [(1.01 + 0.02 * i, "b", 3, 10 + i) for i in range(10)]
    steps = overlaps(a + b)
    assert steps and all(s.startswith("partition 3:") for s in steps)
    assert figures(a + b, 0.0, 2.0, partitions=4)["overlap"] == 1


def test_a_member_given_a_partition_back_after_another_went_on_from_its_commit_is_no_overlap() -> None:
    deliveries = run("a", 0, range(0, 10), 0.0) + run("b", 0, range(10, 20), 1.0) + run("a", 0, range(20, 30), 2.0)
    assert overlaps(deliveries) == []


def test_a_partition_never_delivered_again_counts_up_to_the_end_of_the_window() -> None:
    deliveries = run("a", 0, range(0, 10), 0.0, step=0.1) + run("a", 1, range(0, 5), 0.0, step=0.1)
    assert longest_gap(deliveries, 0.0, 3.0, partitions=2) == (pytest.approx(2.6), 1)
    # a partition with no delivery at all in the window: the whole window
    assert longest_gap(deliveries, 0.0, 3.0, partitions=3) == (pytest.approx(3.0), 2)


def test_only_the_window_counts() -> None:
    deliveries = run("a", 0, range(0, 10), 0.0) + run("a", 0, range(0, 10), 5.0)
    assert duplicates(deliveries) == 10
    assert figures(deliveries, 4.9, 6.0, partitions=1)["duplicates"] == 0


def test_values_printed_by_a_child_are_placed_by_the_producers_acknowledgements() -> None:
    where = {b"v1": (2, 40), b"v2": (5, 7)}
    assert resolve([(1.0, "java-5", b"v2"), (1.1, "java-5", b"never-acked")], where) == [(1.0, "java-5", 5, 7)]
    assert lost(where, [b"v1"]) == 1


def test_the_table_has_a_row_per_phase() -> None:
    row = {"longest_undelivered_s": 0.4, "partition": 3, "duplicates": 2, "overlap": 0, "lost": 0, "command_s": 9.0}
    lines = table({"live switch": row, "rollback": row}).splitlines()
    assert len(lines) == 4
    assert lines[2] == "| live switch | 0.40 s (partition 3) | 2 | 0 | 0 | 9.0 s |"
