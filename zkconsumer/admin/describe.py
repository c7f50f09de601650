"""``describe``: a group's members and, per partition, offset, log end, lag and owner
(what ``kafka.tools.ConsumerOffsetChecker`` prints)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from ..consumer.topic_count import SubscriptionError, WildcardTopicCount, topic_count_from_registration
from ..errors import MalformedZnodeError, UnsupportedPatternError, ZkConsumerError
from ..structs import TopicPartition
from ..wire.protocol import LATEST_TIME
from ..zookeeper import zkformat
from . import reads
from .log_offsets import LogOffsets
from .reads import Progress
from .stores import CoordinatorOffsets, GroupOffsets, StoredOffset, read_group_offsets

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
    ``owner`` is the owning thread id or ``None``. Read from both stores, ``offset`` is the
    larger (what a dual-commit consumer resumes from), ``zookeeper_offset``/``kafka_offset``
    each store's, and ``disagree`` whether they differ."""

    topic: str
    partition: int
    offset: Optional[int]
    log_end_offset: Optional[int]
    lag: Optional[int]
    owner: Optional[str]
    zookeeper_offset: Optional[int] = None
    kafka_offset: Optional[int] = None
    disagree: bool = False

#: The :class:`PartitionRow` fields shown only when both stores were read.
BOTH_STORES_FIELDS = ("zookeeper_offset", "kafka_offset", "disagree")


@dataclass(frozen=True)
class GroupDescription:
    """The result of :func:`describe_group`; :meth:`to_dict` gives the JSON shape."""

    group: str
    members: List[MemberInfo]
    partitions: List[PartitionRow]
    warnings: List[str] = field(default_factory=list)
    #: Where the offsets were read: ``zookeeper``, ``kafka`` or ``both``; ``storage_detected``: by detection.
    offsets_storage: str = "zookeeper"
    storage_detected: bool = False

    def storage_note(self) -> str:
        """``offsets read from ...`` (one line, for the CLI's output)."""
        rows = [StoredOffset(p.topic, p.partition, self.offsets_storage, p.zookeeper_offset, p.kafka_offset)
                for p in self.partitions]
        return GroupOffsets(self.group, self.offsets_storage, self.storage_detected, rows).source_note()

    def to_dict(self) -> Dict[str, Any]:
        """``{"group", "offsets_storage", "offsets_storage_detected", "members": [...], "partitions":
        [{"topic", "partition", "offset", "log_end_offset", "lag", "owner"}], "warnings": [...]}``;
        with ``both`` each partition also has ``zookeeper_offset``, ``kafka_offset`` and ``disagree``."""
        hidden = () if self.offsets_storage == "both" else BOTH_STORES_FIELDS
        return {
            "group": self.group,
            "offsets_storage": self.offsets_storage,
            "offsets_storage_detected": self.storage_detected,
            "members": [asdict(m) for m in self.members],
            "partitions": [{k: v for k, v in asdict(p).items() if k not in hidden} for p in self.partitions],
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
    zk: KazooClient, group: str, log_offsets: LogOffsets, progress: Optional[Progress] = None,
    store: str = "zookeeper", kafka: Optional[CoordinatorOffsets] = None,
) -> GroupDescription:
    """Members and per-partition offset, log end, lag and owner of ``group``.

    Offsets come from ``store`` (:data:`~.stores.STORE_CHOICES`; ``kafka`` needed unless
    ``zookeeper``). ``detect`` falls back to ZooKeeper, with a warning, when Kafka's
    offsets cannot be read; ``kafka`` and ``both`` raise then.

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

    stored = _stored(zk, group, partitions, committed, store, kafka, warnings)
    existing = [tp for tp in partitions if tp[0] in partition_map]
    log_ends, problems = log_offsets.fetch(existing, LATEST_TIME) if existing else ({}, {})
    for tp, why in sorted(problems.items()):
        warnings.append(f"log end offset of {tp[0]}/{tp[1]} unknown: {why}")

    rows: List[PartitionRow] = []
    for (topic, p), row in zip(partitions, stored.rows):
        offset, log_end, owner = row.offset, log_ends.get((topic, p)), owners[(topic, p)]
        lag = log_end - offset if offset is not None and offset >= 0 and log_end is not None else None
        rows.append(PartitionRow(topic, p, offset, log_end, lag, owner, row.zookeeper, row.kafka, row.disagree))
        if owner is None and topic in subscribed and topic in partition_map:
            warnings.append(f"partition {topic}/{p} of a subscribed topic has no owner")
        if owner is not None and _thread_owner_member(owner) not in member_ids:
            warnings.append(f"partition {topic}/{p} is owned by {owner}, which is not a registered member")
    if stored.disagreements:
        warnings.append("offsets in ZooKeeper and Kafka disagree for " + ", ".join(
            f"{r.topic}/{r.partition} (zookeeper {_text(r.zookeeper)}, kafka {_text(r.kafka)})"
            for r in stored.disagreements))
    return GroupDescription(group, [m for m, _ in members], rows, warnings, stored.store, stored.detected)


def _text(offset: Optional[int]) -> str:
    return "none" if offset is None else str(offset)


def _stored(zk: KazooClient, group: str, partitions: List[TopicPartition],
            in_zookeeper: Dict[TopicPartition, Optional[int]], store: str, kafka: Optional[CoordinatorOffsets],
            warnings: List[str]) -> GroupOffsets:
    """The offsets of ``partitions`` from ``store`` (ZooKeeper's already read: ``in_zookeeper``)."""
    zookeeper_only = GroupOffsets(group, "zookeeper", store == "detect",
                                  [StoredOffset(t, p, "zookeeper", in_zookeeper[(t, p)]) for t, p in partitions])
    if store == "zookeeper" or not partitions:
        return zookeeper_only
    if store == "detect" and kafka is not None:
        try:
            return read_group_offsets(zk, group, partitions, store, kafka)
        except (ZkConsumerError, KazooException) as exc:
            warnings.append(f"offsets in Kafka could not be read ({exc}): showing ZooKeeper's")
            return zookeeper_only
    return read_group_offsets(zk, group, partitions, store, kafka)
