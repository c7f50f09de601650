"""A zkconsumer member in a broker-managed group: what it sends, the leader's plan, its streams' share.

Pure functions, no I/O. The group speaks Kafka's standard consumer protocol
(:mod:`~zkconsumer.coordinator.consumer_protocol`: ``protocol_type``
``consumer``, protocols ``range`` and ``roundrobin``), so zkconsumer members,
Kafka's Java ``KafkaConsumer``, kafka-python and confluent-kafka share one group,
and whoever leads, each partition goes to the member Kafka's assignor names.

metadata
    Kafka's subscription: the topics the member reads now (a pattern
    subscription: the topics it matches when it joins), and as ``user_data``
    the member's ZooKeeper-style registration JSON (its stream counts and
    pattern), which other clients ignore and a zkconsumer leader reads to
    notice when a pattern member's topics change::

        {"version":1,"subscription":{"events":2},"pattern":"static","timestamp":"1700000000000"}

    The timestamp is fixed for the connector's life: the coordinator compares a
    rejoining member's metadata to decide whether the group must rebalance.

assignment
    Kafka's: the member's partitions. The member then spreads them over its own
    streams (:func:`spread`): thread ids ``<member id>-<i>``, as a ZooKeeper
    member numbers them, with the member's own assignor over its own threads.

Worked example: members ``a`` (2 streams) and ``b`` (1 stream) on a 4-partition
topic with Range: Kafka's assignor gives ``a`` partitions 0 and 1, ``b`` 2 and
3; ``a`` spreads its two over its streams ``a-0`` and ``a-1``.

>>> subs = [("a", subscription_metadata(StaticTopicCount("a", {"t": 2}), ["t"], 1)),
...         ("b", subscription_metadata(StaticTopicCount("b", {"t": 1}), ["t"], 1))]
>>> shares = plan("range", subs, {"t": 4})
>>> shares["a"], shares["b"]
([('t', 0), ('t', 1)], [('t', 2), ('t', 3)])
>>> spread(StaticTopicCount("a", {"t": 2}), shares["a"], "range")
{('t', 0): 'a-0', ('t', 1): 'a-1'}
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from .. import assignors
from ..assignors import Assignment, AssignmentError
from ..consumer.topic_count import StaticTopicCount, TopicCount, consumers_per_topic, topic_count_from_registration
from ..errors import MalformedZnodeError
from ..structs import TopicPartition
from ..zookeeper import zkformat
from . import consumer_protocol

__all__ = [
    "as_member", "decode_share", "member_topics", "pattern_members", "plan", "spread", "subscribed_topics",
    "subscription_metadata",
]


def subscribed_topics(count: TopicCount, all_topics: Sequence[str]) -> List[str]:
    """The topics ``count`` reads among ``all_topics`` (a static subscription: its own topics)."""
    return sorted(count.consumer_thread_ids(() if isinstance(count, StaticTopicCount) else all_topics))


def subscription_metadata(count: TopicCount, topics: Iterable[str], timestamp_ms: int) -> bytes:
    """A zkconsumer member's JoinGroup metadata: Kafka's subscription of ``topics``, with the
    member's registration JSON as ``user_data``."""
    registration = zkformat.encode_registration(count.subscription, count.pattern, timestamp_ms)
    return consumer_protocol.encode_subscription(topics, registration)


def member_topics(members: Sequence[Tuple[str, bytes]]) -> Dict[str, List[str]]:
    """Member id -> the topics its subscription lists (any consumer-protocol client); raises
    :class:`~zkconsumer.assignors.AssignmentError` naming a member whose metadata is not one."""
    return {member_id: consumer_protocol.decode_subscription(metadata, member_id)[0]
            for member_id, metadata in members}


def pattern_members(members: Sequence[Tuple[str, bytes]], exclude_internal_topics: bool
                    ) -> Dict[str, Tuple[TopicCount, Set[str]]]:
    """The zkconsumer members that subscribe by pattern: id -> (their subscription, the topics they
    listed). Other clients' ``user_data`` is not a zkconsumer registration and is skipped."""
    found: Dict[str, Tuple[TopicCount, Set[str]]] = {}
    for member_id, metadata in members:
        topics, user_data = consumer_protocol.decode_subscription(metadata, member_id)
        count = _zkconsumer_count(member_id, user_data, exclude_internal_topics)
        if count is not None and not isinstance(count, StaticTopicCount):
            found[member_id] = (count, set(topics))
    return found


def _zkconsumer_count(member_id: str, user_data: bytes, exclude_internal_topics: bool) -> Optional[TopicCount]:
    if not user_data.startswith(b"{"):
        return None
    try:
        registration = zkformat.decode_registration(f"(user data of member {member_id})", user_data)
    except MalformedZnodeError:
        return None
    return topic_count_from_registration(member_id, registration, exclude_internal_topics)


def plan(protocol: str, members: Sequence[Tuple[str, bytes]],
         partition_counts: Mapping[str, int]) -> Dict[str, List[TopicPartition]]:
    """Kafka's assignment: member id -> its partitions (every member gets an entry).

    ``protocol`` names Kafka's assignor (``range`` or ``roundrobin``);
    ``partition_counts``: each subscribed topic that exists and its partition
    count (a topic missing from it is skipped, as Kafka skips a topic it has
    no metadata for).
    """
    try:
        assignor = consumer_protocol.ASSIGNORS[protocol]
    except KeyError:
        raise AssignmentError(f"unknown assignor {protocol!r}; expected range or roundrobin") from None
    return assignor(member_topics(members), partition_counts)


def spread(count: TopicCount, partitions: Iterable[TopicPartition], strategy: str) -> Assignment:
    """This member's partitions over its own streams: partition -> thread id ``<member id>-<i>``.

    ``strategy`` (``range``/``roundrobin``) spreads them as the ZooKeeper
    assignors would with this member alone; a partition of a topic the member
    has no stream for (an assignment from a leader that read an older
    subscription) goes to its first stream of any topic, so nothing assigned is
    left unread.
    """
    mine = sorted(set(partitions))
    topics = sorted({topic for topic, _ in mine})
    threads = consumers_per_topic([count], topics)
    ids: Dict[str, List[int]] = {}
    for topic, partition in mine:
        ids.setdefault(topic, []).append(partition)
    known = {topic: ps for topic, ps in ids.items() if threads.get(topic)}
    share: Assignment = dict(assignors.get_assignor(strategy)({t: threads[t] for t in known}, known)) if known else {}
    fallback = next((t for ts in threads.values() for t in ts), f"{count.consumer_id}-0")
    for tp in mine:
        share.setdefault(tp, fallback)
    return share


def as_member(count: TopicCount, member_id: str, exclude_internal_topics: bool) -> TopicCount:
    """``count`` with the coordinator's member id as its consumer id (its thread ids ``<member id>-<i>``)."""
    registration = zkformat.encode_registration(count.subscription, count.pattern, 0)
    return topic_count_from_registration(
        member_id, zkformat.decode_registration(f"(subscription of member {member_id})", registration),
        exclude_internal_topics)


def decode_share(data: bytes, count: TopicCount, strategy: str) -> Assignment:
    """This member's share from SyncGroup bytes, spread over its streams (:func:`spread`); ``count``
    carries the member id (:func:`as_member`)."""
    return spread(count, consumer_protocol.decode_assignment(data, count.consumer_id), strategy)
