"""Kafka's binary wire protocol, version 0, for the three requests a consumer sends.

Only framing lives here: turning request objects into bytes and response bytes
into objects. Sockets are :mod:`zkconsumer.wire.connection`'s job; message sets (the
``records`` of a fetch response) are decoded by :mod:`zkconsumer.wire.messageset`.

Every integer is big-endian. A request on the wire is::

    size:int32  api_key:int16  api_version:int16  correlation_id:int32
    client_id:string  body...

and a response is ``size:int32 correlation_id:int32 body...``. A ``string`` is an
int16 length (``-1`` = null) then UTF-8 bytes; ``bytes`` has an int32 length; an
array is an int32 count then its elements.

Requests implemented (all version 0, which Kafka 0.8.2 to 2.x brokers accept):

===========  =======  ===================================================
request      api_key  purpose
===========  =======  ===================================================
Fetch        1        read message sets from partition leaders
ListOffsets  2        earliest (``-2``) / latest (``-1``) offset of a partition
Metadata     3        brokers, and leader/replicas/isr of each partition
===========  =======  ===================================================

Broker error codes are Kafka's ``ErrorMapping``; :func:`error_for_code` turns a
code into a :class:`~zkconsumer.errors.BrokerError` subclass that carries
``error_code`` and ``retriable``.

Worked example (a metadata round trip, without a socket)::

    >>> req = MetadataRequest(["events"])
    >>> frame = encode_request(req, correlation_id=7, client_id="c1")
    >>> frame[:4] == (len(frame) - 4).to_bytes(4, "big")
    True
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar, Dict, Generic, List, Optional, Sequence, Tuple, Type, TypeVar

from ..errors import BrokerError

__all__ = [
    "API_FETCH", "API_LIST_OFFSETS", "API_METADATA", "CONSUMER_REPLICA_ID",
    "EARLIEST_TIME", "LATEST_TIME", "NO_LEADER", "ERROR_NAMES",
    "KafkaProtocolError", "UnknownServerError", "OffsetOutOfRangeError", "InvalidMessageError",
    "UnknownTopicOrPartitionError", "InvalidFetchSizeError", "LeaderNotAvailableError",
    "NotLeaderForPartitionError", "RequestTimedOutError", "BrokerNotAvailableError",
    "ReplicaNotAvailableError", "BrokerMessageTooLargeError", "error_for_code", "raise_for_code",
    "ProtocolDecodeError", "Request", "encode_request", "decode_response_header",
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

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_HEADER = struct.Struct(">ihhi")       # size, api_key, api_version, correlation_id
_RESPONSE_HEADER = struct.Struct(">i")  # correlation_id (after the size prefix)
_FETCH_HEAD = struct.Struct(">iii")     # replica_id, max_wait_ms, min_bytes
_FETCH_PARTITION = struct.Struct(">iqi")  # partition, fetch_offset, max_bytes
_FETCH_PARTITION_HEAD = struct.Struct(">ihqi")  # partition, error, high watermark, set size
_OFFSETS_PARTITION = struct.Struct(">iqi")  # partition, time, max_num_offsets
_PARTITION_META_HEAD = struct.Struct(">hii")  # error, partition, leader
_OFFSETS_RESPONSE_HEAD = struct.Struct(">ih")  # partition, error


# --------------------------------------------------------------------------- errors

#: Kafka's ErrorMapping / ``Errors`` names by code, for messages and logs.
ERROR_NAMES: Dict[int, str] = {
    -1: "UNKNOWN", 0: "NONE", 1: "OFFSET_OUT_OF_RANGE", 2: "CORRUPT_MESSAGE",
    3: "UNKNOWN_TOPIC_OR_PARTITION", 4: "INVALID_FETCH_SIZE", 5: "LEADER_NOT_AVAILABLE",
    6: "NOT_LEADER_FOR_PARTITION", 7: "REQUEST_TIMED_OUT", 8: "BROKER_NOT_AVAILABLE",
    9: "REPLICA_NOT_AVAILABLE", 10: "MESSAGE_TOO_LARGE", 11: "STALE_CONTROLLER_EPOCH",
    12: "OFFSET_METADATA_TOO_LARGE", 13: "STALE_LEADER_EPOCH", 14: "OFFSETS_LOAD_IN_PROGRESS",
    15: "CONSUMER_COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR_FOR_CONSUMER",
    17: "INVALID_TOPIC_EXCEPTION", 18: "RECORD_LIST_TOO_LARGE", 19: "NOT_ENOUGH_REPLICAS",
    20: "NOT_ENOUGH_REPLICAS_AFTER_APPEND", 21: "INVALID_REQUIRED_ACKS", 22: "ILLEGAL_GENERATION",
    23: "INCONSISTENT_GROUP_PROTOCOL", 24: "INVALID_GROUP_ID", 25: "UNKNOWN_MEMBER_ID",
    26: "INVALID_SESSION_TIMEOUT", 27: "REBALANCE_IN_PROGRESS", 28: "INVALID_COMMIT_OFFSET_SIZE",
    29: "TOPIC_AUTHORIZATION_FAILED", 30: "GROUP_AUTHORIZATION_FAILED",
    31: "CLUSTER_AUTHORIZATION_FAILED",
}

#: Codes after which the same request may succeed later (a leader moved, a
#: replica caught up, a coordinator finished loading). Matches Kafka's
#: ``RetriableException`` subclasses.
_RETRIABLE_CODES = frozenset({3, 5, 6, 7, 8, 9, 14, 15, 16, 19, 20, 27})


class KafkaProtocolError(BrokerError):
    """A broker answered a request with a non-zero error code.

    ``error_code`` is the code, ``error_name`` Kafka's name for it, ``retriable``
    whether the same request may succeed later. ``topic``/``partition`` name the
    partition the code was reported for, when it was per partition.
    """

    error_code: Optional[int] = -1
    error_name: str = "UNKNOWN"

    def __init__(self, detail: str = "", topic: Optional[str] = None, partition: Optional[int] = None) -> None:
        self.topic = topic
        self.partition = partition
        where = "" if topic is None else f" for {topic}" + ("" if partition is None else f"-{partition}")
        text = f"{self.error_name} (error code {self.error_code}){where}"
        super().__init__(f"{text}: {detail}" if detail else text)


class UnknownServerError(KafkaProtocolError):
    """UNKNOWN (-1), or a code this module does not know; ``error_code`` is the actual code."""

    def __init__(self, detail: str = "", topic: Optional[str] = None, partition: Optional[int] = None,
                 code: int = -1) -> None:
        self.error_code = code
        self.error_name = ERROR_NAMES.get(code, "UNKNOWN")
        super().__init__(detail, topic, partition)


class OffsetOutOfRangeError(KafkaProtocolError):
    """OFFSET_OUT_OF_RANGE (1): the fetch offset is before the log start or after its end."""

    error_code, error_name = 1, "OFFSET_OUT_OF_RANGE"


class InvalidMessageError(KafkaProtocolError):
    """CORRUPT_MESSAGE (2): the broker found a message failing its CRC (Kafka's InvalidMessageException)."""

    error_code, error_name = 2, "CORRUPT_MESSAGE"


class UnknownTopicOrPartitionError(KafkaProtocolError):
    """UNKNOWN_TOPIC_OR_PARTITION (3): this broker does not host the partition (yet)."""

    error_code, error_name, retriable = 3, "UNKNOWN_TOPIC_OR_PARTITION", True


class InvalidFetchSizeError(KafkaProtocolError):
    """INVALID_FETCH_SIZE (4)."""

    error_code, error_name = 4, "INVALID_FETCH_SIZE"


class LeaderNotAvailableError(KafkaProtocolError):
    """LEADER_NOT_AVAILABLE (5): an election is in progress."""

    error_code, error_name, retriable = 5, "LEADER_NOT_AVAILABLE", True


class NotLeaderForPartitionError(KafkaProtocolError):
    """NOT_LEADER_FOR_PARTITION (6): the leader moved to another broker."""

    error_code, error_name, retriable = 6, "NOT_LEADER_FOR_PARTITION", True


class RequestTimedOutError(KafkaProtocolError):
    """REQUEST_TIMED_OUT (7)."""

    error_code, error_name, retriable = 7, "REQUEST_TIMED_OUT", True


class BrokerNotAvailableError(KafkaProtocolError):
    """BROKER_NOT_AVAILABLE (8)."""

    error_code, error_name, retriable = 8, "BROKER_NOT_AVAILABLE", True


class ReplicaNotAvailableError(KafkaProtocolError):
    """REPLICA_NOT_AVAILABLE (9): in metadata, some non-leader replica is down (harmless to consumers)."""

    error_code, error_name, retriable = 9, "REPLICA_NOT_AVAILABLE", True


class BrokerMessageTooLargeError(KafkaProtocolError):
    """MESSAGE_TOO_LARGE (10), as the broker reports it (a produce-side error).

    Not to be confused with :class:`zkconsumer.errors.MessageSizeTooLargeError`,
    which the consumer raises when a message exceeds ``fetch.message.max.bytes``.
    """

    error_code, error_name = 10, "MESSAGE_TOO_LARGE"


_ERROR_CLASSES: Dict[int, Type[KafkaProtocolError]] = {
    cls.error_code: cls  # type: ignore[misc]
    for cls in (OffsetOutOfRangeError, InvalidMessageError, UnknownTopicOrPartitionError,
                InvalidFetchSizeError, LeaderNotAvailableError, NotLeaderForPartitionError,
                RequestTimedOutError, BrokerNotAvailableError, ReplicaNotAvailableError,
                BrokerMessageTooLargeError)
}


def _generic_error_class(code: int) -> Type[KafkaProtocolError]:
    """A KafkaProtocolError subclass for a code without a dedicated class above."""
    name = ERROR_NAMES.get(code, f"UNKNOWN_{code}")
    return type(
        "".join(part.capitalize() for part in name.lower().split("_")) + "Error",
        (KafkaProtocolError,),
        {"error_code": code, "error_name": name, "retriable": code in _RETRIABLE_CODES,
         "__doc__": f"{name} ({code}).", "__module__": __name__},
    )


for _code in ERROR_NAMES:
    if _code > 0 and _code not in _ERROR_CLASSES:
        _ERROR_CLASSES[_code] = _generic_error_class(_code)
del _code


def error_for_code(code: int, detail: str = "", topic: Optional[str] = None,
                   partition: Optional[int] = None) -> KafkaProtocolError:
    """The exception for a non-zero broker error ``code``.

    Codes without a class (newer brokers, or ``-1``) give :class:`UnknownServerError`
    with ``error_code`` set to the actual code; ``retriable`` is then ``False``.

    >>> e = error_for_code(6, topic="t", partition=0)
    >>> type(e).__name__, e.error_code, e.retriable
    ('NotLeaderForPartitionError', 6, True)
    """
    if code == 0:
        raise ValueError("error code 0 means no error")
    cls = _ERROR_CLASSES.get(code)
    if cls is None:
        return UnknownServerError(detail, topic, partition, code=code)
    return cls(detail, topic, partition)


def raise_for_code(code: int, detail: str = "", topic: Optional[str] = None,
                   partition: Optional[int] = None) -> None:
    """Raise :func:`error_for_code` unless ``code`` is 0."""
    if code:
        raise error_for_code(code, detail, topic, partition)


class ProtocolDecodeError(BrokerError):
    """A response could not be parsed (truncated, or not the expected layout)."""


# --------------------------------------------------------------------------- encoding helpers

def _string(value: Optional[str]) -> bytes:
    """A protocol ``string``: int16 length, then UTF-8 (``None`` -> length -1)."""
    if value is None:
        return _INT16.pack(-1)
    raw = value.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ValueError(f"string too long for the Kafka protocol ({len(raw)} bytes)")
    return _INT16.pack(len(raw)) + raw


def _group_by_topic(items: Sequence[Tuple[str, bytes]]) -> List[Tuple[str, List[bytes]]]:
    """Group encoded per-partition entries by topic, keeping first-seen topic order."""
    grouped: Dict[str, List[bytes]] = {}
    for topic, entry in items:
        grouped.setdefault(topic, []).append(entry)
    return list(grouped.items())


def _topic_arrays(items: Sequence[Tuple[str, bytes]]) -> bytes:
    """``[topic [partition-entry]]`` from ``(topic, encoded entry)`` pairs."""
    groups = _group_by_topic(items)
    parts = [_INT32.pack(len(groups))]
    for topic, entries in groups:
        parts.append(_string(topic))
        parts.append(_INT32.pack(len(entries)))
        parts.extend(entries)
    return b"".join(parts)


class _Reader:
    """Sequential big-endian reads from a response body; raises ProtocolDecodeError when short."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: memoryview, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def unpack(self, fmt: struct.Struct) -> tuple:
        try:
            values = fmt.unpack_from(self.buf, self.pos)
        except struct.error as exc:
            raise ProtocolDecodeError(f"response truncated at byte {self.pos}") from exc
        self.pos += fmt.size
        return values

    def int16(self) -> int:
        return self.unpack(_INT16)[0]

    def int32(self) -> int:
        return self.unpack(_INT32)[0]

    def int64(self) -> int:
        return self.unpack(_INT64)[0]

    def count(self) -> int:
        """An array length; ``-1`` (null array) reads as 0."""
        n = self.int32()
        if n < -1:
            raise ProtocolDecodeError(f"negative array length {n} at byte {self.pos - 4}")
        return max(n, 0)

    def string(self) -> Optional[str]:
        n = self.int16()
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

    def int32_array(self) -> Tuple[int, ...]:
        n = self.count()
        if n == 0:
            return ()
        fmt = struct.Struct(f">{n}i")
        return self.unpack(fmt)

    def int64_array(self) -> Tuple[int, ...]:
        n = self.count()
        if n == 0:
            return ()
        return self.unpack(struct.Struct(f">{n}q"))


# --------------------------------------------------------------------------- framing

R = TypeVar("R")


class Request(Generic[R]):
    """A request: knows its api key/version, encodes its body and decodes its response."""

    API_KEY: ClassVar[int]
    API_VERSION: ClassVar[int] = 0

    def encode_body(self) -> bytes:  # pragma: no cover - abstract
        raise NotImplementedError

    def decode_response(self, body: memoryview) -> R:  # pragma: no cover - abstract
        """Decode a response body (after the correlation id)."""
        raise NotImplementedError


def encode_request(request: Request, correlation_id: int, client_id: Optional[str]) -> bytes:
    """The complete frame for ``request``, size prefix included."""
    rest = _string(client_id) + request.encode_body()
    return _HEADER.pack(8 + len(rest), request.API_KEY, request.API_VERSION, correlation_id) + rest


def decode_response_header(frame: memoryview) -> Tuple[int, memoryview]:
    """Split a response frame (without its size prefix) into ``(correlation_id, body)``."""
    if len(frame) < 4:
        raise ProtocolDecodeError(f"response of {len(frame)} bytes has no correlation id")
    return _RESPONSE_HEADER.unpack_from(frame, 0)[0], frame[4:]


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
class MetadataRequest(Request[MetadataResponse]):
    """Metadata v0 for ``topics`` (an empty list asks for every topic).

    A v0 request for a topic that does not exist makes a broker with
    ``auto.create.topics.enable`` create it.
    """

    topics: Sequence[str]

    API_KEY: ClassVar[int] = API_METADATA

    def encode_body(self) -> bytes:
        return _INT32.pack(len(self.topics)) + b"".join(_string(t) for t in self.topics)

    def decode_response(self, body: memoryview) -> MetadataResponse:
        r = _Reader(body)
        brokers = []
        for _ in range(r.count()):
            node_id = r.int32()
            host = r.string() or ""
            brokers.append(BrokerMetadata(node_id, host, r.int32()))
        topics = []
        for _ in range(r.count()):
            error = r.int16()
            topic = r.string() or ""
            partitions = []
            for _ in range(r.count()):
                p_error, partition, leader = r.unpack(_PARTITION_META_HEAD)
                partitions.append(PartitionMetadata(partition, p_error, leader, r.int32_array(), r.int32_array()))
            topics.append(TopicMetadata(topic, error, tuple(partitions)))
        return MetadataResponse(tuple(brokers), tuple(topics))


# --------------------------------------------------------------------------- Fetch

@dataclass(frozen=True)
class FetchPartition:
    """One partition to fetch: from ``offset``, at most ``max_bytes`` of message set."""

    topic: str
    partition: int
    offset: int
    max_bytes: int


@dataclass(frozen=True)
class FetchPartitionResponse:
    """One partition of a Fetch response.

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

    def encode_body(self) -> bytes:
        entries = [(p.topic, _FETCH_PARTITION.pack(p.partition, p.offset, p.max_bytes)) for p in self.partitions]
        return _FETCH_HEAD.pack(CONSUMER_REPLICA_ID, self.max_wait_ms, self.min_bytes) + _topic_arrays(entries)

    def decode_response(self, body: memoryview) -> FetchResponse:
        r = _Reader(body)
        out = []
        for _ in range(r.count()):
            topic = r.string() or ""
            for _ in range(r.count()):
                partition, error, hw, size = r.unpack(_FETCH_PARTITION_HEAD)
                out.append(FetchPartitionResponse(topic, partition, error, hw, r.bytes_view(size)))
        return FetchResponse(tuple(out))


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
class ListOffsetsRequest(Request[ListOffsetsResponse]):
    """ListOffsets v0: per ``(topic, partition, time)`` at most ``max_num_offsets`` offsets.

    ``time`` is :data:`EARLIEST_TIME` (-2), :data:`LATEST_TIME` (-1) or a
    timestamp in ms (segment granularity).
    """

    partitions: Sequence[Tuple[str, int, int]]
    max_num_offsets: int = 1

    API_KEY: ClassVar[int] = API_LIST_OFFSETS

    def encode_body(self) -> bytes:
        entries = [(t, _OFFSETS_PARTITION.pack(p, time, self.max_num_offsets)) for t, p, time in self.partitions]
        return _INT32.pack(CONSUMER_REPLICA_ID) + _topic_arrays(entries)

    def decode_response(self, body: memoryview) -> ListOffsetsResponse:
        r = _Reader(body)
        out = []
        for _ in range(r.count()):
            topic = r.string() or ""
            for _ in range(r.count()):
                partition, error = r.unpack(_OFFSETS_RESPONSE_HEAD)
                out.append(ListOffsetsPartitionResponse(topic, partition, error, r.int64_array()))
        return ListOffsetsResponse(tuple(out))
