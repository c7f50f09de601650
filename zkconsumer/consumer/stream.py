"""What the application iterates: :class:`KafkaStream` and :class:`MessageAndMetadata`.

A stream wraps one :class:`~zkconsumer.fetch.handoff.ChunkQueue` (one consumer
thread id). Iterating it hands out messages in fetch order and advances each
partition's ``consumed_offset`` as a message is handed out, so committed offsets
are exactly what the application has received (at-least-once).
:meth:`KafkaStream.batches` hands out the same messages as Arrow record
batches instead, with the same semantics at batch granularity.

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
* An error chunk (a message over the fetch size, a corrupt message) is raised
  when the iterator reaches it, in offset order.
* A background failure (a fetcher or rebalancer thread died) is raised to the
  iterating caller, always as a :class:`~zkconsumer.errors.ZkConsumerError`
  (:class:`~zkconsumer.errors.BackgroundThreadError` wrapping anything else).
* ZooKeeper being away does not stop iteration: what the fetchers queued is
  handed out (see :mod:`zkconsumer.zookeeper.lease` for when fetchers hold back).

How the per-message path stays cheap
------------------------------------

The iterator is split in two. The *slow path*, :meth:`ConsumerIterator._refill`
(once per chunk: queue wait, timeout, shutdown, epoch check, error chunks,
failures), is Python and runs under the iterator's lock, which
:meth:`~ConsumerIterator.clear` also takes. The *per-message path* walks the
installed chunk: with the C extension (:mod:`zkconsumer.wire._speedups`) it is the
C ``__next__`` of the iterator's base class, which takes no lock. It does not
need one: a C function runs under the GIL without letting another thread in
unless it calls back into Python or allocates (a collection may run
finalizers). So it builds the message's objects first, then checks that no
``clear()``/install happened meanwhile (a generation counter), then hands the
message out (position, ``consumed_offset``, counters) without running any
Python code, and only then applies decoders. A ``clear()`` therefore happens
either before the hand-out, which then does not happen, or after it, and the
commit that follows includes the message. Without the extension the same
per-message path is Python and holds the lock for each message.

Without decoders, the C path also recycles message tuples, as ``zip()`` does:
a :class:`MessageAndMetadata` it handed out and that nobody else references
any more (the application dropped it) is filled with the next message instead
of a new tuple being allocated, and so are its key and value bytes when only
that tuple references them and the next message's are as long. A message, key
or value the application keeps is never touched; the key and value of the last
two messages handed out stay referenced by the iterator until it reuses them.

Chunks are normally :class:`~zkconsumer.wire.messageset.MessageBlock` objects (the
C decoder's Arrow-layout output) from which the ``bytes`` of a key and value
are made only when the message is handed out, and from which
:meth:`KafkaStream.batches` builds record batches without copying; any
sequence of ``(offset, key, value)`` tuples works too.
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, NamedTuple, Optional, Sequence, Tuple

from ..errors import BackgroundThreadError, ConfigurationError, ConsumerTimeoutError, ZkConsumerError
from ..fetch.handoff import SHUTDOWN, ChunkQueue, PartitionTopicInfo
from ..wire.messageset import RawMessage, speedups
from .acks import ProcessedOffsets

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow

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
        """Record ``error`` if none is recorded yet; ``True`` if it was recorded.

        What the application is given is always a
        :class:`~zkconsumer.errors.ZkConsumerError`: anything else (a bug, a
        library's exception) is wrapped in
        :class:`~zkconsumer.errors.BackgroundThreadError`, the original as its cause.
        """
        if not isinstance(error, ZkConsumerError):
            error = BackgroundThreadError(error)
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


class _PyCursor:
    """Pure-Python twin of ``zkconsumer.wire._speedups.Cursor``: the per-message path over the installed chunk.

    Subclasses provide ``_lock`` (taken per message here) and ``_refill()``,
    which installs the next chunk or raises.
    """

    _lock: threading.Lock

    def __init__(self, message_type: Any, key_decoder: Optional[Decoder] = None,
                 value_decoder: Optional[Decoder] = None) -> None:
        self._message_type = message_type
        self._key_decoder = key_decoder
        self._value_decoder = value_decoder
        self._info: Optional[PartitionTopicInfo] = None
        self._messages: Sequence[RawMessage] = ()
        self._pos = 0
        #: Messages and key+value bytes handed out so far (read by metrics; only this iterator writes).
        self.delivered_messages = 0
        self.delivered_bytes = 0

    def __iter__(self) -> "_PyCursor":
        return self

    def __next__(self) -> MessageAndMetadata:
        while True:
            with self._lock:
                item = self._step()
            if item is not None:
                return item
            self._refill()

    def _refill(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _step(self) -> Optional[MessageAndMetadata]:
        """The next deliverable message of the installed chunk, handed out; ``None`` when exhausted."""
        info, messages = self._info, self._messages
        if info is None:
            return None
        pos, end = self._pos, len(messages)
        while pos < end:
            offset, key, value = messages[pos]
            pos += 1
            if offset < info.consumed_offset:
                continue
            self._pos = pos
            info.consumed_offset = offset + 1
            self.delivered_messages += 1
            self.delivered_bytes += (len(key) if key else 0) + (len(value) if value else 0)
            if self._key_decoder is not None:
                key = self._key_decoder(key)
            if self._value_decoder is not None:
                value = self._value_decoder(value)
            message: MessageAndMetadata = self._message_type(info.topic, info.partition, offset, key, value)
            return message
        self._clear()
        return None

    def _install(self, info: PartitionTopicInfo, messages: Sequence[RawMessage], pos: int = 0) -> None:
        self._info, self._messages, self._pos = info, messages, pos

    def _clear(self) -> None:
        self._info, self._messages, self._pos = None, (), 0

    def _take_rest(self) -> Optional[Tuple[PartitionTopicInfo, Sequence[RawMessage], int]]:
        info, messages, pos = self._info, self._messages, self._pos
        self._clear()
        if info is None or pos >= len(messages):
            return None
        return info, messages, pos

    @property
    def _has_chunk(self) -> bool:
        return self._info is not None and self._pos < len(self._messages)


#: The per-message engine: C when the extension is built (and not disabled), else Python. The C
#: hand-out relies on the GIL for its atomicity, so a free-threaded interpreter uses the Python one.
_GIL = getattr(sys, "_is_gil_enabled", lambda: True)()
_CursorBase: Any = speedups.Cursor if speedups is not None and _GIL else _PyCursor


class ConsumerIterator(_CursorBase):  # type: ignore[misc]
    """The single iterator of one :class:`KafkaStream`; see the module docstring.

    ``delivered_messages`` / ``delivered_bytes`` count the messages and key+value
    bytes handed out so far, by iteration and by batches (read by metrics; only
    the iterating thread writes them).
    """

    def __init__(
        self,
        queue: ChunkQueue,
        consumer_timeout_ms: int,
        key_decoder: Optional[Decoder],
        value_decoder: Optional[Decoder],
        failure: FailureSignal,
        processed: Optional[ProcessedOffsets] = None,
    ) -> None:
        super().__init__(MessageAndMetadata, key_decoder, value_decoder)
        self._queue = queue
        self._processed = processed  # commit.processed.only: each installed chunk is registered there
        self._timeout: Optional[float] = None if consumer_timeout_ms < 0 else consumer_timeout_ms / 1000.0
        self._failure = failure
        # Taken by the slow path, by batches and by clear(); the C per-message path needs none.
        self._lock = threading.Lock()
        self._done = False

    def _refill(self) -> None:
        """Wait for the next chunk and install it; raise at shutdown, timeout, error chunk or failure.

        Called by the per-message path when the installed chunk is exhausted,
        and by batches. Stale chunks (queued before a rebalance cleared the
        queue) are dropped. Raises ``StopIteration`` once the shutdown sentinel was met.
        """
        while True:
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
                if chunk.topic_info.revoked or chunk.topic_info.paused:  # type: ignore[union-attr]
                    continue  # its partition moved away or was paused (taken before its chunks were dropped)
                error = chunk.error  # type: ignore[union-attr]
                if error is None:
                    info = chunk.topic_info  # type: ignore[union-attr]
                    if info.consumed_offset < chunk.fetch_offset:  # type: ignore[union-attr]
                        # The fetch position jumped ahead (auto.offset.reset): follow it.
                        info.consumed_offset = chunk.fetch_offset  # type: ignore[union-attr]
                    if self._processed is not None:  # before any of it is handed out
                        self._processed.note_chunk(info, chunk.messages)  # type: ignore[union-attr]
                    self._install(info, chunk.messages)  # type: ignore[union-attr]
                    return
            raise error

    def clear(self) -> None:
        """Drop the current chunk (the rebalancer calls this right after clearing the queue)."""
        with self._lock:
            self._clear()

    def drop_revoked(self) -> None:
        """Drop the current chunk if its partition was revoked or paused; keep any other chunk where it is.

        The rebalancer (or a pause) sets ``info.revoked`` (``info.paused``) first, then
        calls this: a chunk installed before is dropped here, one installed after is
        refused by :meth:`_refill`, so no message of such a partition is handed out
        once this returns.
        """
        with self._lock:
            rest = self._take_rest()
            if rest is not None and not rest[0].revoked and not rest[0].paused:
                self._install(*rest)

    def _batches(self, arrow: Any, max_rows: Optional[int]) -> Iterator["pyarrow.RecordBatch"]:
        """Record batches, each already handed out (offsets and counters advanced) when yielded; ends at
        shutdown; exceptions as :meth:`_refill`'s. One generator frame for all batches rather than a call per
        batch: a live stream's batches have a row each (issue 44). Yields outside ``_lock``.
        """
        lock, take_rest, hand_out, refill = self._lock, self._take_rest, self._hand_out_batch, self._refill
        while True:
            with lock:
                rest = take_rest()
                batch = None if rest is None else hand_out(arrow, rest[0], rest[1], rest[2], max_rows)
            if batch is not None:
                yield batch
            elif rest is None:
                try:
                    refill()
                except StopIteration:
                    return

    def _hand_out_batch(self, arrow: Any, info: PartitionTopicInfo, messages: Sequence[RawMessage], pos: int,
                        max_rows: Optional[int]) -> Optional["pyarrow.RecordBatch"]:
        """Under ``_lock``: the deliverable messages of ``messages[pos:]`` (at most ``max_rows``) as a batch."""
        consumed = info.consumed_offset
        end = len(messages)
        if speedups is not None and type(messages) is speedups.MessageBlock:
            block: Any = messages  # the C decoder's MessageBlock
            start = max(pos, block.bisect(consumed))
            stop = end if max_rows is None else min(end, start + max_rows)
            if start >= stop:
                return None
            batch = arrow.block_rows(info.topic, info.partition, block, start, stop)
            last = block.offset_at(stop - 1)
            size = block.payload_bytes(start, stop)
        else:
            rows = [m for m in messages[pos:] if m[0] >= consumed]
            if max_rows is not None and len(rows) > max_rows:
                rows, stop = rows[:max_rows], end - (len(rows) - max_rows)
            else:
                stop = end
            if not rows:
                return None
            batch = arrow.record_batch(info.topic, info.partition, rows)
            last = rows[-1][0]
            size = sum((len(k) if k else 0) + (len(v) if v else 0) for _, k, v in rows)
        if stop < end:
            self._install(info, messages, stop)  # the rest stays the current chunk
        info.consumed_offset = last + 1
        self.delivered_messages += batch.num_rows
        self.delivered_bytes += size
        return batch

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
        processed: Optional[ProcessedOffsets] = None,
    ) -> None:
        self.queue = queue
        self.thread_id = thread_id
        self._processed = processed
        self._iterator = ConsumerIterator(
            queue, consumer_timeout_ms, key_decoder, value_decoder, failure or FailureSignal(), processed
        )

    def __iter__(self) -> ConsumerIterator:
        return self._iterator

    def batches(self, max_rows: Optional[int] = None) -> Iterator["pyarrow.RecordBatch"]:
        """The stream's messages as Arrow record batches (needs pyarrow: the ``spark`` extra).

        Columns (:data:`zkconsumer.consumer.arrow.SCHEMA`): ``topic`` string, ``partition``
        int32, ``offset`` int64, ``key`` binary, ``value`` binary. A batch holds
        the messages of one fetched chunk of one partition (at most
        ``max_rows``), built from the decoder's buffers without copying; key and
        value decoders are not applied.

        Same semantics as iterating: messages below ``consumed_offset`` are left
        out, error chunks are raised in order, ``consumer.timeout.ms`` raises
        :class:`~zkconsumer.errors.ConsumerTimeoutError` (call ``batches()``
        again to go on), shutdown ends the generator, and a batch counts as
        handed out when it is yielded: its partition's ``consumed_offset`` is
        then past its last message, so the next commit includes all of it.
        Iteration and batches may be mixed: whatever the iterator left of its
        current chunk comes first.

        Raises ``ImportError`` at once if pyarrow is not installed.
        """
        from . import arrow  # raises a clear ImportError without pyarrow

        if max_rows is not None and max_rows < 1:
            raise ValueError("max_rows must be >= 1")
        return self._iterator._batches(arrow, max_rows)

    def ack(self, message: MessageAndMetadata) -> bool:
        """Mark ``message`` processed (``commit.processed.only=true``); any thread, any order.

        Commits then advance its partition over it once every message handed out before it
        was acked too (see :mod:`zkconsumer.consumer.acks`). Returns ``False`` if the
        message was handed out by an earlier ownership of its partition (before a
        rebalance): ignored, as that ownership's offsets were committed without it and
        the message is delivered again. Raises :class:`~zkconsumer.errors.UnknownAckError`
        for a message this member never handed out, and
        :class:`~zkconsumer.errors.ConfigurationError` without ``commit.processed.only``.
        Acking twice is harmless. Any stream of the connector may ack any of its messages.
        """
        return ack_message(self._processed, message)

    def clear(self) -> None:
        """Drop the chunk being iterated (called by the rebalancer after clearing the queue)."""
        self._iterator.clear()

    def drop_revoked(self) -> None:
        """Drop the chunk being iterated if its partition was revoked or paused (``PartitionTopicInfo``)."""
        self._iterator.drop_revoked()

    @property
    def delivered(self) -> Tuple[int, int]:
        """``(messages, bytes)`` handed to the application through this stream so far."""
        return self._iterator.delivered_messages, self._iterator.delivered_bytes

    def __repr__(self) -> str:
        return f"KafkaStream({self.thread_id or 'unnamed'}, queued_chunks={len(self.queue)})"


def clear_streams(streams: Iterable[KafkaStream]) -> None:
    """Drop everything queued for ``streams`` and every chunk being iterated.

    Queues first, then each stream's current chunk: clearing a queue starts a
    new epoch, so a chunk an iterator took just before is recognised as stale.
    Called with the fetchers stopped (a rebalance, session loss, shutdown).
    """
    streams = list(streams)
    for queue in {id(s.queue): s.queue for s in streams}.values():
        queue.clear()
    for stream in streams:
        stream.clear()


def revoke_partitions(streams: Iterable[KafkaStream], infos: Iterable[PartitionTopicInfo]) -> None:
    """Stop handing out ``infos`` (partitions moving away) while every other partition flows on.

    Call with the fetchers no longer fetching ``infos``. Marks each revoked,
    drops their queued chunks, then any chunk of theirs a stream is iterating.
    Chunks of other partitions, queued or being iterated, are kept. Once this
    returns, the ``consumed_offset`` of each of ``infos`` is final.
    """
    infos = list(infos)
    for info in infos:
        info.revoked = True
    stop_delivering(streams, infos)


def stop_delivering(streams: Iterable[KafkaStream], infos: Iterable[PartitionTopicInfo]) -> None:
    """Drop the queued chunks of ``infos`` (each already marked ``revoked`` or ``paused``), then any
    chunk of theirs a stream is iterating; other partitions' chunks are kept. Call with the
    fetchers no longer fetching ``infos``: once this returns, no message of theirs is handed out."""
    infos = list(infos)
    if not infos:
        return
    for queue in {id(info.queue): info.queue for info in infos}.values():
        queue.discard(infos)
    for stream in streams:
        stream.drop_revoked()


def ack_message(processed: Optional[ProcessedOffsets], message: MessageAndMetadata) -> bool:
    """:meth:`KafkaStream.ack` of ``processed`` (``None``: ``commit.processed.only`` is off)."""
    if processed is None:
        raise ConfigurationError("commit.processed.only", "ack() marks a message processed for commits only when "
                                 "commit.processed.only=true (commits now write what was handed out)")
    return processed.ack(message.topic, message.partition, message.offset)
