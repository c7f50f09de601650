"""The coordinator backend's pure parts: Kafka's consumer protocol, its assignors, a member's spread."""

from __future__ import annotations

import random

import pytest
from kafka.protocol.old.consumer_protocol import ConsumerProtocolMemberAssignment_v0, ConsumerProtocolMemberMetadata_v0

from harness.assignment import expected_member_range, expected_member_roundrobin
from zkconsumer.assignors import AssignmentError
from zkconsumer.consumer.topic_count import StaticTopicCount, Whitelist, WildcardTopicCount
from zkconsumer.coordinator import consumer_protocol as cp
from zkconsumer.coordinator.assignment import (
    as_member,
    decode_share,
    pattern_members,
    plan,
    spread,
    subscribed_topics,
    subscription_metadata,
)
from zkconsumer.coordinator.consumer_protocol import PROTOCOL_TYPE
from zkconsumer.zookeeper import zkformat


def test_the_protocol_is_kafkas_consumer_protocol() -> None:
    assert PROTOCOL_TYPE == "consumer"


def test_subscription_bytes_are_kafkas_and_read_by_kafka_python() -> None:
    count = StaticTopicCount("whatever", {"events": 2, "audit": 1})
    data = subscription_metadata(count, subscribed_topics(count, ()), 1700000000000)
    theirs = ConsumerProtocolMemberMetadata_v0.decode(data)
    assert (theirs.version, theirs.topics) == (0, ["audit", "events"])
    assert theirs.user_data == zkformat.encode_registration({"events": 2, "audit": 1}, "static", 1700000000000)
    mine = ConsumerProtocolMemberMetadata_v0(version=0, topics=["b", "a"], user_data=b"").encode()
    assert cp.decode_subscription(mine, "m-1") == (["b", "a"], b"")
    assert cp.encode_subscription(["b", "a"]) == \
        ConsumerProtocolMemberMetadata_v0(version=0, topics=["a", "b"], user_data=b"").encode()


def test_assignment_bytes_are_kafkas_both_ways() -> None:
    ours = cp.encode_assignment([("t", 3), ("u", 0), ("t", 1)])
    theirs = ConsumerProtocolMemberAssignment_v0.decode(ours)
    assert theirs.version == 0 and [tuple(p) for p in theirs.partitions()] == [("t", 1), ("t", 3), ("u", 0)]
    assert ours == ConsumerProtocolMemberAssignment_v0(version=0, assigned_partitions=[("t", [1, 3]), ("u", [0])],
                                                       user_data=b"").encode()
    data = ConsumerProtocolMemberAssignment_v0(version=0, assigned_partitions=[("u", [2]), ("t", [0])],
                                               user_data=b"x").encode()
    assert cp.decode_assignment(data, "m") == [("t", 0), ("u", 2)]
    assert cp.decode_assignment(b"", "m") == []  # the coordinator's filler for a member the leader left out


def test_unreadable_bytes_name_the_member() -> None:
    with pytest.raises(AssignmentError, match="member m-9"):
        cp.decode_subscription(b'{"version":1}', "m-9")
    with pytest.raises(AssignmentError, match="member m-9"):
        cp.decode_assignment(b"\x00\x00\x00\x00\x00\x05", "m-9")


@pytest.mark.parametrize("seed", range(200))
def test_the_assignors_are_kafkas_for_any_group(seed: int) -> None:
    rng = random.Random(seed)
    topics = [f"t{i}" for i in range(rng.randint(1, 4))] + ["Z", "a\u00e9"]
    counts = {t: rng.randint(1, 9) for t in topics if rng.random() < 0.9}
    members = {f"{rng.choice(['consumer', 'zk', 'rdkafka'])}-{rng.getrandbits(32):08x}":
               rng.sample(topics, rng.randint(1, len(topics))) for _ in range(rng.randint(1, 6))}
    assert {m: sorted(ps) for m, ps in cp.assign_range(members, counts).items()} == expected_member_range(members, counts)
    assert cp.assign_roundrobin(members, counts) == expected_member_roundrobin(members, counts)
    for assignor in (cp.assign_range, cp.assign_roundrobin):
        shares = assignor(members, counts)
        owned = [tp for ps in shares.values() for tp in ps]
        assert len(owned) == len(set(owned))  # one owner each
        wanted = {(t, p) for ts in members.values() for t in ts if t in counts for p in range(counts[t])}
        assert set(owned) == wanted  # every subscribed partition


def test_the_leaders_plan_reads_any_clients_subscription() -> None:
    zk = subscription_metadata(StaticTopicCount("x", {"t": 2}), ["t"], 1)
    java = ConsumerProtocolMemberMetadata_v0(version=0, topics=["t"], user_data=b"").encode()
    shares = plan("range", [("zk-b", zk), ("consumer-a", java)], {"t": 5})
    assert shares == {"consumer-a": [("t", 0), ("t", 1), ("t", 2)], "zk-b": [("t", 3), ("t", 4)]}
    with pytest.raises(AssignmentError, match="unknown assignor"):
        plan("sticky", [("zk-b", zk)], {"t": 1})


def test_a_member_spreads_its_share_over_its_streams() -> None:
    count = as_member(StaticTopicCount("local", {"t": 2, "u": 1}), "zk-1", True)
    assert count.consumer_id == "zk-1"
    assert spread(count, [("t", 4), ("t", 0), ("t", 7), ("u", 2)], "range") == \
        {("t", 0): "zk-1-0", ("t", 4): "zk-1-0", ("t", 7): "zk-1-1", ("u", 2): "zk-1-0"}
    # a partition of a topic it has no stream for (a leader that read an older subscription) is still read
    assert spread(count, [("v", 0)], "range") == {("v", 0): "zk-1-0"}
    data = cp.encode_assignment([("t", 1), ("t", 2)])
    assert decode_share(data, count, "roundrobin") == {("t", 1): "zk-1-0", ("t", 2): "zk-1-1"}


def test_a_pattern_member_lists_what_it_matches_and_the_leader_knows_its_pattern() -> None:
    wildcard = WildcardTopicCount("local", Whitelist("ev.*"), 2)
    topics = subscribed_topics(wildcard, ["events", "evil", "logs", "__consumer_offsets"])
    assert topics == ["events", "evil"]
    data = subscription_metadata(wildcard, topics, 1)
    found = pattern_members([("zk-1", data), ("java-1", cp.encode_subscription(["events"]))], True)
    assert list(found) == ["zk-1"] and found["zk-1"][1] == {"events", "evil"}
