"""The coordinator backend's pure parts: member metadata, the leader's plan, assignment bytes."""

from __future__ import annotations

import pytest

from zkconsumer import assignors
from zkconsumer.assignors import AssignmentError
from zkconsumer.consumer.topic_count import StaticTopicCount, Whitelist, WildcardTopicCount
from zkconsumer.coordinator.assignment import (
    PROTOCOL_TYPE,
    PlanInputs,
    decode_assignment,
    decode_subscriptions,
    encode_assignment,
    encode_subscription,
    plan,
    read_inputs,
)


def test_metadata_is_the_zookeeper_registration_json() -> None:
    count = StaticTopicCount("whatever", {"events": 2})
    assert encode_subscription(count, 1700000000000) == \
        b'{"version":1,"subscription":{"events":2},"pattern":"static","timestamp":"1700000000000"}'
    wildcard = WildcardTopicCount("whatever", Whitelist("ev.*"), 3)
    decoded = decode_subscriptions([("m-1", encode_subscription(count, 1)), ("m-2", encode_subscription(wildcard, 1))], True)
    assert decoded["m-1"] == StaticTopicCount("m-1", {"events": 2})
    assert decoded["m-2"] == WildcardTopicCount("m-2", Whitelist("ev.*"), 3, True)
    assert PROTOCOL_TYPE == "zkconsumer"


def test_unreadable_metadata_names_the_member() -> None:
    with pytest.raises(AssignmentError, match="m-9"):
        decode_subscriptions([("m-9", b"\x00\x01binary consumer protocol")], True)


@pytest.mark.parametrize("protocol", ["range", "roundrobin"])
def test_the_plan_is_the_zookeeper_assignors_over_member_thread_ids(protocol: str) -> None:
    members = {"c-b9": StaticTopicCount("c-b9", {"t": 2, "u": 2}), "c-a1": StaticTopicCount("c-a1", {"t": 2, "u": 2}),
               "c-10": StaticTopicCount("c-10", {"t": 2, "u": 2})}
    inputs = PlanInputs((), {"t": tuple(range(7)), "u": (0, 1, 2)})
    shares = plan(protocol, members, inputs)
    threads = [f"{m}-{i}" for m in members for i in range(2)]
    whole = assignors.get_assignor(protocol)({"t": threads, "u": threads}, {"t": range(7), "u": range(3)})
    assert {tp: t for share in shares.values() for tp, t in share.items()} == whole
    for member, share in shares.items():
        assert share == assignors.owned_by(whole, member)


def test_every_member_gets_an_entry_even_with_nothing_to_do() -> None:
    members = {f"m-{i}": StaticTopicCount(f"m-{i}", {"t": 1}) for i in range(3)}
    shares = plan("range", members, PlanInputs((), {"t": (0,)}))
    assert shares == {"m-0": {("t", 0): "m-0-0"}, "m-1": {}, "m-2": {}}


def test_roundrobin_refuses_different_subscriptions_as_kafka_does() -> None:
    members = {"a": StaticTopicCount("a", {"t": 1, "u": 1}), "b": StaticTopicCount("b", {"t": 1})}
    with pytest.raises(AssignmentError):
        plan("roundrobin", members, PlanInputs((), {"t": (0, 1), "u": (0,)}))


def test_read_inputs_lists_topics_only_for_wildcards_and_skips_missing_topics() -> None:
    calls = []

    def all_topics():  # type: ignore[no-untyped-def]
        calls.append("all")
        return ["events", "evil", "logs"]

    def partitions(topics):  # type: ignore[no-untyped-def]
        known = {"events": [1, 0], "evil": [0], "logs": [0, 1, 2]}
        return {t: known[t] for t in topics if t in known}

    static = {"a": StaticTopicCount("a", {"events": 1, "gone": 1})}
    assert read_inputs(static, all_topics, partitions) == PlanInputs((), {"events": (0, 1)})
    assert calls == []
    wildcard = {"a": WildcardTopicCount("a", Whitelist("ev.*"), 1)}
    assert read_inputs(wildcard, all_topics, partitions) == \
        PlanInputs(("events", "evil", "logs"), {"events": (0, 1), "evil": (0,)})


def test_assignment_bytes_round_trip_and_are_checked() -> None:
    share = {("t", 3): "m-1-0", ("u", 0): "m-1-1", ("t", 10): "m-1-0"}
    data = encode_assignment(share)
    assert data == b'{"version":1,"partitions":{"t":{"3":"m-1-0","10":"m-1-0"},"u":{"0":"m-1-1"}}}'
    assert decode_assignment(data, "m-1") == share
    assert decode_assignment(b"", "m-1") == {}  # the coordinator's filler for members the leader left out
    with pytest.raises(AssignmentError, match="other members"):
        decode_assignment(data, "m")  # "m-1-0" is not a thread of member "m"
    with pytest.raises(AssignmentError, match="unreadable"):
        decode_assignment(b"{not json", "m-1")
