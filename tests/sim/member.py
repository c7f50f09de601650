"""One zkconsumer group member in the simulation, wired as the connector wires it.

The parts are the production ones: :class:`~zkconsumer.zookeeper.group.GroupClient`
(with its owner-node, offset-node and retry code), :class:`~zkconsumer.zookeeper.watchers.GroupWatcher`,
:class:`~zkconsumer.offsets.committer.OffsetCommitter` with fenced ZooKeeper offsets, and
:class:`~zkconsumer.rebalance.rebalancer.Rebalancer`; only the kazoo client
(:class:`~.client.SimKazoo`), the runtime (:class:`~.kernel.SimRuntime`), the
clock and the random generators are the simulation's. The session-state
callback does what ``ZooKeeperMembership.on_zk_state`` does, and a
commit what its ``_commit`` does. Fetchers and Kafka are not simulated: the
application "consumes" by advancing ``consumed_offset`` of a partition the
rebalancer has installed, which is what an iterator does with a message.
"""

from __future__ import annotations

import random
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from kazoo.protocol.states import KazooState

from zkconsumer import assignors
from zkconsumer.consumer.membership import RebalanceState
from zkconsumer.consumer.topic_count import StaticTopicCount, TopicCount, Whitelist, WildcardTopicCount
from zkconsumer.errors import ZkConsumerError
from zkconsumer.fetch.handoff import ChunkQueue, PartitionTopicInfo
from zkconsumer.offsets.committer import OffsetCommitter
from zkconsumer.offsets.storage import OffsetStorageError
from zkconsumer.rebalance.rebalancer import Rebalancer
from zkconsumer.structs import TopicPartition
from zkconsumer.zookeeper import zkformat
from zkconsumer.zookeeper.group import GroupClient
from zkconsumer.zookeeper.watchers import GroupWatcher

from .client import Network
from .kernel import Kernel, SimRuntime, SimTask
from .process import SimProcess
from .zkmodel import Ensemble

GROUP = "g"


class _Fetchers:
    """What the rebalancer asks of the fetcher manager: recorded, nothing fetched."""

    def __init__(self) -> None:
        self.fetching: Dict[TopicPartition, PartitionTopicInfo] = {}

    def start_connections(self, infos: Iterable[PartitionTopicInfo]) -> None:
        for info in infos:
            self.fetching[(info.topic, info.partition)] = info

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.fetching.pop(tp, None)

    def stop_connections(self) -> None:
        self.fetching.clear()


class Member(SimProcess):
    """A zkconsumer member: join, consume, commit, leave cleanly, or be killed."""

    def __init__(self, kernel: Kernel, ensemble: Ensemble, network: Network, index: int, incarnation: int,
                 subscription: Dict[str, int], wildcard: Optional[str], strategy: str, seed: int,
                 trace: Callable[[str], None], session_timeout: float = 6.0) -> None:
        super().__init__(kernel, ensemble, network, "m", index, incarnation, seed, trace, session_timeout)
        self.session_timeout = session_timeout
        runtime = SimRuntime(kernel, self.name)
        self.group = GroupClient(self.client, GROUP, self.consumer_id, retry_timeout_s=session_timeout,  # type: ignore[arg-type]
                                 sleep=kernel.sleep, clock=kernel.clock)
        count: TopicCount
        if wildcard is not None:
            count = WildcardTopicCount(self.consumer_id, Whitelist(wildcard), next(iter(subscription.values())), True)
        else:
            count = StaticTopicCount(self.consumer_id, subscription)
        self.count = count
        self.registration = zkformat.encode_registration(count.subscription, count.pattern, 1_700_000_000_000 + index)
        topic_allowed = (lambda t: count.topic_filter.is_topic_allowed(t, True)) if wildcard is not None else None  # type: ignore[attr-defined]
        self.watcher = GroupWatcher(self.client, self.group.paths, self._signal, topic_allowed)  # type: ignore[arg-type]
        self.group.member_list = self.watcher.member_list
        self.group.topic_data = self.watcher.topic_data
        self.committer = OffsetCommitter(self.group, runtime=runtime)
        self.fetchers = _Fetchers()
        self._queues: Dict[str, ChunkQueue] = {}
        self.failures: List[BaseException] = []
        self.rebalancer = Rebalancer(
            group=self.group, topic_count=count, assignor=assignors.get_assignor(strategy),
            queue_for=self._queue_for, streams=[], fetchers=self.fetchers, committer=self.committer,
            auto_commit=True, fetch_size=1024, max_retries=4, backoff_ms=2000, exclude_internal_topics=True,
            register=self._register, watch_topics=self.watcher.watch_topics, on_failure=self.failures.append,
            read_offsets=self.committer.read_offsets, clock=kernel.clock, rng=random.Random(seed + 1),
            runtime=runtime,
        )
        self._session_was_lost = False
        self.stale = False
        self.state = "new"  # new, joining, joined, join-failed, leaving, left, killed
        self.committing = False
        self.task: Optional[SimTask] = None
        self.client.add_listener(self._on_state)

    # ------------------------------------------------------------- wiring

    def _queue_for(self, topic: str, thread_id: str) -> ChunkQueue:
        queue = self._queues.get(thread_id)
        if queue is None:  # made only when missing (each has a lock and two conditions)
            queue = self._queues[thread_id] = ChunkQueue(4)
        return queue

    def _register(self) -> None:
        self.group.register(self.registration)

    def _signal(self, reason: str) -> None:
        if self.state in ("joined", "joining"):
            self.rebalancer.request(reason)

    def _on_state(self, state: str) -> None:
        """``ZooKeeperMembership.on_zk_state``: signal only."""
        if state == KazooState.CONNECTED:
            self.group.note_session()
        else:
            self.group.connection_lost()
        if state == KazooState.LOST:
            self.stale = True  # for the checker: what it delivers now was owned by the lost session
            self._session_was_lost = True
            if self.state == "joined":
                self.rebalancer.session_lost()
        elif state == KazooState.CONNECTED and self._session_was_lost:
            self._session_was_lost = False
            if self.state == "joined":
                self.rebalancer.session_restored()

    # ------------------------------------------------------------- the application

    def join(self) -> None:
        """``create_message_streams``: connect, register, watch, start the rebalancer."""
        self.state = "joining"
        self.client.start()

        def run() -> None:
            try:
                self._register()
                self.watcher.start()
            except ZkConsumerError as exc:
                self.trace(f"{self.name} join failed: {exc}")
                self.state = "join-failed"
                self.watcher.stop()
                self.client.stop()
                return
            if self.state != "joining":  # asked to leave meanwhile (its thread was descheduled): the leave has closed it
                return
            self.state = "joined"
            self.rebalancer.start()
        self.task = self.spawn(run, "join")

    def owned(self) -> List[Tuple[PartitionTopicInfo, str]]:
        return self.rebalancer.owned_partitions() if self.state == "joined" else []

    def consume(self) -> Optional[Tuple[TopicPartition, int]]:
        """Hand out the next message of an owned partition: ``((topic, partition), offset)``."""
        owned = [info for info, _ in self.owned() if not info.revoked]
        if not owned:
            return None
        info = self.rng.choice(sorted(owned, key=lambda i: (i.topic, i.partition)))
        offset = info.consumed_offset if info.consumed_offset >= 0 else 0  # auto.offset.reset=smallest
        info.consumed_offset = offset + 1
        return (info.topic, info.partition), offset

    def commit(self) -> None:
        """``commitOffsets()`` on the application's thread (one at a time)."""
        if self.state != "joined" or self.committing:
            return
        self.committing = True

        def run() -> None:
            fenced: List[TopicPartition] = []
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

    def leave(self, done: Callable[[], None]) -> None:
        """``shutdown()``, bounded as the connector bounds it: the coordination (watches, rebalancer)
        is asked to stop on a thread of its own, the final commit runs under the group client's
        deadline, both within one session timeout of the start, then the session closes (which
        fails whatever is still waiting). ``_final_commit`` makes one attempt here, not
        ``commit_retrying``'s several (they share the same deadline)."""
        previous, self.state = self.state, "leaving"

        def run() -> None:
            deadline = self.kernel.clock() + self.session_timeout

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
        status = self.rebalancer.status
        return status.state == RebalanceState.STABLE and not status.gave_up

    def believed(self) -> Dict[TopicPartition, str]:
        """What the member delivers now: partition -> its thread id."""
        return {(info.topic, info.partition): thread for info, thread in self.owned() if not info.revoked}
