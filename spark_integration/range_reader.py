"""Reading exactly one :class:`~spark_integration.ranges.OffsetRange` from its partition leader.

This is the executor side of :func:`~spark_integration.create_rdd` and of the
``zkconsumer`` data source. It needs only plain data: consumer properties, a
list of broker addresses to bootstrap from, and the range. It never joins the
group and never opens a ZooKeeper session unless every known broker is
unreachable (then it re-reads ``/brokers/ids``).

Contract of :meth:`RangeReader.read`:

* yields the messages with ``from_offset <= offset < until_offset`` as
  ``(offset, key, value)`` tuples (``key``/``value`` bytes or ``None``), in
  offset order, grouped in chunks of one fetch each: each chunk is the
  decoder's sequence as is (a :class:`~zkconsumer.wire.messageset.MessageBlock` in
  Arrow layout when the C decoder is used) unless it had to be cut at
  ``until_offset``;
* :meth:`RangeReader.batches` yields the same messages as Arrow record
  batches instead, one per non-empty chunk, built from the C decoder's buffers
  without a Python object per message (the chunk's rows cut at
  ``until_offset`` by a slice, not a copy): what the ``zkconsumer`` Spark
  source hands to Spark;
* follows leader changes: a retriable broker error (NOT_LEADER_FOR_PARTITION,
  LEADER_NOT_AVAILABLE, a connection failure, ...) makes it look the leader up
  again after ``refresh.leader.backoff.ms``; it gives up with
  :class:`~zkconsumer.BrokerUnavailableError` when no progress was made for
  ``retry_window_s``;
* raises :class:`OffsetRangeUnavailableError` when part of the range is gone
  (deleted by retention, or lost in an unclean leader election): it never
  silently skips or resets, since the range was promised to the caller.
  With ``fail_on_data_loss=False`` (the data source's ``failOnDataLoss=false``)
  it logs a warning naming the partition and offsets instead and goes on from
  the log start (offsets deleted below it), or ends the range (offsets beyond
  the log end); it still raises when the log's bounds cannot be looked up;
* raises :class:`~zkconsumer.MessageSizeTooLargeError` if a message exceeds
  ``fetch.message.max.bytes`` and :class:`~zkconsumer.CorruptMessageError` for a
  corrupt one;
* on a compacted topic, offsets missing from the log are simply absent.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from zkconsumer import BrokerUnavailableError, ConsumerConfig, MessageSizeTooLargeError, ZkConsumerError
from zkconsumer.kerberos import broker_authenticator
from zkconsumer.wire.broker_errors import (
    LeaderNotAvailableError,
    OffsetOutOfRangeError,
    ProtocolDecodeError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from zkconsumer.wire.connection import BrokerConnection
from zkconsumer.wire.messageset import MessageBlock, RawMessage, decode_message_set
from zkconsumer.wire.protocol import EARLIEST_TIME, LATEST_TIME, FetchPartition, FetchPartitionResponse, MetadataResponse
from zkconsumer.wire.tls import broker_ssl_context

from .credentials import consumer_config
from .ranges import OffsetRange

__all__ = ["RangeReader", "OffsetRangeUnavailableError", "BrokerAddress", "read_offset_range",
           "read_offset_range_batches"]

log = logging.getLogger(__name__)

BrokerAddress = Tuple[str, int]


class OffsetRangeUnavailableError(ZkConsumerError):
    """Part of an offset range can no longer be read from the log.

    ``offset`` is the first offset that could not be read; ``log_start`` and
    ``log_end`` are the partition's log bounds as the leader reported them
    (``None`` if they could not be looked up).
    """

    def __init__(self, offset_range: OffsetRange, offset: int, log_start: Optional[int],
                 log_end: Optional[int], reason: str) -> None:
        self.offset_range, self.offset, self.log_start, self.log_end = offset_range, offset, log_start, log_end
        r = offset_range
        super().__init__(
            f"offsets [{r.from_offset}, {r.until_offset}) of {r.topic}/{r.partition} are no longer available "
            f"from offset {offset}: {reason}"
        )


def _resume_after_loss(gone: OffsetRangeUnavailableError) -> Optional[int]:
    """Where reading goes on when data loss is tolerated: the log start, or the range's end; ``None``: unknown.

    >>> r = OffsetRange("t", 0, 2, 9)
    >>> [_resume_after_loss(OffsetRangeUnavailableError(r, 2, s, e, "")) for s, e in [(5, 20), (0, 1), (None, None)]]
    [5, 9, None]
    """
    r = gone.offset_range
    if gone.log_start is not None and gone.offset < gone.log_start:
        return min(gone.log_start, r.until_offset)
    if gone.log_end is not None and gone.offset >= gone.log_end:
        return r.until_offset
    return None


def _explain(offset: int, log_start: Optional[int], log_end: Optional[int]) -> str:
    if log_start is not None and offset < log_start:
        return f"the log now starts at {log_start} (deleted by retention)"
    if log_end is not None and offset >= log_end:
        return f"the log now ends at {log_end} (truncated by an unclean leader election, or the topic was recreated)"
    return f"the broker reports the offset out of range (log [{log_start}, {log_end}])"


def _cut(messages: Sequence[RawMessage], until: int) -> Tuple[int, int]:
    """``(last offset, how many messages lie below until)`` of a non-empty, ascending ``messages``.

    >>> _cut([(3, None, b""), (4, None, b""), (7, None, b"")], 5)
    (7, 2)
    """
    if MessageBlock is not None and type(messages) is MessageBlock:
        block: Any = messages
        return int(block.last_offset), int(block.bisect(until))
    last = messages[-1][0]
    if last < until:
        return last, len(messages)
    return last, sum(1 for m in messages if m[0] < until)


class RangeReader:
    """Reads offset ranges of any partitions; keeps one connection per broker until :meth:`close`.

    ``brokers`` are bootstrap addresses for metadata requests; ``refresh_brokers``
    (optional) is called for fresh ones when none of them answers. The default
    ``retry_window_s`` is ``socket.timeout.ms + 2 * zookeeper.session.timeout.ms``:
    long enough for a dead leader's session to expire and a new leader to be
    elected. ``fail_on_data_loss`` is described in the module docstring.
    ``connect``, ``sleep`` and ``clock`` are injectable for tests.
    """

    def __init__(
        self,
        config: ConsumerConfig,
        brokers: Sequence[BrokerAddress],
        *,
        refresh_brokers: Optional[Callable[[], Sequence[BrokerAddress]]] = None,
        retry_window_s: Optional[float] = None,
        fail_on_data_loss: bool = True,
        connect: Optional[Callable[[str, int], BrokerConnection]] = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._brokers: List[BrokerAddress] = [tuple(b) for b in brokers]  # type: ignore[misc]
        self._refresh_brokers = refresh_brokers
        if retry_window_s is None:
            retry_window_s = (config.socket_timeout_ms + 2 * config.zookeeper_session_timeout_ms) / 1000.0
        self._window = retry_window_s
        self._fail_on_data_loss = fail_on_data_loss
        self._connect = connect or self._default_connect
        self._sleep = sleep
        self._clock = clock
        self._connections: Dict[BrokerAddress, BrokerConnection] = {}
        self._leaders: Dict[Tuple[str, int], BrokerAddress] = {}
        self._ssl = None if connect is not None else broker_ssl_context(config)
        self._authenticate = None if connect is not None else broker_authenticator(config)

    def __enter__(self) -> "RangeReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every broker connection (idempotent)."""
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    # ------------------------------------------------------------------ reading

    def messages(self, offset_range: OffsetRange) -> Iterator[RawMessage]:
        """The range's messages one by one; see :meth:`read`."""
        for chunk in self.read(offset_range):
            yield from chunk

    def read(self, offset_range: OffsetRange) -> Iterator[Sequence[RawMessage]]:
        """The range's messages in chunks (one per fetch), in offset order; see the module docstring."""
        for messages, stop in self._chunks(offset_range):
            yield messages if stop == len(messages) else [messages[i] for i in range(stop)]

    def batches(self, offset_range: OffsetRange, schema: Any = None) -> Iterator[Any]:
        """The range's messages as Arrow record batches (one per non-empty chunk), in offset order.

        Columns ``topic, partition, offset, key, value``; ``schema`` is
        :data:`zkconsumer.consumer.arrow.SCHEMA` (the default) or
        :data:`zkconsumer.consumer.arrow.NOT_NULL_SCHEMA`. Same messages, errors and
        retries as :meth:`read`. Needs pyarrow.
        """
        from zkconsumer.consumer import arrow

        schema = arrow.SCHEMA if schema is None else schema
        r = offset_range
        for messages, stop in self._chunks(r):
            yield arrow.record_batch(r.topic, r.partition, messages, 0, stop, schema)

    def _chunks(self, offset_range: OffsetRange) -> Iterator[Tuple[Sequence[RawMessage], int]]:
        """``(messages, stop)`` per fetch with a message in the range: ``messages[:stop]`` are its messages.

        ``messages`` is the decoder's sequence as is (offsets ascending, all at or
        after the fetch position); ``stop >= 1`` cuts it at ``until_offset``.
        """
        r = offset_range
        tp = (r.topic, r.partition)
        pos = r.from_offset
        deadline = self._clock() + self._window
        while pos < r.until_offset:
            try:
                connection = self._leader(tp)
                part = self._fetch(connection, r, pos)
                if part.error_code == OffsetOutOfRangeError.error_code:
                    gone = self._unavailable(connection, r, pos)
                    resume = None if self._fail_on_data_loss else _resume_after_loss(gone)
                    if resume is None:
                        raise gone
                    self._warn_skipped(gone, resume)
                    pos = resume
                    deadline = self._clock() + self._window
                    continue
                if part.error_code:
                    raise error_for_code(part.error_code, f"fetching offset {pos}", r.topic, r.partition)
            except ZkConsumerError as exc:
                if not exc.retriable:
                    raise
                self._leaders.pop(tp, None)
                self._backoff(deadline, r, pos, str(exc))
                continue
            decoded = decode_message_set(part.message_set, r.topic, r.partition, pos)
            messages = decoded.messages
            if messages:
                last, stop = _cut(messages, r.until_offset)
                pos = max(decoded.next_offset, last + 1)
                deadline = self._clock() + self._window
                if stop:
                    yield messages, stop
            elif decoded.too_large:
                raise MessageSizeTooLargeError(r.topic, r.partition, pos, self._config.fetch_message_max_bytes)
            elif decoded.valid_bytes and decoded.next_offset > pos:
                pos = decoded.next_offset  # only entries before pos (a compacted wrapper): skip past them
            elif 0 <= part.high_watermark <= pos:
                # The leader's log ends before the range does. Right after a leader change the
                # high watermark can lag for a moment; past the retry window the data is gone.
                if self._clock() >= deadline:
                    gone = OffsetRangeUnavailableError(r, pos, None, part.high_watermark,
                                                       f"the leader's log ends at {part.high_watermark}")
                    if self._fail_on_data_loss:
                        raise gone
                    self._warn_skipped(gone, r.until_offset)
                    return
                self._sleep(self._config.refresh_leader_backoff_ms / 1000.0)
            else:
                self._backoff(deadline, r, pos, "an empty fetch response below the high watermark")

    def _warn_skipped(self, gone: OffsetRangeUnavailableError, resume: int) -> None:
        r = gone.offset_range
        what = f"going on from offset {resume}" if resume < r.until_offset else "ending the range there"
        log.warning("possible data loss: %s; failOnDataLoss=false: skipping offsets [%d, %d) of %s/%d, %s",
                    gone, gone.offset, resume, r.topic, r.partition, what)

    def _backoff(self, deadline: float, r: OffsetRange, pos: int, why: str) -> None:
        if self._clock() >= deadline:
            raise BrokerUnavailableError(
                f"reading {r.topic}/{r.partition} at offset {pos} (range [{r.from_offset}, {r.until_offset})): "
                f"no progress for {self._window:.0f}s; last problem: {why}"
            )
        log.debug("%s/%d at %d: %s; retrying", r.topic, r.partition, pos, why)
        self._sleep(self._config.refresh_leader_backoff_ms / 1000.0)

    def _fetch(self, connection: BrokerConnection, r: OffsetRange, pos: int) -> FetchPartitionResponse:
        cfg = self._config
        request = [FetchPartition(r.topic, r.partition, pos, cfg.fetch_message_max_bytes)]
        response = connection.fetch(request, cfg.fetch_wait_max_ms, 1)
        for part in response.partitions:
            if part.topic == r.topic and part.partition == r.partition:
                return part
        raise ProtocolDecodeError(f"fetch response from {connection.address} has no entry for {r.topic}-{r.partition}")

    def _unavailable(self, connection: BrokerConnection, r: OffsetRange, pos: int) -> OffsetRangeUnavailableError:
        bounds: List[Optional[int]] = []
        for time_ in (EARLIEST_TIME, LATEST_TIME):
            try:
                bounds.append(connection.list_offsets(r.topic, r.partition, time_))
            except ZkConsumerError:
                bounds.append(None)
        start, end = bounds
        return OffsetRangeUnavailableError(r, pos, start, end, _explain(pos, start, end))

    # ------------------------------------------------------------------ leaders

    def _default_connect(self, host: str, port: int) -> BrokerConnection:
        cfg = self._config
        return BrokerConnection(host, port, cfg.client_id, cfg.socket_timeout_ms, cfg.socket_receive_buffer_bytes,
                                self._ssl, authenticate=self._authenticate)

    def _connection(self, address: BrokerAddress) -> BrokerConnection:
        connection = self._connections.get(address)
        if connection is None:
            connection = self._connections[address] = self._connect(*address)
        return connection

    def _leader(self, tp: Tuple[str, int]) -> BrokerConnection:
        address = self._leaders.get(tp)
        if address is None:
            address = self._leaders[tp] = self._find_leader(tp)
        return self._connection(address)

    def _find_leader(self, tp: Tuple[str, int]) -> BrokerAddress:
        topic, partition = tp
        metadata = self._metadata(topic)
        for tm in metadata.topics:
            if tm.topic != topic:
                continue
            for pm in tm.partitions:
                if pm.partition == partition:
                    leader = metadata.broker(pm.leader) if pm.leader >= 0 else None
                    if leader is None:
                        raise LeaderNotAvailableError("no live leader in metadata", topic, partition)
                    return (leader.host, leader.port)
            if tm.error_code:
                raise error_for_code(tm.error_code, "metadata", topic)
        raise UnknownTopicOrPartitionError("not in the metadata response", topic, partition)

    def _metadata(self, topic: str) -> MetadataResponse:
        """Metadata for ``topic`` from the first broker that answers; brokers re-read once if none does."""
        failures: List[str] = []
        for refresh in (False, True):
            if refresh:
                if self._refresh_brokers is None:
                    break
                self._brokers = [tuple(b) for b in self._refresh_brokers()]  # type: ignore[misc]
            for address in random.sample(self._brokers, len(self._brokers)):
                try:
                    return self._connection(address).metadata([topic])
                except ZkConsumerError as exc:
                    failures.append(f"{address[0]}:{address[1]}: {exc}")
        raise BrokerUnavailableError(
            f"no broker answered a metadata request for {topic!r}: {'; '.join(failures) or 'no brokers known'}")


def read_offset_range(
    props: Dict[str, str],
    brokers: Sequence[BrokerAddress],
    offset_range: OffsetRange,
    refresh_brokers: Optional[Callable[[], Sequence[BrokerAddress]]] = None,
    fail_on_data_loss: bool = True,
) -> Iterator[Sequence[RawMessage]]:
    """Chunks of one range, with a reader made from plain ``props`` and closed at the end (executor entry point)."""
    with RangeReader(consumer_config(props), brokers, refresh_brokers=refresh_brokers,
                     fail_on_data_loss=fail_on_data_loss) as reader:
        yield from reader.read(offset_range)


def read_offset_range_batches(
    props: Dict[str, str],
    brokers: Sequence[BrokerAddress],
    offset_range: OffsetRange,
    refresh_brokers: Optional[Callable[[], Sequence[BrokerAddress]]] = None,
    fail_on_data_loss: bool = True,
    schema: Any = None,
) -> Iterator[Any]:
    """Arrow record batches of one range (:meth:`RangeReader.batches`), with a reader closed at the end."""
    with RangeReader(consumer_config(props), brokers, refresh_brokers=refresh_brokers,
                     fail_on_data_loss=fail_on_data_loss) as reader:
        yield from reader.batches(offset_range, schema)
