"""The driver's view of a consumer group: partitions, committed offsets, log offsets, commits.

:class:`GroupView` opens its own ZooKeeper session (it never joins the group:
nothing is registered under ``/consumers/<group>/ids``) and asks partition
leaders for log offsets through :class:`~zkconsumer.admin.BrokerOffsets`. It is
used on the driver only: by :func:`~spark_integration.create_rdd`,
:func:`~spark_integration.commit_offset_ranges` and the streaming source's
planner. Executors never receive it (it is not picklable).

Offsets are read and written at exactly the nodes Kafka's consumer and tools use
(``/consumers/<group>/offsets/<topic>/<partition>``), so ZooKeeper-based lag
monitors (ConsumerOffsetChecker, Burrow) see what Spark consumed.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from zkconsumer import ConsumerConfig, Whitelist, ZkConsumerError, ZooKeeperUnavailableError
from zkconsumer.admin import BrokerOffsets, UnknownTopicError
from zkconsumer.kerberos import broker_authenticator, zookeeper_sasl_options
from zkconsumer.security import broker_ssl_context, zookeeper_acls, zookeeper_auth_data
from zkconsumer.wire.protocol import EARLIEST_TIME, LATEST_TIME
from zkconsumer.zookeeper.group import GroupClient
from zkconsumer.zookeeper.reachability import diagnose

from .ranges import OffsetRange, TopicPartition, plan_ranges, resolve_start

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
        """The group's committed next offset of each partition (``None`` where none)."""
        return {tp: self._group.read_offset(*tp) for tp in partitions}

    def log_offsets(self, partitions: Sequence[TopicPartition], time_: int, attempts: int = 5) -> Dict[TopicPartition, int]:
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
            offsets, problems = self._log_offsets.fetch(missing, time_)
            found.update(offsets)
            missing = [tp for tp in missing if tp not in found]
        if missing:
            raise LogOffsetsUnavailableError({tp: problems.get(tp, "no answer") for tp in missing})
        return found

    def log_ends(self, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, int]:
        return self.log_offsets(partitions, LATEST_TIME)

    def log_starts(self, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, int]:
        return self.log_offsets(partitions, EARLIEST_TIME)

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
        """Write each offset as the group's next offset to consume (idempotent, retried)."""
        for (topic, partition), offset in sorted(offsets.items()):
            if offset < 0:
                raise ValueError(f"cannot commit negative offset {offset} for {topic}/{partition}")
            self._group.commit_offset(topic, partition, offset)
