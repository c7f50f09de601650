"""Where a group's committed offsets are, for the admin commands: ZooKeeper, Kafka, or both.

A group following Kafka 0.8.2's ``offsets.storage=kafka`` keeps its offsets in the
coordinator's ``__consumer_offsets``; with ``dual.commit.enabled`` in both stores.
The admin commands read the store they are told to (``--offsets-storage``):

==============  ===================================================================
store           read
==============  ===================================================================
``zookeeper``   ``/consumers/<g>/offsets/<t>/<p>``
``kafka``       OffsetFetch v1 to the group's coordinator (:class:`CoordinatorOffsets`)
``both``        both, per partition; :attr:`StoredOffset.disagree` flags a difference
``detect``      both, then the store(s) that hold any offset of the group
                (ZooKeeper if neither does): :func:`read_group_offsets`
==============  ===================================================================

:class:`CoordinatorOffsets` reaches the coordinator through
:class:`~zkconsumer.offsets.channel.CoordinatorChannel` (found with a
GroupCoordinator request to a live broker from ``/brokers/ids``), reads with
:class:`~zkconsumer.offsets.storage.KafkaOffsetStorage` (its retries), commits with
*one* OffsetCommit v1 request carrying every partition (generation -1, member
``""``: a group whose membership is not the coordinator's, as Kafka 0.8.2 sends),
and asks DescribeGroups v0 for the coordinator's live members.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set

from kazoo.client import KazooClient

from ..errors import BrokerError, ZkConsumerError
from ..offsets.channel import CoordinatorChannel
from ..offsets.storage import DualOffsetStorage, KafkaOffsetStorage
from ..structs import TopicPartition
from ..wire.connection import BrokerConnection
from ..wire.group_protocol import (
    COORDINATOR_MOVED_CODES,
    GROUP_LOAD_IN_PROGRESS,
    DescribedGroup,
    DescribeGroupsRequest,
    OffsetCommitEntry,
    OffsetCommitRequestV1,
    error_name,
)
from . import reads
from .access import PLAINTEXT, BrokerAccess
from .errors import AdminError, UnknownTopicError

__all__ = ["OFFSET_STORES", "STORE_CHOICES", "StoredOffset", "GroupOffsets", "CoordinatorOffsets",
           "group_partitions", "read_group_offsets"]

#: The stores a command may be told to read (``both``: each, side by side).
OFFSET_STORES = ("zookeeper", "kafka", "both")
#: ``--offsets-storage`` choices: a store, or ``detect`` (where the group's offsets are).
STORE_CHOICES = ("detect",) + OFFSET_STORES

#: Per-partition commit codes worth sending the whole commit again for (same offsets: idempotent).
_COMMIT_RETRY_CODES = COORDINATOR_MOVED_CODES | {GROUP_LOAD_IN_PROGRESS}
#: Coordinator group states in which it has no members.
_MEMBERLESS_STATES = ("", "Dead", "Empty")


@dataclass(frozen=True)
class StoredOffset:
    """One partition's committed offsets: ``zookeeper``/``kafka`` are ``None`` where that store
    has none *or was not read* (``store`` says which were read: ``zookeeper``, ``kafka``, ``both``)."""

    topic: str
    partition: int
    store: str
    zookeeper: Optional[int] = None
    kafka: Optional[int] = None

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def offset(self) -> Optional[int]:
        """The offset a consumer of this store resumes from; for ``both`` the larger (a dual-commit read)."""
        if self.store == "zookeeper":
            return self.zookeeper
        if self.store == "kafka":
            return self.kafka
        return DualOffsetStorage.merge(self.kafka, self.zookeeper)

    @property
    def disagree(self) -> bool:
        """Both stores were read and hold different offsets (one having none counts)."""
        return self.store == "both" and self.zookeeper != self.kafka


@dataclass(frozen=True)
class GroupOffsets:
    """What :func:`read_group_offsets` found: the store read (``detected``: chosen by detection)."""

    group: str
    store: str
    detected: bool
    rows: List[StoredOffset]

    @property
    def disagreements(self) -> List[StoredOffset]:
        return [r for r in self.rows if r.disagree]

    def source_note(self) -> str:
        """One line naming the store read, e.g. ``Offsets read from Kafka (detected: ...)``."""
        where = "ZooKeeper and Kafka" if self.store == "both" else {"zookeeper": "ZooKeeper"}.get(self.store, "Kafka")
        note = f"Offsets read from {where}" + (" (detected: where the group has offsets)" if self.detected else "")
        if self.store == "both":
            note += f"; {len(self.disagreements)} partition(s) disagree"
        return note


class CoordinatorOffsets:
    """A group's offsets in Kafka, through its coordinator (see the module docstring).

    Connections are made lazily and closed by :meth:`close` (also a context manager).
    Reads raise :class:`~zkconsumer.errors.OffsetStorageError` or a
    :class:`~zkconsumer.errors.BrokerError` after ``retries`` further attempts.
    """

    def __init__(self, zk: KazooClient, group: str, *, socket_timeout_ms: int = 10000,
                 client_id: str = reads.ADMIN_CLIENT_ID, retries: int = 3, backoff_ms: int = 200,
                 access: BrokerAccess = PLAINTEXT) -> None:
        self.group = group
        client = reads.group_client(zk, group)

        def connect(host: str, port: int) -> BrokerConnection:
            return access.connection(host, port, client_id, socket_timeout_ms)

        self._channel = CoordinatorChannel(group, brokers=lambda: client.brokers(access.protocol), connect=connect,
                                           name="admin")
        self._attempts = 1 + max(0, retries)
        self._backoff_s = backoff_ms / 1000.0
        self._storage = KafkaOffsetStorage(self._channel, group, max_retries=retries, backoff_ms=backoff_ms)

    def __enter__(self) -> "CoordinatorOffsets":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    @property
    def coordinator(self) -> str:
        """The coordinator last used, in words (``"unknown"`` before any request)."""
        found = self._channel.coordinator
        return str(found) if found is not None else "unknown"

    def read(self, partitions: Iterable[TopicPartition]) -> Dict[TopicPartition, Optional[int]]:
        """The committed offset of each partition in Kafka (``None``: none), OffsetFetch v1."""
        return self._storage.read(partitions)

    def describe(self) -> DescribedGroup:
        """The coordinator's view of the group (state and members), DescribeGroups v0."""
        last: Optional[BaseException] = None
        for attempt in range(self._attempts):
            if attempt:
                time.sleep(self._backoff_s)
            try:
                found = [g for g in self._channel.send(DescribeGroupsRequest([self.group])) if g.group_id == self.group]
            except BrokerError as exc:
                if not exc.retriable:
                    raise
                last = exc
                continue
            if found and found[0].error_code == 0:
                return found[0]
            code = found[0].error_code if found else -1
            last = AdminError(f"the coordinator of group {self.group} did not describe it ({error_name(code)})")
            if code in COORDINATOR_MOVED_CODES:
                self._channel.invalidate(error_name(code))
            elif code != GROUP_LOAD_IN_PROGRESS:
                break
        raise AdminError(f"cannot describe group {self.group} at its coordinator: {last}")

    def live_members(self) -> List[str]:
        """The coordinator's members of the group, each as ``member_id (client_id@host)``; empty if none."""
        described = self.describe()
        if described.state in _MEMBERLESS_STATES:
            return []
        return [f"{m.member_id} ({m.client_id}@{m.client_host.lstrip('/')})" for m in described.members]

    def commit(self, offsets: Mapping[TopicPartition, int]) -> Dict[TopicPartition, int]:
        """Commit every offset in *one* OffsetCommit v1 request; return each partition's error code (0: stored).

        The whole request is sent again (same offsets) only while the coordinator moved or
        is loading the group, or the connection failed; other codes are returned as they are.
        """
        if not offsets:
            return {}
        request = OffsetCommitRequestV1(self.group, [OffsetCommitEntry(t, p, o) for (t, p), o in sorted(offsets.items())])
        codes: Dict[TopicPartition, int] = {}
        for attempt in range(self._attempts):
            if attempt:
                time.sleep(self._backoff_s)
            try:
                codes = self._channel.send(request).errors()
            except BrokerError as exc:
                if not exc.retriable or attempt == self._attempts - 1:
                    raise
                continue
            retry = {c for c in codes.values() if c in _COMMIT_RETRY_CODES}
            if not retry:
                break
            if retry & COORDINATOR_MOVED_CODES:
                self._channel.invalidate(error_name(min(retry)))
        return {tp: codes.get(tp, -1) for tp in offsets}


def group_partitions(zk: KazooClient, group: str, topics: Optional[Sequence[str]] = None) -> List[TopicPartition]:
    """The partitions whose offsets the admin commands read, sorted.

    ``topics`` given: every partition of those topics (:class:`UnknownTopicError` for
    one that does not exist); the group need not exist in ZooKeeper (a group that
    only ever committed to Kafka). Otherwise the topics the group has offsets or
    owners for in ZooKeeper (:class:`UnknownGroupError` if ``/consumers/<g>`` does not
    exist; :class:`AdminError` if it names no topic: OffsetFetch v1 needs them named).
    """
    client = reads.group_client(zk, group)
    if topics:
        wanted = sorted(set(topics))
        known = client.partitions_for_topics(wanted)
        for topic in wanted:
            if topic not in known:
                raise UnknownTopicError(topic)
        return [(t, p) for t in wanted for p in known[t]]
    paths = reads.require_group(zk, group)
    found = sorted(set(reads.children(zk, paths.offsets)) | set(reads.children(zk, paths.owners)))
    if not found:
        raise AdminError(f"group {group!r} has no offsets or owners in ZooKeeper to learn its topics from; "
                         "name them with --topic")
    known = client.partitions_for_topics(found)
    result: Set[TopicPartition] = set()
    for topic in found:
        result.update((topic, p) for p in known.get(topic, ()))
        result.update((topic, p) for p in reads.partition_ids(reads.children(zk, paths.offsets_topic(topic))))
    return sorted(result)


def _zookeeper_offsets(zk: KazooClient, group: str,
                       partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, Optional[int]]:
    return reads.group_client(zk, group).read_offsets(list(partitions))


def read_group_offsets(zk: KazooClient, group: str, partitions: Sequence[TopicPartition], store: str,
                       kafka: Optional[CoordinatorOffsets]) -> GroupOffsets:
    """The committed offsets of ``partitions`` in ``store`` (one of :data:`STORE_CHOICES`).

    ``kafka`` is required unless ``store`` is ``zookeeper``. ``detect`` reads both and
    keeps the store(s) that hold any offset of these partitions: ``both`` if each does,
    ZooKeeper if neither does. Raises :class:`AdminError` for an unknown store, and with
    ``detect`` when Kafka's offsets cannot be read (naming ``--offsets-storage zookeeper``).
    """
    if store not in STORE_CHOICES:
        raise AdminError(f"unknown offsets storage {store!r}: expected one of {', '.join(STORE_CHOICES)}")
    if store != "zookeeper" and kafka is None:
        raise AdminError(f"reading offsets from {store} needs the group's coordinator")
    in_zk: Dict[TopicPartition, Optional[int]] = {}
    in_kafka: Dict[TopicPartition, Optional[int]] = {}
    if store != "kafka":
        in_zk = _zookeeper_offsets(zk, group, partitions)
    if store != "zookeeper" and kafka is not None:
        try:
            in_kafka = kafka.read(partitions)
        except ZkConsumerError as exc:
            if store != "detect":
                raise
            raise AdminError(f"cannot tell where the offsets of group {group} are: Kafka's could not be read "
                             f"({exc}); pass --offsets-storage zookeeper to use ZooKeeper's alone") from exc
    chosen = store
    if store == "detect":
        has_zk = any(v is not None for v in in_zk.values())
        has_kafka = any(v is not None for v in in_kafka.values())
        chosen = "both" if has_zk and has_kafka else "kafka" if has_kafka else "zookeeper"
    rows = [StoredOffset(t, p, chosen,
                         in_zk.get((t, p)) if chosen != "kafka" else None,
                         in_kafka.get((t, p)) if chosen != "zookeeper" else None) for t, p in partitions]
    return GroupOffsets(group, chosen, store == "detect", rows)
