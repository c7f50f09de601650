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
to a new leader while its old fetcher was blocked on a full queue) never delivers
a message twice.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Callable, Deque, Iterable, Optional, Sequence, Tuple, Union

#: One decoded message as fetchers deliver it: ``(offset, key, value)``.
RawMessage = Tuple[int, Optional[bytes], Optional[bytes]]


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
    """A bounded FIFO of chunks whose blocked producers can be woken to give up.

    ``capacity`` is ``queued.max.message.chunks``. A fetcher blocks in :meth:`put`
    while the queue is full (back-pressure). :meth:`put` returns ``False`` without
    queuing once ``should_abort()`` becomes true; whoever makes it true calls
    :meth:`wake_producers` so the blocked fetcher notices at once.

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
        self._wakeups = 0
        self.epoch = 0

    def put(self, chunk: FetchedDataChunk, should_abort: Callable[[], bool]) -> bool:
        """Queue ``chunk``, waiting while full; ``False`` if aborted before it fit."""
        with self._not_full:
            while len(self._items) >= self.capacity:
                if should_abort():
                    return False
                self._not_full.wait()
            if should_abort():
                return False
            chunk.epoch = self.epoch
            self._items.append(chunk)
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
        :meth:`wake_consumers` was called while waiting.
        """
        with self._not_empty:
            if not self._items:
                wakeups = self._wakeups
                ready = lambda: bool(self._items) or self._wakeups != wakeups  # noqa: E731
                if not self._not_empty.wait_for(ready, timeout) or not self._items:
                    return None
            item = self._items.popleft()
            self._not_full.notify()
            return item

    def wake_consumers(self) -> None:
        """Make every blocked :meth:`get` return ``None`` now (a background failure to report)."""
        with self._lock:
            self._wakeups += 1
            self._not_empty.notify_all()

    def clear(self) -> int:
        """Drop every queued item (not the shutdown sentinel), start a new epoch; return how many went."""
        with self._lock:
            self.epoch += 1
            kept = [item for item in self._items if item is SHUTDOWN]
            dropped = len(self._items) - len(kept)
            self._items.clear()
            self._items.extend(kept)
            self._not_full.notify_all()
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

    __slots__ = ("topic", "partition", "queue", "consumed_offset", "fetched_offset", "fetch_size", "revoked", "_lock")

    def __init__(self, topic: str, partition: int, queue: ChunkQueue, offset: int, fetch_size: int) -> None:
        self.topic = topic
        self.partition = partition
        self.queue = queue
        self.consumed_offset = offset
        self.fetched_offset = offset
        self.fetch_size = fetch_size
        #: Set (never cleared) once the partition moved away from this info's stream: iterators drop its chunks.
        self.revoked = False
        self._lock = threading.Lock()

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

    def enqueue_error(self, fetch_offset: int, error: BaseException, should_abort: Callable[[], bool]) -> bool:
        """Queue an error chunk that the iterator raises when it reaches it."""
        return self.queue.put(FetchedDataChunk(self, fetch_offset, (), error), should_abort)

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
