"""Fetching: Kafka's ConsumerFetcherManager, LeaderFinderThread and ConsumerFetcherThread.

Threads and who owns what::

    start_connections(infos) ──▶ partitions without a leader ──▶ LeaderFinder (1 thread)
                                         ▲                           │ Metadata request to any live broker
                 hand back on error      │                           ▼
                 (NOT_LEADER, ...) ──────┴──── FetcherThread per (leader broker, fetcher id)
                                                  │ Fetch at info.fetched_offset
                                                  ▼
                                       PartitionTopicInfo.offer ──▶ ChunkQueue ──▶ iterator
                                          │ queue full?                 │ room appeared
                                          ▼                             │ (room listener)
                                       parked chunk (1 per partition) ◀─┘

* The **LeaderFinder** sleeps on a condition while every partition has a
  fetcher. When some do not, it asks the live brokers (``brokers()``, tried in
  random order until one answers) for Metadata of their topics, gives every
  partition that has a leader to the fetcher thread of ``(leader, fetcher id)``
  (starting it on demand), shuts down fetchers left without partitions, then
  waits ``refresh.leader.backoff.ms`` before its next pass.
* A **FetcherThread** fetches its partitions in one request from their
  ``fetched_offset``: every partition whose stream queue has room and that has
  no parked chunk (back-pressure per partition, below). Per partition: data is
  decoded and queued, or parked if the queue is full; OFFSET_OUT_OF_RANGE resets the
  position per ``auto.offset.reset``; a message over the fetch size or a corrupt
  message becomes an error chunk the iterator raises (once; the partition then
  stops fetching); any other error (NOT_LEADER_FOR_PARTITION,
  UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, ...) hands the partition
  back to the LeaderFinder; a connection failure hands back all of them.
* A partition whose position is negative (no committed offset) is first placed
  per ``auto.offset.reset`` (Kafka's ``PartitionTopicInfo.isOffsetInvalid``).

Back-pressure per partition: a fetcher never blocks on a stream's queue, so a
stream whose consumer stops reading does not stop the fetching of partitions of
other streams served by the same fetcher. A chunk that finds its queue full is
*parked* on the partition's fetcher state (``fetched_offset`` does not move);
the partition is not fetched again until that chunk is queued, and a partition
whose queue is full is left out of the requests. Every queue a fetcher serves
has a room listener (``ChunkQueue.add_room_listener``) that wakes the fetcher
when a consumer takes from a full queue; the fetcher then queues its parked
chunks (oldest partition state first) and fetches again. With every partition
blocked, the fetcher waits for that signal (at most :data:`ROOM_WAIT_S`
between checks), it does not spin. Per partition, chunks are queued in offset
order: a partition has at most one parked chunk and is not fetched while it has one.

Memory bound, per stream: at most ``queued.max.message.chunks`` chunks in its
queue plus one parked chunk per partition of the stream (each at most
``fetch.message.max.bytes`` of message data, decoded into its own buffers),
plus, per fetcher thread, the one response being processed. A partition that
leaves its fetcher (removed, handed back, stopped) drops its parked chunk; its
``fetched_offset`` never moved past it, so the next fetch gets the same messages.

Exactly-once delivery across re-homing: ``info.fetched_offset`` is the only
fetch position; it advances only after a chunk is queued (not when parked), and a fetcher only
gives a partition back after it finished processing it, so the next fetcher
starts exactly where the previous one stopped. A partition's data is processed
(fetch result or parked chunk) under a per-partition lock that removal also
takes after flagging the partition: once removal returns, no chunk for that
partition can be queued any more.

Failures: expected ones (brokers down, metadata unavailable) are logged and
retried after the backoff. An unexpected exception in a thread is passed to
``on_error`` (the connector re-raises it to the application) and ends that
thread; its partitions stay with it until ``stop_connections``.

Lock order (outer first): ``_lifecycle`` > ``_fetchers_lock`` > ``_cond`` (manager
state) > a fetcher's ``_lock`` > a queue's lock. A fetcher thread never holds a
partition lock while taking a manager lock. Room listeners run with no queue
lock held and take only the fetcher's ``_lock``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple,
)

from ..assignors import java_string_hash
from ..wire.connection import BrokerConnection
from ..errors import BrokerError, ConsumerShutdownError, CorruptMessageError, \
    MessageSizeTooLargeError, ZkConsumerError
from ..wire.messageset import decode_message_set
from .partition_info import ChunkQueue, FetchedDataChunk, PartitionTopicInfo
from ..wire.protocol import EARLIEST_TIME, ERROR_NAMES, LATEST_TIME, FetchPartition, FetchPartitionResponse, \
    MetadataResponse, OffsetOutOfRangeError
from ..security import broker_ssl_context

if TYPE_CHECKING:  # pragma: no cover
    from ..zookeeper.zkformat import Broker

__all__ = ["FetcherManager", "FetcherThread", "FetcherKey", "FetchStats", "fetcher_id"]

log = logging.getLogger(__name__)

TopicPartition = Tuple[str, int]
ConnectionFactory = Callable[[str, int], BrokerConnection]

_INT32_MIN = -(1 << 31)

#: Longest wait of a fetcher whose partitions all wait for room before it looks again
#: (room listeners normally wake it at once; this only bounds a missed signal).
ROOM_WAIT_S = 0.2


def fetcher_id(topic: str, partition: int, num_fetchers: int) -> int:
    """Which of a broker's ``num.consumer.fetchers`` threads fetches ``topic``/``partition``.

    Kafka's ``AbstractFetcherManager.getFetcherId``:
    ``Utils.abs(31 * topic.hashCode() + partition) % numFetchers`` in Java ``int``
    arithmetic (wrapping at 32 bits; ``Utils.abs(Integer.MIN_VALUE)`` is 0).

    >>> fetcher_id("events", 0, 2), fetcher_id("events", 1, 2)   # hashCode("events") = -1291329255
    (1, 0)
    """
    h = (31 * java_string_hash(topic) + partition) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return (0 if h == _INT32_MIN else abs(h)) % num_fetchers


@dataclass(frozen=True)
class FetcherKey:
    """Identity of a fetcher thread: the leader's endpoint and the fetcher id (Kafka's BrokerAndFetcherId)."""

    broker_id: int
    host: str
    port: int
    fetcher_id: int


def _is_expected(exc: BaseException) -> bool:
    """Failures that come from the outside world (retry later), as opposed to bugs (report)."""
    return isinstance(exc, (BrokerError, OSError)) or (isinstance(exc, ZkConsumerError) and exc.retriable)


# =========================================================================== fetcher thread

class FetchStats:
    """Cumulative fetch counters per broker id; thread-safe, counters only grow.

    Fetcher threads add one response's totals at a time (one lock acquisition
    per fetch response, nothing per message). :meth:`snapshot` returns
    ``{broker_id: {"requests", "bytes", "messages", "errors": {kind: n}}}``:
    ``requests`` counts Fetch requests sent (failed ones included), ``bytes``
    the message-set bytes of the responses (as received, a trailing partial
    message included), ``messages`` the messages decoded from them and handed
    to the streams' queues, ``errors`` failed requests by exception
    (``KafkaProtocolError.error_name`` or the class name, e.g.
    ``BrokerUnavailableError``) and per-partition error codes by Kafka's name
    (e.g. ``NOT_LEADER_FOR_PARTITION``, ``OFFSET_OUT_OF_RANGE``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._brokers: Dict[int, Dict[str, Any]] = {}

    def _entry(self, broker_id: int) -> Dict[str, Any]:
        entry = self._brokers.get(broker_id)
        if entry is None:
            entry = self._brokers[broker_id] = {"requests": 0, "bytes": 0, "messages": 0, "errors": {}}
        return entry

    def record_response(self, broker_id: int, size: int, messages: int, errors: Sequence[str] = ()) -> None:
        """One fetch request answered: ``size`` message-set bytes, ``messages`` decoded, partition ``errors``."""
        with self._lock:
            entry = self._entry(broker_id)
            entry["requests"] += 1
            entry["bytes"] += size
            entry["messages"] += messages
            for kind in errors:
                entry["errors"][kind] = entry["errors"].get(kind, 0) + 1

    def record_failure(self, broker_id: int, kind: str) -> None:
        """One fetch request failed as a whole with an error of ``kind``."""
        with self._lock:
            entry = self._entry(broker_id)
            entry["requests"] += 1
            entry["errors"][kind] = entry["errors"].get(kind, 0) + 1

    def snapshot(self) -> Dict[int, Dict[str, Any]]:
        with self._lock:
            return {b: {**e, "errors": dict(e["errors"])} for b, e in self._brokers.items()}


def _error_kind(exc: BaseException) -> str:
    """The label of a failed fetch: Kafka's error name for a protocol error, else the exception's class name."""
    name = getattr(exc, "error_name", None)
    return name if isinstance(name, str) and name else type(exc).__name__


class _PartitionState:
    """A fetcher's view of one partition. ``lock`` is held while its data is processed.

    ``parked`` is the one chunk fetched but not yet queued because the queue was
    full: set and queued by the fetcher thread under ``lock``, dropped under
    ``lock`` when the partition is removed.
    """

    __slots__ = ("info", "lock", "removed", "stalled", "delay_until", "high_watermark", "parked")

    def __init__(self, info: PartitionTopicInfo) -> None:
        self.info = info
        self.lock = threading.Lock()
        self.removed = False
        self.stalled = False            # an error chunk was queued or parked; never fetch again
        self.delay_until = 0.0          # time.monotonic() before which not to fetch
        self.high_watermark = -1
        self.parked: Optional[FetchedDataChunk] = None

    @property
    def tp(self) -> TopicPartition:
        return (self.info.topic, self.info.partition)


class FetcherThread(threading.Thread):
    """Fetches a set of partitions from one broker (Kafka's ConsumerFetcherThread).

    Created and owned by :class:`FetcherManager`; partitions come and go through
    :meth:`add_partitions` / :meth:`remove_partitions`; :meth:`request_stop` then
    ``join()`` ends it. ``hand_back(infos)`` is called (from this thread, with no
    lock held) with partitions whose leader must be looked up again.
    """

    def __init__(self, key: FetcherKey, config: Any, connection: BrokerConnection,
                 hand_back: Callable[[List[PartitionTopicInfo]], None],
                 on_error: Callable[[BaseException], None],
                 deliverable: Callable[[], bool] = lambda: True, stats: Optional[FetchStats] = None) -> None:
        super().__init__(name=f"zkconsumer-fetcher-{config.client_id}-{key.fetcher_id}-broker-{key.broker_id}",
                         daemon=True)
        self.key = key
        self._config = config
        self._conn = connection
        self._hand_back = hand_back
        self._on_error = on_error
        self._deliverable = deliverable
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._partitions: Dict[TopicPartition, _PartitionState] = {}
        self._queues: Dict[int, ChunkQueue] = {}  # queues whose room listener is ours (guarded by _lock)
        self._room_events = 0  # how many times room appeared in one of them (guarded by _lock)
        self._failures = 0  # consecutive failed fetches
        #: Per-broker fetch counters (shared with the manager); ``_response_*`` total the response being processed.
        self.stats = stats if stats is not None else FetchStats()
        self._response_messages = 0
        self._response_errors: List[str] = []
        self.stopping = False

    # ------------------------------------------------------------------ control (other threads)

    def add_partitions(self, infos: Iterable[PartitionTopicInfo]) -> None:
        """Start fetching ``infos`` from their ``fetched_offset``; partitions already held are kept."""
        with self._cond:
            for info in infos:
                tp = (info.topic, info.partition)
                if tp not in self._partitions:
                    self._partitions[tp] = _PartitionState(info)
                    if id(info.queue) not in self._queues:
                        self._queues[id(info.queue)] = info.queue
                        info.queue.add_room_listener(self._room_appeared)
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
        for st in removed:
            with st.lock:
                st.parked = None
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
        """Make the thread end soon: wakes its waits and aborts its socket."""
        with self._cond:
            self.stopping = True
            self._cond.notify_all()
        self._conn.abort()

    def _room_appeared(self) -> None:
        """Room listener of every queue served: a consumer took from a full queue (any thread, no queue lock)."""
        with self._cond:
            self._room_events += 1
            self._cond.notify_all()

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        try:
            while not self.stopping:
                if not self._deliverable():  # e.g. the session lease lapsed: fetch nothing for now
                    with self._cond:
                        self._cond.wait(0.05)
                    continue
                with self._lock:
                    seen = self._room_events
                self._queue_parked()
                batch = self._next_batch(seen)
                if batch:
                    self._fetch_once(batch)
        except BaseException as exc:  # noqa: BLE001 - reported, never swallowed
            log.exception("%s died", self.name)
            if not self.stopping:
                self._on_error(exc)
        finally:
            with self._lock:
                queues, self._queues = list(self._queues.values()), {}
            for queue in queues:
                queue.remove_room_listener(self._room_appeared)
            self._conn.close()

    def _next_batch(self, seen: int) -> List[_PartitionState]:
        """Partitions to fetch now: not stalled, not delayed, no parked chunk, room in their queue.

        Waits while there are none. Returns ``[]`` when stopping, and as soon as
        a parked chunk could be queued or room appeared since ``seen`` (the
        room-event count read before the caller last tried its parked chunks),
        so the caller queues them first.
        """
        with self._cond:
            while not self.stopping:
                if self._room_events != seen:
                    return []
                now = time.monotonic()
                ready: List[_PartitionState] = []
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
                    elif not st.info.queue.has_room():
                        timeout = ROOM_WAIT_S if timeout is None else min(timeout, ROOM_WAIT_S)
                    else:
                        ready.append(st)
                if ready:
                    return ready
                self._cond.wait(timeout)
            return []

    def _queue_parked(self) -> None:
        """Queue every parked chunk whose queue has room now (each partition's offset order is kept)."""
        with self._lock:
            parked = [st for st in self._partitions.values() if st.parked is not None]
        for st in parked:
            with st.lock:
                chunk = st.parked
                if chunk is None or st.removed or self.stopping or not self._deliverable():
                    continue
                if st.info.offer(chunk):
                    st.parked = None

    def _fetch_once(self, batch: Sequence[_PartitionState]) -> None:
        """One Fetch request for ``batch`` and the processing of its response."""
        failed: List[TopicPartition] = []
        requested: Dict[TopicPartition, Tuple[_PartitionState, int]] = {}
        for st in batch:
            offset = self._position(st)
            if offset is None:
                failed.append(st.tp)
            elif offset >= 0:
                requested[st.tp] = (st, offset)
        if requested:
            failed.extend(self._fetch_and_process(requested))
        if failed:
            self._give_back(failed)

    def _fetch_and_process(self, requested: Dict[TopicPartition, Tuple[_PartitionState, int]]) -> List[TopicPartition]:
        """Send the fetch; returns partitions to hand back."""
        max_bytes = self._config.fetch_message_max_bytes
        wanted = [FetchPartition(t, p, offset, max_bytes) for (t, p), (_, offset) in requested.items()]
        try:
            response = self._conn.fetch(wanted, self._config.fetch_wait_max_ms, self._config.fetch_min_bytes)
        except BrokerError as exc:
            if self.stopping:
                return []
            self._failures += 1
            self.stats.record_failure(self.key.broker_id, _error_kind(exc))
            # The LeaderFinder retries every refresh.leader.backoff.ms until the
            # controller moves leadership: warn once per outage, not per retry.
            log.log(logging.WARNING if self._failures == 1 else logging.DEBUG,
                    "%s: fetch from broker %s failed (%s); handing its partitions back", self.name,
                    self._conn.address, exc)
            with self._lock:  # stalled ones stay: their error was delivered, nothing more to fetch
                return [tp for tp, st in self._partitions.items() if not st.stalled]
        self._failures = 0
        failed = []
        size = 0
        self._response_messages, self._response_errors = 0, []
        try:
            for part in response.partitions:
                size += len(part.message_set)
                entry = requested.get((part.topic, part.partition))
                if entry is not None and not self._process(entry[0], entry[1], part):
                    failed.append((part.topic, part.partition))
        finally:  # once per response: no per-message cost
            self.stats.record_response(self.key.broker_id, size, self._response_messages, self._response_errors)
        return failed

    def _give_back(self, tps: List[TopicPartition]) -> None:
        infos = self.remove_partitions(tps)
        if infos:
            self._hand_back(infos)

    # ------------------------------------------------------------------ per partition

    def _position(self, st: _PartitionState) -> Optional[int]:
        """The offset to fetch from; places a negative position per auto.offset.reset first.

        Returns ``None`` if the partition must go back to the LeaderFinder, ``-1``
        to skip it this round (removed meanwhile).
        """
        offset = st.info.fetched_offset
        if offset >= 0:
            return offset
        with st.lock:
            if st.removed or self.stopping:
                return -1
            return st.info.fetched_offset if self._reset_offset(st, st.info.fetched_offset) else None

    def _process(self, st: _PartitionState, fetch_offset: int, part: FetchPartitionResponse) -> bool:
        """Handle one partition of a fetch response; ``False`` = hand it back to the LeaderFinder."""
        with st.lock:
            if st.removed or self.stopping:
                return True
            if part.high_watermark >= 0:
                st.high_watermark = part.high_watermark
            if part.error_code != 0:
                self._response_errors.append(ERROR_NAMES.get(part.error_code, f"UNKNOWN_{part.error_code}"))
            if part.error_code == 0:
                self._deliver(st, fetch_offset, part.message_set)
                return True
            if part.error_code == OffsetOutOfRangeError.error_code:
                return self._reset_offset(st, fetch_offset)
            log.info("%s: %s-%d: broker %d reports error code %d; looking up its leader again",
                     self.name, part.topic, part.partition, self.key.broker_id, part.error_code)
            return False

    def _deliver(self, st: _PartitionState, fetch_offset: int, message_set: memoryview) -> None:
        """Decode and queue, or park if the queue is full (never blocks); caller holds ``st.lock``."""
        info = st.info
        if info.fetched_offset != fetch_offset:
            return  # the position moved (reset) since the request went out: stale data
        if not self._deliverable():
            return  # not ours to hand out right now; fetched_offset is unchanged, so it is fetched again
        try:
            decoded = decode_message_set(message_set, info.topic, info.partition, fetch_offset)
        except CorruptMessageError as exc:
            self._stall(st, fetch_offset, exc)
            return
        if decoded.messages:
            self._response_messages += len(decoded.messages)
            self._queue_or_park(st, FetchedDataChunk(info, fetch_offset, decoded.messages))
        elif decoded.too_large:
            self._stall(st, fetch_offset, MessageSizeTooLargeError(
                info.topic, info.partition, fetch_offset, self._config.fetch_message_max_bytes))
        elif decoded.valid_bytes:
            # Complete entries but none at or after the fetch offset: a broker never
            # sends that; back off rather than spin on it.
            log.warning("%s: %s-%d: no message at or after offset %d in %d bytes (next offset %d); retrying later",
                        self.name, info.topic, info.partition, fetch_offset, decoded.valid_bytes, decoded.next_offset)
            st.delay_until = time.monotonic() + self._config.refresh_leader_backoff_ms / 1000.0

    def _queue_or_park(self, st: _PartitionState, chunk: FetchedDataChunk) -> None:
        """Queue ``chunk`` now, or park it until its queue has room; caller holds ``st.lock``."""
        if not st.info.offer(chunk):
            st.parked = chunk

    def _stall(self, st: _PartitionState, fetch_offset: int, error: ZkConsumerError) -> None:
        """Queue (or park) ``error`` for the iterator and stop fetching the partition (no refetch spin)."""
        st.stalled = True
        self._queue_or_park(st, FetchedDataChunk(st.info, fetch_offset, (), error))
        log.error("%s: stopped fetching %s-%d: %s", self.name, st.info.topic, st.info.partition, error)

    def _reset_offset(self, st: _PartitionState, fetch_offset: int) -> bool:
        """Move a partition whose position is invalid to the earliest/latest offset (auto.offset.reset)."""
        info = st.info
        if info.fetched_offset != fetch_offset:
            return True
        smallest = self._config.auto_offset_reset == "smallest"
        try:
            offset = self._conn.list_offsets(info.topic, info.partition, EARLIEST_TIME if smallest else LATEST_TIME)
        except BrokerError as exc:
            if not self.stopping:
                log.warning("%s: %s-%d: could not look up the %s offset: %s", self.name, info.topic,
                            info.partition, "earliest" if smallest else "latest", exc)
            return False
        if fetch_offset >= 0:
            log.warning("%s: %s-%d: offset %d is out of range; reset to %d (auto.offset.reset=%s)", self.name,
                        info.topic, info.partition, fetch_offset, offset, self._config.auto_offset_reset)
        else:
            log.info("%s: %s-%d: no committed offset; starting at %d (auto.offset.reset=%s)", self.name,
                     info.topic, info.partition, offset, self._config.auto_offset_reset)
        info.reset_offsets(offset)
        return True


# =========================================================================== leader finder

class _LeaderFinder(threading.Thread):
    """Finds leaders for partitions without a fetcher (Kafka's LeaderFinderThread)."""

    def __init__(self, manager: "FetcherManager", name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._manager = manager
        self.stop_event = threading.Event()
        self._conn: Optional[BrokerConnection] = None
        self._failures = 0  # consecutive failed passes

    def request_stop(self) -> None:
        self.stop_event.set()
        self._manager._wake()
        conn = self._conn
        if conn is not None:
            conn.abort()

    def run(self) -> None:
        manager = self._manager
        try:
            while not self.stop_event.is_set():
                wanted = manager._wait_for_leaderless(self.stop_event)
                if not wanted:
                    break
                metadata = self._lookup(sorted({topic for topic, _ in wanted}))
                if metadata is not None and not self.stop_event.is_set():
                    manager._assign_leaders(metadata, self.stop_event)
                manager._shutdown_idle_fetchers()
                manager._backoff(self.stop_event)
        except BaseException as exc:  # noqa: BLE001 - reported, never swallowed
            log.exception("%s died", self.name)
            if not self.stop_event.is_set():
                manager._report(exc)

    def _lookup(self, topics: List[str]) -> Optional[MetadataResponse]:
        """Metadata for ``topics`` from the first live broker that answers; ``None`` if none did."""
        try:
            brokers = list(self._manager._brokers())
        except Exception as exc:  # noqa: BLE001 - the registry (ZooKeeper) may be briefly unavailable
            self._failed(f"cannot list live brokers: {exc!r}")
            return None
        random.shuffle(brokers)
        failures = []
        for broker in brokers:
            self._conn = conn = self._manager._connect(broker.host, broker.port)
            if self.stop_event.is_set():  # checked after publishing conn, so request_stop cannot miss it
                self._conn = None
                return None
            try:
                metadata = conn.metadata(topics)
                if self._failures:
                    log.info("%s: metadata available again", self.name)
                self._failures = 0
                return metadata
            except BrokerError as exc:
                failures.append(f"{broker.id}@{broker.host}:{broker.port}: {exc}")
            finally:
                self._conn = None
                conn.close()
        if not self.stop_event.is_set():
            self._failed(f"no broker answered a metadata request for {topics}: "
                         f"{'; '.join(failures) or 'no live brokers'}")
        return None

    def _failed(self, message: str) -> None:
        """Log a failed pass: a warning for the first of a series, debug for the retries."""
        self._failures += 1
        log.log(logging.WARNING if self._failures == 1 else logging.DEBUG, "%s: %s (retrying every %d ms)",
                self.name, message, self._manager._config.refresh_leader_backoff_ms)


# =========================================================================== manager

class FetcherManager:
    """Runs the LeaderFinder and the fetcher threads for a set of owned partitions.

    Usage (by the rebalancer): ``start_connections(infos)`` after claiming
    partitions, ``stop_connections()`` before releasing them (and before clearing
    the queues), repeated any number of times; ``shutdown()`` at the end.

    ``brokers()`` returns the live brokers (from ZooKeeper ``/brokers/ids``) to
    bootstrap metadata requests; it is called on every LeaderFinder pass and may
    raise (retried after the backoff). ``on_error(exc)`` receives unexpected
    exceptions from the background threads. ``sleep`` replaces the LeaderFinder's
    backoff wait (tests); by default that wait ends early when stopping.
    ``connection_factory(host, port)`` replaces :class:`BrokerConnection` (tests).
    While ``deliverable()`` is false (the connector's session lease lapsed),
    fetcher threads neither fetch nor queue; positions do not move, so nothing
    is skipped when it becomes true again.
    """

    def __init__(self, config: Any, brokers: Callable[[], Sequence["Broker"]],
                 on_error: Callable[[BaseException], None], *, sleep: Callable[[float], None] = time.sleep,
                 connection_factory: Optional[ConnectionFactory] = None,
                 deliverable: Callable[[], bool] = lambda: True) -> None:
        self._config = config
        self._brokers = brokers
        self._on_error = on_error
        self._sleep = sleep
        self._ssl_context = broker_ssl_context(config)
        self._connection_factory = connection_factory
        self._deliverable = deliverable
        self._lifecycle = threading.RLock()
        self._fetchers_lock = threading.Lock()
        self._fetchers: Dict[FetcherKey, FetcherThread] = {}
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._partitions: Dict[TopicPartition, PartitionTopicInfo] = {}
        self._leaderless: Set[TopicPartition] = set()
        self._leaders: Dict[TopicPartition, int] = {}
        self._announced: Dict[TopicPartition, int] = {}  # last leader logged per partition (LeaderFinder only)
        self._leader_finder: Optional[_LeaderFinder] = None
        self._shut_down = False
        self._generation = 0
        #: Cumulative per-broker fetch counters of every fetcher thread this manager ran.
        self.fetch_stats = FetchStats()

    # ------------------------------------------------------------------ public

    def start_connections(self, infos: Iterable[PartitionTopicInfo]) -> None:
        """Begin fetching ``infos`` (each from its ``fetched_offset``); starts the LeaderFinder.

        May be called again without :meth:`stop_connections` to add partitions; a
        partition given again with a different info object is removed first.
        Raises ConsumerShutdownError after :meth:`shutdown`.
        """
        infos = list(infos)
        with self._lifecycle:
            if self._shut_down:
                raise ConsumerShutdownError("the fetcher manager was shut down")
            with self._fetchers_lock:
                with self._cond:
                    replaced = [tp for tp, info in self._by_tp(infos).items()
                                if tp in self._partitions and self._partitions[tp] is not info]
                for fetcher in self._fetchers.values():
                    fetcher.remove_partitions(replaced)
                with self._cond:
                    for tp, info in self._by_tp(infos).items():
                        if self._partitions.get(tp) is not info:
                            self._partitions[tp] = info
                            self._leaderless.add(tp)
                            self._leaders.pop(tp, None)
                    self._cond.notify_all()
            if self._leader_finder is None:
                self._generation += 1
                self._leader_finder = _LeaderFinder(
                    self, f"zkconsumer-leader-finder-{self._config.client_id}-{self._generation}")
                self._leader_finder.start()

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching ``tps`` (and forget them) while the others go on.

        Used by the rebalancer for partitions that move away: the others keep
        their fetcher, position and queued chunks. Returns when no chunk for
        ``tps`` can be queued any more; fetchers left without partitions are
        stopped and joined.
        """
        tps = set(tps)
        if not tps:
            return
        with self._lifecycle:
            with self._fetchers_lock:
                for fetcher in self._fetchers.values():
                    fetcher.remove_partitions(tps)
                with self._cond:
                    for tp in tps:
                        self._partitions.pop(tp, None)
                        self._leaders.pop(tp, None)
                        self._announced.pop(tp, None)
                    self._leaderless -= tps
            self._shutdown_idle_fetchers()

    def stop_connections(self) -> None:
        """Stop the LeaderFinder and every fetcher, join them all, forget every partition.

        After it returns no chunk is queued by this manager until the next
        :meth:`start_connections`. Parked chunks (waiting for room in a full
        queue) are dropped with their fetchers; their positions never moved past them.
        """
        with self._lifecycle:
            finder, self._leader_finder = self._leader_finder, None
            if finder is not None:
                finder.request_stop()
                finder.join()
            with self._fetchers_lock:
                fetchers = list(self._fetchers.values())
                self._fetchers.clear()
            for fetcher in fetchers:
                fetcher.request_stop()
            for fetcher in fetchers:
                fetcher.join()
            with self._cond:
                self._partitions.clear()
                self._leaderless.clear()
                self._leaders.clear()

    def shutdown(self) -> None:
        """Stop everything (as :meth:`stop_connections`); idempotent; later starts raise."""
        with self._lifecycle:
            self._shut_down = True
            self.stop_connections()

    def metrics(self) -> Dict[str, Any]:
        """A snapshot for monitoring.

        ``partitions``: ``{"topic-partition": {...}}`` with ``fetched_offset``,
        ``consumed_offset``, ``high_watermark`` (``None`` until fetched),
        ``fetch_lag`` (high watermark - fetched offset), ``consumer_lag`` (high
        watermark - consumed offset), ``leader`` (broker id or ``None``),
        ``fetcher`` (thread name or ``None``), ``stalled`` (an error chunk was
        queued or parked) and ``parked`` (a fetched chunk waits for room in its
        stream's queue: that stream is not being read fast enough).
        ``fetchers``: ``{thread name: {"broker", "fetcher_id", "partitions", "alive"}}``.
        ``partitions_without_leader``: how many wait for the LeaderFinder.
        ``brokers``: ``{broker_id: {"requests", "bytes", "messages", "errors": {kind: n}}}``,
        cumulative since the manager was created (see :class:`FetchStats`).
        """
        with self._fetchers_lock:
            fetchers = dict(self._fetchers)
        held = {key: f.snapshot() for key, f in fetchers.items()}
        with self._cond:
            infos = dict(self._partitions)
            leaders = dict(self._leaders)
            leaderless = len(self._leaderless)
        where: Dict[TopicPartition, Tuple[str, int, bool, bool]] = {}
        for key, snap in held.items():
            for tp, (_, hw, stalled, parked) in snap.items():
                where[tp] = (fetchers[key].name, hw, stalled, parked)
        partitions = {}
        for tp, info in sorted(infos.items()):
            name, hw, stalled, parked = where.get(tp, (None, -1, False, False))
            partitions[f"{tp[0]}-{tp[1]}"] = {
                "topic": tp[0], "partition": tp[1],
                "fetched_offset": info.fetched_offset, "consumed_offset": info.consumed_offset,
                "high_watermark": hw if hw >= 0 else None,
                "fetch_lag": max(0, hw - info.fetched_offset) if hw >= 0 and info.fetched_offset >= 0 else None,
                "consumer_lag": max(0, hw - info.consumed_offset) if hw >= 0 and info.consumed_offset >= 0 else None,
                "leader": leaders.get(tp), "fetcher": name, "stalled": stalled, "parked": parked,
            }
        return {
            "partitions": partitions,
            "fetchers": {f.name: {"broker": key.broker_id, "fetcher_id": key.fetcher_id,
                                  "partitions": len(held[key]), "alive": f.is_alive()}
                         for key, f in fetchers.items()},
            "partitions_without_leader": leaderless,
            "brokers": self.fetch_stats.snapshot(),
        }

    # ------------------------------------------------------------------ used by the threads

    @staticmethod
    def _by_tp(infos: Iterable[PartitionTopicInfo]) -> Dict[TopicPartition, PartitionTopicInfo]:
        return {(info.topic, info.partition): info for info in infos}

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _report(self, exc: BaseException) -> None:
        try:
            self._on_error(exc)
        except Exception:  # noqa: BLE001 - a failing callback must not hide the original error
            log.exception("on_error callback failed")

    def _connect(self, host: str, port: int) -> BrokerConnection:
        if self._connection_factory is not None:
            return self._connection_factory(host, port)
        c = self._config
        return BrokerConnection(host, port, c.client_id, c.socket_timeout_ms, c.socket_receive_buffer_bytes,
                                self._ssl_context)

    def _wait_for_leaderless(self, stop: threading.Event) -> Set[TopicPartition]:
        """Block until some partition lacks a leader; returns them (empty set when stopping)."""
        with self._cond:
            while not self._leaderless and not stop.is_set():
                self._cond.wait()
            return set() if stop.is_set() else set(self._leaderless)

    def _backoff(self, stop: threading.Event) -> None:
        seconds = self._config.refresh_leader_backoff_ms / 1000.0
        if self._sleep is time.sleep:
            stop.wait(seconds)
        else:
            self._sleep(seconds)

    def _hand_back(self, infos: List[PartitionTopicInfo]) -> None:
        """A fetcher gave these up: find their leader again (unless they were replaced or dropped)."""
        with self._cond:
            for info in infos:
                tp = (info.topic, info.partition)
                if self._partitions.get(tp) is info:
                    self._leaderless.add(tp)
                    self._leaders.pop(tp, None)
            self._cond.notify_all()

    def _assign_leaders(self, metadata: MetadataResponse, stop: threading.Event) -> None:
        """Give every leaderless partition that has a live leader to its fetcher thread."""
        found: Dict[TopicPartition, FetcherKey] = {}
        num = max(1, int(self._config.num_consumer_fetchers))
        for topic in metadata.topics:
            for pm in topic.partitions:
                leader = metadata.broker(pm.leader) if pm.leader >= 0 else None
                if leader is not None:
                    found[(topic.topic, pm.partition)] = FetcherKey(
                        leader.node_id, leader.host, leader.port, fetcher_id(topic.topic, pm.partition, num))
        with self._fetchers_lock:
            with self._cond:
                if stop.is_set():
                    return
                chosen = {tp: (self._partitions[tp], found[tp]) for tp in self._leaderless if tp in found}
                self._leaderless.difference_update(chosen)
                for tp, (_, key) in chosen.items():
                    self._leaders[tp] = key.broker_id
            groups: Dict[FetcherKey, List[PartitionTopicInfo]] = {}
            for tp, (info, key) in sorted(chosen.items()):
                groups.setdefault(key, []).append(info)
            for key, infos in groups.items():
                self._fetcher_for(key).add_partitions(infos)
        if chosen:
            # While a dead leader is still in the metadata, the same assignment repeats
            # every backoff: log it at INFO only when it changes.
            moves = {tp: key.broker_id for tp, (_, key) in chosen.items()}
            level = logging.DEBUG if all(self._announced.get(tp) == b for tp, b in moves.items()) else logging.INFO
            self._announced.update(moves)
            log.log(level, "fetching %s", ", ".join(f"{t}-{p} from broker {b}" for (t, p), b in sorted(moves.items())))

    def _fetcher_for(self, key: FetcherKey) -> FetcherThread:
        """The fetcher thread for ``key``, started on demand (caller holds ``_fetchers_lock``)."""
        fetcher = self._fetchers.get(key)
        if fetcher is None or not fetcher.is_alive():  # a dead one already reported its error
            fetcher = FetcherThread(key, self._config, self._connect(key.host, key.port), self._hand_back,
                                    self._report, self._deliverable, self.fetch_stats)
            self._fetchers[key] = fetcher
            fetcher.start()
        return fetcher

    def _shutdown_idle_fetchers(self) -> None:
        """Stop and join fetchers left without partitions (Kafka's shutdownIdleFetcherThreads)."""
        with self._fetchers_lock:
            idle = [key for key, f in self._fetchers.items() if f.partition_count() == 0]
            fetchers = [self._fetchers.pop(key) for key in idle]
        for fetcher in fetchers:
            fetcher.request_stop()
        for fetcher in fetchers:
            fetcher.join()
