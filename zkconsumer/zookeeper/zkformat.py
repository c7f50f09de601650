"""ZooKeeper paths and the bytes of every znode zkconsumer reads or writes.

This is the wire format shared with Kafka's own consumer and tools
(ConsumerOffsetChecker, ``kafka-consumer-groups --zookeeper``, Burrow), so it is
kept in one place and tested byte for byte:

==========================================  =========  ==========================================
path                                        kind       content
==========================================  =========  ==========================================
``/consumers/<g>/ids/<consumerId>``         ephemeral  registration JSON (:func:`encode_registration`)
``/consumers/<g>/owners/<topic>/<p>``       ephemeral  owning thread id ``<consumerId>-<i>``
``/consumers/<g>/offsets/<topic>/<p>``      persistent decimal next offset, no whitespace
``/brokers/ids/<id>``                       read       broker JSON (:func:`decode_broker`)
``/brokers/topics/<t>``                     read       ``{"version":1,"partitions":{"0":[1,2]}}``
``/brokers/topics/<t>/partitions/<p>/state`` read      ``{"leader":1,"leader_epoch":0,"isr":[1]...}``
==========================================  =========  ==========================================

Writers produce compact JSON exactly as Kafka does. Readers tolerate unknown keys
and any key order, and turn every kind of bad data (``None``, empty, not UTF-8,
not JSON, wrong types, missing keys) into
:class:`~zkconsumer.errors.MalformedZnodeError` naming the path and the problem.

Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from ..errors import MalformedZnodeError
from ..structs import Broker

__all__ = [
    "BROKER_IDS_PATH",
    "BROKER_TOPICS_PATH",
    "CONSUMERS_PATH",
    "REGISTRATION_PATTERNS",
    "GroupPaths",
    "PartitionState",
    "Registration",
    "broker_path",
    "decode_broker",
    "decode_offset",
    "decode_owner",
    "decode_partition_state",
    "decode_registration",
    "decode_topic_partitions",
    "encode_offset",
    "encode_owner",
    "encode_registration",
    "partition_state_path",
    "topic_path",
]

CONSUMERS_PATH = "/consumers"
BROKER_IDS_PATH = "/brokers/ids"
BROKER_TOPICS_PATH = "/brokers/topics"

#: Valid ``pattern`` values of a registration.
REGISTRATION_PATTERNS = ("static", "white_list", "black_list")

#: What ZooKeeper hands back for a node's data.
ZnodeData = Union[bytes, bytearray, memoryview, str, None]


# --------------------------------------------------------------------------- paths


def _segment(kind: str, value: object) -> str:
    """One path component: a non-empty string without ``/`` that is not ``.``/``..``."""
    if not isinstance(value, str) or not value or "/" in value or value in (".", ".."):
        raise ValueError(f"invalid {kind} for a ZooKeeper path: {value!r}")
    return value


def _partition(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"invalid partition for a ZooKeeper path: {value!r}")
    return value


@dataclass(frozen=True)
class GroupPaths:
    """The ZooKeeper paths of one consumer group (Kafka's ``ZKGroupDirs``/``ZKGroupTopicDirs``).

    Path builders raise ``ValueError`` for a component that is empty, contains
    ``/`` or is ``.``/``..`` (a programming error: configuration and topic names
    are validated before they get here).

    >>> p = GroupPaths("g1")
    >>> p.root, p.ids, p.member("g1_host-1-ab12cd34")
    ('/consumers/g1', '/consumers/g1/ids', '/consumers/g1/ids/g1_host-1-ab12cd34')
    >>> p.owner("events", 3), p.offset("events", 3)
    ('/consumers/g1/owners/events/3', '/consumers/g1/offsets/events/3')
    """

    group: str

    def __post_init__(self) -> None:
        _segment("group", self.group)

    @property
    def root(self) -> str:
        """``/consumers/<g>``"""
        return f"{CONSUMERS_PATH}/{self.group}"

    @property
    def ids(self) -> str:
        """``/consumers/<g>/ids``: one ephemeral registration node per member."""
        return f"{self.root}/ids"

    def member(self, consumer_id: str) -> str:
        """``/consumers/<g>/ids/<consumerId>``"""
        return f"{self.ids}/{_segment('consumer id', consumer_id)}"

    @property
    def fences(self) -> str:
        """``/consumers/<g>/fences``: zkconsumer's per-session fence nodes (Kafka's consumer and
        tools read only ``ids``, ``owners`` and ``offsets``, and ignore this)."""
        return f"{self.root}/fences"

    def fence_prefix(self, consumer_id: str) -> str:
        """``/consumers/<g>/fences/<consumerId>-``: ZooKeeper appends a sequence number."""
        return f"{self.fences}/{_segment('consumer id', consumer_id)}-"

    @property
    def owners(self) -> str:
        """``/consumers/<g>/owners``"""
        return f"{self.root}/owners"

    def owners_topic(self, topic: str) -> str:
        """``/consumers/<g>/owners/<topic>``"""
        return f"{self.owners}/{_segment('topic', topic)}"

    def owner(self, topic: str, partition: int) -> str:
        """``/consumers/<g>/owners/<topic>/<partition>``: ephemeral, holds the owning thread id."""
        return f"{self.owners_topic(topic)}/{_partition(partition)}"

    @property
    def offsets(self) -> str:
        """``/consumers/<g>/offsets``"""
        return f"{self.root}/offsets"

    def offsets_topic(self, topic: str) -> str:
        """``/consumers/<g>/offsets/<topic>``"""
        return f"{self.offsets}/{_segment('topic', topic)}"

    def offset(self, topic: str, partition: int) -> str:
        """``/consumers/<g>/offsets/<topic>/<partition>``: persistent, holds the next offset."""
        return f"{self.offsets_topic(topic)}/{_partition(partition)}"


def topic_path(topic: str) -> str:
    """``/brokers/topics/<topic>``: the topic's partition -> replicas map."""
    return f"{BROKER_TOPICS_PATH}/{_segment('topic', topic)}"


def partition_state_path(topic: str, partition: int) -> str:
    """``/brokers/topics/<topic>/partitions/<p>/state``: leader, leader epoch and ISR."""
    return f"{topic_path(topic)}/partitions/{_partition(partition)}/state"


def broker_path(broker_id: int) -> str:
    """``/brokers/ids/<id>``: a live broker's registration."""
    if isinstance(broker_id, bool) or not isinstance(broker_id, int) or broker_id < 0:
        raise ValueError(f"invalid broker id for a ZooKeeper path: {broker_id!r}")
    return f"{BROKER_IDS_PATH}/{broker_id}"


# --------------------------------------------------------------------------- decoding helpers


def _text(path: str, data: ZnodeData) -> str:
    if data is None:
        raise MalformedZnodeError(path, "the node has no data")
    if isinstance(data, str):
        text = data
    elif isinstance(data, (bytes, bytearray, memoryview)):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedZnodeError(path, f"the data is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    else:
        raise MalformedZnodeError(path, f"expected bytes, got {type(data).__name__}")
    if not text.strip():
        raise MalformedZnodeError(path, "the node's data is empty")
    return text


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _json_object(path: str, data: ZnodeData) -> Dict[str, Any]:
    text = _text(path, data)
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise MalformedZnodeError(path, f"the data is not JSON ({exc}): {_preview(text)}") from None
    if not isinstance(value, dict):
        raise MalformedZnodeError(path, f"expected a JSON object, got {_json_type(value)}: {_preview(text)}")
    return value


def _preview(text: str, limit: int = 200) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require(path: str, obj: Mapping[str, Any], key: str) -> Any:
    if key not in obj:
        raise MalformedZnodeError(path, f'missing key "{key}"')
    return obj[key]


def _require_int(path: str, obj: Mapping[str, Any], key: str) -> int:
    value = _require(path, obj, key)
    if not isinstance(value, int) or isinstance(value, bool):  # JSON true/false are not integers
        raise MalformedZnodeError(path, f'"{key}" must be an integer, got {_json_type(value)} {value!r}')
    return value


def _int_list(path: str, key: str, value: object) -> List[int]:
    if not isinstance(value, list) or not all(_is_int(v) for v in value):
        raise MalformedZnodeError(path, f'"{key}" must be an array of integers, got {value!r}')
    return list(value)


# --------------------------------------------------------------------------- brokers


# Kafka's EndPoint.createEndPoint: protocol://host:port, protocol://[ipv6]:port, host may be empty.
_ENDPOINT = re.compile(r"(.*)://\[?([0-9a-zA-Z\-.:]*)\]?:(-?[0-9]+)")
_DIGITS = re.compile(r"[0-9]+")


def _valid_port(port: int) -> bool:
    return 0 < port < 65536


def decode_broker(path: str, data: ZnodeData, protocol: str = "PLAINTEXT") -> Broker:
    """Decode ``/brokers/ids/<id>``; the id comes from the path's last component.

    Version 1 nodes have ``host`` and ``port``; version 2+ (Kafka 0.9+) add
    ``"endpoints": ["PLAINTEXT://host:9092", "SSL://host:9093"]``. The endpoint of
    ``protocol`` (case-insensitive: ``PLAINTEXT``, ``SSL``, ...) is used; for
    ``PLAINTEXT`` the top-level ``host``/``port`` are the fallback. Unknown keys are
    ignored.

    >>> decode_broker("/brokers/ids/1", b'{"jmx_port":-1,"timestamp":"1","host":"h","version":1,"port":9092}')
    Broker(id=1, host='h', port=9092)
    >>> data = b'{"version":2,"host":null,"port":-1,"endpoints":["SSL://[::1]:9093"]}'
    >>> decode_broker("/brokers/ids/2", data, "ssl")
    Broker(id=2, host='::1', port=9093)
    """
    broker_id_text = path.rstrip("/").rsplit("/", 1)[-1]
    if not _DIGITS.fullmatch(broker_id_text):
        raise MalformedZnodeError(path, f"the node name {broker_id_text!r} is not a broker id")
    broker_id = int(broker_id_text)
    obj = _json_object(path, data)
    if "version" in obj and not _is_int(obj["version"]):
        raise MalformedZnodeError(path, f'"version" must be an integer, got {obj["version"]!r}')
    wanted = protocol.strip().upper()

    endpoints = obj.get("endpoints")
    if endpoints is not None:
        if not isinstance(endpoints, list) or not all(isinstance(e, str) for e in endpoints):
            raise MalformedZnodeError(path, f'"endpoints" must be an array of strings, got {endpoints!r}')
        for endpoint in endpoints:
            match = _ENDPOINT.fullmatch(endpoint)
            if match is None:
                raise MalformedZnodeError(path, f"unparseable endpoint {endpoint!r}")
            ep_protocol, host, port_text = match.groups()
            if ep_protocol.upper() != wanted or not host:
                continue
            port = int(port_text)
            if not _valid_port(port):
                raise MalformedZnodeError(path, f"endpoint {endpoint!r} has an invalid port")
            return Broker(broker_id, host, port)

    if wanted == "PLAINTEXT":
        host_value, port_value = obj.get("host"), obj.get("port")
        if (isinstance(host_value, str) and host_value and isinstance(port_value, int)
                and not isinstance(port_value, bool) and _valid_port(port_value)):
            return Broker(broker_id, host_value, port_value)
        if endpoints is None:
            if "host" not in obj or "port" not in obj:
                raise MalformedZnodeError(path, 'missing "host"/"port" (and no "endpoints")')
            raise MalformedZnodeError(path, f"invalid host/port {host_value!r}:{port_value!r}")
    raise MalformedZnodeError(path, f"the broker has no {wanted} endpoint (endpoints: {endpoints!r})")


# --------------------------------------------------------------------------- topics


def decode_topic_partitions(path: str, data: ZnodeData) -> Dict[int, List[int]]:
    """Decode ``/brokers/topics/<t>``: partition -> replica broker ids, in partition order.

    >>> decode_topic_partitions("/brokers/topics/t", b'{"version":1,"partitions":{"1":[2,1],"0":[1,2]}}')
    {0: [1, 2], 1: [2, 1]}
    """
    obj = _json_object(path, data)
    partitions = _require(path, obj, "partitions")
    if not isinstance(partitions, dict):
        raise MalformedZnodeError(path, f'"partitions" must be an object, got {_json_type(partitions)}')
    result: Dict[int, List[int]] = {}
    for key, replicas in partitions.items():
        if not _DIGITS.fullmatch(key):
            raise MalformedZnodeError(path, f'"partitions" has a key that is not a partition id: {key!r}')
        result[int(key)] = _int_list(path, f"partitions.{key}", replicas)
    return dict(sorted(result.items()))


@dataclass(frozen=True)
class PartitionState:
    """``/brokers/topics/<t>/partitions/<p>/state``. ``leader`` is -1 while there is none."""

    leader: int
    leader_epoch: int
    isr: Tuple[int, ...]


def decode_partition_state(path: str, data: ZnodeData) -> PartitionState:
    """Decode a partition's leader/ISR node (``controller_epoch``, ``version`` and unknown keys ignored).

    >>> decode_partition_state("/s", b'{"controller_epoch":3,"leader":2,"version":1,"leader_epoch":5,"isr":[2,1]}')
    PartitionState(leader=2, leader_epoch=5, isr=(2, 1))
    """
    obj = _json_object(path, data)
    leader = _require_int(path, obj, "leader")
    leader_epoch = _require_int(path, obj, "leader_epoch")
    isr = _int_list(path, "isr", _require(path, obj, "isr"))
    return PartitionState(leader, leader_epoch, tuple(isr))


# --------------------------------------------------------------------------- registrations


@dataclass(frozen=True)
class Registration:
    """A decoded ``/consumers/<g>/ids/<consumerId>`` node.

    ``subscription`` is topic -> streams for ``pattern == "static"``, or
    ``{regex: streams}`` (one entry) for ``"white_list"``/``"black_list"``.
    ``timestamp`` is the registration time in ms as text (``None`` if absent).
    """

    subscription: Dict[str, int]
    pattern: str
    timestamp: Optional[str]
    version: int


def _kafka_json_escape(s: str) -> str:
    """Kafka's ``CoreUtils.JSONEscapeString``: what Kafka writes for a wildcard regex key.

    Escapes ``"``, ``\\``, ``/``, the short escapes ``\\b \\f \\n \\r \\t``, and the
    other C0/DEL/C1 control characters as lowercase ``\\u00xx``; everything else
    is written as is (UTF-8).
    """
    out: List[str] = []
    for ch in s:
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ch <= "\x1f" or "\x7f" <= ch <= "\x9f":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _check_stream_count(what: str, key: str, value: object) -> int:
    if not _is_int(value) or value < 1:  # type: ignore[operator]
        raise ValueError(f"{what} for {key!r} must be an integer >= 1, got {value!r}")
    return value  # type: ignore[return-value]


def encode_registration(subscription: Mapping[str, int], pattern: str, timestamp_ms: int) -> bytes:
    """The bytes of a member's registration node, exactly as Kafka writes them.

    ``{"version":1,"subscription":{...},"pattern":"<pattern>","timestamp":"<ms>"}``:
    compact, keys in that order, the timestamp a JSON *string*, subscription
    entries in the given order. Keys are escaped as Kafka escapes them (``/`` as
    ``\\/``, control characters as ``\\u00xx``). Raises ``ValueError`` for an
    unknown pattern, a stream count below 1, or a wildcard subscription that is
    not exactly one ``{regex: streams}`` entry.

    >>> encode_registration({"events": 2}, "static", 1700000000000)
    b'{"version":1,"subscription":{"events":2},"pattern":"static","timestamp":"1700000000000"}'
    >>> encode_registration({"ev.*|a\\\\d": 1}, "white_list", 5)
    b'{"version":1,"subscription":{"ev.*|a\\\\\\\\d":1},"pattern":"white_list","timestamp":"5"}'
    """
    if pattern not in REGISTRATION_PATTERNS:
        raise ValueError(f"pattern must be one of {', '.join(REGISTRATION_PATTERNS)}, got {pattern!r}")
    if pattern != "static" and len(subscription) != 1:
        raise ValueError(f"a {pattern} subscription has exactly one regex entry, got {dict(subscription)!r}")
    if not _is_int(timestamp_ms) or timestamp_ms < 0:
        raise ValueError(f"timestamp_ms must be a non-negative integer, got {timestamp_ms!r}")
    entries = []
    for key, count in subscription.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"subscription keys must be non-empty strings, got {key!r}")
        entries.append(f'"{_kafka_json_escape(key)}":{_check_stream_count("the stream count", key, count)}')
    text = (
        '{"version":1,"subscription":{' + ",".join(entries) + '},"pattern":"' + pattern + '","timestamp":"'
        + str(timestamp_ms) + '"}'
    )
    return text.encode("utf-8")


def decode_registration(path: str, data: ZnodeData) -> Registration:
    """Decode a member's registration node (any key order; unknown keys ignored).

    ``subscription`` (an object of positive integers) and ``pattern`` (``static``,
    ``white_list`` or ``black_list``) are required; a wildcard subscription has at
    most one entry. ``timestamp`` may be a string or a number (or absent);
    ``version`` defaults to 1 when absent (Kafka never reads it).

    >>> decode_registration("/consumers/g/ids/c", b'{"pattern":"static","subscription":{"t":2},"version":1,"timestamp":1}')
    Registration(subscription={'t': 2}, pattern='static', timestamp='1', version=1)
    """
    obj = _json_object(path, data)
    subscription = _require(path, obj, "subscription")
    if not isinstance(subscription, dict):
        raise MalformedZnodeError(path, f'"subscription" must be an object, got {_json_type(subscription)}')
    for key, count in subscription.items():
        if not key:
            raise MalformedZnodeError(path, '"subscription" has an empty topic name')
        if not _is_int(count) or count < 1:
            raise MalformedZnodeError(
                path, f'"subscription" stream count for {key!r} must be an integer >= 1, got {count!r}'
            )
    pattern = _require(path, obj, "pattern")
    if pattern not in REGISTRATION_PATTERNS:
        raise MalformedZnodeError(
            path, f'"pattern" must be one of {", ".join(REGISTRATION_PATTERNS)}, got {pattern!r}'
        )
    if pattern != "static" and len(subscription) > 1:
        raise MalformedZnodeError(path, f"a {pattern} subscription has one regex entry, got {len(subscription)}")
    timestamp = obj.get("timestamp")
    if timestamp is not None:
        if _is_int(timestamp):
            timestamp = str(timestamp)
        elif not isinstance(timestamp, str):
            raise MalformedZnodeError(path, f'"timestamp" must be a string or an integer, got {timestamp!r}')
    version = obj.get("version", 1)
    if not _is_int(version):
        raise MalformedZnodeError(path, f'"version" must be an integer, got {version!r}')
    return Registration(dict(subscription), pattern, timestamp, version)


# --------------------------------------------------------------------------- offsets and owners

_OFFSET = re.compile(r"-?[0-9]+")
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def encode_offset(offset: int) -> bytes:
    """The bytes of an offset node: the decimal offset, nothing else.

    >>> encode_offset(42)
    b'42'
    """
    if not _is_int(offset) or not 0 <= offset <= _LONG_MAX:
        raise ValueError(f"an offset must be an integer in [0, 2**63), got {offset!r}")
    return str(offset).encode("ascii")


def decode_offset(path: str, data: ZnodeData) -> int:
    """Decode an offset node: decimal text (surrounding whitespace tolerated) of a signed 64-bit int.

    Negative values (``-1``, which some tools write to mean "no offset") are
    returned as they are; the caller treats them as out of range.

    >>> decode_offset("/o", b" 42\\n")
    42
    """
    text = _text(path, data).strip()
    if not _OFFSET.fullmatch(text):
        raise MalformedZnodeError(path, f"the offset is not a decimal integer: {_preview(text)}")
    value = int(text)
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise MalformedZnodeError(path, f"the offset {text} does not fit in 64 bits")
    return value


def encode_owner(thread_id: str) -> bytes:
    """The bytes of an owner node: the owning consumer thread id, UTF-8.

    >>> encode_owner("g1_host-1700000000000-ab12cd34-0")
    b'g1_host-1700000000000-ab12cd34-0'
    """
    if not isinstance(thread_id, str) or not thread_id.strip():
        raise ValueError(f"a thread id must be a non-empty string, got {thread_id!r}")
    return thread_id.encode("utf-8")


def decode_owner(path: str, data: ZnodeData) -> str:
    """Decode an owner node: the thread id (surrounding whitespace removed).

    >>> decode_owner("/consumers/g/owners/t/0", b"g1_host-1-ab12cd34-0")
    'g1_host-1-ab12cd34-0'
    """
    return _text(path, data).strip()
