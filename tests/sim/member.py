"""One zkconsumer group member in the simulation, wired as the connector wires it.

The parts are the production ones: :class:`~zkconsumer.zookeeper.group.GroupClient`
(with its owner-node, offset-node and retry code), :class:`~zkconsumer.zookeeper.watchers.GroupWatcher`,
:class:`~zkconsumer.offsets.committer.OffsetCommitter` with fenced ZooKeeper offsets, and
:class:`~zkconsumer.rebalance.rebalancer.Rebalancer`; only the kazoo client
(:class:`~.client.SimKazoo`), the runtime (:class:`~.kernel.SimRuntime`), the
clock and the random generators are the simulation's. The session-state
callback does what ``ZooKeeperMembership.on_zk_state`` does, and a
commit what its ``_commit`` does. The production
:class:`~zkconsumer.zookeeper.lease.SessionLease` runs as one of the member's tasks, fed by
the production heartbeat's proof book-keeping, and gates a model of the fetchers
(:mod:`.fetch`); the application hands out what they queued (an iterator's work: the
partition's ``consumed_offset`` moves past the message). Brokers are not simulated: every
partition always has data.
"""

from __future__ import annotations

import random
from typing import Callable, Dict, List, Optional, Set, Tuple

from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState

from zkconsumer import assignors
from zkconsumer.consumer.membership import RebalanceState
from zkconsumer.consumer.topic_count import StaticTopicCount, TopicCount, Whitelist, WildcardTopicCount
from zkconsumer.errors import OffsetStorageError, ZkConsumerError
from zkconsumer.fetch.handoff import ChunkQueue, PartitionTopicInfo
from zkconsumer.offsets.committer import OffsetCommitter
from zkconsumer.offsets.storage import KafkaOffsetStorage
from zkconsumer.rebalance.rebalancer import Rebalancer
from zkconsumer.structs import TopicPartition
from zkconsumer.zookeeper import zkformat
from zkconsumer.zookeeper.group import GroupClient
from zkconsumer.zookeeper.lease import SessionLease
from zkconsumer.zookeeper.offset_storage import ZooKeeperOffsetStorage
from zkconsumer.zookeeper.watchers import GroupWatcher
from zkconsumer.zookeeper.zkcalls import BoundedZooKeeper

from . import switch
from .client import Network
from .coordinator import GroupCoordinator, SimChannel
from .fetch import Chunk, SimFetchers, SimHeartbeat, SimThread
from .kernel import Kernel, SimEvent, SimLock, SimRuntime, SimTask
from .process import SimProcess
from .switch import CoordinatorSide, Switcher
from .zkmodel import Ensemble

GROUP = "g"


class Member(SimProcess):
    """A zkconsumer member: join, consume, commit, leave cleanly, or be killed."""

    def __init__(self, kernel: Kernel, ensemble: Ensemble, network: Network, index: int, incarnation: int,
                 subscription: Dict[str, int], wildcard: Optional[str], strategy: str, seed: int,
                 trace: Callable[[str], None], session_timeout: float = 6.0,
                 coordinator: Optional[GroupCoordinator] = None, jitter: Optional[random.Random] = None) -> None:
        super().__init__(kernel, ensemble, network, "m", index, incarnation, seed, trace, session_timeout)
        self.session_timeout = session_timeout
        self.strategy = strategy
        runtime = self.runtime = SimRuntime(kernel, self.name)
        self.group = GroupClient(self.client, GROUP, self.consumer_id, retry_timeout_s=session_timeout,  # type: ignore[arg-type]
                                 sleep=kernel.sleep, clock=kernel.clock, rng=jitter or random.Random(seed))
        count: TopicCount
        if wildcard is not None:
            count = WildcardTopicCount(self.consumer_id, Whitelist(wildcard), next(iter(subscription.values())), True)
        else:
            count = StaticTopicCount(self.consumer_id, subscription)
        self.count = count
        self.registration = zkformat.encode_registration(count.subscription, count.pattern, 1_700_000_000_000 + index)
        topic_allowed = (lambda t: count.topic_filter.is_topic_allowed(t, True)) if wildcard is not None else None  # type: ignore[attr-defined]
        self.topic_allowed = topic_allowed
        self.watcher = GroupWatcher(self.client, self.group.paths, self._signal, topic_allowed)  # type: ignore[arg-type]
        self.group.member_list = self.watcher.member_list
        self.group.topic_data = self.watcher.topic_data
        #: which membership runs: ``zookeeper``, ``kafka`` (coordinator), or ``switching`` between them
        self.mode = "zookeeper"
        self.closing = SimEvent(kernel)  # shutdown() began (the connector's ``closing``)
        self.side: Optional[CoordinatorSide] = None
        self.switcher: Optional[Switcher] = None
        if coordinator is None:
            self.committer = OffsetCommitter(self.group, ZooKeeperOffsetStorage(self.group), runtime=runtime)
        else:  # a switch schedule: offsets.storage=kafka, fenced by owner nodes under ZooKeeper membership (as
            # make_offset_storage builds it, over the coordinator model)
            storage = KafkaOffsetStorage(SimChannel(coordinator, self.name, alive=self.alive), GROUP, max_retries=2,
                                         backoff_ms=1000,
                                         owns=self.group.owns, session=lambda: self.group.session_id)
            storage._closed = SimEvent(kernel)  # type: ignore[assignment]
            self.committer = OffsetCommitter(self.group, storage=storage, runtime=runtime)
            self.switcher = Switcher(self, coordinator)
            # Two tasks of the member may read the topics' partitions at once now (the coordinator's leader
            # plans while a stopping rebalancer reads): ClusterReads' locks, held across a ZooKeeper call,
            # must be the kernel's (a real lock held by a suspended task blocks the whole simulation).
            self.group.cluster._topic_lock = SimLock(kernel)  # type: ignore[assignment]
            self.group.cluster._broker_lock = SimLock(kernel)  # type: ignore[assignment]
        self.heartbeat = SimHeartbeat(self.client, kernel.clock)
        self.lease: Optional[SessionLease] = None  # made after registering, as ZooKeeperMembership does
        self.fetchers = SimFetchers(kernel, random.Random(seed * 5 + 2), self.deliverable, self.lease_session)
        self.last_chunk: Optional[Chunk] = None  # the chunk of the last message handed out
        self._queues: Dict[str, ChunkQueue] = {}
        self.failures: List[BaseException] = []
        self.rebalancer = self._rebalancer(random.Random(seed + 1))
        self._session_was_lost = False
        self.stale = False
        self.lost_sessions: Set[int] = set()
        self.state = "new"  # new, joining, joined, join-failed, leaving, left, killed
        self.committing = False
        self.task: Optional[SimTask] = None
        self.client.add_listener(self._on_state)

    # ------------------------------------------------------------- wiring

    def _rebalancer(self, rng: random.Random) -> Rebalancer:
        return Rebalancer(
            group=self.group, topic_count=self.count, assignor=assignors.get_assignor(self.strategy),
            queue_for=self._queue_for, streams=[], fetchers=self.fetchers, committer=self.committer,
            auto_commit=True, fetch_size=1024, max_retries=4, backoff_ms=2000, exclude_internal_topics=True,
            register=self._register, watch_topics=self.watcher.watch_topics, on_failure=self.failures.append,
            read_offsets=self.committer.read_offsets, clock=self.kernel.clock, rng=rng,
            runtime=self.runtime, on_rebalanced=self._rebalanced,
        )

    def _queue_for(self, topic: str, thread_id: str) -> ChunkQueue:
        queue = self._queues.get(thread_id)
        if queue is None:  # made only when missing (each has a lock and two conditions)
            queue = self._queues[thread_id] = ChunkQueue(4)
        return queue

    def _register(self) -> None:
        if self.switcher is not None:  # ZooKeeperMembership's may_register: production registration_refused
            try:
                why = self.switcher.refused()
            except KazooException as exc:  # production lets it out: the attempt fails all the same
                raise ZkConsumerError(f"reading the migration node: {exc!r}") from exc
            if why is not None:
                raise ZkConsumerError(why)
        self.group.register(self.registration)
        if self.switcher is not None and switch.RECHECK:  # ZooKeeperMembership's register: asked again
            try:
                why = self.switcher.refused()
            except KazooException as exc:
                raise ZkConsumerError(f"reading the migration node: {exc!r}") from exc
            if why is not None:
                self.group.deregister()
                raise ZkConsumerError(why)

    def _rebalanced(self, duration_s: float) -> None:
        """``ZooKeeperMembership._rebalanced``: the current session's proofs count for the lease."""
        if self.lease is not None:
            self.lease.accept_session()

    def alive(self) -> bool:
        """Not killed (kill -9)."""
        return self.state != "killed"

    def deliverable(self) -> bool:
        """``ZooKeeperMembership.deliverable``: the fetchers may queue (``CoordinatorMembership``'s: always)."""
        return self.mode != "zookeeper" or self.lease is None or self.lease.valid()

    def lease_session(self) -> Optional[int]:
        """The session the lease vouches for (its accepted one; for the checker)."""
        accepted = self.lease._accepted if self.lease is not None else None
        return accepted if accepted is not None else self.client.sid

    def _signal(self, reason: str) -> None:
        if self.state in ("joined", "joining") and self.mode == "zookeeper":
            self.rebalancer.request(reason)

    def _on_state(self, state: str) -> None:
        """``ZooKeeperMembership.on_zk_state``: signal only."""
        if self.switcher is not None and state == KazooState.CONNECTED:
            self.switcher.wake.set()  # SwitchingMembership.on_zk_state: read the migration node again
        if state == KazooState.CONNECTED:
            self.group.note_session()
        else:
            self.group.connection_lost()
        if state == KazooState.LOST:
            self.stale = True  # for the checker: what it delivers now was owned by the lost session
            if self.client.sid is not None:
                self.lost_sessions.add(self.client.sid)  # for the checker: kazoo has said LOST
            if self.lease is not None:
                self.lease.session_lost()
            self._session_was_lost = True
            if self.state == "joined" and self.mode == "zookeeper":
                self.rebalancer.session_lost()
        elif state == KazooState.CONNECTED and self._session_was_lost:
            self._session_was_lost = False
            if self.state == "joined" and self.mode == "zookeeper":
                self.rebalancer.session_restored()

    # ------------------------------------------------------------- the application

    def join(self) -> None:
        """``create_message_streams``: connect, register, watch, start the rebalancer."""
        self.state = "joining"
        self.client.start()

        def run() -> None:
            if self.switcher is not None and self._join_switching():
                return
            try:
                self._register()
                lease = SessionLease(BoundedZooKeeper(self.client, self.client.timeout / 3.0, clock=self.kernel.clock),
                                     self.group.paths.member(self.consumer_id), self.client.timeout,
                                     clock=self.kernel.clock, heartbeat=self.heartbeat)
                lease._thread = SimThread(self.kernel, self.spawn, lease._run, "lease")  # type: ignore[assignment]
                self.watcher.start()
            except ZkConsumerError as exc:
                if self.switcher is not None and self._joined_coordinator_instead():
                    return
                self.trace(f"{self.name} join failed: {exc}")
                self.state = "join-failed"
                self.watcher.stop()
                self.client.stop()
                return
            if self.state != "joining":  # asked to leave meanwhile (its thread was descheduled): the leave has closed it
                return
            self.state = "joined"
            self.lease = lease
            lease.start()
            self.spawn(self.fetchers.run, "fetcher")
            self.rebalancer.start()
            if self.switcher is not None:
                self.spawn(self.switcher.run, "switch")
        self.task = self.spawn(run, "join")

    def _join_switching(self) -> bool:
        """``SwitchingMembership.join``: join the membership the migration node names. ``True``: joined
        the coordinator (or failed); ``False``: go on with ZooKeeper membership."""
        assert self.switcher is not None
        try:
            intent = self.switcher.intent()
        except (KazooException, ZkConsumerError) as exc:
            self.trace(f"{self.name} join failed: {exc}")
            self.state = "join-failed"
            self.client.stop()
            return True
        if intent is not None and intent.to == "kafka":
            return self._start_coordinator()
        if intent is not None and not self.switcher.wait_coordinator_empty():
            return self._start_coordinator()  # the rollback was reversed meanwhile
        return False

    def _joined_coordinator_instead(self) -> bool:
        """A registration refused: the node may have been written since it was read; follow it."""
        assert self.switcher is not None
        try:
            intent = self.switcher.intent()
        except (KazooException, ZkConsumerError):
            return False
        if intent is None or intent.to != "kafka":
            return False
        if not self.switcher.abandon_zookeeper():  # SwitchingMembership.join: production _abandon
            return True
        return self._start_coordinator()

    def _start_coordinator(self) -> bool:
        assert self.switcher is not None
        if self.state != "joining":
            return True
        self.watcher.stop()
        self.state = "joined"
        self.spawn(self.fetchers.run, "fetcher")
        self.switcher.join_coordinator()
        self.spawn(self.switcher.run, "switch")
        return True

    def rejoin_zookeeper(self) -> bool:
        """Back to ZooKeeper membership (a rollback): register, then new watches, lease and rebalancer.
        ``False``: the registration failed (refused: the node says ``kafka`` again), nothing started."""
        try:
            self._register()
        except ZkConsumerError:
            return False
        if self.state != "joined":
            return False
        self.watcher = GroupWatcher(self.client, self.group.paths, self._signal, self.topic_allowed)  # type: ignore[arg-type]
        self.group.member_list = self.watcher.member_list
        self.group.topic_data = self.watcher.topic_data
        self.rebalancer = self._rebalancer(random.Random(self.rng.random()))
        lease = SessionLease(BoundedZooKeeper(self.client, self.client.timeout / 3.0, clock=self.kernel.clock),
                             self.group.paths.member(self.consumer_id), self.client.timeout,
                             clock=self.kernel.clock, heartbeat=self.heartbeat)
        lease._thread = SimThread(self.kernel, self.spawn, lease._run, "lease")  # type: ignore[assignment]
        self.lease = lease
        self.mode = "zookeeper"
        lease.start()
        self.watcher.start()
        self.rebalancer.start()
        return True

    def owned(self) -> List[Tuple[PartitionTopicInfo, str]]:
        if self.state != "joined" or self.mode == "switching":
            return []
        if self.mode == "kafka":
            return self.side.owned() if self.side is not None else []
        return self.rebalancer.owned_partitions()

    def consume(self) -> Optional[Tuple[TopicPartition, int]]:
        """Hand out the next queued message of an owned partition: ``((topic, partition), offset)``;
        its chunk is :attr:`last_chunk`. ``None`` if the partition drawn has nothing queued."""
        owned = [info for info, _ in self.owned() if not info.revoked]
        if not owned:
            return None
        info = self.rng.choice(sorted(owned, key=lambda i: (i.topic, i.partition)))
        got = self.fetchers.take(info)
        if got is None:
            return None
        offset, self.last_chunk = got
        info.consumed_offset = offset + 1
        return (info.topic, info.partition), offset

    def commit(self) -> None:
        """``commitOffsets()`` on the application's thread (one at a time)."""
        if self.state != "joined" or self.committing:
            return
        self.committing = True

        def run() -> None:
            fenced: List[TopicPartition] = []
            if self.mode != "zookeeper":
                self._commit_coordinator()
                return
            try:
                fenced = self.committer.commit(self.rebalancer.owned_partitions())
            except OffsetStorageError as exc:
                fenced = list(exc.fenced)
            except ZkConsumerError:
                pass
            finally:
                self.committing = False
                if fenced and self.state == "joined":
                    self.rebalancer.ownership_lost(fenced)
        self.spawn(run, "commit")

    def _commit_coordinator(self) -> None:
        """``CoordinatorMembership.commit``: under the generation the partitions were delivered in."""
        try:
            if self.side is not None:
                generation, owned, _ = self.side.delivery.to_commit()
                if generation is not None and owned:
                    self.committer.commit(owned, generation)
        except ZkConsumerError:
            pass
        finally:
            self.committing = False

    def leave(self, done: Callable[[], None]) -> None:
        """``shutdown()``, bounded as the connector bounds it: the fetchers stop, the coordination
        (watches, rebalancer) is asked to stop on a thread of its own, the final commit runs under the
        group client's deadline, both within one session timeout of the start of the shutdown, then
        the session closes (which fails whatever is still waiting). ``_final_commit`` makes one attempt
        here, not ``commit_retrying``'s several (they share the same deadline)."""
        previous, self.state = self.state, "leaving"
        self.closing.set()
        deadline = self.kernel.clock() + self.session_timeout

        def run() -> None:
            self.fetchers.stop()
            if self.lease is not None:
                self.lease.request_stop()
            if self.mode != "zookeeper":  # CoordinatorMembership's shutdown: stop, commit, LeaveGroup
                side = self.side
                if side is not None:
                    side.stop()
                    side.final_commit_and_leave()
                self.exit(done)
                return

            def stop_coordination() -> None:
                self.watcher.stop()
                if previous == "joined":
                    self.rebalancer.stop()
            stopping = self.spawn(stop_coordination, "stop-coordination")
            if previous == "joined":
                try:
                    with self.group.client.deadline(max(0.5, deadline - self.kernel.clock())):
                        self.committer.commit(self.rebalancer.owned_partitions())
                except ZkConsumerError:
                    pass
            stopping.join(max(0.0, deadline - self.kernel.clock()))
            self.exit(done)
        self.spawn(run, "leave")

    # ------------------------------------------------------------- what the invariants look at

    def settled(self) -> bool:
        if self.mode == "kafka":
            side = self.side
            generation = side.generation() if side is not None else None
            return generation is not None and side is not None and side.coordinator.state == "Stable" \
                and generation.generation_id == side.coordinator.generation
        if self.mode != "zookeeper":
            return False
        status = self.rebalancer.status
        return status.state == RebalanceState.STABLE and not status.gave_up

    def believed(self) -> Dict[TopicPartition, str]:
        """What the member delivers now: partition -> its thread id."""
        return {(info.topic, info.partition): thread for info, thread in self.owned() if not info.revoked}
