"""Kafka's wire protocol for the three requests every consumer sends: Metadata, ListOffsets, Fetch.

Framing lives here (the broker error table in :mod:`zkconsumer.wire.broker_errors`,
re-exported); sockets are :mod:`zkconsumer.wire.connection`'s job, the
consumer-group requests are :mod:`zkconsumer.wire.group_protocol`'s, and message sets (the ``records`` of a
fetch response) are decoded by :mod:`zkconsumer.wire.messageset`.

A request on the wire is ``size:int32 api_key:int16 api_version:int16
correlation_id:int32 client_id:string body...``, a response ``size:int32
correlation_id:int32 body...`` (big-endian; a ``string`` is an int16 length,
``-1`` = null, then UTF-8; an array an int32 count then its elements).

Who writes the bytes:

* **kafka-python's** ``kafka.protocol`` classes (generated from Kafka's own
  JSON message schemas) encode every request and decode every response, except
  Fetch: :class:`KafkaPythonRequest` adapts one of them to this module's typed
  :class:`Request`, and turns the untyped message it decodes into the frozen
  dataclasses below. Metadata and ListOffsets here, the group requests in
  :mod:`~zkconsumer.wire.group_protocol`.
* **by hand**: the Fetch request and response, the hot path (a fetcher sends one per message
  at low rates). With the C extension both are written/read in C
  (``_speedups_fetch.c``), byte for byte as the Python code here does, which remains the
  reference and the path without the extension. The response is
  split into zero-copy ``memoryview`` slices of the one receive buffer, which
  :func:`~zkconsumer.wire.messageset.decode_message_set` (with its C
  accelerator) decodes. ``scripts/bench-decode --fetch-response`` measures
  the alternative, kafka-python's ``FetchResponse.decode`` + ``MemoryRecords``
  (figures in the comment above :class:`FetchRequest`).

===========  =======  =======  ===================================================
request      api_key  version  purpose
===========  =======  =======  ===================================================
Fetch        1        0        read message sets from partition leaders
ListOffsets  2        0        earliest (``-2``) / latest (``-1``) offset of a partition
Metadata     3        0        brokers, and leader/replicas/isr of each partition
===========  =======  =======  ===================================================

Version 0 of each, which Kafka 0.8.2 to 3.x brokers accept. Broker error codes
are Kafka's ``ErrorMapping``; :func:`error_for_code` turns a code into a
:class:`~zkconsumer.errors.BrokerError` subclass that carries ``error_code``
and ``retriable``. A response that does not parse as the request's response
type, or is longer or shorter than it, raises :class:`ProtocolDecodeError`.

Worked example (a metadata round trip, without a socket)::

    >>> frame = encode_request(MetadataRequest(["events"]), correlation_id=7, client_id="c1")
    >>> frame[:4] == (len(frame) - 4).to_bytes(4, "big")
    True
    >>> frame[4:].hex()   # api key 3, version 0, correlation id 7, "c1", ["events"]
    '0003000000000007000263310000000100066576656e7473'
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Dict, Generic, List, NamedTuple, Optional, Sequence, Tuple, TypeVar

from kafka.protocol.consumer import ListOffsetsRequest as _KListOffsetsRequest
from kafka.protocol.consumer import ListOffsetsResponse as _KListOffsetsResponse
from kafka.protocol.metadata import MetadataRequest as _KMetadataRequest
from kafka.protocol.metadata import MetadataResponse as _KMetadataResponse

from .broker_errors import (
    ProtocolDecodeError,
    raise_for_code,
)
from .messageset import speedups

__all__ = [
    "API_FETCH", "API_LIST_OFFSETS", "API_METADATA", "CONSUMER_REPLICA_ID",
    "EARLIEST_TIME", "LATEST_TIME", "NO_LEADER",
    "Request", "KafkaPythonRequest", "decode_exact", "encode_request", "decode_response_header",
    "MetadataRequest", "MetadataResponse", "BrokerMetadata", "TopicMetadata", "PartitionMetadata",
    "FetchRequest", "FetchResponse", "FetchPartition", "FetchPartitionResponse",
    "ListOffsetsRequest", "ListOffsetsResponse", "ListOffsetsPartitionResponse",
]

API_FETCH = 1
API_LIST_OFFSETS = 2
API_METADATA = 3

#: ``replica_id`` of an ordinary consumer (brokers fetching as followers send their id).
CONSUMER_REPLICA_ID = -1
#: ListOffsets ``time`` asking for the log start (``auto.offset.reset=smallest``).
EARLIEST_TIME = -2
#: ListOffsets ``time`` asking for the log end (``auto.offset.reset=largest``).
LATEST_TIME = -1
#: The ``leader`` of a partition that has none right now.
NO_LEADER = -1

# The hand-written Fetch framing (see "who writes the bytes" above).
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_HEADER = struct.Struct(">ihhi")       # size, api_key, api_version, correlation_id
_RESPONSE_HEADER = struct.Struct(">i")  # correlation_id (after the size prefix)
_FETCH_HEAD = struct.Struct(">iii")     # replica_id, max_wait_ms, min_bytes
_FETCH_PARTITION = struct.Struct(">iqi")  # partition, fetch_offset, max_bytes
_FETCH_PARTITION_HEAD = struct.Struct(">ihqi")  # partition, error, high watermark, set size


# --------------------------------------------------------------------------- framing

R = TypeVar("R")


class Request(Generic[R]):
    """A request: knows its api key/version, encodes its body and decodes its response."""

    API_KEY: ClassVar[int]
    API_VERSION: ClassVar[int] = 0

    def encode_body(self) -> bytes:  # pragma: no cover - abstract
        raise NotImplementedError

    def encode_frame(self, correlation_id: int, client_id: Optional[str]) -> bytes:
        """The complete frame, size prefix and request header included."""
        rest = (_string(client_id) if client_id is None else _cached_string(client_id)) + self.encode_body()
        return _HEADER.pack(8 + len(rest), self.API_KEY, self.API_VERSION, correlation_id) + rest

    def decode_response(self, body: memoryview) -> R:  # pragma: no cover - abstract
        """Decode a response body (after the correlation id)."""
        raise NotImplementedError


def encode_request(request: Request[Any], correlation_id: int, client_id: Optional[str]) -> bytes:
    """The complete frame for ``request``, size prefix included."""
    return request.encode_frame(correlation_id, client_id)


def decode_response_header(frame: memoryview) -> Tuple[int, memoryview]:
    """Split a response frame (without its size prefix) into ``(correlation_id, body)``."""
    if len(frame) < 4:
        raise ProtocolDecodeError(f"response of {len(frame)} bytes has no correlation id")
    correlation_id: int = _RESPONSE_HEADER.unpack_from(frame, 0)[0]
    return correlation_id, frame[4:]


# --------------------------------------------------------------------------- the kafka-python bridge

#: What kafka-python's generated decoders raise on bytes that are not the message.
_KAFKA_DECODE_ERRORS = (struct.error, ValueError, IndexError, TypeError, OverflowError, AttributeError)


def decode_exact(response_class: Any, version: int, body: memoryview, what: str) -> Any:
    """``response_class.decode(body, version)`` (a ``kafka.protocol`` message), checked to be all of ``body``.

    kafka-python stops reading where the message ends and, inside a ``bytes``
    or ``string`` field, slices without checking the length, so a response cut
    short or followed by stray bytes would decode silently: the message is
    encoded again and must give back ``body`` byte for byte (a few µs for the
    group responses; about twice the decoding time for a large Metadata
    response, which is rare). Raises :class:`ProtocolDecodeError`.
    """
    try:
        message = response_class.decode(body, version=version)
        again = message.encode()
    except _KAFKA_DECODE_ERRORS as exc:
        raise ProtocolDecodeError(f"{what} response does not parse: {exc!r}") from exc
    if again != body:
        problem = "is truncated" if len(again) >= len(body) else f"has {len(body) - len(again)} unexpected trailing bytes"
        raise ProtocolDecodeError(f"{what} response of {len(body)} bytes {problem}")
    return message


class KafkaPythonRequest(Request[R]):
    """A :class:`Request` whose bytes kafka-python's ``kafka.protocol`` classes write and read.

    A subclass names kafka-python's response class (``RESPONSE``), builds the
    kafka-python request message in :meth:`message` and turns the decoded
    response message into its typed result in :meth:`convert`; ``API_KEY``
    and ``API_VERSION`` must agree with the message's (checked by the tests).
    """

    RESPONSE: ClassVar[Any]

    def message(self) -> Any:  # pragma: no cover - abstract
        """The kafka-python request message, at :attr:`API_VERSION`."""
        raise NotImplementedError

    def convert(self, response: Any) -> R:  # pragma: no cover - abstract
        """The typed result of a decoded kafka-python response message."""
        raise NotImplementedError

    def encode_body(self) -> bytes:
        return bytes(self.message().encode())

    def encode_frame(self, correlation_id: int, client_id: Optional[str]) -> bytes:
        message = self.message()
        message.with_header(correlation_id=correlation_id, client_id=client_id)
        return bytes(message.encode(header=True, framed=True))

    def decode_response(self, body: memoryview) -> R:
        name = type(self).__name__.replace("Request", "")
        return self.convert(decode_exact(self.RESPONSE, self.API_VERSION, body, name))


def field_text(value: Any) -> str:
    """A decoded ``string`` field; a null string reads as ``""``."""
    return "" if value is None else str(value)


def field_bytes(value: Any) -> bytes:
    """A decoded ``bytes`` field; null reads as ``b""``."""
    return b"" if value is None else bytes(value)


def field_items(values: Any) -> List[Any]:
    """A decoded array of structures; a null array reads as empty."""
    return [] if values is None else list(values)


def _ints(values: Any) -> Tuple[int, ...]:
    """A decoded ``[]int32``/``[]int64`` field; a null array reads as empty."""
    return () if values is None else tuple(int(v) for v in values)


def group_by_topic(items: Sequence[Tuple[str, Any]]) -> List[Tuple[str, List[Any]]]:
    """Per-partition entries grouped by topic, keeping first-seen topic order (as arrays of topics are sent)."""
    grouped: Dict[str, List[Any]] = {}
    for topic, entry in items:
        grouped.setdefault(topic, []).append(entry)
    return list(grouped.items())


# --------------------------------------------------------------------------- Metadata

@dataclass(frozen=True)
class BrokerMetadata:
    """A live broker as a Metadata response lists it."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class PartitionMetadata:
    """One partition in a Metadata response; ``leader`` is :data:`NO_LEADER` (-1) if none.

    ``error_code`` 9 (REPLICA_NOT_AVAILABLE) is reported when some non-leader
    replica is down; a consumer may ignore it (Kafka's does).
    """

    partition: int
    error_code: int
    leader: int
    replicas: Tuple[int, ...]
    isr: Tuple[int, ...]


@dataclass(frozen=True)
class TopicMetadata:
    """One topic in a Metadata response; ``error_code`` non-zero means ``partitions`` may be empty."""

    topic: str
    error_code: int
    partitions: Tuple[PartitionMetadata, ...]


@dataclass(frozen=True)
class MetadataResponse:
    """Metadata v0 response: the live brokers and the requested topics."""

    brokers: Tuple[BrokerMetadata, ...]
    topics: Tuple[TopicMetadata, ...]

    def broker(self, node_id: int) -> Optional[BrokerMetadata]:
        """The broker with ``node_id``, or ``None`` (a leader missing from the broker list is unusable)."""
        for b in self.brokers:
            if b.node_id == node_id:
                return b
        return None


@dataclass(frozen=True)
class MetadataRequest(KafkaPythonRequest[MetadataResponse]):
    """Metadata v0 for ``topics`` (an empty list asks for every topic).

    A v0 request for a topic that does not exist makes a broker with
    ``auto.create.topics.enable`` create it.
    """

    topics: Sequence[str]

    API_KEY: ClassVar[int] = API_METADATA
    RESPONSE: ClassVar[Any] = _KMetadataResponse

    def message(self) -> Any:
        topic = _KMetadataRequest.MetadataRequestTopic
        return _KMetadataRequest(topics=[topic(name=t) for t in self.topics], version=self.API_VERSION)

    def convert(self, response: Any) -> MetadataResponse:
        brokers = tuple(BrokerMetadata(int(b.node_id), field_text(b.host), int(b.port)) for b in field_items(response.brokers))
        topics = tuple(
            TopicMetadata(field_text(t.name), int(t.error_code), tuple(
                PartitionMetadata(int(p.partition_index), int(p.error_code), int(p.leader_id),
                                  _ints(p.replica_nodes), _ints(p.isr_nodes))
                for p in field_items(t.partitions)))
            for t in field_items(response.topics))
        return MetadataResponse(brokers, topics)


# --------------------------------------------------------------------------- ListOffsets

@dataclass(frozen=True)
class ListOffsetsPartitionResponse:
    """One partition of a ListOffsets v0 response: offsets newest first."""

    topic: str
    partition: int
    error_code: int
    offsets: Tuple[int, ...]


@dataclass(frozen=True)
class ListOffsetsResponse:
    """ListOffsets (Kafka's OffsetRequest) v0 response."""

    partitions: Tuple[ListOffsetsPartitionResponse, ...]

    def offset(self, topic: str, partition: int) -> int:
        """The single offset asked for, raising the partition's broker error if any."""
        for p in self.partitions:
            if p.topic == topic and p.partition == partition:
                raise_for_code(p.error_code, "list offsets", topic, partition)
                if not p.offsets:
                    raise ProtocolDecodeError(f"no offset returned for {topic}-{partition}")
                return p.offsets[0]
        raise ProtocolDecodeError(f"list offsets response has no entry for {topic}-{partition}")


@dataclass(frozen=True)
class ListOffsetsRequest(KafkaPythonRequest[ListOffsetsResponse]):
    """ListOffsets v0: per ``(topic, partition, time)`` at most ``max_num_offsets`` offsets.

    ``time`` is :data:`EARLIEST_TIME` (-2), :data:`LATEST_TIME` (-1) or a
    timestamp in ms (segment granularity).
    """

    partitions: Sequence[Tuple[str, int, int]]
    max_num_offsets: int = 1

    API_KEY: ClassVar[int] = API_LIST_OFFSETS
    RESPONSE: ClassVar[Any] = _KListOffsetsResponse

    def message(self) -> Any:
        topic, partition = _KListOffsetsRequest.ListOffsetsTopic, _KListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
        entries = [(t, partition(partition_index=p, timestamp=time, max_num_offsets=self.max_num_offsets))
                   for t, p, time in self.partitions]
        return _KListOffsetsRequest(replica_id=CONSUMER_REPLICA_ID, version=self.API_VERSION,
                                    topics=[topic(name=t, partitions=ps) for t, ps in group_by_topic(entries)])

    def convert(self, response: Any) -> ListOffsetsResponse:
        return ListOffsetsResponse(tuple(
            ListOffsetsPartitionResponse(field_text(t.name), int(p.partition_index), int(p.error_code),
                                         _ints(p.old_style_offsets))
            for t in field_items(response.topics) for p in field_items(t.partitions)))


# --------------------------------------------------------------------------- Fetch (hand-written)

# The Fetch request and response stay hand-written: a fetch response is the
# consumer's bulk data, and kafka-python's generic decoder copies every
# partition's records into a new ``bytes`` before ``MemoryRecords`` walks them
# again, where this splits the one receive buffer into zero-copy views for the
# (C-accelerated) message-set decoder. ``scripts/bench-decode --fetch-response``
# (1 MiB Fetch v0 response body, 8 partitions of 100-byte values, magic 0, CRC
# checked both ways; kafka-python 3.0.12, 2 shared cores):
#   uncompressed: zkconsumer 4,595,169 msgs/s, kafka-python 52,570 msgs/s (87x)
#   snappy:       zkconsumer   986,799 msgs/s, kafka-python 56,467 msgs/s (17.5x)
#   encoding one request frame: zkconsumer 19 µs, kafka-python 291 µs
# The other requests are a few per second at most, where kafka-python's cost
# (tens of µs each) does not matter.

def _string(value: Optional[str]) -> bytes:
    """A protocol ``string``: int16 length, then UTF-8 (``None`` -> length -1)."""
    if value is None:
        return _INT16.pack(-1)
    raw = value.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ValueError(f"string too long for the Kafka protocol ({len(raw)} bytes)")
    return _INT16.pack(len(raw)) + raw


#: Encoded client ids and fetch requests' topic names (a fetcher sends the same few over and over); bounded.
_CACHED_STRINGS: Dict[str, bytes] = {}


def _cached_string(value: str) -> bytes:
    """:func:`_string` of ``value`` (not ``None``), cached (at most 1024 strings; the cache starts over when full)."""
    encoded = _CACHED_STRINGS.get(value)
    if encoded is None:
        if len(_CACHED_STRINGS) >= 1024:
            _CACHED_STRINGS.clear()
        encoded = _CACHED_STRINGS[value] = _string(value)
    return encoded


class _Reader:
    """Sequential big-endian reads from a fetch response body; raises ProtocolDecodeError when short."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: memoryview, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def unpack(self, fmt: struct.Struct) -> Tuple[Any, ...]:
        try:
            values = fmt.unpack_from(self.buf, self.pos)
        except struct.error as exc:
            raise ProtocolDecodeError(f"response truncated at byte {self.pos}") from exc
        self.pos += fmt.size
        return values

    def count(self) -> int:
        """An array length; ``-1`` (null array) reads as 0."""
        n: int = self.unpack(_INT32)[0]
        if n < -1:
            raise ProtocolDecodeError(f"negative array length {n} at byte {self.pos - 4}")
        return max(n, 0)

    def string(self) -> Optional[str]:
        n: int = self.unpack(_INT16)[0]
        if n < 0:
            return None
        return self.bytes_view(n).tobytes().decode("utf-8")

    def bytes_view(self, n: int) -> memoryview:
        """The next ``n`` bytes as a zero-copy view."""
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise ProtocolDecodeError(f"response truncated: {n} bytes wanted at byte {self.pos}")
        view = self.buf[self.pos:end]
        self.pos = end
        return view


@dataclass(frozen=True)
class FetchPartition:
    """One partition to fetch: from ``offset``, at most ``max_bytes`` of message set."""

    topic: str
    partition: int
    offset: int
    max_bytes: int


class FetchPartitionResponse(NamedTuple):
    """One partition of a Fetch response (a named tuple: a response builds one per partition, and a
    tuple is built in under half the time of a frozen dataclass).

    ``message_set`` is a zero-copy view into the response buffer; its last
    message may be cut short at ``max_bytes`` (decode with
    :func:`zkconsumer.wire.messageset.decode_message_set`). ``high_watermark`` is the
    offset after the last committed message, ``-1`` when an error is reported.
    """

    topic: str
    partition: int
    error_code: int
    high_watermark: int
    message_set: memoryview


@dataclass(frozen=True)
class FetchResponse:
    """Fetch v0 response: one entry per partition, in the broker's order."""

    partitions: Tuple[FetchPartitionResponse, ...]


@dataclass(frozen=True)
class FetchRequest(Request[FetchResponse]):
    """Fetch v0 as an ordinary consumer (``replica_id`` -1).

    The broker answers once ``min_bytes`` are available or ``max_wait_ms`` passed.
    """

    max_wait_ms: int
    min_bytes: int
    partitions: Sequence[FetchPartition]

    API_KEY: ClassVar[int] = API_FETCH

    def encode_frame(self, correlation_id: int, client_id: Optional[str]) -> bytes:
        """The frame :meth:`Request.encode_frame` writes; with the C extension written in C, byte for byte
        (a request it does not take is written here, raising this encoder's error if any)."""
        frame = native_fetch_frame(correlation_id, client_id, self.max_wait_ms, self.min_bytes, self.partitions)
        return frame if frame is not None else super().encode_frame(correlation_id, client_id)

    def encode_body(self) -> bytes:
        pack = _FETCH_PARTITION.pack
        groups = group_by_topic([(p.topic, pack(p.partition, p.offset, p.max_bytes)) for p in self.partitions])
        parts = [_FETCH_HEAD.pack(CONSUMER_REPLICA_ID, self.max_wait_ms, self.min_bytes), _INT32.pack(len(groups))]
        for topic, entries in groups:
            parts += [_cached_string(topic), _INT32.pack(len(entries)), *entries]
        return b"".join(parts)

    def decode_response(self, body: memoryview) -> FetchResponse:
        """The response's partitions; :class:`ProtocolDecodeError` (or ``UnicodeDecodeError`` for a topic
        name that is not UTF-8) for a body that is not a Fetch v0 response. Bytes after it are ignored.

        With the C extension the body is read in C (the same rules); a body it refuses is read
        again here, so the error raised is this decoder's either way.
        """
        if _fetch_response is not None:
            parsed = _fetch_response(body, FetchPartitionResponse)
            if parsed is not None:
                return FetchResponse(tuple(parsed))
        return FetchResponse(tuple(decode_fetch_response_python(body)))


#: The C reader of a Fetch response body (``None`` without the extension, or with a build older than it).
_fetch_response: Optional[Callable[[memoryview, Any], Optional[List[FetchPartitionResponse]]]] = getattr(
    speedups, "fetch_response", None)
#: The C writer of a Fetch request frame (likewise).
_fetch_request: Optional[Callable[..., Optional[bytes]]] = getattr(speedups, "fetch_request", None)


def native_fetch_frame(correlation_id: int, client_id: Optional[str], max_wait_ms: int, min_bytes: int,
                       partitions: Any, max_bytes: Optional[int] = None) -> Optional[bytes]:
    """A Fetch v0 frame written by the C extension, byte for byte :meth:`FetchRequest.encode_frame`'s; ``None``
    without the extension, or for a request it does not take (the caller then writes it in Python, which
    raises the encoder's error if any). ``partitions``: a sequence of :class:`FetchPartition`, or, with
    ``max_bytes``, a fetcher's ``(topic, partition) -> (state, offset)`` dict, each asked with ``max_bytes``."""
    if _fetch_request is None:
        return None
    if max_bytes is None:
        return _fetch_request(correlation_id, client_id, max_wait_ms, min_bytes, partitions)
    return _fetch_request(correlation_id, client_id, max_wait_ms, min_bytes, partitions, max_bytes)


def decode_fetch_response_python(body: memoryview) -> List[FetchPartitionResponse]:
    """The pure-Python reader of :meth:`FetchRequest.decode_response` (the reference the C one follows)."""
    # The per-partition loop reads the buffer directly (one bounds check, one unpack, one slice):
    # a fetcher thread decodes a response per message at low rates (issue 44).
    r = _Reader(body)
    out: List[FetchPartitionResponse] = []
    end_of_body = len(body)
    unpack_head, head_size = _FETCH_PARTITION_HEAD.unpack_from, _FETCH_PARTITION_HEAD.size
    for _ in range(r.count()):
        topic = r.string() or ""
        count = r.count()
        pos = r.pos
        for _ in range(count):
            start = pos + head_size
            if start > end_of_body:
                raise ProtocolDecodeError(f"response truncated at byte {pos}")
            partition, error, hw, size = unpack_head(body, pos)
            pos = start + size
            if size < 0 or pos > end_of_body:
                raise ProtocolDecodeError(f"response truncated: {size} bytes wanted at byte {start}")
            out.append(FetchPartitionResponse(topic, partition, error, hw, body[start:pos]))
        r.pos = pos
    return out
