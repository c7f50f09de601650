"""ZooKeeper group membership (Kafka 0.8's rebalance): :class:`ZooKeeperMembershipConnector`.

The membership part of the default connector. On top of
:class:`~zkconsumer.consumer.connector.ConsumerConnectorBase` it registers the member
under ``/consumers/<group>/ids`` and starts, in order, the session lease
(:mod:`.zookeeper.lease`), the watches (:mod:`.zookeeper.watchers`) and the
rebalancer (:mod:`.rebalancer`), and stops them at shutdown. While ZooKeeper is
away, iterators go on handing out what was fetched (fetchers hold back new data
once the session lease ran out). Applications construct it as
:class:`zkconsumer.ZookeeperConsumerConnector` (:mod:`zkconsumer.connector`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, List, Mapping, Optional, Tuple, Union

from kazoo.exceptions import KazooException, NoAuthError
from kazoo.protocol.states import KazooState

from .. import assignors
from ..config import ConsumerConfig
from ..consumer.connector import ConsumerConnectorBase
from ..consumer.membership import ConsumerRebalanceListener, RebalanceStatus
from ..consumer.topic_count import TopicCount
from ..errors import ConsumerShutdownError, ZooKeeperAccessError, ZooKeeperUnavailableError
from ..offsets.storage import OffsetStorageError
from ..zookeeper import zkformat
from ..zookeeper.lease import SessionLease
from ..zookeeper.watchers import GroupWatcher
from ..zookeeper.zkcalls import BoundedZooKeeper
from .rebalancer import Rebalancer

__all__ = ["ZooKeeperMembershipConnector"]

log = logging.getLogger(__name__)


class ZooKeeperMembershipConnector(ConsumerConnectorBase):
    """A member of a ZooKeeper-coordinated consumer group (Kafka 0.8's high-level consumer).

    Same constructor arguments as :class:`~zkconsumer.consumer.connector.ConsumerConnectorBase`.
    """

    def __init__(
        self,
        config: Union[ConsumerConfig, Mapping[str, Any]],
        *,
        rebalance_listener: Optional[ConsumerRebalanceListener] = None,
        metrics_interval_s: Optional[float] = None,
        metrics_port: Optional[int] = None,
        metrics_registry: Any = None,
        metrics_pushgateway: Optional[str] = None,
    ) -> None:
        self._rebalancer: Optional[Rebalancer] = None
        self._watcher: Optional[GroupWatcher] = None
        self._lease: Optional[SessionLease] = None
        self._session_was_lost = False
        super().__init__(config, rebalance_listener=rebalance_listener, metrics_interval_s=metrics_interval_s,
                         metrics_port=metrics_port, metrics_registry=metrics_registry,
                         metrics_pushgateway=metrics_pushgateway)

    @property
    def status(self) -> Optional[RebalanceStatus]:
        """The rebalancer's state, owned partitions and last error, and the heartbeat that runs
        (``None`` before joining)."""
        if self._rebalancer is None:
            return None
        return dataclasses.replace(self._rebalancer.status, heartbeat=self.heartbeat_mode)

    def _stop_coordination(self) -> None:
        """Stop (and join) the watches, the rebalancer and the session lease."""
        if self._watcher is not None:
            self._watcher.stop()
        if self._lease is not None:
            self._lease.request_stop()
        if self._rebalancer is not None:
            self._rebalancer.stop()
        if self._lease is not None:
            self._lease.stop()

    def _joined(self) -> bool:
        """Whether streams were created (so there is something to commit)."""
        return self._rebalancer is not None

    def _uncommitted(self) -> List[Tuple[str, int, int]]:
        """``(topic, partition, consumed offset)`` handed out but not known to be committed."""
        if self._rebalancer is None:
            return []
        committed = self._committer.committed()
        return sorted(
            (info.topic, info.partition, info.consumed_offset)
            for info, _ in self._rebalancer.owned_partitions()
            if info.consumed_offset >= 0 and committed.get((info.topic, info.partition)) != info.consumed_offset
        )

    def _leave_group(self) -> None:
        """Nothing to do here: closing the session removes our ephemeral nodes. A subclass hook."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.consumer_id}, {self._state.value})"

    # ----------------------------------------------------------------- wiring

    def _join(self, count: TopicCount, queue_for: Any, topic_allowed: Any) -> None:
        self._begin_join()
        self._join_done.clear()  # shutdown() waits (bounded) for the join to wind down
        try:
            self._join_group(count, queue_for, topic_allowed)
        finally:
            self._join_done.set()

    def _join_group(self, count: TopicCount, queue_for: Any, topic_allowed: Any) -> None:
        """Register, start lease, rebalancer and watches, wait for the first assignment.

        Each part is started under ``_state_lock`` after checking that shutdown()
        has not begun, so shutdown() sees (and stops) everything started, and
        nothing is started after it began.
        """
        cfg = self.config
        group = self._group_client()
        registration = zkformat.encode_registration(count.subscription, count.pattern, int(time.time() * 1000))

        def register() -> None:
            group.register(registration, cancelled=self._closing)

        try:
            register()
        except ZooKeeperUnavailableError:
            if self._closing.is_set():
                raise ConsumerShutdownError("shutdown() while create_message_streams() was registering") from None
            raise
        lease = SessionLease(
            BoundedZooKeeper(self._zk, self._session_timeout_s() / 3.0),
            group.paths.member(self.consumer_id), cfg.zookeeper_session_timeout_ms / 1000.0,
            name=f"zkconsumer-lease-{self.consumer_id}", heartbeat=self._heartbeat,
        )
        watcher = GroupWatcher(self._zk, group.paths, self._request_rebalance, topic_allowed)
        group.member_list = watcher.member_list  # the members' watch reads the list: no read of our own
        rebalancer = Rebalancer(
            group=group,
            topic_count=count,
            assignor=assignors.get_assignor(cfg.partition_assignment_strategy),
            queue_for=queue_for,
            streams=self._streams,
            fetchers=self._fetchers,
            committer=self._committer,
            auto_commit=cfg.auto_commit_enable,
            fetch_size=cfg.fetch_message_max_bytes,
            max_retries=cfg.rebalance_max_retries,
            backoff_ms=cfg.rebalance_backoff_ms,
            exclude_internal_topics=cfg.exclude_internal_topics,
            register=register,
            watch_topics=watcher.watch_topics,
            on_failure=self._background_failure,
            listener=self._listener,
            on_rebalanced=self._rebalanced,
            on_attempt_failed=self.metrics.record_failed_rebalance_attempt,
            read_offsets=self._committer.read_offsets,
        )
        with self._state_lock:
            self._check_open()
            self._watcher = watcher
        try:  # armed before the rebalancer's first read of members and topics
            watcher.start()  # may block in kazoo while ZooKeeper is away; shutdown() releases it
        except NoAuthError as exc:
            raise ZooKeeperAccessError(group.paths.ids, "watching") from exc
        except KazooException as exc:
            if self._closing.is_set():
                raise ConsumerShutdownError("shutdown() while create_message_streams() was joining the group") from exc
            raise ZooKeeperUnavailableError(f"could not watch {group.paths.ids}: {exc!r}") from exc
        with self._state_lock:
            self._check_open()
            self._lease, self._rebalancer = lease, rebalancer
            lease.start()
            rebalancer.start()
        while not rebalancer.wait_first_assignment(timeout=0.1):
            if self._closing.is_set():
                break
        self._failure.raise_if_failed()
        self._start_periodic_threads()

    def _commit(self) -> None:
        """Commit what was handed out; partitions found owned by someone else are given up."""
        if self._rebalancer is None:
            return
        fenced: List[Tuple[str, int]] = []
        try:
            fenced = self._committer.commit(self._rebalancer.owned_partitions())
        except OffsetStorageError as exc:
            fenced = exc.fenced
            raise
        finally:
            if fenced:
                self._rebalancer.ownership_lost(fenced)

    # ------------------------------------------------------ callbacks (signal only)

    def _request_rebalance(self, reason: str) -> None:
        if self._rebalancer is not None:
            self._rebalancer.request(reason)

    def _on_zk_state(self, state: str) -> None:
        """kazoo's connection thread: only signal."""
        if state == KazooState.CONNECTED and self._group is not None:
            self._group.note_session()  # a session of ours: its leftover nodes may be replaced later
        if state == KazooState.LOST:
            self._session_was_lost = True
            log.warning("%s: ZooKeeper session expired", self.consumer_id)
            if self._rebalancer is not None:
                self._rebalancer.session_lost()
        elif state == KazooState.SUSPENDED:
            log.warning("%s: ZooKeeper connection lost; still consuming owned partitions", self.consumer_id)
        elif state == KazooState.CONNECTED and self._session_was_lost:
            self._session_was_lost = False
            log.info("%s: new ZooKeeper session; rejoining the group", self.consumer_id)
            if self._rebalancer is not None:
                self._rebalancer.session_restored()

    def _rebalanced(self, duration_s: float) -> None:
        """The rebalancer thread: a rebalance succeeded; the current session's proofs count for the lease."""
        self.metrics.record_rebalance(duration_s)
        if self._lease is not None:
            self._lease.accept_session()

    def _session_proven(self) -> bool:
        """Fetchers may queue data: the ZooKeeper session was proven alive within its timeout.

        After a freeze longer than the session timeout (SIGSTOP, a stalled VM)
        this is false at once, before kazoo learns the session expired, so a
        resumed member does not hand out backlog that a successor owns by now.
        """
        return self._lease is None or self._lease.valid()
