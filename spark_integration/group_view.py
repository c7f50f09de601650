"""The driver's view of a consumer group: partitions, committed offsets, log offsets, commits.

:class:`GroupView` opens its own ZooKeeper session (it never joins the group:
nothing is registered under ``/consumers/<group>/ids``) and asks partition
leaders for log offsets through :class:`~zkconsumer.admin.BrokerOffsets`. It is
used on the driver only: by :func:`~spark_integration.create_rdd`,
:func:`~spark_integration.commit_offset_ranges` and the streaming source's
planner. Executors never receive it (it is not picklable).

Offsets are read and written where the group keeps them, chosen with Kafka
0.8.2's consumer properties, as the connector does
(:func:`zkconsumer.consumer.offset_stores.make_offset_storage`):

=============================================  ===============================================
``offsets.storage`` / ``dual.commit.enabled``  offsets
=============================================  ===============================================
``zookeeper`` (the default)                    ``/consumers/<group>/offsets/<topic>/<partition>``,
                                               the nodes Kafka's consumer and tools use
                                               (ConsumerOffsetChecker, Burrow see them)
``kafka`` / ``false``                          the coordinator's ``__consumer_offsets``
                                               (OffsetFetch v1; OffsetCommit v1, generation -1)
``kafka`` / ``true`` (``kafka``'s default)     both: commits go to Kafka, then to ZooKeeper
                                               what Kafka accepted; reads take the larger
=============================================  ===============================================

A commit to Kafka carries no generation (the driver is no member of the group):
while coordinator members (``group.membership=kafka``, or Kafka's new consumers)
hold the group, the coordinator refuses it, and :meth:`GroupView.commit` raises the
connector's :class:`~zkconsumer.errors.OffsetStorageError` naming that cause,
with nothing written to ZooKeeper either.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from zkconsumer import ConsumerConfig, OffsetStorageError, Whitelist, ZkConsumerError, ZooKeeperUnavailableError
from zkconsumer.admin import BrokerOffsets, UnknownTopicError
from zkconsumer.commits import CommitEntry, OffsetStorage
from zkconsumer.consumer.offset_stores import make_offset_storage
from zkconsumer.kerberos import broker_authenticator, zookeeper_sasl_options
from zkconsumer.structs import TopicPartition
from zkconsumer.wire.protocol import EARLIEST_TIME, LATEST_TIME
from zkconsumer.wire.tls import broker_ssl_context
from zkconsumer.zookeeper.acl import zookeeper_acls, zookeeper_auth_data
from zkconsumer.zookeeper.group import GroupClient
from zkconsumer.zookeeper.reachability import diagnose

from .ranges import OffsetRange, plan_ranges, resolve_start

__all__ = ["GroupView", "LogOffsetsUnavailableError", "open_zookeeper", "DRIVER_CLIENT_ID"]

log = logging.getLogger(__name__)

#: Consumer id of the driver's GroupClient (never registered as a member).
DRIVER_CLIENT_ID = "zkconsumer-spark-driver"

#: ``(host, port)`` of a live broker.
BrokerAddress = Tuple[str, int]


class LogOffsetsUnavailableError(ZkConsumerError):
    """The log start/end of some partitions could not be looked up (no leader, broker down)."""

    retriable = True

    def __init__(self, problems: Mapping[TopicPartition, str]) -> None:
        self.problems = dict(problems)
        shown = "; ".join(f"{t}/{p}: {why}" for (t, p), why in sorted(self.problems.items())[:5])
        more = f" (and {len(self.problems) - 5} more)" if len(self.problems) > 5 else ""
        super().__init__(f"cannot look up log offsets of {len(self.problems)} partition(s): {shown}{more}")


def open_zookeeper(config: ConsumerConfig) -> KazooClient:
    """A started KazooClient for ``zookeeper.connect`` (chroot included) with the config's timeouts and auth.

    Raises :class:`~zkconsumer.ZooKeeperUnavailableError` naming ``zookeeper.connect``
    if no server answers within ``zookeeper.connection.timeout.ms``.
    """
    client = KazooClient(
        hosts=config.zookeeper_connect,
        timeout=config.zookeeper_session_timeout_ms / 1000.0,
        auth_data=zookeeper_auth_data(config),
        sasl_options=zookeeper_sasl_options(config),
    )
    try:
        client.start(timeout=config.zookeeper_connection_timeout_ms / 1000.0)
    except KazooTimeoutError as exc:
        client.close()
        raise ZooKeeperUnavailableError(
            f"could not connect to ZooKeeper at zookeeper.connect={config.zookeeper_connect!r} within "
            f"zookeeper.connection.timeout.ms={config.zookeeper_connection_timeout_ms}: "
            f"{diagnose(config.zookeeper_connect)}"
        ) from exc
    return client


class GroupView:
    """Driver-side access to one group (``group.id``) on one cluster (``zookeeper.connect``).

    A context manager; :meth:`close` ends the ZooKeeper session and broker
    connections. Not thread-safe. ``sleep`` is injectable for tests.
    """

    def __init__(self, config: ConsumerConfig, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self._sleep = sleep
        self._zk = open_zookeeper(config)
        self._group = GroupClient(
            self._zk, config.group_id, DRIVER_CLIENT_ID,
            retry_timeout_s=config.zookeeper_session_timeout_ms / 1000.0, acl=zookeeper_acls(config),
        )
        self._log_offsets = self._new_log_offsets()
        self._storage: Optional[OffsetStorage] = None

    @property
    def offsets_storage(self) -> str:
        """Where the group's offsets are read and written: ``zookeeper``, ``kafka`` or ``kafka+zookeeper``."""
        if self.config.offsets_storage == "zookeeper":
            return "zookeeper"
        return "kafka+zookeeper" if self.config.dual_commit_enabled else "kafka"

    def _offset_storage(self) -> OffsetStorage:
        """The connector's storage for ``offsets.storage``, unfenced (the driver owns no partition); lazy."""
        if self._storage is None:
            self._storage = make_offset_storage(self.config, self._group, owner_fenced=False)
        return self._storage

    def _new_log_offsets(self) -> BrokerOffsets:
        cfg = self.config
        return BrokerOffsets(self._zk, socket_timeout_ms=cfg.socket_timeout_ms, client_id=cfg.client_id,
                             protocol=cfg.security_protocol, ssl_context=broker_ssl_context(cfg),
                             authenticate=broker_authenticator(cfg))

    def __enter__(self) -> "GroupView":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close broker connections and the ZooKeeper session (idempotent)."""
        self._log_offsets.close()
        if self._storage is not None:
            self._storage.close()
            self._storage = None
        self._zk.stop()
        self._zk.close()

    def __getstate__(self) -> None:
        raise TypeError("GroupView holds a ZooKeeper session and is driver-only; ship plain data to executors")

    # ------------------------------------------------------------------ topology

    def partitions(self, topics: Sequence[str]) -> Dict[str, List[int]]:
        """Sorted partition ids of each topic; :class:`~zkconsumer.admin.UnknownTopicError` for a missing one."""
        found = self._group.partitions_for_topics(topics)
        for topic in topics:
            if topic not in found:
                raise UnknownTopicError(topic)
        return found

    def matching_topics(self, whitelist: str) -> List[str]:
        """Topics under ``/brokers/topics`` whose whole name matches Kafka's whitelist regex."""
        topic_filter = Whitelist(whitelist)
        exclude = self.config.exclude_internal_topics
        return [t for t in self._group.all_topics() if topic_filter.is_topic_allowed(t, exclude)]

    def topic_partitions(self, topics: Sequence[str] = (), whitelist: Optional[str] = None) -> List[TopicPartition]:
        """Every ``(topic, partition)`` of ``topics`` (each must exist) or of the topics matching ``whitelist``."""
        if whitelist is not None:
            by_topic = self._group.partitions_for_topics(self.matching_topics(whitelist))
        else:
            by_topic = self.partitions(topics)
        return [(t, p) for t in sorted(by_topic) for p in by_topic[t]]

    def brokers(self) -> List[BrokerAddress]:
        """``(host, port)`` of every live broker (``/brokers/ids``), for executors to bootstrap from."""
        return [(b.host, b.port) for b in self._group.brokers(self.config.security_protocol)]

    # ------------------------------------------------------------------ offsets

    def committed(self, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, Optional[int]]:
        """The group's committed next offset of each partition (``None`` where none), from
        :attr:`offsets_storage` (both stores: the larger of the two)."""
        if self.config.offsets_storage == "zookeeper":
            return {tp: self._group.read_offset(*tp) for tp in partitions}
        return self._offset_storage().read(partitions)

    def log_offsets(self, partitions: Sequence[TopicPartition], time_: int, attempts: int = 5,
                    empty: Optional[int] = None) -> Dict[TopicPartition, int]:
        """Log start (``EARLIEST_TIME``) or end (``LATEST_TIME``) of each partition, from its leader.

        Partitions whose leader is briefly unavailable are asked again, up to
        ``attempts`` times ``refresh.leader.backoff.ms`` apart (fresh leader and
        broker lookups each time); then :class:`LogOffsetsUnavailableError`.
        """
        found: Dict[TopicPartition, int] = {}
        missing = list(partitions)
        problems: Dict[TopicPartition, str] = {}
        for attempt in range(attempts):
            if not missing:
                break
            if attempt:
                self._sleep(self.config.refresh_leader_backoff_ms / 1000.0)
                self._log_offsets.close()
                self._log_offsets = self._new_log_offsets()  # forget cached broker addresses
            offsets, problems = self._log_offsets.fetch(missing, time_, empty)
            found.update(offsets)
            missing = [tp for tp in missing if tp not in found]
        if missing:
            raise LogOffsetsUnavailableError({tp: problems.get(tp, "no answer") for tp in missing})
        return found

    def log_ends(self, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, int]:
        return self.log_offsets(partitions, LATEST_TIME)

    def log_starts(self, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, int]:
        return self.log_offsets(partitions, EARLIEST_TIME)

    def offsets_before(self, times: Mapping[TopicPartition, int]) -> Dict[TopicPartition, Optional[int]]:
        """The brokers' offsets-before-time lookup (ListOffsets v0) for each partition's time (ms since the epoch).

        A 0.8/0.9 broker answers with the base offset of the newest log segment
        last modified at or before the time (the log end if the time is now or
        later): a segment boundary, not a message's own time, since messages
        carry none. ``None`` where the time lies before every segment.
        """
        by_time: Dict[int, List[TopicPartition]] = {}
        for tp, at in times.items():
            if at < 0:
                raise ValueError(f"a time must be >= 0 ms since the epoch, not {at} for {tp[0]}/{tp[1]}")
            by_time.setdefault(at, []).append(tp)
        found: Dict[TopicPartition, Optional[int]] = {}
        for at, tps in sorted(by_time.items()):
            for tp, offset in self.log_offsets(tps, at, empty=-1).items():
                found[tp] = None if offset < 0 else offset
        return found

    def positions(self, partitions: Sequence[TopicPartition],
                  log_ends: Optional[Mapping[TopicPartition, int]] = None) -> Dict[TopicPartition, int]:
        """Where the group resumes each partition: committed, or ``auto.offset.reset`` (see :func:`resolve_start`).

        ``log_ends`` may be given if already looked up.
        """
        if not partitions:
            return {}
        committed = self.committed(partitions)
        starts = self.log_starts(partitions)
        ends = log_ends if log_ends is not None else self.log_ends(partitions)
        reset = self.config.auto_offset_reset
        positions = {}
        for tp in partitions:
            positions[tp] = resolve_start(committed[tp], starts[tp], ends[tp], reset)
            if committed[tp] is not None and positions[tp] != committed[tp]:
                log.warning("group %s: committed offset %d of %s/%d is outside the log [%d, %d]; "
                            "resuming at %d (auto.offset.reset=%s)", self.config.group_id, committed[tp],
                            tp[0], tp[1], starts[tp], ends[tp], positions[tp], reset)
        return positions

    def plan(self, topics: Sequence[str] = (), whitelist: Optional[str] = None,
             max_messages_per_partition: Optional[int] = None) -> List[OffsetRange]:
        """The group's next batch: from where it resumes to the current log end, per partition."""
        partitions = self.topic_partitions(topics, whitelist)
        ends = self.log_ends(partitions)
        return plan_ranges(self.positions(partitions, ends), ends, max_messages_per_partition)

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Write each offset as the group's next offset to consume, in :attr:`offsets_storage` (idempotent, retried).

        To Kafka: one OffsetCommit v1 request (generation -1); with dual commit,
        then ZooKeeper for what Kafka accepted. Raises
        :class:`~zkconsumer.errors.OffsetStorageError` if any offset was
        not stored (the coordinator manages the group, or it is unreachable).
        """
        for (topic, partition), offset in sorted(offsets.items()):
            if offset < 0:
                raise ValueError(f"cannot commit negative offset {offset} for {topic}/{partition}")
        if self.config.offsets_storage == "zookeeper":
            for (topic, partition), offset in sorted(offsets.items()):
                self._group.commit_offset(topic, partition, offset)
            return
        entries = [CommitEntry(t, p, o, DRIVER_CLIENT_ID) for (t, p), o in sorted(offsets.items())]
        outcome = self._offset_storage().write(entries)
        if outcome.error is not None:
            raise outcome.error
        missing = sorted(set(offsets) - set(outcome.committed))
        if missing:
            raise OffsetStorageError(f"group {self.config.group_id}: offsets of {missing} not committed to "
                                     f"{self.offsets_storage}", retriable=True)
