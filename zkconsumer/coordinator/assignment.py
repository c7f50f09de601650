"""What coordinator-managed members tell each other, and the leader's plan (pure, no I/O).

The broker's coordinator never looks inside a group's protocol bytes: members
send opaque *metadata* with JoinGroup, the elected leader receives everyone's,
computes the assignment and sends each member opaque *assignment* bytes with
SyncGroup. zkconsumer's protocol (``protocol_type`` :data:`PROTOCOL_TYPE`, one
protocol named after ``partition.assignment.strategy``: ``range`` or
``roundrobin``):

metadata
    The member's subscription, byte for byte the JSON its ZooKeeper registration
    would hold (:func:`zkconsumer.zookeeper.zkformat.encode_registration`)::

        {"version":1,"subscription":{"events":2},"pattern":"static","timestamp":"1700000000000"}

    (``white_list``/``black_list`` patterns carry ``{regex: streams}``). The
    timestamp is fixed for the connector's life: the coordinator compares a
    rejoining member's metadata to decide whether the group must rebalance.

assignment
    The member's partitions and the thread id (stream) each goes to::

        {"version":1,"partitions":{"events":{"0":"<member id>-0","1":"<member id>-1"}}}

The plan is Kafka's: each member ``m`` subscribing ``n`` streams to a topic
contributes thread ids ``m-0 .. m-(n-1)``, and the same pure assignors that
ZooKeeper members run (:mod:`zkconsumer.assignors`) map partitions to thread
ids, sorted as Java strings. Only the member ids differ: the coordinator
assigns them (``<client.id>-<uuid>``).

Worked example: members ``a`` (2 streams) and ``b`` (1 stream) on a 4-partition
topic with Range: thread ids ``a-0, a-1, b-0``; ``a-0`` takes 0 and 1, ``a-1``
takes 2, ``b-0`` takes 3.

>>> subs = {"a": StaticTopicCount("a", {"t": 2}), "b": StaticTopicCount("b", {"t": 1})}
>>> shares = plan("range", subs, PlanInputs((), {"t": (0, 1, 2, 3)}))
>>> shares["a"], shares["b"]
({('t', 0): 'a-0', ('t', 1): 'a-0', ('t', 2): 'a-1'}, {('t', 3): 'b-0'})
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Mapping, Sequence, Tuple

from .. import assignors
from ..assignors import Assignment, AssignmentError
from ..consumer.topic_count import StaticTopicCount, TopicCount, consumers_per_topic, topic_count_from_registration
from ..errors import MalformedZnodeError
from ..structs import TopicPartition
from ..zookeeper import zkformat

__all__ = [
    "ASSIGNMENT_VERSION", "PROTOCOL_TYPE", "PlanInputs", "decode_assignment", "decode_subscriptions",
    "encode_assignment", "encode_subscription", "plan", "read_inputs",
]

#: JoinGroup ``protocol_type`` of zkconsumer groups. A Java/kafka-python consumer
#: (protocol type ``consumer``) cannot join the same group by mistake: the
#: coordinator answers INCONSISTENT_GROUP_PROTOCOL.
PROTOCOL_TYPE = "zkconsumer"
ASSIGNMENT_VERSION = 1


def encode_subscription(count: TopicCount, timestamp_ms: int) -> bytes:
    """A member's JoinGroup metadata: its ZooKeeper registration JSON."""
    return zkformat.encode_registration(count.subscription, count.pattern, timestamp_ms)


def decode_subscriptions(members: Iterable[Tuple[str, bytes]], exclude_internal_topics: bool) -> Dict[str, TopicCount]:
    """Every member's :class:`TopicCount` (thread ids ``<member id>-<i>``) from its metadata.

    Raises :class:`~zkconsumer.assignors.AssignmentError` naming a member whose
    metadata is not a subscription.
    """
    result: Dict[str, TopicCount] = {}
    for member_id, metadata in members:
        try:
            registration = zkformat.decode_registration(f"(JoinGroup metadata of member {member_id})", metadata)
        except MalformedZnodeError as exc:
            raise AssignmentError(f"member {member_id} sent metadata that is not a zkconsumer subscription: {exc}") from exc
        result[member_id] = topic_count_from_registration(member_id, registration, exclude_internal_topics)
    return result


@dataclass(frozen=True)
class PlanInputs:
    """What the leader read from the cluster to plan: it replans when this changes.

    ``topics``: every topic name, read only when some member subscribes by
    pattern (else empty). ``partitions``: the partition ids of each subscribed
    topic that exists.
    """

    topics: Tuple[str, ...]
    partitions: Mapping[str, Tuple[int, ...]]


def read_inputs(subscriptions: Mapping[str, TopicCount], all_topics: Callable[[], Sequence[str]],
                partitions_for_topics: Callable[[Iterable[str]], Mapping[str, Sequence[int]]]) -> PlanInputs:
    """Read the topics and partitions ``subscriptions`` need, through the given readers."""
    wildcard = any(not isinstance(count, StaticTopicCount) for count in subscriptions.values())
    topics = tuple(sorted(all_topics())) if wildcard else ()
    wanted = consumers_per_topic(subscriptions.values(), topics)
    found = partitions_for_topics(list(wanted))
    return PlanInputs(topics, {t: tuple(sorted(ps)) for t, ps in sorted(found.items())})


def plan(protocol: str, subscriptions: Mapping[str, TopicCount], inputs: PlanInputs) -> Dict[str, Assignment]:
    """Each member's share (member id -> partition -> thread id); every member gets an entry.

    ``protocol`` names the assignor (``range`` or ``roundrobin``); RoundRobin
    raises :class:`~zkconsumer.assignors.AssignmentError` when members
    subscribe differently, as Kafka's does.
    """
    consumers = consumers_per_topic(subscriptions.values(), inputs.topics)
    whole = assignors.get_assignor(protocol)(consumers, inputs.partitions)
    shares: Dict[str, Assignment] = {member_id: {} for member_id in subscriptions}
    for tp, thread_id in whole.items():
        member_id, _ = assignors.split_thread_id(thread_id)
        shares[member_id][tp] = thread_id
    return shares


def encode_assignment(share: Mapping[TopicPartition, str]) -> bytes:
    """One member's SyncGroup assignment bytes (compact JSON, topics and partitions sorted).

    >>> encode_assignment({("t", 1): "m-0", ("t", 0): "m-1"})
    b'{"version":1,"partitions":{"t":{"0":"m-1","1":"m-0"}}}'
    """
    by_topic: Dict[str, Dict[str, str]] = {}
    for (topic, partition), thread_id in sorted(share.items()):
        by_topic.setdefault(topic, {})[str(partition)] = thread_id
    document = {"version": ASSIGNMENT_VERSION, "partitions": by_topic}
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_assignment(data: bytes, member_id: str) -> Assignment:
    """This member's partitions from SyncGroup bytes; empty bytes mean "nothing" (the coordinator's filler).

    Raises :class:`~zkconsumer.assignors.AssignmentError` for bytes that are not
    an assignment, or that hand this member another member's thread id.

    >>> decode_assignment(b'{"version":1,"partitions":{"t":{"0":"m-1"}}}', "m")
    {('t', 0): 'm-1'}
    """
    if not data:
        return {}
    try:
        document = json.loads(bytes(data).decode("utf-8"))
        partitions = document["partitions"]
        share: Assignment = {}
        for topic, entries in partitions.items():
            for partition, thread_id in entries.items():
                share[(str(topic), int(partition))] = str(thread_id)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise AssignmentError(f"member {member_id} received an unreadable assignment: {bytes(data)[:200]!r}") from exc
    foreign = [t for t in share.values() if not assignors.is_thread_of(t, member_id)]
    if foreign:
        raise AssignmentError(f"member {member_id} was assigned other members' thread ids: {sorted(set(foreign))}")
    return share
