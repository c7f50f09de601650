"""ZooKeeper group membership (Kafka 0.8's rebalance): :class:`ZooKeeperMembership`.

The membership of the default connector (``group.membership=zookeeper``). It registers
the member under ``/consumers/<group>/ids`` and starts, in order, the session lease
(:mod:`zkconsumer.zookeeper.lease`), the watches (:mod:`zkconsumer.zookeeper.watchers`)
and the rebalancer (:mod:`.rebalancer`), and stops them at shutdown. While ZooKeeper is
away, iterators go on handing out what was fetched (fetchers hold back new data once the
session lease ran out). Applications get it through
:class:`zkconsumer.ZookeeperConsumerConnector`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from kazoo.exceptions import KazooException, NoAuthError
from kazoo.protocol.states import KazooState

from .. import assignors
from ..consumer.membership import ConnectorParts, QueueFor, RebalanceStatus, TopicAllowed
from ..consumer.topic_count import TopicCount
from ..errors import ConsumerShutdownError, OffsetStorageError, ZkConsumerError, ZooKeeperAccessError, ZooKeeperUnavailableError
from ..structs import TopicPartition
from ..zookeeper import zkformat
from ..zookeeper.lease import SessionLease
from ..zookeeper.watchers import GroupWatcher
from ..zookeeper.zkcalls import BoundedZooKeeper
from .rebalancer import Rebalancer

__all__ = ["ZooKeeperMembership"]

log = logging.getLogger(__name__)


class ZooKeeperMembership:
    """A member of a ZooKeeper-coordinated consumer group (Kafka 0.8's high-level consumer).

    Built by the connector with the parts it may use (:class:`~zkconsumer.consumer.membership.ConnectorParts`);
    implements :class:`~zkconsumer.consumer.membership.Membership`.
    """

    kind = "zookeeper"

    def __init__(self, member: ConnectorParts, may_register: Callable[[], Optional[str]] = lambda: None) -> None:
        self._member = member
        #: Asked before every registration (the first and each one after a session loss): a reason
        #: not to register (a group migrating to coordinator membership) fails the attempt instead.
        self._may_register = may_register
        self._rebalancer: Optional[Rebalancer] = None
        self._watcher: Optional[GroupWatcher] = None
        self._lease: Optional[SessionLease] = None
        self._session_was_lost = False

    @property
    def rebalancer(self) -> Optional[Rebalancer]:
        """The rebalancer, once :meth:`join` started it."""
        return self._rebalancer

    def status(self) -> Optional[RebalanceStatus]:
        """The rebalancer's state, owned partitions and last error, and the heartbeat that runs
        (``None`` before joining)."""
        if self._rebalancer is None:
            return None
        return dataclasses.replace(self._rebalancer.status, heartbeat=self._member.heartbeat_mode())

    def stop(self) -> None:
        """Stop (and join) the watches, the rebalancer and the session lease."""
        if self._member.seeks is not None:
            self._member.seeks.stop()
        if self._watcher is not None:
            self._watcher.stop()
        if self._lease is not None:
            self._lease.request_stop()
        if self._rebalancer is not None:
            self._rebalancer.stop()
        if self._lease is not None:
            self._lease.stop()

    def joined(self) -> bool:
        """Whether streams were created (so there is something to commit)."""
        return self._rebalancer is not None

    def uncommitted(self) -> List[Tuple[str, int, int]]:
        """``(topic, partition, consumed offset)`` handed out but not known to be committed."""
        if self._rebalancer is None:
            return []
        committed = self._member.committer.committed()
        positions = [(info.topic, info.partition, info.commit_position) for info, _ in self._rebalancer.owned_partitions()]
        return sorted((t, p, o) for t, p, o in positions if o >= 0 and committed.get((t, p)) != o)

    def leave(self) -> None:
        """Nothing to do: closing the session removes our ephemeral nodes."""

    def describe(self) -> str:
        return ""

    # ----------------------------------------------------------------- joining

    def join(self, count: TopicCount, queue_for: QueueFor, topic_allowed: TopicAllowed) -> None:
        """Register, start lease, rebalancer and watches, wait for the first assignment.

        ``shutdown()`` waits (bounded) for this to wind down: ``join_done`` is clear meanwhile.
        """
        self._member.join_done.clear()
        try:
            self._join_group(count, queue_for, topic_allowed)
        finally:
            self._member.join_done.set()

    def _join_group(self, count: TopicCount, queue_for: QueueFor, topic_allowed: TopicAllowed) -> None:
        """Each part is started inside ``member.guard()``, so shutdown() sees (and stops)
        everything started, and nothing is started after it began."""
        member = self._member
        cfg, group, closing = member.config, member.group, member.closing
        registration = zkformat.encode_registration(count.subscription, count.pattern, int(time.time() * 1000))

        def register() -> None:
            refused = self._may_register()
            if refused:
                raise ZkConsumerError(f"not registering under {group.paths.ids}: {refused}")
            group.register(registration, cancelled=closing)
            # Asked again now that we are registered: a coordinator member checks /ids after it joined, so
            # of a member joining the coordinator and this one registering at the same moment, at least one
            # sees the other (found by the simulator: switch schedule seed 16850, both checks passed first).
            refused = self._may_register()
            if refused:
                group.deregister()
                raise ZkConsumerError(f"registered under {group.paths.ids}, then withdrew: {refused}")

        try:
            register()
        except ZooKeeperUnavailableError:
            if closing.is_set():
                raise ConsumerShutdownError("shutdown() while create_message_streams() was registering") from None
            raise
        lease = SessionLease(
            BoundedZooKeeper(member.zk, member.session_timeout_s() / 3.0),
            group.paths.member(member.consumer_id), cfg.zookeeper_session_timeout_ms / 1000.0,
            name=f"zkconsumer-lease-{member.consumer_id}", heartbeat=member.heartbeat,
        )
        seeks = member.seeks
        watcher = GroupWatcher(member.zk, group.paths, self._request_rebalance, topic_allowed)
        group.member_list = watcher.member_list  # the members' watch reads the list: no read of our own
        group.topic_data = watcher.topic_data  # and the topics' watches their partition maps
        rebalancer = Rebalancer(
            group=group,
            topic_count=count,
            assignor=assignors.get_assignor(cfg.partition_assignment_strategy),
            queue_for=queue_for,
            streams=member.streams,
            fetchers=member.fetchers,
            committer=member.committer,
            auto_commit=cfg.auto_commit_enable,
            fetch_size=cfg.fetch_message_max_bytes,
            max_retries=cfg.rebalance_max_retries,
            backoff_ms=cfg.rebalance_backoff_ms,
            exclude_internal_topics=cfg.exclude_internal_topics,
            register=register,
            watch_topics=watcher.watch_topics,
            on_failure=member.on_failure,
            listener=member.listener,
            on_rebalanced=self._rebalanced,
            on_attempt_failed=member.metrics.record_failed_rebalance_attempt,
            read_offsets=(member.committer.read_offsets if seeks is None
                          else seeks.read_offsets(member.committer.read_offsets)),
            on_seek=None if seeks is None else lambda: seeks.apply(rebalancer.owned_partitions(),
                                                                  rebalancer.ownership_lost),
        )
        with member.guard():
            self._watcher = watcher
        try:  # armed before the rebalancer's first read of members and topics
            watcher.start()  # may block in kazoo while ZooKeeper is away; shutdown() releases it
        except NoAuthError as exc:
            raise ZooKeeperAccessError(group.paths.ids, "watching") from exc
        except KazooException as exc:
            if closing.is_set():
                raise ConsumerShutdownError("shutdown() while create_message_streams() was joining the group") from exc
            raise ZooKeeperUnavailableError(f"could not watch {group.paths.ids}: {exc!r}") from exc
        if seeks is not None:  # before the first claim: a pending seek is known when it reads offsets
            try:
                seeks.start(rebalancer.seek_requested)
            except KazooException as exc:  # the seek watch is not worth failing the join: say so
                log.warning("%s: cannot watch for live seeks: %r", member.consumer_id, exc)
        with member.guard():
            self._lease, self._rebalancer = lease, rebalancer
            lease.start()
            rebalancer.start()
        while not rebalancer.wait_first_assignment(timeout=0.1):
            if closing.is_set():
                break
        member.failure.raise_if_failed()

    # ----------------------------------------------------------------- committing

    def positions(self) -> Dict[TopicPartition, int]:
        if self._rebalancer is None:
            return {}
        return {(info.topic, info.partition): info.commit_position
                for info, _ in self._rebalancer.owned_partitions() if info.commit_position >= 0}

    def commit(self, offsets: Optional[Mapping[TopicPartition, int]] = None) -> List[TopicPartition]:
        """Commit what was handed out (or ``offsets``); partitions found owned by someone else are given up."""
        if self._rebalancer is None:
            return sorted(offsets or ())
        owned = self._rebalancer.owned_partitions()
        held = {(info.topic, info.partition) for info, _ in owned}
        fenced: List[Tuple[str, int]] = []
        try:
            fenced = self._member.committer.commit(owned, offsets=offsets)
        except OffsetStorageError as exc:
            fenced = exc.fenced
            raise
        finally:
            if fenced:
                self._rebalancer.ownership_lost(fenced)
        return sorted(set(fenced) | {tp for tp in offsets or () if tp not in held})

    # ------------------------------------------------------ callbacks (signal only)

    def _request_rebalance(self, reason: str) -> None:
        if self._rebalancer is not None:
            self._rebalancer.request(reason)

    def on_zk_state(self, state: str) -> None:
        """kazoo's connection thread: only signal."""
        member = self._member
        if state == KazooState.CONNECTED:
            member.group.note_session()  # a session of ours: its leftover nodes may be replaced later
        else:
            member.group.connection_lost()  # its watches are gone: so is what they kept valid
        if state == KazooState.LOST:
            self._session_was_lost = True
            log.warning("%s: ZooKeeper session expired", member.consumer_id)
            if self._lease is not None:
                self._lease.session_lost()  # its proofs no longer count: nothing new is queued until the rejoin
            if self._rebalancer is not None:
                self._rebalancer.session_lost()
        elif state == KazooState.SUSPENDED:
            log.warning("%s: ZooKeeper connection lost; still consuming owned partitions", member.consumer_id)
        elif state == KazooState.CONNECTED and self._session_was_lost:
            self._session_was_lost = False
            log.info("%s: new ZooKeeper session; rejoining the group", member.consumer_id)
            if self._rebalancer is not None:
                self._rebalancer.session_restored()

    def _rebalanced(self, duration_s: float) -> None:
        """The rebalancer thread: a rebalance succeeded; the current session's proofs count for the lease."""
        self._member.metrics.record_rebalance(duration_s)
        if self._lease is not None:
            self._lease.accept_session()

    def deliverable(self) -> bool:
        """Fetchers may queue data: the ZooKeeper session was proven alive within its timeout.

        After a freeze longer than the session timeout (SIGSTOP, a stalled VM)
        this is false at once, before kazoo learns the session expired, so a
        resumed member does not hand out backlog that a successor owns by now.
        """
        return self._lease is None or self._lease.valid()
