"""A FetcherThread: fetches a set of partitions from one broker (Kafka's ConsumerFetcherThread).

Back-pressure per partition: a fetcher never blocks on a stream's queue, so a stream whose consumer stops reading does
not stop the fetching of partitions of other streams served by the same fetcher. A chunk that finds its queue full is
*parked* on the partition's fetcher state (``fetched_offset`` does not move); the partition is not fetched again until
that chunk is queued. Every queue a fetcher serves has a room listener (``ChunkQueue.add_room_listener``): when a
consumer takes from a full queue, the listener queues the parked chunks of that queue right there, on the consumer's
thread, if their partition locks are free (never waiting), and wakes the fetcher (unless it waits out a consumer's
turn: that consumer's next round queues them), which queues the rest (oldest partition state first) and fetches again.
With every partition blocked, the fetcher waits for that signal (at most :data:`ROOM_WAIT_S` between checks), it does
not spin. Per partition, chunks are queued in offset order: a partition has at most one parked chunk and is not
fetched while it has one.

Fetching ahead, as Kafka's ConsumerFetcherThread does (its next request goes out once its last chunk is queued): a
partition is fetched again as soon as its own last chunk is queued, even while others of the same stream wait with a
parked chunk, so the consumer never waits for a response with an empty queue while one stream is full. Unparking on
the consumer's thread spares a thread hand-off per chunk: the fetcher thread needs the GIL to queue one, and taking it
from a busy iterating thread costs up to ``sys.getswitchinterval()`` (5 ms), as long as reading a 1 MB chunk takes.

Not waiting behind a parked chunk: a request that leaves out a partition whose chunk is parked cannot take it in when
room appears (one request per connection at a time), so it asks the broker to wait less (``rounds.held_back_wait_ms``:
1 ms, doubled while a chunk stays parked, ``fetch.wait.max.ms`` at most: a few short requests, not a poll loop).
``fetch.wait.max.ms`` keeps Kafka's meaning: how long the broker may hold a request ``fetch.min.bytes`` leaves open.

Fetching on the consumer's thread (``fetch.on.consumer.thread``): a fetcher that serves one stream's queue alone,
narrow, with small responses, is that queue's driver: a consumer that finds the queue empty runs the fetcher's next
round itself (:meth:`FetcherThread.drive`, the same round: lease check, request, the lease fence per partition,
queuing), one thread woken per response instead of two (``rounds.py``: whose turn; ``rounds.round_bounds``: the
consumer's deadline bounds the round, the socket's wait included).

Memory bound, per stream: ``queued.max.message.chunks`` chunks in its queue plus one parked chunk per partition (each
at most ``fetch.message.max.bytes`` of messages, decoded into its own buffers); per fetcher thread, its connection's
response buffer, as large as the largest response yet (reused until the fetcher stops, ``reuse_buffer=True``); per
process, 8 recycled block buffers of at most 4 MB (``_speedups_block.c``). A partition that leaves its fetcher drops
its parked chunk; its ``fetched_offset`` never moved past it, so the next fetch gets the same messages.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ..errors import BrokerError, CorruptMessageError, MessageSizeTooLargeError, ZkConsumerError
from ..structs import TopicPartition
from ..threads import ShutdownableThread
from ..wire.broker_errors import ERROR_NAMES, OffsetOutOfRangeError
from ..wire.connection import BrokerConnection
from ..wire.messageset import DecodeResult, decode_message_set, speedups
from ..wire.protocol import FetchPartitionResponse
from . import rounds
from .fetch_stats import FetchStats, error_kind
from .handoff import ChunkQueue, FetchedDataChunk, PartitionTopicInfo
from .partition_state import Hindrances, PartitionState
from .placement import place_offset
from .rounds import HANDBACK_S, QUIET_S, ROOM_WAIT_S, RoundTurns, held_back_wait_ms, round_bounds

__all__ = ["FetcherThread", "FetcherKey"]

#: The C decoder and its last status of a message set decoded whole (``None``: no extension; see ``_process``).
_decode = speedups.decode if speedups is not None else None
_TRUNCATED: int = speedups.TRUNCATED if speedups is not None else 0

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class FetcherKey:
    """Identity of a fetcher thread: the leader's endpoint and the fetcher id (Kafka's BrokerAndFetcherId),
    and which of that fetcher's ``fetcher.connections`` connections it is (``connection``)."""

    broker_id: int
    host: str
    port: int
    fetcher_id: int
    connection: int = 0


class FetcherThread(ShutdownableThread):
    """Fetches a set of partitions from one broker (Kafka's ConsumerFetcherThread).

    Created and owned by :class:`FetcherManager`; partitions come and go through
    :meth:`add_partitions` / :meth:`remove_partitions`; :meth:`stop` (or
    :meth:`request_stop` then :meth:`join`) ends it. ``hand_back(infos)`` is called
    (from this thread, with no lock held) with partitions whose leader must be looked up again.
    """

    def __init__(self, key: FetcherKey, config: Any, connection: BrokerConnection,
                 hand_back: Callable[[List[PartitionTopicInfo]], None],
                 on_error: Callable[[BaseException], None],
                 deliverable: Callable[[], bool] = lambda: True, stats: Optional[FetchStats] = None,
                 resize: Optional[Callable[["FetcherThread", bool], None]] = None) -> None:
        name = f"zkconsumer-fetcher-{config.client_id}-{key.fetcher_id}-broker-{key.broker_id}"
        super().__init__(f"{name}-{key.connection}" if key.connection else name)
        self.key = key
        self._config = config
        self._conn = connection
        self._hand_back = hand_back
        self._on_error = on_error
        self._deliverable = deliverable
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._partitions: Dict[TopicPartition, PartitionState] = {}
        self._hindrances = Hindrances()  # how many of them are parked, stalled or delayed (both 0: all ready)
        self._queues: Dict[int, ChunkQueue] = {}  # queues whose room listener is ours (guarded by _lock)
        self._room_events = 0  # how many times room appeared in one of them (guarded by _lock)
        self._stepped_back = False  # the thread waits out a consumer's turn (run(); guarded by _lock)
        self._failures = 0  # consecutive failed fetches
        self._held_back_wait = 0  # broker wait (ms) of the last request that left out a parked partition, else 0
        #: Per-broker fetch counters (shared with the manager); ``_response_*`` total the response being processed.
        self.stats = stats if stats is not None else FetchStats()
        self._response_messages = 0
        self._response_errors: List[str] = []
        #: ``resize(self, wide)`` (the manager's): called between requests, no lock held, when a response
        #: was large (:func:`~zkconsumer.fetch.rounds.large_response`) while ``wide`` is false, and at most
        #: every ``quiet_s`` while ``wide`` is true and no large response came for ``quiet_s``.
        self._resize = resize
        self.wide = False  # set by the manager
        self.last_large = time.monotonic()  # when the last large response came (its creation at first)
        self._response_large = False
        self._next_quiet_check = 0.0
        # The config is immutable: the properties every round reads, read once (a property call each otherwise).
        self._wait_max_ms: int = config.fetch_wait_max_ms
        self._turns = RoundTurns(self._wait_max_ms)  # whose turn a round is: this thread's or a consumer's
        self._min_bytes: int = config.fetch_min_bytes
        self._max_bytes: int = config.fetch_message_max_bytes
        self._socket_timeout_ms: int = config.socket_timeout_ms
        self._drives = bool(getattr(config, "fetch_on_consumer_thread", False))
        self._interrupted = False  # interrupt() failed the request of a consumer's round: no hand-back
        self._silent_since: Optional[float] = None  # the send of the first request still unanswered (see round_bounds)
        self._deadline: Optional[float] = None  # time.monotonic() deadline of the consumer running a round
        self._cut_until = 0.0  # time.monotonic() before which consumers run no round (a round was cut: CUT_BACKOFF_S)

    # ------------------------------------------------------------------ control (other threads)

    def add_partitions(self, infos: Iterable[PartitionTopicInfo]) -> None:
        """Start fetching ``infos`` from their ``fetched_offset``; partitions already held are kept."""
        with self._cond:
            for info in infos:
                tp = (info.topic, info.partition)
                if tp not in self._partitions:
                    self._partitions[tp] = PartitionState(info)
                    if id(info.queue) not in self._queues:
                        self._queues[id(info.queue)] = info.queue
                        info.queue.add_room_listener(self._room_appeared)
                        if self._drives:
                            info.queue.add_driver(self)
            self._cond.notify_all()

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> List[PartitionTopicInfo]:
        """Stop fetching ``tps``; return the infos that were held.

        Returns once none of them can have a chunk queued any more (one being
        processed is waited for). Their parked chunks, if any, are dropped:
        their ``fetched_offset`` is still in front of those messages.
        """
        with self._lock:
            removed = [self._partitions.pop(tp) for tp in set(tps) if tp in self._partitions]
            for st in removed:
                st.removed = True
            used = {id(st.info.queue) for st in self._partitions.values()}
            unused = [self._queues.pop(key) for key in list(self._queues) if key not in used]
            for queue in unused:
                queue.remove_room_listener(self._room_appeared)
                queue.remove_driver(self)
        for st in removed:
            with st.lock:
                self._hindrances.forget(st)
        return [st.info for st in removed]

    def partition_count(self) -> int:
        with self._lock:
            return len(self._partitions)

    def snapshot(self) -> Dict[TopicPartition, Tuple[PartitionTopicInfo, int, bool, bool]]:
        """``{tp: (info, last high watermark or -1, stalled, has a parked chunk)}`` for metrics."""
        with self._lock:
            return {tp: (st.info, st.high_watermark, st.stalled, st.parked is not None)
                    for tp, st in self._partitions.items()}

    def request_stop(self) -> None:
        """Make the thread end soon: wakes its waits and aborts its socket (never blocks on the network).

        A round running on a consumer's thread ends soon too (its socket is aborted), and
        no later :meth:`drive` runs one.
        """
        super().request_stop()
        with self._cond:
            self._cond.notify_all()
        self._conn.abort()

    def join(self, timeout: Optional[float] = None) -> None:
        """Wait for the thread to end and for a round on a consumer's thread to finish, at most
        ``timeout`` seconds in all (``None``: until both did). Once both did after a stop, no
        round runs again: chunks of this fetcher are no longer queued."""
        deadline = None if timeout is None else time.monotonic() + timeout
        super().join(timeout)
        self._turns.wait_until_idle(deadline)

    def _room_appeared(self) -> None:
        """Room listener of every queue served: a consumer took from a full queue (any thread, no queue lock).
        Queues the parked chunks it can without waiting for a lock (see the module docstring), then wakes the fetcher
        thread for the rest and the next fetch, unless it waits out a consumer's turn that is still on (that
        consumer's next round queues the rest; woken, the thread only took the GIL to wait again)."""
        self._queue_parked(wait=False)
        with self._cond:
            self._room_events += 1
            if not (self._stepped_back and self._hands_over()):
                self._cond.notify_all()

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        try:
            while not self.stopping:
                pause, stepped_back = self._turns.thread_pause_s(self._hands_over()), True
                if pause > 0:
                    self._nudge()  # a consumer's turn: one that asked while this thread's round ran waits for it
                elif not self._turns.lock.acquire(False):
                    pause = HANDBACK_S  # a consumer is running a round
                else:
                    try:
                        done = self.fetch_round()
                    finally:
                        self._turns.lock.release()
                    if done:
                        continue
                    pause, stepped_back = 0.05, False  # e.g. the session lease lapsed: fetch nothing for now
                with self._cond:
                    self._stepped_back = stepped_back
                    self._cond.wait(pause)
                    self._stepped_back = False
        except BaseException as exc:  # noqa: BLE001 - reported, never swallowed
            log.exception("%s died", self.name)
            if not self.stopping:
                self._on_error(exc)
        finally:
            with self._lock:
                queues, self._queues = list(self._queues.values()), {}
            for queue in queues:
                queue.remove_room_listener(self._room_appeared)
                queue.remove_driver(self)
            self._conn.close()

    def fetch_round(self) -> bool:
        """One turn of :meth:`run`'s loop, on this thread: queue the chunks parked for want of room,
        then one fetch for the partitions with room (if any), and maybe a resize. ``False``, having
        done nothing: the member may not deliver now (:meth:`run` waits a little and asks again)."""
        return self._round(block=True, left_ms=None) is not None

    def drive(self, timeout: Optional[float]) -> bool:
        """On a consumer's thread whose queue is empty: run this fetcher's next round here, within
        ``timeout`` s (``None``: no deadline) and ``ANSWER_GRACE_MS``, the socket wait included, whatever
        the broker does (``rounds.round_bounds``). ``True`` once a fetch was sent and answered, or timed out at the
        deadline (the partitions stay); ``False``, having fetched nothing, if this fetcher does not
        hand its rounds over now (see the module docstring), another round is running, nothing may
        be fetched now, or less than ``MIN_CONSUMER_ROUND_MS`` is left: the consumer waits for its queue.

        An exception of the round ends this fetcher as if its thread had died (reported through
        ``on_error``); one that is not an ``Exception`` (``KeyboardInterrupt``) propagates to the
        consumer, after closing the connection it may have left mid-request.
        """
        left_ms = None if timeout is None else int(timeout * 1000)
        if self.stopping or not self._hands_over() or (left_ms is not None and left_ms < rounds.MIN_CONSUMER_ROUND_MS):
            return False
        if not self._turns.begin_consumer_round():  # the thread steps back after its round, and nudges
            return False
        fetched: Optional[bool] = False
        try:
            if self.stopping:
                return False
            self._deadline = None if timeout is None else time.monotonic() + timeout
            fetched = self._consumer_round(left_ms)
        except Exception as exc:  # noqa: BLE001 - reported as the fetcher thread reports its own
            log.exception("%s died on a consumer's thread", self.name)
            self.request_stop()
            self._on_error(exc)
            return False
        except BaseException:
            self._conn.close()
            raise
        finally:
            self._deadline = None
            self._turns.end_consumer_round(bool(fetched))
        return bool(fetched)

    def interrupt(self) -> None:
        """From any thread: make a round running on a consumer's thread end now (its request fails
        and is not retried; the partitions stay here and the next round fetches them on a new
        connection). A no-op while no consumer runs one."""
        if self._turns.driving is not None:
            self._interrupted = True
            self._conn.interrupt()

    def _hands_over(self) -> bool:
        """Whether consumers may run this fetcher's rounds now: the property, one queue, narrow, small responses,
        no round cut at a consumer's deadline within ``CUT_BACKOFF_S``."""
        return (self._drives and not self.wide and not self._response_large and len(self._queues) == 1
                and (not self._cut_until or time.monotonic() >= self._cut_until))

    def _cut(self) -> None:
        """A consumer's round was cut at its deadline: the thread runs the rounds, its own bound, ``CUT_BACKOFF_S``."""
        self._cut_until = time.monotonic() + rounds.CUT_BACKOFF_S
        with self._cond:
            self._cond.notify_all()

    def _nudge(self) -> None:
        """Tell the consumers of the queues served that they may fetch (this thread stepped back)."""
        with self._lock:
            queues = list(self._queues.values())
        for queue in queues:
            queue.nudge()

    def _round(self, block: bool, left_ms: Optional[int]) -> Optional[bool]:
        """One round (caller holds the round lock). ``None``: the member may not deliver now;
        ``False``: nothing to fetch (``block``: waited for something first, until stopping or room
        appeared); ``True``: fetched. ``left_ms``: the deadline of the consumer running it (see
        :meth:`drive`). Resizes only on this thread (``block``)."""
        if not self._deliverable():
            return None
        with self._lock:
            seen = self._room_events
        self._queue_parked()
        batch = self._next_batch(seen, block)
        if not batch:
            return False
        self._fetch_once(batch, left_ms)
        if block and self._resize is not None:
            self._check_width(self._resize)
        return True

    def _consumer_round(self, left_ms: Optional[int]) -> Optional[bool]:
        """:meth:`_round` on a consumer's thread, without its scans while no partition is parked, stalled or delayed
        (issue 44: at low rates every message is a round of its own, and each frame of a round costs CPU)."""
        if not self._hindrances.clear():
            return self._round(block=False, left_ms=left_ms)
        if not self._deliverable():
            return None
        with self._lock:
            batch = list(self._partitions.values())
        if not batch:
            return False
        self._fetch_once(batch, left_ms)
        return True

    def _check_width(self, resize: Callable[["FetcherThread", bool], None]) -> None:
        """After a response: ask the manager to spread (large response, narrow) or gather (quiet, wide)."""
        now = time.monotonic()
        if self._response_large:
            self.last_large = now
            if not self.wide:
                resize(self, True)
        elif self.wide and now - self.last_large >= QUIET_S and now >= self._next_quiet_check:
            self._next_quiet_check = now + QUIET_S / 5
            resize(self, False)

    def _next_batch(self, seen: int, block: bool = True) -> List[PartitionState]:
        """Partitions to fetch now: not stalled, not delayed, no parked chunk, room in their queue.

        Waits while there are none (``block``; else returns ``[]``). Returns ``[]`` when stopping, and as soon as
        a parked chunk could be queued or room appeared since ``seen`` (the
        room-event count read before the caller last tried its parked chunks),
        so the caller queues them first.
        """
        with self._lock:  # the lock of _cond (a Condition's own ``with`` is a Python call)
            while not self.stopping:
                if self._room_events != seen:
                    return []
                if self._partitions and self._hindrances.clear():
                    return list(self._partitions.values())  # none parked, stalled or delayed: all ready
                now = time.monotonic()
                ready: List[PartitionState] = []
                timeout: Optional[float] = None
                for st in self._partitions.values():
                    if st.parked is not None:
                        if st.info.queue.has_room():
                            return []  # queue it first
                        timeout = ROOM_WAIT_S if timeout is None else min(timeout, ROOM_WAIT_S)
                    elif st.stalled:
                        continue
                    elif st.delay_until > now:
                        delay = st.delay_until - now
                        timeout = delay if timeout is None else min(timeout, delay)
                    else:
                        ready.append(st)
                if ready or not block:
                    return ready
                self._cond.wait(timeout)
            return []

    def _queue_parked(self, wait: bool = True) -> None:
        """Queue every parked chunk whose queue has room now (each partition's offset order is kept).

        ``wait=False`` (room listeners, on a consumer's thread): skip a partition
        whose lock is taken (the fetcher thread is processing it) instead of waiting.
        """
        if not self._hindrances.parked:  # see Hindrances: a round never misses a park
            return
        with self._lock:
            parked = [st for st in self._partitions.values() if st.parked is not None]
        for st in parked:
            if not st.lock.acquire(wait):
                continue
            try:
                chunk = st.parked
                if chunk is None or st.removed or self.stopping or not self._deliverable():
                    continue
                if st.info.offer(chunk):
                    self._hindrances.unpark(st)
            finally:
                st.lock.release()

    def _fetch_once(self, batch: Sequence[PartitionState], left_ms: Optional[int] = None) -> None:
        """One Fetch request for ``batch`` and the processing of its response.

        The broker's wait is ``fetch.wait.max.ms``, or shorter while a partition is left
        out with a parked chunk (see the module docstring: ``rounds.held_back_wait_ms``), or
        before the deadline of a consumer running the round ``left_ms`` before it (``rounds.round_bounds``).
        """
        held_back = self._hindrances.parked > 0
        full = self._wait_max_ms
        self._held_back_wait = held_back_wait_ms(self._held_back_wait, full) if held_back else 0
        silent = None if self._silent_since is None else time.monotonic() - self._silent_since
        wait, bound, by_deadline = round_bounds(self._held_back_wait if held_back else full, left_ms,
                                                self._socket_timeout_ms, silent)
        failed: List[TopicPartition] = []
        requested: Dict[TopicPartition, Tuple[PartitionState, int]] = {}
        for st in batch:
            offset = st.info.fetched_offset  # not placed yet (negative): _position places it, or says why not
            if offset < 0:
                placed = self._position(st)
                if placed is None:
                    failed.append(st.tp)
                    continue
                if placed < 0:
                    continue
                offset = placed
            requested[st.tp] = (st, offset)
        if requested:
            failed.extend(self._fetch_and_process(requested, wait, held_back and wait >= full, bound, by_deadline))
        if failed:
            self._give_back(failed)

    def _fetch_and_process(self, requested: Dict[TopicPartition, Tuple[PartitionState, int]], wait_ms: int,
                           held_back_full_wait: bool, bound_ms: Optional[int] = None,
                           by_deadline: bool = False) -> List[TopicPartition]:
        """Send the fetch of ``requested``'s partitions at their offsets (the broker waits at most ``wait_ms``,
        the socket ``bound_ms``); returns partitions to hand back. ``held_back_full_wait``: the request leaves
        out a parked partition and still waits the whole ``fetch.wait.max.ms`` (counted in the stats if
        answered empty). ``by_deadline``: ``bound_ms`` is a consumer's deadline, and a timeout hands nothing
        back (see ``round_bounds``)."""
        sent = time.monotonic()
        try:
            walked = self._conn.fetch_walked(requested, wait_ms, self._min_bytes, self._max_bytes, bound_ms)
        except BrokerError as exc:
            if self.stopping:
                self.stats.record_abandoned(self.key.broker_id, False)
                return []
            if self._interrupted:
                self._interrupted = False
                self.stats.record_abandoned(self.key.broker_id, False)
                return []
            if by_deadline and getattr(exc, "timed_out", False):  # the consumer's deadline came first
                self._silent_since = sent if self._silent_since is None else self._silent_since
                self.stats.record_abandoned(self.key.broker_id, True)
                self._cut()
                return []
            self._silent_since = None
            self._failures += 1
            self.stats.record_failure(self.key.broker_id, error_kind(exc))
            # The LeaderFinder retries every refresh.leader.backoff.ms until the
            # controller moves leadership: warn once per outage, not per retry.
            log.log(logging.WARNING if self._failures == 1 else logging.DEBUG,
                    "%s: fetch from broker %s failed (%s); handing its partitions back", self.name,
                    self._conn.address, exc)
            with self._lock:  # stalled ones stay: their error was delivered, nothing more to fetch
                return [tp for tp, st in self._partitions.items() if not st.stalled]
        self._failures = 0
        self._silent_since = None
        failed = []
        self._response_messages, self._response_errors = 0, []
        try:  # empty partitions without an error (most of a live stream's) only had their high watermark set
            for st, offset, part in walked.rows:
                if not self._process(st, offset, part):
                    failed.append(st.tp)
        finally:  # once per response: no per-message cost
            self._response_large = 2 * walked.largest >= max(1, self._max_bytes)  # large_response
            self.stats.record_response(self.key.broker_id, walked.size, self._response_messages, self._response_errors,
                                       held_back_wait=held_back_full_wait and walked.size == 0)
        return failed

    def _give_back(self, tps: List[TopicPartition]) -> None:
        infos = self.remove_partitions(tps)
        if infos:
            self._hand_back(infos)

    # ------------------------------------------------------------------ per partition

    def _position(self, st: PartitionState) -> Optional[int]:
        """The offset to fetch from; places a negative position per auto.offset.reset first.

        Returns ``None`` if the partition must go back to the LeaderFinder, ``-1``
        to skip it this round (removed meanwhile, or a consumer's deadline came first).
        """
        offset = st.info.fetched_offset
        if offset >= 0:
            return offset
        with st.lock:
            if st.removed or self.stopping:
                return -1
            placed = self._reset_offset(st, st.info.fetched_offset)
            return -1 if placed is None else st.info.fetched_offset if placed else None

    def _process(self, st: PartitionState, fetch_offset: int, part: FetchPartitionResponse) -> bool:
        """Handle one partition of a fetch response; ``False`` = hand it back to the LeaderFinder."""
        with st.lock:
            if st.removed or self.stopping:
                return True
            if part.high_watermark >= 0:
                st.high_watermark = part.high_watermark
            if part.error_code == 0:
                if st.info.fetched_offset != fetch_offset or not self._deliverable():
                    return True  # moved (a reset) since the request went out, or not ours to hand out now: fetched again
                first = None
                if _decode is not None:  # plain messages, the common case, queued in this frame (issue 44)
                    first = _decode(part.message_set, 0, fetch_offset, True)
                    block, status = first[0], first[3]
                    if block and status <= _TRUNCATED:
                        self._response_messages += len(block)
                        self._queue_or_park(st, FetchedDataChunk(st.info, fetch_offset, block))
                        return True
                self._deliver(st, fetch_offset, part.message_set, first)
                return True
            self._response_errors.append(ERROR_NAMES.get(part.error_code, f"UNKNOWN_{part.error_code}"))
            if part.error_code == OffsetOutOfRangeError.error_code:
                return self._reset_offset(st, fetch_offset) is not False
            log.info("%s: %s-%d: broker %d reports error code %d; looking up its leader again",
                     self.name, part.topic, part.partition, self.key.broker_id, part.error_code)
            return False

    def _deliver(self, st: PartitionState, fetch_offset: int, message_set: memoryview,
                 first: Optional[DecodeResult]) -> None:
        """Decode and queue, or park if the queue is full (never blocks). The caller holds ``st.lock`` and checked
        that the position is still ``fetch_offset`` and that the member may deliver; ``first`` is what the C
        decoder gave for the set's start, if it was asked already (see ``decode_message_set``)."""
        info = st.info
        try:
            decoded = decode_message_set(message_set, info.topic, info.partition, fetch_offset, first)
        except CorruptMessageError as exc:
            self._stall(st, fetch_offset, exc)
            return
        if decoded.messages:
            self._response_messages += len(decoded.messages)
            self._queue_or_park(st, FetchedDataChunk(info, fetch_offset, decoded.messages))
        elif decoded.too_large:
            self._stall(st, fetch_offset, MessageSizeTooLargeError(
                info.topic, info.partition, fetch_offset, self._max_bytes))
        elif decoded.valid_bytes:
            # Complete entries but none at or after the fetch offset: a broker never
            # sends that; back off rather than spin on it.
            log.warning("%s: %s-%d: no message at or after offset %d in %d bytes (next offset %d); retrying later",
                        self.name, info.topic, info.partition, fetch_offset, decoded.valid_bytes, decoded.next_offset)
            self._hindrances.delay(st, time.monotonic() + self._config.refresh_leader_backoff_ms / 1000.0)

    def _queue_or_park(self, st: PartitionState, chunk: FetchedDataChunk) -> None:
        """Queue ``chunk`` now, or park it until its queue has room; caller holds ``st.lock``."""
        if not st.info.offer(chunk):
            self._hindrances.park(st, chunk)

    def _stall(self, st: PartitionState, fetch_offset: int, error: ZkConsumerError) -> None:
        """Queue (or park) ``error`` for the iterator and stop fetching the partition (no refetch spin)."""
        self._hindrances.stall(st)
        self._queue_or_park(st, FetchedDataChunk(st.info, fetch_offset, (), error))
        log.error("%s: stopped fetching %s-%d: %s", self.name, st.info.topic, st.info.partition, error)

    def _reset_offset(self, st: PartitionState, fetch_offset: int) -> Optional[bool]:
        """Place a partition whose position is invalid (``placement.place_offset``; caller holds ``st.lock``),
        within what is left of the deadline of a consumer running the round."""
        bound = None
        if self._deadline is not None:
            bound = int((self._deadline - time.monotonic()) * 1000)
            if bound < rounds.MIN_CONSUMER_ROUND_MS:
                return None
            bound = round_bounds(0, bound, self._socket_timeout_ms, None)[1]
        placed = place_offset(self._conn, st.info, fetch_offset, self._config, self.name, bound, self.stopping)
        if placed is None:  # the lookup was cut at the consumer's deadline
            self._cut()
        return placed
