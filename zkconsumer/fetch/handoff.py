"""The hand-off between fetcher threads and stream iterators.

One :class:`ChunkQueue` exists per consumer thread id (per stream). Fetcher threads
put :class:`FetchedDataChunk` objects into it; the stream's iterator takes them out.
Each owned partition has one :class:`PartitionTopicInfo` that records two offsets:

* ``fetched_offset``: where the next fetch for this partition starts. Only
  fetchers advance it, after a chunk is queued.
* ``consumed_offset``: the offset *after* the last message handed to the
  application. Only the iterator advances it; offset commits write it.

Contract (as in Kafka's ``PartitionTopicInfo``/``ConsumerIterator``): a chunk's
messages are in ascending offset order; the iterator skips any message whose
offset is below ``consumed_offset`` so a chunk fetched twice (a partition re-homed
to a new leader while its old fetcher was still processing a response) never
delivers a message twice.

Back-pressure: a queue holds at most ``queued.max.message.chunks`` chunks.
Fetchers :meth:`PartitionTopicInfo.offer` chunks without blocking and keep
(park) one that does not fit; a room listener on the queue tells them when a
consumer made room (see ``fetcher_thread.py``).

Fetching on the consumer's thread: a queue fed by exactly one fetcher has that
fetcher as its *driver* (:meth:`ChunkQueue.add_driver`). A consumer that finds the
queue empty asks the driver to run one fetch round on the consumer's own thread
(:meth:`_Driver.drive`) instead of waiting for the fetcher thread to hand a chunk
over: one thread woken per response instead of two. The driver may decline (its
thread is in a round, or fetches ahead); the consumer then waits as before, and the
driver :meth:`ChunkQueue.nudge` s it when its thread steps back.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable, Deque, Iterable, Optional, Protocol, Sequence, Tuple, Union

from ..wire.messageset import RawMessage


class _Acks(Protocol):
    """What a partition's ack tracker offers (:class:`zkconsumer.consumer.acks.PartitionAcks`)."""

    start: int

    def note_run(self, first: int, end: int) -> None: ...

    def ack(self, offset: int) -> bool: ...

    def position(self, consumed: int) -> int: ...

    def in_flight(self, consumed: int) -> int: ...


class _Driver(Protocol):
    """A fetcher that may run a fetch round on a consumer's thread (:class:`~zkconsumer.fetch.fetcher_thread.FetcherThread`)."""

    def drive(self, timeout: Optional[float]) -> bool:
        """Run at most one fetch round on the calling thread, its broker wait at most ``timeout``
        seconds (``None``: the fetcher's own); ``False`` if it declined and did nothing."""
        ...

    def interrupt(self) -> None:
        """End a round running on a consumer's thread now (that consumer has something to raise)."""
        ...


__all__ = ["ChunkQueue", "FetchedDataChunk", "PartitionTopicInfo", "SHUTDOWN"]


class FetchedDataChunk:
    """Messages fetched for one partition in one fetch response.

    ``error`` is set instead of ``messages`` when the fetch could not produce
    messages that the application must see (a message over the fetch size, a
    corrupt message): the iterator raises it when it reaches the chunk, so the
    failure surfaces in order, at the offset where it happened.
    """

    __slots__ = ("topic_info", "fetch_offset", "messages", "error", "epoch")

    def __init__(
        self,
        topic_info: "PartitionTopicInfo",
        fetch_offset: int,
        messages: Sequence[RawMessage],
        error: Optional[BaseException] = None,
    ) -> None:
        self.topic_info = topic_info
        self.fetch_offset = fetch_offset
        self.messages = messages
        self.error = error
        #: The queue's epoch when the chunk was queued (set by :meth:`ChunkQueue.put`).
        self.epoch = 0

    def __repr__(self) -> str:
        return (
            f"FetchedDataChunk({self.topic_info.topic}-{self.topic_info.partition}, "
            f"fetch_offset={self.fetch_offset}, messages={len(self.messages)}, error={self.error!r})"
        )


class _Shutdown:
    """The sentinel type put in every queue on shutdown; ends iteration."""

    _instance: Optional["_Shutdown"] = None

    def __new__(cls) -> "_Shutdown":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "SHUTDOWN"


#: Put into a queue to end every iteration over it (Kafka's ``shutdownCommand``).
SHUTDOWN = _Shutdown()

QueueItem = Union[FetchedDataChunk, _Shutdown]


class ChunkQueue:
    """A bounded FIFO of chunks; producers never need to block on it.

    ``capacity`` is ``queued.max.message.chunks``: the queue never holds more
    chunks than that (the shutdown sentinel aside). Fetchers use the
    non-blocking :meth:`offer` and keep a chunk that does not fit (see
    ``fetcher_thread.py``: a full stream must not stop the fetching of other streams'
    partitions); they learn that room appeared through a *room listener*
    (:meth:`add_room_listener`), called whenever an item leaves a full queue
    (:meth:`get`, :meth:`clear`, :meth:`discard`).

    The blocking :meth:`put` remains for producers that may wait: it returns
    ``False`` without queuing once ``should_abort()`` becomes true; whoever
    makes it true calls :meth:`wake_producers` so the blocked producer notices at once.

    ``epoch`` counts :meth:`clear` calls and is stamped on each chunk as it is
    queued: a consumer holding a chunk whose epoch is older than the queue's
    took it before a rebalance cleared the queue, and must drop it.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._items: Deque[QueueItem] = deque()
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        # Threads waiting on each condition (guarded by _lock): a single notify() is sent only to a waiter.
        # threading.Condition.notify is Python code that costs a microsecond or two even with nobody waiting,
        # and a live stream's round queues a chunk and takes it with nobody waiting on either side (issue 44).
        self._takers = 0
        self._putters = 0
        self._wakeups = 0
        self._room_listeners: Tuple[Callable[[], None], ...] = ()
        self._drivers: Tuple[_Driver, ...] = ()
        self._nudges = 0
        self.epoch = 0

    def add_room_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` whenever room appears in a full queue (idempotent per listener).

        It is called from the consuming thread (or whoever clears the queue),
        with no lock of the queue held: it must be quick and must not block.
        """
        with self._lock:
            if listener not in self._room_listeners:
                self._room_listeners = self._room_listeners + (listener,)

    def remove_room_listener(self, listener: Callable[[], None]) -> None:
        """Stop calling ``listener`` (a no-op if it was not added)."""
        with self._lock:
            self._room_listeners = tuple(f for f in self._room_listeners if f != listener)

    def add_driver(self, driver: _Driver) -> None:
        """``driver`` feeds this queue (idempotent); consumers ask it to fetch while it is the only one."""
        with self._lock:
            if driver not in self._drivers:
                self._drivers = self._drivers + (driver,)

    def remove_driver(self, driver: _Driver) -> None:
        """``driver`` no longer feeds this queue (a no-op if it did not)."""
        with self._lock:
            self._drivers = tuple(d for d in self._drivers if d is not driver)

    def nudge(self) -> None:
        """Make a blocked :meth:`get` look again whether it may fetch (the driver's thread stepped back)."""
        with self._lock:
            self._nudges += 1
            self._not_empty.notify_all()

    def _room_appeared(self) -> None:
        """Tell the room listeners; called with ``_lock`` NOT held."""
        for listener in self._room_listeners:
            listener()

    def has_room(self) -> bool:
        """Whether :meth:`offer` would queue a chunk now (a hint: another producer may fill it first)."""
        return len(self._items) < self.capacity

    def offer(self, chunk: FetchedDataChunk) -> bool:
        """Queue ``chunk`` if the queue has room now; ``False`` (nothing queued) if it is full. Never blocks."""
        with self._lock:
            if len(self._items) >= self.capacity:
                return False
            chunk.epoch = self.epoch
            self._items.append(chunk)
            if self._takers:
                self._not_empty.notify()
            return True

    def put(self, chunk: FetchedDataChunk, should_abort: Callable[[], bool]) -> bool:
        """Queue ``chunk``, waiting while full; ``False`` if aborted before it fit."""
        with self._not_full:
            while len(self._items) >= self.capacity:
                if should_abort():
                    return False
                self._putters += 1
                try:
                    self._not_full.wait()
                finally:
                    self._putters -= 1
            if should_abort():
                return False
            chunk.epoch = self.epoch
            self._items.append(chunk)
            if self._takers:
                self._not_empty.notify()
            return True

    def put_shutdown(self) -> None:
        """Append the shutdown sentinel, ignoring the bound (never blocks)."""
        with self._lock:
            self._items.append(SHUTDOWN)
            self._not_empty.notify_all()

    def get(self, timeout: Optional[float]) -> Optional[QueueItem]:
        """Take the oldest item, waiting up to ``timeout`` seconds (``None``: forever).

        Returns ``None`` if nothing arrived in time, or at once if
        :meth:`wake_consumers` was called while waiting. While the queue is empty and
        has exactly one driver, the wait is spent in that driver's fetch rounds on this
        thread where it accepts (each round's broker wait within what is left of ``timeout``).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        wakeups = self._wakeups
        while True:
            with self._lock:  # the lock of _not_empty and _not_full (a Condition's ``with`` is a Python call)
                if self._items:
                    was_full = len(self._items) >= self.capacity
                    item = self._items.popleft()
                    if self._putters:
                        self._not_full.notify()
                    break
                if self._wakeups != wakeups:
                    return None
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                drivers = self._drivers
                if len(drivers) != 1:
                    self._wait(wakeups, left)
                    continue
                nudges = self._nudges
            if not drivers[0].drive(left):
                with self._lock:
                    if self._nudges == nudges:
                        self._wait(wakeups, left, nudges)
        if was_full:
            self._room_appeared()
        return item

    def _wait(self, wakeups: int, left: Optional[float], nudges: Optional[int] = None) -> None:
        """Wait (caller holds ``_lock``) until an item, a wake-up, a nudge (if ``nudges`` is given) or ``left`` s passed."""
        self._takers += 1
        try:
            if nudges is None:
                self._not_empty.wait_for(lambda: bool(self._items) or self._wakeups != wakeups, left)
            else:
                self._not_empty.wait_for(
                    lambda: bool(self._items) or self._wakeups != wakeups or self._nudges != nudges, left)
        finally:
            self._takers -= 1

    def wake_consumers(self) -> None:
        """Make every blocked :meth:`get` return ``None`` now (a background failure to report), also
        one running its driver's round (the round is interrupted)."""
        with self._lock:
            self._wakeups += 1
            self._not_empty.notify_all()
            drivers = self._drivers
        for driver in drivers:
            driver.interrupt()

    def clear(self) -> int:
        """Drop every queued item (not the shutdown sentinel), start a new epoch; return how many went."""
        with self._lock:
            self.epoch += 1
            kept = [item for item in self._items if item is SHUTDOWN]
            dropped = len(self._items) - len(kept)
            self._items.clear()
            self._items.extend(kept)
            self._not_full.notify_all()
        if dropped:
            self._room_appeared()
        return dropped

    def discard(self, infos: Iterable["PartitionTopicInfo"]) -> int:
        """Drop the queued chunks of ``infos`` only (partitions moving away); return how many went.

        Unlike :meth:`clear`, the epoch does not change: chunks of other
        partitions stay deliverable, including one an iterator already took.
        A chunk of ``infos`` already taken is caught by its info's ``revoked`` flag.
        """
        gone = {id(info) for info in infos}
        with self._lock:
            kept = [item for item in self._items
                    if item is SHUTDOWN or id(item.topic_info) not in gone]  # type: ignore[union-attr]
            dropped = len(self._items) - len(kept)
            if dropped:
                self._items.clear()
                self._items.extend(kept)
                self._not_full.notify_all()
        if dropped:
            self._room_appeared()
        return dropped

    def wake_producers(self) -> None:
        """Wake every blocked :meth:`put` so it re-checks its ``should_abort``."""
        with self._lock:
            self._not_full.notify_all()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


class PartitionTopicInfo:
    """The consumer's state for one owned partition during one assignment.

    Created by the rebalancer after it claims the partition; handed to the
    fetcher manager (which fetches from ``fetched_offset``) and reached by the
    iterator through the chunks it takes from ``queue``.
    """

    __slots__ = ("topic", "partition", "queue", "consumed_offset", "fetched_offset", "fetch_size", "revoked", "paused",
                 "acks", "started_at", "_lock")

    def __init__(self, topic: str, partition: int, queue: ChunkQueue, offset: int, fetch_size: int) -> None:
        self.topic = topic
        self.partition = partition
        self.queue = queue
        self.consumed_offset = offset
        self.fetched_offset = offset
        #: The position this incarnation started from (what the claim read, or carried over).
        self.started_at = offset
        self.fetch_size = fetch_size
        #: Set (never cleared) once the partition moved away from this info's stream: iterators drop its chunks.
        self.revoked = False
        #: Set while the application paused the partition (see ``consumer/pausing.py``): iterators drop its chunks.
        self.paused = False
        #: ``commit.processed.only``: the acks of this incarnation (a :class:`~zkconsumer.consumer.acks.PartitionAcks`,
        #: attached by the stream when it installs the first chunk); ``None`` otherwise.
        self.acks: Optional[_Acks] = None
        self._lock = threading.Lock()

    @property
    def commit_position(self) -> int:
        """The offset a commit writes: ``consumed_offset``, or with ``commit.processed.only`` the first
        offset handed out and not yet acked (never beyond ``consumed_offset``). Negative: not known yet."""
        acks = self.acks
        consumed = self.consumed_offset
        return consumed if acks is None or consumed < 0 else acks.position(consumed)

    def enqueue(self, fetch_offset: int, messages: Sequence[RawMessage], should_abort: Callable[[], bool]) -> bool:
        """Queue the messages fetched at ``fetch_offset`` and advance ``fetched_offset``.

        A no-op returning ``True`` for an empty message list. Returns ``False`` if
        aborted while waiting for room (nothing queued, offset not advanced) or if
        ``fetched_offset`` moved since the fetch was issued (another fetcher or a
        reset got there first; the result is stale and dropped).
        """
        if not messages:
            return True
        if fetch_offset != self.fetched_offset:
            return False
        if not self.queue.put(FetchedDataChunk(self, fetch_offset, messages), should_abort):
            return False
        with self._lock:
            if self.fetched_offset == fetch_offset:
                self.fetched_offset = messages[-1][0] + 1
        return True

    def offer(self, chunk: FetchedDataChunk) -> bool:
        """Queue ``chunk`` if its queue has room now, without blocking; ``False`` if the queue is full.

        ``chunk`` must have been fetched for this partition. A data chunk is
        queued only if it starts at ``fetched_offset``, which then moves past
        its last message; one that does not (the position moved since the
        fetch: stale) is dropped and ``True`` returned, as there is nothing
        left to do with it. An error chunk is queued as is. ``False`` means
        nothing changed: the caller keeps the chunk (the fetcher *parks* it)
        and offers it again once the queue has room.
        """
        if chunk.error is None:
            if not chunk.messages:
                return True
            if chunk.fetch_offset != self.fetched_offset:
                return True
        if not self.queue.offer(chunk):
            return False
        if chunk.error is None:
            with self._lock:
                if self.fetched_offset == chunk.fetch_offset:
                    self.fetched_offset = chunk.messages[-1][0] + 1
        return True

    def enqueue_error(self, fetch_offset: int, error: BaseException, should_abort: Callable[[], bool]) -> bool:
        """Queue an error chunk that the iterator raises when it reaches it."""
        return self.queue.put(FetchedDataChunk(self, fetch_offset, (), error), should_abort)

    def rewind_to_consumed(self) -> None:
        """Move ``fetched_offset`` back to ``consumed_offset``: what was fetched but not handed out is
        fetched again (a pause dropped it). Call only while no fetcher fetches the partition."""
        with self._lock:
            if self.consumed_offset >= 0:
                self.fetched_offset = self.consumed_offset

    def reset_offsets(self, offset: int) -> None:
        """Move both positions to ``offset`` (``auto.offset.reset`` after OFFSET_OUT_OF_RANGE)."""
        with self._lock:
            self.fetched_offset = offset
            self.consumed_offset = offset

    def __repr__(self) -> str:
        return (
            f"PartitionTopicInfo({self.topic}-{self.partition}, fetched={self.fetched_offset}, "
            f"consumed={self.consumed_offset})"
        )
