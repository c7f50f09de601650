"""The fetch path of a simulated member and the production session lease that gates it.

Production (``zkconsumer/fetch/fetcher_thread.py``): a fetcher thread fetches the partitions it
serves and queues each response's messages as a chunk into the partition's stream queue
(bounded: ``queued.max.message.chunks``, plus one parked chunk per partition); while
``deliverable()`` is false (``ZooKeeperMembership.deliverable``: the
:class:`~zkconsumer.zookeeper.lease.SessionLease` is not valid) it fetches nothing, and a
response that arrives meanwhile is dropped unqueued (``_deliver`` asks again just before
queuing). The application's iterator hands out what is queued, lease or not.

Modelled here:

* :class:`SimHeartbeat`: the production :class:`~zkconsumer.zookeeper.heartbeat.SessionHeartbeat`
  (``kafka`` mode; no native thread, since its clock is the simulation's), its proof book-keeping
  (``_note``, ``last_proof``, ``longest_silence``) unchanged. What kazoo's hooked connection
  methods feed it in production (``_submit``'s send time, ``_read_header``'s reply), the
  simulated client feeds it (``SimKazoo.on_proof``): the send time of every request and ping the
  server answered, with the session it was answered on. The negotiated timeout is the requested
  one (the model's server does not clamp).
* :class:`SimThread`: the lease's :class:`~zkconsumer.threads.ShutdownableThread` on the kernel,
  so the production ``SessionLease._run`` and ``_round`` (its own reads when a proof is overdue)
  run unchanged, as one of the member's tasks.
* :class:`SimFetchers`: the fetcher manager as the rebalancer drives it (start, remove, stop), and
  one fetcher task per member: per partition a queue of at most :data:`DEPTH` chunks of
  :data:`CHUNK` messages each (every partition always has data); a fetch round trip takes a few
  ms; the lease is consulted before the fetch and again when its answer is queued, as production
  does. The check and the queuing are one step here (a greenlet switches only where it blocks):
  a process frozen between them resumes to queue a chunk, which is the same as a freeze just
  after queuing it (bounded the same way, by the queue depth).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Callable, Deque, Dict, Iterable, List, Optional, Tuple

from zkconsumer.fetch.handoff import PartitionTopicInfo
from zkconsumer.structs import TopicPartition
from zkconsumer.zookeeper.heartbeat import SessionHeartbeat

from .client import SimKazoo
from .kernel import Kernel, SimEvent, SimTask

#: Chunks queued per partition at most (the stream queue and the parked chunk, per partition).
DEPTH = 2
#: Messages per chunk (one fetch response's share of a partition).
CHUNK = 3
#: Production's wait while the lease is lapsed (``FetcherThread.run``: ``cond.wait(0.05)``).
LAPSED_POLL_S = 0.05


class SimHeartbeat(SessionHeartbeat):
    """The production heartbeat's proofs, observed from the simulated client (see the module docstring)."""

    def __init__(self, client: SimKazoo, clock: Callable[[], float]) -> None:
        super().__init__("kafka", clock)  # a clock other than time.monotonic: no native thread
        self._negotiated = client.timeout
        self._observing = True
        client.on_proof = self._note
        client.on_handshake = self._handshake


class SimThread:
    """:class:`~zkconsumer.threads.ShutdownableThread`'s surface used by ``SessionLease``, on the kernel."""

    def __init__(self, kernel: Kernel, spawn: Callable[[Callable[[], None], str], SimTask],
                 target: Callable[[], None], name: str) -> None:
        self._spawn, self._target, self.name = spawn, target, name
        self._stop = SimEvent(kernel)
        self._task: Optional[SimTask] = None

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def start(self) -> None:
        self._task = self._spawn(self._target, self.name)

    def wait(self, timeout: Optional[float]) -> bool:
        return self._stop.wait(timeout)

    def request_stop(self) -> None:
        self._stop.set()

    def stop(self, timeout: Optional[float] = None) -> bool:
        self.request_stop()
        if self._task is not None:
            self._task.join(timeout)
        return self._task is None or self._task.done


@dataclass
class Chunk:
    """Messages ``first .. end-1`` of a partition, queued at ``at`` under ``session`` (the lease's)."""

    info: PartitionTopicInfo
    first: int
    end: int
    session: Optional[int]
    at: float
    next: int = 0

    def __post_init__(self) -> None:
        self.next = self.first


class SimFetchers:
    """The fetcher manager and its thread, as the rebalancer and the application see them.

    ``deliverable()`` is the connector's (the lease); ``session()`` the session the lease vouches
    for; ``observer(tp, chunk)`` is told of every chunk queued (the checker's ``queued``).
    """

    def __init__(self, kernel: Kernel, rng: random.Random, deliverable: Callable[[], bool],
                 session: Callable[[], Optional[int]]) -> None:
        self.kernel = kernel
        self.rng = rng
        self.deliverable = deliverable
        self.session = session
        self.fetching: Dict[TopicPartition, PartitionTopicInfo] = {}
        self.queues: Dict[TopicPartition, Deque[Chunk]] = {}
        self.observer: Callable[[TopicPartition, Chunk], None] = lambda tp, chunk: None
        self.stopped = False
        self.held_back = 0  # fetch answers dropped because the lease had lapsed meanwhile
        self._room = SimEvent(kernel)

    # ------------------------------------------------------------- the rebalancer's side

    def start_connections(self, infos: Iterable[PartitionTopicInfo]) -> None:
        for info in infos:
            tp = (info.topic, info.partition)
            self.fetching[tp] = info
            self.queues[tp] = deque()
        self._room.set()

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching ``tps`` and drop their queued chunks (the stream queue's ``discard``)."""
        for tp in tps:
            self.fetching.pop(tp, None)
            self.queues.pop(tp, None)

    def stop_connections(self) -> None:
        self.fetching.clear()
        self.queues.clear()

    def stop(self) -> None:
        self.stopped = True
        self._room.set()

    # ------------------------------------------------------------- the application's side

    def take(self, info: PartitionTopicInfo) -> Optional[Tuple[int, Chunk]]:
        """The next queued message of ``info``'s partition: ``(offset, its chunk)``; ``None`` if none is queued."""
        queue = self.queues.get((info.topic, info.partition))
        while queue:
            chunk = queue[0]
            if chunk.info is not info or chunk.next >= chunk.end:  # not this assignment's: dropped
                queue.popleft()
                continue
            offset = chunk.next
            chunk.next += 1
            if chunk.next >= chunk.end:
                queue.popleft()
                self._room.set()
            return offset, chunk
        return None

    # ------------------------------------------------------------- the fetcher thread

    def run(self) -> None:
        while not self.stopped:
            self._room.clear()
            ready: List[TopicPartition] = [tp for tp in sorted(self.queues) if len(self.queues[tp]) < DEPTH]
            if not ready:
                self._room.wait(None)
                continue
            if not self.deliverable():  # the session lease lapsed: fetch nothing for now
                self.kernel.sleep(LAPSED_POLL_S)
                continue
            requested = [(tp, self.fetching[tp]) for tp in ready]
            self.kernel.sleep(self.rng.uniform(0.002, 0.03))  # the Fetch request's round trip
            if self.stopped:
                return
            for tp, info in requested:
                queue = self.queues.get(tp)
                if queue is None or self.fetching.get(tp) is not info or len(queue) >= DEPTH:
                    continue  # removed meanwhile (or moved to another stream): the answer is stale
                if not self.deliverable():  # FetcherThread._deliver: not ours to hand out right now
                    self.held_back += 1
                    continue
                if info.fetched_offset < 0:  # auto.offset.reset=smallest
                    info.reset_offsets(0)
                first = info.fetched_offset
                chunk = Chunk(info, first, first + CHUNK, self.session(), self.kernel.now)
                queue.append(chunk)
                info.fetched_offset = chunk.end
                self.observer(tp, chunk)
