"""Kafka's standard consumer group protocol (``protocol_type`` ``consumer``): formats and assignors.

Pure functions, no I/O. What every client of a broker-managed group speaks, so
that zkconsumer members, Kafka 0.9's Java ``KafkaConsumer``, kafka-python and
confluent-kafka (librdkafka) share one group and whichever of them leads, the
assignment is Kafka's.

Formats (Kafka's ``ConsumerProtocol``, version 0; big-endian, strings as an
int16 length and UTF-8, arrays and bytes as an int32 length):

subscription (JoinGroup metadata)
    ``version int16, topics [string], user_data bytes``

assignment (SyncGroup)
    ``version int16, [topic string, partitions [int32]], user_data bytes``

Assignors, named as Kafka's (``range``, ``roundrobin``), assign partitions to
*members*; a member then spreads its share over its own streams (a zkconsumer
member with several streams; :func:`spread`). Kafka 0.9's ``RangeAssignor``
works topic by topic over the members subscribed to it, sorted by member id:
each takes ``partitions // members`` consecutive partitions and the first
``partitions % members`` one more. Its ``RoundRobinAssignor`` walks every
subscribed topic's partitions (topics sorted, then partitions) over all members
sorted by id, in a circle, skipping members not subscribed to the partition's
topic. Member ids and topics sort as Java strings (UTF-16 code units).

>>> subs = {"b": ["t"], "a": ["t", "u"]}
>>> assign_range(subs, {"t": 3, "u": 1})
{'a': [('t', 0), ('t', 1), ('u', 0)], 'b': [('t', 2)]}
>>> assign_roundrobin(subs, {"t": 3, "u": 1})
{'a': [('t', 0), ('t', 2), ('u', 0)], 'b': [('t', 1)]}
"""

from __future__ import annotations

import struct
from typing import Callable, Dict, Iterable, List, Mapping, Sequence, Tuple

from ..assignors import AssignmentError, java_string_key
from ..structs import TopicPartition

__all__ = [
    "ASSIGNORS", "PROTOCOL_TYPE", "VERSION", "assign_range", "assign_roundrobin", "decode_assignment",
    "decode_subscription", "encode_assignment", "encode_subscription",
]

#: JoinGroup ``protocol_type`` of every Kafka consumer (Java, kafka-python, librdkafka, zkconsumer).
PROTOCOL_TYPE = "consumer"
#: The version zkconsumer writes; later versions are read as far as version 0 goes (Kafka's rule:
#: newer versions only append fields).
VERSION = 0

MemberAssignor = Callable[[Mapping[str, Sequence[str]], Mapping[str, int]], Dict[str, List[TopicPartition]]]


# --------------------------------------------------------------------------- formats


def _string(value: str) -> bytes:
    data = value.encode("utf-8")
    return struct.pack(">h", len(data)) + data


def _bytes(value: bytes) -> bytes:
    return struct.pack(">i", len(value)) + value


class _Reader:
    """Reads the protocol's primitives; raises :class:`AssignmentError` naming ``what`` on short or bad data."""

    def __init__(self, data: bytes, what: str) -> None:
        self._data = bytes(data)
        self._at = 0
        self._what = what

    def _take(self, size: int) -> bytes:
        if size < 0 or self._at + size > len(self._data):
            raise AssignmentError(f"{self._what} is cut short or malformed ({len(self._data)} bytes): "
                                  f"{self._data[:64]!r}")
        chunk = self._data[self._at:self._at + size]
        self._at += size
        return chunk

    def int16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def string(self) -> str:
        try:
            return self._take(self.int16()).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise AssignmentError(f"{self._what} holds a topic name that is not UTF-8: {exc}") from None

    def bytes_(self) -> bytes:
        size = self.int32()
        return b"" if size == -1 else self._take(size)

    def version(self) -> int:
        version = self.int16()
        if version < 0:
            raise AssignmentError(f"{self._what} has an unknown consumer protocol version {version}")
        return version


def encode_subscription(topics: Iterable[str], user_data: bytes = b"") -> bytes:
    """JoinGroup metadata: the topics this member subscribes to (sorted), and opaque ``user_data``.

    >>> encode_subscription(["t"])
    b'\\x00\\x00\\x00\\x00\\x00\\x01\\x00\\x01t\\x00\\x00\\x00\\x00'
    """
    names = sorted(set(topics), key=java_string_key)
    return (struct.pack(">hi", VERSION, len(names)) + b"".join(_string(t) for t in names) + _bytes(user_data))


def decode_subscription(data: bytes, member_id: str) -> Tuple[List[str], bytes]:
    """(topics, user_data) of a member's JoinGroup metadata; :class:`AssignmentError` naming the member
    when it is not a consumer-protocol subscription."""
    reader = _Reader(data, f"the subscription of member {member_id}")
    reader.version()
    topics = [reader.string() for _ in range(reader.int32())]
    return topics, reader.bytes_()


def encode_assignment(partitions: Iterable[TopicPartition], user_data: bytes = b"") -> bytes:
    """SyncGroup assignment bytes: topics sorted, each topic's partitions ascending.

    >>> encode_assignment([("t", 1), ("t", 0)])
    b'\\x00\\x00\\x00\\x00\\x00\\x01\\x00\\x01t\\x00\\x00\\x00\\x02\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x01\\x00\\x00\\x00\\x00'
    """
    by_topic: Dict[str, List[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    out = [struct.pack(">hi", VERSION, len(by_topic))]
    for topic in sorted(by_topic, key=java_string_key):
        ids = sorted(set(by_topic[topic]))
        out.append(_string(topic) + struct.pack(f">i{len(ids)}i", len(ids), *ids))
    out.append(_bytes(user_data))
    return b"".join(out)


def decode_assignment(data: bytes, member_id: str) -> List[TopicPartition]:
    """This member's partitions from SyncGroup bytes (sorted); empty bytes mean none (the
    coordinator's filler for a member the leader left out). :class:`AssignmentError` naming the
    member for bytes that are not a consumer-protocol assignment."""
    if not data:
        return []
    reader = _Reader(data, f"the assignment of member {member_id}")
    reader.version()
    partitions: List[TopicPartition] = []
    for _ in range(reader.int32()):
        topic = reader.string()
        partitions.extend((topic, reader.int32()) for _ in range(reader.int32()))
    return sorted(set(partitions))


# --------------------------------------------------------------------------- assignors


def _members_sorted(members: Iterable[str]) -> List[str]:
    return sorted(members, key=java_string_key)


def assign_range(subscriptions: Mapping[str, Sequence[str]], partitions: Mapping[str, int]) -> Dict[str, List[TopicPartition]]:
    """Kafka 0.9's ``RangeAssignor``: member id -> its partitions (every member gets an entry).

    ``partitions``: the partition count of each topic that exists; a subscribed
    topic missing from it is skipped (Kafka: no metadata for it).
    """
    result: Dict[str, List[TopicPartition]] = {member: [] for member in _members_sorted(subscriptions)}
    per_topic: Dict[str, List[str]] = {}
    for member, topics in subscriptions.items():
        for topic in set(topics):
            per_topic.setdefault(topic, []).append(member)
    for topic in sorted(per_topic, key=java_string_key):
        count = partitions.get(topic)
        if count is None:
            continue
        members = _members_sorted(per_topic[topic])
        each, extra = divmod(count, len(members))
        for i, member in enumerate(members):
            start = each * i + min(i, extra)
            length = each + (1 if i < extra else 0)
            result[member].extend((topic, p) for p in range(start, start + length))
    return result


def assign_roundrobin(subscriptions: Mapping[str, Sequence[str]],
                      partitions: Mapping[str, int]) -> Dict[str, List[TopicPartition]]:
    """Kafka 0.9's ``RoundRobinAssignor``: member id -> its partitions (every member gets an entry)."""
    result: Dict[str, List[TopicPartition]] = {member: [] for member in _members_sorted(subscriptions)}
    members = _members_sorted(subscriptions)
    if not members:
        return result
    subscribed = {member: set(topics) for member, topics in subscriptions.items()}
    topics = sorted({t for ts in subscribed.values() for t in ts if t in partitions}, key=java_string_key)
    at = 0
    for topic in topics:
        for partition in range(partitions[topic]):
            while topic not in subscribed[members[at % len(members)]]:
                at += 1
            result[members[at % len(members)]].append((topic, partition))
            at += 1
    return result


#: Kafka's assignor names (``partition.assignment.strategy``) and the member-level assignors.
ASSIGNORS: Dict[str, MemberAssignor] = {"range": assign_range, "roundrobin": assign_roundrobin}
