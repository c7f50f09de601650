"""``describe``: a group's members and, per partition, offset, log end, lag and owner
(what ``kafka.tools.ConsumerOffsetChecker`` prints)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from kazoo.client import KazooClient

from ..consumer.topic_count import SubscriptionError, WildcardTopicCount, topic_count_from_registration
from ..errors import MalformedZnodeError, UnsupportedPatternError
from ..structs import TopicPartition
from ..wire.protocol import LATEST_TIME
from ..zookeeper import zkformat
from . import reads
from .log_offsets import LogOffsets
from .reads import Progress

__all__ = ["MemberInfo", "PartitionRow", "GroupDescription", "describe_group"]


@dataclass(frozen=True)
class MemberInfo:
    """A registered member (``id`` is its consumer id). ``registered_since`` is ISO 8601 UTC from the registration timestamp
    (the node's creation time if the registration has none); ``error`` is set, and the
    subscription empty, when the node could not be decoded."""

    id: str
    subscription: Dict[str, int]
    pattern: Optional[str]
    registered_since: Optional[str]
    error: Optional[str] = None


@dataclass(frozen=True)
class PartitionRow:
    """One partition of a group: ``offset`` is the committed next offset (``None``: none
    committed), ``log_end_offset`` ``None`` when unknown, ``lag`` ``None`` when either is;
    ``owner`` is the owning thread id or ``None``."""

    topic: str
    partition: int
    offset: Optional[int]
    log_end_offset: Optional[int]
    lag: Optional[int]
    owner: Optional[str]


@dataclass(frozen=True)
class GroupDescription:
    """The result of :func:`describe_group`; :meth:`to_dict` gives the JSON shape."""

    group: str
    members: List[MemberInfo]
    partitions: List[PartitionRow]
    warnings: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        """``{"group", "members": [...], "partitions": [{"topic", "partition", "offset",
        "log_end_offset", "lag", "owner"}], "warnings": [...]}``"""
        return {
            "group": self.group,
            "members": [asdict(m) for m in self.members],
            "partitions": [asdict(p) for p in self.partitions],
            "warnings": list(self.warnings),
        }


def _read_members(zk: KazooClient, paths: zkformat.GroupPaths) -> List[Tuple[MemberInfo, Optional[zkformat.Registration]]]:
    result: List[Tuple[MemberInfo, Optional[zkformat.Registration]]] = []
    for consumer_id in reads.children(zk, paths.ids):
        path = paths.member(consumer_id)
        got = reads.get(zk, path)
        if got is None:
            continue  # left while we looked
        data, stat = got
        try:
            registration = zkformat.decode_registration(path, data)
        except MalformedZnodeError as exc:
            created = reads.iso_from_ms(stat.ctime)
            result.append((MemberInfo(consumer_id, {}, None, created, str(exc)), None))
            continue
        ms: Optional[int] = None
        if registration.timestamp is not None and registration.timestamp.strip().lstrip("-").isdigit():
            ms = int(registration.timestamp)
        registered = reads.iso_from_ms(ms if ms is not None and ms >= 0 else stat.ctime)
        result.append((MemberInfo(consumer_id, dict(registration.subscription), registration.pattern, registered),
                       registration))
    return result


def _subscribed_topics(
    members: Sequence[Tuple[MemberInfo, Optional[zkformat.Registration]]], all_topics: Sequence[str]
) -> Tuple[Set[str], List[str]]:
    """Topics some member subscribes to (wildcards evaluated against ``all_topics``), and warnings."""
    topics: Set[str] = set()
    warnings: List[str] = []
    for info, registration in members:
        if registration is None:
            continue
        try:
            count = topic_count_from_registration(info.id, registration, True)
        except (SubscriptionError, UnsupportedPatternError) as exc:
            warnings.append(f"member {info.id} has an unusable subscription: {exc}")
            continue
        if isinstance(count, WildcardTopicCount):
            topics.update(count.topics(all_topics))
        else:
            topics.update(count.subscription)
    return topics, warnings


def _thread_owner_member(thread_id: str) -> str:
    """The consumer id of a thread id ``<consumerId>-<i>``."""
    head, sep, tail = thread_id.rpartition("-")
    return head if sep and tail.isdigit() else thread_id


def describe_group(
    zk: KazooClient, group: str, log_offsets: LogOffsets, progress: Optional[Progress] = None
) -> GroupDescription:
    """Members and per-partition offset, log end, lag and owner of ``group``.

    Partitions covered: every partition of every topic the group has offsets or
    owners for, or that a member subscribes to; sorted by topic, then partition.
    Lag is ``log end - offset`` (as ConsumerOffsetChecker computes it), ``None``
    when either is unknown or the offset is negative. ``warnings`` flag
    partitions of subscribed topics without an owner, owners that are not
    registered members, subscribed topics that do not exist, offsets of topics
    that no longer exist, and log end offsets that could not be looked up.

    Raises :class:`UnknownGroupError` if ``/consumers/<group>`` does not exist,
    and :class:`~zkconsumer.errors.MalformedZnodeError` for an offset node that
    is not a decimal number.
    """
    paths = reads.require_group(zk, group)
    client = reads.group_client(zk, group)
    members = _read_members(zk, paths)
    warnings = [f"member {m.id}: {m.error}" for m, _ in members if m.error]
    all_topics = client.all_topics()
    subscribed, sub_warnings = _subscribed_topics(members, all_topics)
    warnings += sub_warnings
    offset_topics = set(reads.children(zk, paths.offsets))
    owner_topics = set(reads.children(zk, paths.owners))
    topics = sorted(offset_topics | owner_topics | subscribed)
    partition_map = client.partitions_for_topics(topics)
    member_ids = {m.id for m, _ in members}

    partitions: List[TopicPartition] = []
    for topic in topics:
        known = partition_map.get(topic)
        found = set(reads.partition_ids(reads.children(zk, paths.offsets_topic(topic)))) | set(
            reads.partition_ids(reads.children(zk, paths.owners_topic(topic))))
        if known is None:
            if topic in subscribed:
                warnings.append(f"subscribed topic {topic} does not exist")
            if found:
                warnings.append(f"topic {topic} does not exist, but the group has offsets or owners for it")
        partitions += [(topic, p) for p in sorted(set(known or ()) | found)]

    offset_paths = [paths.offset(t, p) for t, p in partitions]
    owner_paths = [paths.owner(t, p) for t, p in partitions]
    data = reads.get_many(zk, offset_paths + owner_paths, progress)
    committed: Dict[TopicPartition, Optional[int]] = {}
    owners: Dict[TopicPartition, Optional[str]] = {}
    for tp, offset_path, owner_path in zip(partitions, offset_paths, owner_paths):
        raw_offset, raw_owner = data[offset_path], data[owner_path]
        committed[tp] = None if raw_offset is None else zkformat.decode_offset(offset_path, raw_offset)
        owners[tp] = None
        if raw_owner is not None:
            try:
                owners[tp] = zkformat.decode_owner(owner_path, raw_owner)
            except MalformedZnodeError as exc:
                warnings.append(str(exc))

    existing = [tp for tp in partitions if tp[0] in partition_map]
    log_ends, problems = log_offsets.fetch(existing, LATEST_TIME) if existing else ({}, {})
    for tp, why in sorted(problems.items()):
        warnings.append(f"log end offset of {tp[0]}/{tp[1]} unknown: {why}")

    rows: List[PartitionRow] = []
    for topic, p in partitions:
        offset, log_end, owner = committed[(topic, p)], log_ends.get((topic, p)), owners[(topic, p)]
        lag = log_end - offset if offset is not None and offset >= 0 and log_end is not None else None
        rows.append(PartitionRow(topic, p, offset, log_end, lag, owner))
        if owner is None and topic in subscribed and topic in partition_map:
            warnings.append(f"partition {topic}/{p} of a subscribed topic has no owner")
        if owner is not None and _thread_owner_member(owner) not in member_ids:
            warnings.append(f"partition {topic}/{p} is owned by {owner}, which is not a registered member")
    return GroupDescription(group, [m for m, _ in members], rows, warnings)
