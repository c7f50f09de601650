"""A member's coordinator membership and its live switch between the two memberships (switch schedules).

Production parts run here unchanged: :class:`~zkconsumer.coordinator.delivery.Delivery` (install and
revoke an assignment, reading offsets and committing under the generation), the leader's plan and
the share (:func:`~zkconsumer.coordinator.assignment.plan`, ``decode_share``, ``as_member``,
``subscription_metadata``: Kafka's Range and RoundRobin), ``OffsetCommitter`` with the production
``KafkaOffsetStorage`` over :class:`~.coordinator.SimChannel`, the migration node's format and read
(:mod:`zkconsumer.zookeeper.migration`), the barrier before a JoinGroup
(``CoordinatorMembership._zookeeper_members_gone``), the refusal to register again
(``registration_refused``) and the release of owner nodes and registration
(``SwitchingMembership._delete_our_nodes``), each through the simulated kazoo client.

Restated (a few dozen lines each, in the order production runs them):

* :class:`CoordinatorSide`: ``JoinSyncLoop``'s loop (precondition, JoinGroup, the leader's
  plan, SyncGroup, install, heartbeats every ``INTERVAL_S`` until a reason to rejoin, revoke with
  or without a commit as its table says), on one task where production has two threads (the
  heartbeats are answered between the same steps);
* :class:`Switcher`: ``SwitchingMembership._run`` and ``_switch``: a watch on the migration node
  (and a read at every CONNECTED), then stop the running membership, drop the fetchers' queues,
  the final commit (retried), then to the coordinator: release owner nodes and deregister; back to
  ZooKeeper: LeaveGroup, wait until the coordinator lists no member, then register and rebalance.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from kazoo.exceptions import KazooException

from zkconsumer.commits import Generation
from zkconsumer.consumer.switching import SwitchingMembership, registration_refused
from zkconsumer.coordinator import consumer_protocol
from zkconsumer.coordinator.assignment import as_member, decode_share, plan, subscribed_topics, subscription_metadata
from zkconsumer.coordinator.delivery import Delivery
from zkconsumer.coordinator.kafka_membership import CoordinatorMembership
from zkconsumer.errors import ConsumerShutdownError, ZkConsumerError
from zkconsumer.fetch.handoff import PartitionTopicInfo
from zkconsumer.structs import TopicPartition
from zkconsumer.wire.group_protocol import NO_ERROR, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER
from zkconsumer.zookeeper import migration

from .coordinator import GroupCoordinator, JoinAnswer
from .kernel import SimEvent, SimLock, SimTask

GROUP_ID = "g"

if TYPE_CHECKING:
    from .member import Member

#: ``heartbeat.interval.ms`` of the simulated members (a third of the session timeout).
INTERVAL_S = 2.0
#: ``rebalance.backoff.ms``
BACKOFF_S = 2.0
#: attempts of the final commit before a switch (``offsets.commit.max.retries`` + 1), and the pause between
COMMIT_ATTEMPTS, COMMIT_BACKOFF_S = 3, 1.0
#: ``SwitchingMembership``'s poll without a watch
POLL_S = 5.0
#: Each side asks again once it announced itself (production since seed 16850: ``JoinSyncLoop`` after
#: SyncGroup, ``ZooKeeperMembership``'s registration); ``False`` replays the barriers as they were before.
RECHECK = True


class CoordinatorSide:
    """One member's coordinator membership (see the module docstring)."""

    def __init__(self, m: "Member", coordinator: GroupCoordinator) -> None:
        self.m = m
        self.coordinator = coordinator
        self.delivery = Delivery(consumer_id=m.consumer_id, queue_for=m._queue_for, streams=[], fetchers=m.fetchers,
                                 committer=m.committer, auto_commit=True, fetch_size=1024)
        self.delivery._lock = SimLock(m.kernel)  # type: ignore[assignment]
        self.member_id = ""
        self.stopped = SimEvent(m.kernel)
        self.task: Optional[SimTask] = None

    def _call(self, kind: str, *args: Any, timeout: float) -> Any:
        return self.coordinator.call(kind, args, timeout, self.m.name, self.m.alive)

    def start(self) -> None:
        self.task = self.m.spawn(self._run, "coordinator")

    def stop(self) -> None:
        self.stopped.set()

    def owned(self) -> List[Tuple[PartitionTopicInfo, str]]:
        return self.delivery.owned()[1]

    def generation(self) -> Optional[Generation]:
        return self.delivery.owned()[0]

    def _zookeeper_members_left(self) -> Optional[str]:
        """The connector's precondition, production code (a reason to wait, or ``None``)."""
        try:
            return CoordinatorMembership._zookeeper_members_gone(SimpleNamespace(_member=self.m))  # type: ignore[arg-type]
        except (KazooException, ZkConsumerError) as exc:
            return repr(exc)

    def _run(self) -> None:
        m = self.m
        session = m.session_timeout
        while not self.stopped.is_set():
            if self._zookeeper_members_left():  # no JoinGroup while /ids lists anyone
                self.stopped.wait(BACKOFF_S)
                continue
            topics = subscribed_topics(m.count, ())
            answer: Optional[JoinAnswer] = self._call("join", self.member_id,
                                                      subscription_metadata(m.count, topics, 1_700_000_000_000),
                                                      timeout=session + 5.0)
            if self.stopped.is_set():
                return
            if answer is None or answer.error != NO_ERROR:
                if answer is not None and answer.error == UNKNOWN_MEMBER:
                    self.member_id = ""
                self.stopped.wait(BACKOFF_S)
                continue
            self.member_id = answer.member_id
            generation = Generation(answer.generation, answer.member_id)
            assignments: List[Tuple[str, bytes]] = []
            if answer.leader == answer.member_id:
                try:
                    wanted = sorted({t for _, md in answer.members
                                     for t in consumer_protocol.decode_subscription(md, "")[0]})
                    counts = {t: len(ps) for t, ps in m.group.partitions_for_topics(wanted).items()}
                except (KazooException, ZkConsumerError):
                    self.stopped.wait(BACKOFF_S)
                    continue
                shares = plan(m.strategy, answer.members, counts)
                assignments = [(i, consumer_protocol.encode_assignment(s)) for i, s in sorted(shares.items())]
            got = self._call("sync", answer.generation, self.member_id, assignments, timeout=session + 5.0)
            if self.stopped.is_set():
                return
            if not isinstance(got, bytes):
                if got == UNKNOWN_MEMBER:
                    self.member_id = ""
                if got is None:
                    self.stopped.wait(BACKOFF_S)
                continue
            share: Dict[TopicPartition, str] = dict(decode_share(got, as_member(m.count, self.member_id, True),
                                                                 m.strategy))
            if RECHECK and self._zookeeper_members_left():  # JoinSyncLoop asks again once listed
                self.stopped.wait(BACKOFF_S)
                continue
            try:
                self.delivery.assign(generation, share)
            except ZkConsumerError:
                self.stopped.wait(BACKOFF_S)
                continue
            m.trace(f"{m.name} coordinator generation {generation.generation_id}: {sorted(share)}")
            commit = self._heartbeats(generation)
            if commit is None:
                return  # stopped: the caller commits under the generation and leaves
            self.delivery.revoke(commit)

    def _heartbeats(self, generation: Generation) -> Optional[bool]:
        """Heartbeat until a reason to rejoin: whether the revoke may commit; ``None`` once stopped."""
        last_ok = self.m.kernel.now
        while not self.stopped.wait(INTERVAL_S):
            code = self._call("heartbeat", generation.generation_id, self.member_id, timeout=INTERVAL_S)
            if self.stopped.is_set():
                return None
            if code is None:
                if self.m.kernel.now - last_ok > self.m.session_timeout:
                    return False  # the coordinator has presumably expelled us
                continue
            last_ok = self.m.kernel.now
            if code == NO_ERROR:
                continue
            if code == UNKNOWN_MEMBER:
                self.member_id = ""
            return code == REBALANCE_IN_PROGRESS
        return None

    def final_commit_and_leave(self) -> None:
        """After :meth:`stop`: the fetchers stop, the final commit under the generation, LeaveGroup."""
        m = self.m
        m.fetchers.stop_connections()
        generation, owned, _ = self.delivery.to_commit()
        for info, _thread in owned:
            info.revoked = True
        if generation is not None and owned:
            for attempt in range(COMMIT_ATTEMPTS):
                try:
                    m.committer.commit(owned, generation)
                    break
                except ZkConsumerError:
                    if attempt + 1 < COMMIT_ATTEMPTS:
                        m.kernel.sleep(COMMIT_BACKOFF_S)
        if self.member_id:
            self._call("leave", self.member_id, timeout=m.session_timeout)


class _Production:
    """What ``SwitchingMembership``'s own methods read of ``self``, for a simulated member: its production
    ``_wait_coordinator_empty``, ``_still_intended``, ``_check_can_follow``, ``_abandon``,
    ``_leave_zookeeper`` and ``_delete_our_nodes`` run on it unchanged."""

    _wait_coordinator_empty = SwitchingMembership._wait_coordinator_empty
    _still_intended = SwitchingMembership._still_intended
    _check_can_follow = SwitchingMembership._check_can_follow
    _abandon = SwitchingMembership._abandon
    _leave_zookeeper = SwitchingMembership._leave_zookeeper
    _delete_our_nodes = SwitchingMembership._delete_our_nodes

    def __init__(self, m: "Member", coordinator: GroupCoordinator) -> None:
        self._m = m
        self._coordinator = coordinator
        config = SimpleNamespace(group_id=GROUP_ID, offsets_storage="kafka", dual_commit_enabled=False,
                                 rebalance_backoff_ms=int(BACKOFF_S * 1000))
        self._member = SimpleNamespace(consumer_id=m.consumer_id, group=m.group, config=config, closing=m.closing)

    def _stopped(self) -> bool:
        return self._m.state not in ("joined", "joining")

    def _coordinator_members(self) -> List[str]:
        """``coordinator_members``: DescribeGroups; raises when the coordinator does not answer."""
        left = self._coordinator.call("describe", (), self._m.session_timeout, self._m.name, self._m.alive)
        if left is None:
            raise ZkConsumerError("DescribeGroups: no answer")
        return list(left)


class Switcher:
    """``SwitchingMembership``'s switch thread for a simulated member (see the module docstring)."""

    def __init__(self, m: "Member", coordinator: GroupCoordinator) -> None:
        self.m = m
        self.coordinator = coordinator
        self.wake = SimEvent(m.kernel)
        self.watched = False
        self.switches = 0
        self.production = _Production(m, coordinator)

    def intent(self) -> Optional[migration.Intent]:
        return migration.read_intent(self.m.group.client, GROUP_ID)

    def refused(self) -> Optional[str]:
        """Production ``registration_refused``, with the coordinator's members as the connector passes them."""
        return registration_refused(SimpleNamespace(group=self.m.group,  # type: ignore[arg-type]
                                                    config=SimpleNamespace(group_id=GROUP_ID)),
                                    self.production._coordinator_members)

    def run(self) -> None:
        m = self.m
        path = migration.migration_path(GROUP_ID)
        while m.state == "joined":
            if not self.wake.wait(None if self.watched else POLL_S) and self.watched:
                continue
            self.wake.clear()
            if m.state != "joined":
                return
            try:
                m.group.client.exists(path, watch=lambda event: self.wake.set())
                self.watched = True
                intent = self.intent()
            except (KazooException, ZkConsumerError):
                self.watched = False
                continue
            if intent is None or intent.to == m.mode:
                continue
            if intent.to == "kafka":
                self.to_kafka()
            else:
                self.to_zookeeper()

    def to_kafka(self) -> None:
        m = self.m
        m.trace(f"{m.name} switching to coordinator membership")
        m.mode = "switching"
        # ZooKeeperMembership.stop: watches, lease, then the rebalancer joined without a bound (an attempt
        # under way registering again must end before the registration is deleted below), then the lease
        m.watcher.stop()
        if m.lease is not None:
            m.lease.request_stop()
        m.rebalancer.stop()
        if m.lease is not None:
            m.lease.stop()
        m.fetchers.stop_connections()
        owned = m.rebalancer.owned_partitions()
        for info, _thread in owned:
            info.revoked = True
        for attempt in range(COMMIT_ATTEMPTS):  # generation -1: the owner nodes fence it
            try:
                m.committer.commit(owned)
                break
            except ZkConsumerError:
                if attempt + 1 < COMMIT_ATTEMPTS:
                    m.kernel.sleep(COMMIT_BACKOFF_S)
        if self._production(self.production._leave_zookeeper) is False or m.state != "joined":
            return
        self.join_coordinator()

    def _production(self, step: Any, *args: Any) -> Any:
        """Run a production step; ``False`` if it raised ``ConsumerShutdownError`` (the member is leaving)."""
        try:
            return step(*args)
        except ConsumerShutdownError:
            return False

    def abandon_zookeeper(self) -> bool:
        """Production ``_abandon`` of a ZooKeeper membership whose join failed; ``False``: shutting down."""
        stopped = SimpleNamespace(kind="zookeeper", stop=lambda: None)  # nothing was started
        return self._production(self.production._abandon, stopped) is not False

    def join_coordinator(self) -> None:
        m = self.m
        m.mode = "kafka"
        m.side = CoordinatorSide(m, self.coordinator)
        m.side.start()
        self.switches += 1

    def to_zookeeper(self) -> None:
        m = self.m
        side = m.side
        m.trace(f"{m.name} switching back to ZooKeeper membership")
        m.mode = "switching"
        if side is not None:
            side.stop()
            if side.task is not None:
                side.task.join(m.session_timeout)
            side.final_commit_and_leave()
        m.side = None
        while m.state == "joined":  # _join_retrying("zookeeper")
            if not self.wait_coordinator_empty():
                self.join_coordinator()  # the rollback was reversed meanwhile: follow the node
                return
            if m.state != "joined":
                return
            if m.rejoin_zookeeper():
                self.switches += 1
                return
            if not self.abandon_zookeeper():
                return
            m.kernel.sleep(BACKOFF_S)
            if self.production._still_intended("zookeeper") == "kafka":
                self.join_coordinator()
                return

    def wait_coordinator_empty(self) -> bool:
        """Production ``_wait_coordinator_empty``: ``True`` once the coordinator lists no member; ``False``
        as soon as the node says ``kafka`` again, or the member is leaving."""
        return bool(self._production(self.production._wait_coordinator_empty))
