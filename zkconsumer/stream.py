"""What the application iterates: :class:`KafkaStream` and :class:`MessageAndMetadata`.

A stream wraps one :class:`~zkconsumer.partition_info.ChunkQueue` (one consumer
thread id). Iterating it hands out messages in fetch order and advances each
partition's ``consumed_offset`` as a message is handed out, so committed offsets
are exactly what the application has received (at-least-once).

Semantics (Kafka's ``ConsumerIterator``):

* ``consumer.timeout.ms`` >= 0: waiting longer than that for a chunk raises
  :class:`~zkconsumer.errors.ConsumerTimeoutError`; the stream stays usable and
  can be iterated again.
* The shutdown sentinel ends iteration (``StopIteration``), for good.
* A message whose offset is below its partition's ``consumed_offset`` is skipped,
  so a chunk fetched twice never delivers a message twice.
* A rebalance clears the queue and then calls :meth:`KafkaStream.clear`,
  dropping the chunk being iterated; a chunk taken from the queue before the
  clear but not yet installed is recognised by its epoch and dropped too. After
  the rebalancer committed, nothing fetched before the rebalance is handed out,
  while chunks queued after it are delivered even to an iterator that was
  waiting across the rebalance.
* A background failure (a fetcher or rebalancer thread died) is raised to the
  iterating caller.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterator, NamedTuple, Optional, Sequence, Tuple

from .errors import ConsumerTimeoutError
from .partition_info import SHUTDOWN, ChunkQueue, FetchedDataChunk, PartitionTopicInfo, RawMessage

Decoder = Callable[[Optional[bytes]], Any]


class MessageAndMetadata(NamedTuple):
    """One consumed message. ``key``/``message`` are bytes unless decoders were given."""

    topic: str
    partition: int
    offset: int
    key: Any
    message: Any


class FailureSignal:
    """The first fatal background failure of a connector, shared with its streams."""

    def __init__(self) -> None:
        self._error: Optional[BaseException] = None
        self._lock = threading.Lock()

    def set(self, error: BaseException) -> bool:
        """Record ``error`` if none is recorded yet; ``True`` if it was recorded."""
        with self._lock:
            if self._error is None:
                self._error = error
                return True
            return False

    @property
    def error(self) -> Optional[BaseException]:
        return self._error

    def raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error


class ConsumerIterator(Iterator[MessageAndMetadata]):
    """The single iterator of one :class:`KafkaStream`; see the module docstring."""

    def __init__(
        self,
        queue: ChunkQueue,
        consumer_timeout_ms: int,
        key_decoder: Optional[Decoder],
        value_decoder: Optional[Decoder],
        failure: FailureSignal,
    ) -> None:
        self._queue = queue
        self._timeout: Optional[float] = None if consumer_timeout_ms < 0 else consumer_timeout_ms / 1000.0
        self._key_decoder = key_decoder
        self._value_decoder = value_decoder
        self._failure = failure
        # The current chunk; guarded by _lock, which clear() also takes.
        self._lock = threading.Lock()
        self._info: Optional[PartitionTopicInfo] = None
        self._messages: Sequence[RawMessage] = ()
        self._pos = 0
        self._done = False
        #: Messages and key+value bytes handed out so far (read by metrics; only this iterator writes).
        self.delivered_messages = 0
        self.delivered_bytes = 0

    def __iter__(self) -> "ConsumerIterator":
        return self

    def __next__(self) -> MessageAndMetadata:
        while True:
            with self._lock:
                item = self._next_from_chunk()
                if item is not None:
                    return item
                if self._done:
                    raise StopIteration
            self._failure.raise_if_failed()
            chunk = self._queue.get(self._timeout)
            if chunk is None:
                self._failure.raise_if_failed()
                raise ConsumerTimeoutError(f"no message within consumer.timeout.ms ({self._timeout_ms()} ms)")
            with self._lock:
                if chunk is SHUTDOWN:
                    self._done = True
                    raise StopIteration
                if chunk.epoch != self._queue.epoch:  # type: ignore[union-attr]
                    continue  # queued before a rebalance cleared the queue: stale
                self._install(chunk)  # type: ignore[arg-type]

    def _next_from_chunk(self) -> Optional[MessageAndMetadata]:
        """The next deliverable message of the current chunk, advancing offsets; under _lock."""
        info, messages = self._info, self._messages
        if info is None:
            return None
        pos, end = self._pos, len(messages)
        consumed = info.consumed_offset
        while pos < end:
            offset, key, value = messages[pos]
            pos += 1
            if offset < consumed:
                continue
            self._pos = pos
            info.consumed_offset = offset + 1
            self.delivered_messages += 1
            self.delivered_bytes += (len(key) if key else 0) + (len(value) if value else 0)
            if self._key_decoder is not None:
                key = self._key_decoder(key)
            if self._value_decoder is not None:
                value = self._value_decoder(value)
            return MessageAndMetadata(info.topic, info.partition, offset, key, value)
        self._info, self._messages, self._pos = None, (), 0
        return None

    def _install(self, chunk: FetchedDataChunk) -> None:
        if chunk.error is not None:
            raise chunk.error
        info = chunk.topic_info
        if info.consumed_offset < chunk.fetch_offset:
            # The fetch position jumped ahead (auto.offset.reset): follow it.
            info.consumed_offset = chunk.fetch_offset
        self._info, self._messages, self._pos = info, chunk.messages, 0

    def clear(self) -> None:
        """Drop the current chunk (the rebalancer calls this right after clearing the queue)."""
        with self._lock:
            self._info, self._messages, self._pos = None, (), 0

    def _timeout_ms(self) -> int:
        return -1 if self._timeout is None else int(self._timeout * 1000)


class KafkaStream:
    """An iterable of :class:`MessageAndMetadata` fed by one consumer thread id.

    ``iter(stream)`` always returns the same :class:`ConsumerIterator`, so a
    ``for`` loop interrupted by :class:`~zkconsumer.errors.ConsumerTimeoutError`
    can simply be started again.
    """

    def __init__(
        self,
        queue: ChunkQueue,
        consumer_timeout_ms: int,
        key_decoder: Optional[Decoder] = None,
        value_decoder: Optional[Decoder] = None,
        failure: Optional[FailureSignal] = None,
        thread_id: str = "",
    ) -> None:
        self.queue = queue
        self.thread_id = thread_id
        self._iterator = ConsumerIterator(
            queue, consumer_timeout_ms, key_decoder, value_decoder, failure or FailureSignal()
        )

    def __iter__(self) -> ConsumerIterator:
        return self._iterator

    def clear(self) -> None:
        """Drop the chunk being iterated (called by the rebalancer after clearing the queue)."""
        self._iterator.clear()

    @property
    def delivered(self) -> Tuple[int, int]:
        """``(messages, bytes)`` handed to the application through this stream so far."""
        return self._iterator.delivered_messages, self._iterator.delivered_bytes

    def __repr__(self) -> str:
        return f"KafkaStream({self.thread_id or 'unnamed'}, queued_chunks={len(self.queue)})"
