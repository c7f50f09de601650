"""Kafka's consumer-group requests: coordinator lookup, offsets in Kafka, and group membership.

Built on :mod:`zkconsumer.wire.protocol`'s framing and primitives (same ``Request``
base, same ``string``/array encoding, same ``_Reader``), so a request here is
sent with :meth:`zkconsumer.wire.connection.BrokerConnection.send` like any other.

==================  =======  =======  ===================================================
request             api_key  version  purpose
==================  =======  =======  ===================================================
OffsetCommit        8        1        offsets into Kafka, ZooKeeper-managed group (gen -1)
OffsetCommit        8        2        offsets into Kafka, generation-fenced (member id)
OffsetFetch         9        1        committed offsets from Kafka (v0 would read ZooKeeper)
GroupCoordinator    10       0        which broker coordinates a group
JoinGroup           11       0        join, or rejoin, a broker-managed group
Heartbeat           12       0        stay a member; learn that a rebalance started
LeaveGroup          13       0        leave at once instead of after the session timeout
SyncGroup           14       0        the leader hands out, every member receives, the assignment
==================  =======  =======  ===================================================

Version choices, from Kafka 0.9.0.1's ``KafkaApis``: OffsetCommit v0 and
OffsetFetch v0 make the *broker* read and write ZooKeeper, so offsets in Kafka
need v1 and up. Kafka 0.8.2's ZooKeeper consumer sends OffsetCommit v1 with
generation ``-1`` and member id ``""`` (a group the coordinator does not manage;
0.8.2 brokers know no v2); a broker-managed group's members send v2 with their
generation and member id, and the coordinator rejects a stale one with
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID or REBALANCE_IN_PROGRESS.

Layouts (``[x]`` is an int32-counted array, ``bytes`` an int32-length blob)::

    GroupCoordinator v0  group -> error:int16 coordinator_id:int32 host port:int32
    OffsetCommit v1      group generation:int32 member [topic [partition:int32 offset:int64 timestamp:int64 metadata]]
    OffsetCommit v2      group generation:int32 member retention_ms:int64 [topic [partition:int32 offset:int64 metadata]]
                         -> [topic [partition:int32 error:int16]]
    OffsetFetch v1       group [topic [partition:int32]]
                         -> [topic [partition:int32 offset:int64 metadata error:int16]]   (offset -1: none)
    JoinGroup v0         group session_timeout:int32 member protocol_type [name metadata:bytes]
                         -> error:int16 generation:int32 protocol leader member [member metadata:bytes]
    SyncGroup v0         group generation:int32 member [member assignment:bytes] -> error:int16 assignment:bytes
    Heartbeat v0         group generation:int32 member -> error:int16
    LeaveGroup v0        group member -> error:int16

Worked example (what a member sends first, without a socket)::

    >>> req = JoinGroupRequest("g1", 6000, UNKNOWN_MEMBER_ID, "zkconsumer", (("range", b"{}"),))
    >>> req.encode_body().hex()
    '00026731000017700000000a7a6b636f6e73756d657200000001000572616e6765000000027b7d'
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar, Optional, Sequence, Tuple

from .protocol import _INT32, _INT64, ERROR_NAMES, ProtocolDecodeError, Request, _Reader, _string, _topic_arrays

__all__ = [
    "API_OFFSET_COMMIT", "API_OFFSET_FETCH", "API_GROUP_COORDINATOR", "API_JOIN_GROUP",
    "API_HEARTBEAT", "API_LEAVE_GROUP", "API_SYNC_GROUP",
    "NO_ERROR", "OFFSET_METADATA_TOO_LARGE", "GROUP_LOAD_IN_PROGRESS", "GROUP_COORDINATOR_NOT_AVAILABLE",
    "NOT_COORDINATOR_FOR_GROUP", "ILLEGAL_GENERATION", "INCONSISTENT_GROUP_PROTOCOL", "INVALID_GROUP_ID",
    "UNKNOWN_MEMBER", "INVALID_SESSION_TIMEOUT", "REBALANCE_IN_PROGRESS", "GROUP_AUTHORIZATION_FAILED",
    "COORDINATOR_MOVED_CODES", "MEMBERSHIP_LOST_CODES", "error_name",
    "DEFAULT_GENERATION_ID", "UNKNOWN_MEMBER_ID", "DEFAULT_RETENTION_TIME", "DEFAULT_TIMESTAMP",
    "GroupCoordinatorRequest", "GroupCoordinatorResponse",
    "OffsetCommitEntry", "OffsetCommitRequestV1", "OffsetCommitRequestV2", "OffsetCommitResponse",
    "OffsetCommitPartitionResponse", "OffsetFetchRequest", "OffsetFetchResponse", "OffsetFetchPartitionResponse",
    "JoinGroupRequest", "JoinGroupResponse", "GroupMember", "SyncGroupRequest", "SyncGroupResponse",
    "HeartbeatRequest", "HeartbeatResponse", "LeaveGroupRequest", "LeaveGroupResponse",
]

API_OFFSET_COMMIT = 8
API_OFFSET_FETCH = 9
API_GROUP_COORDINATOR = 10
API_JOIN_GROUP = 11
API_HEARTBEAT = 12
API_LEAVE_GROUP = 13
API_SYNC_GROUP = 14

# Error codes this module's callers act on (names as Kafka 0.9's ``Errors``).
NO_ERROR = 0
OFFSET_METADATA_TOO_LARGE = 12
GROUP_LOAD_IN_PROGRESS = 14
GROUP_COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR_FOR_GROUP = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
GROUP_AUTHORIZATION_FAILED = 30

#: Codes after which the coordinator must be looked up again.
COORDINATOR_MOVED_CODES = frozenset({GROUP_COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR_FOR_GROUP})
#: Codes telling a member that its generation is over: stop, then (re)join.
MEMBERSHIP_LOST_CODES = frozenset({ILLEGAL_GENERATION, UNKNOWN_MEMBER, REBALANCE_IN_PROGRESS})

_GROUP_ERROR_NAMES = {14: "GROUP_LOAD_IN_PROGRESS", 15: "GROUP_COORDINATOR_NOT_AVAILABLE",
                      16: "NOT_COORDINATOR_FOR_GROUP"}

#: ``generation_id`` of a commit from a group the coordinator does not manage.
DEFAULT_GENERATION_ID = -1
#: ``member_id`` of a first JoinGroup, and of a commit from a group the coordinator does not manage.
UNKNOWN_MEMBER_ID = ""
#: OffsetCommit v2 ``retention_time``: the broker's ``offsets.retention.minutes``.
DEFAULT_RETENTION_TIME = -1
#: OffsetCommit v1 ``timestamp``: "now" on the broker.
DEFAULT_TIMESTAMP = -1

_COMMIT_V1_PARTITION = struct.Struct(">iqq")  # partition, offset, timestamp
_COMMIT_V2_PARTITION = struct.Struct(">iq")   # partition, offset
_PARTITION_ERROR = struct.Struct(">ih")       # partition, error
_FETCH_PARTITION = struct.Struct(">iq")       # partition, offset


def error_name(code: int) -> str:
    """Kafka 0.9's name for a broker error code (``"UNKNOWN_<code>"`` if unknown).

    >>> error_name(16), error_name(27)
    ('NOT_COORDINATOR_FOR_GROUP', 'REBALANCE_IN_PROGRESS')
    """
    return _GROUP_ERROR_NAMES.get(code) or ERROR_NAMES.get(code, f"UNKNOWN_{code}")


def _bytes(value: Optional[bytes]) -> bytes:
    """A protocol ``bytes``: int32 length, then the bytes (``None`` -> length -1)."""
    if value is None:
        return _INT32.pack(-1)
    return _INT32.pack(len(value)) + bytes(value)


def _read_bytes(r: _Reader) -> bytes:
    n = r.int32()
    return b"" if n < 0 else r.bytes_view(n).tobytes()


def _array(items: Sequence[bytes]) -> bytes:
    return _INT32.pack(len(items)) + b"".join(items)


def _read_partition_errors(r: _Reader) -> Tuple["OffsetCommitPartitionResponse", ...]:
    out = []
    for _ in range(r.count()):
        topic = r.string() or ""
        for _ in range(r.count()):
            partition, error = r.unpack(_PARTITION_ERROR)
            out.append(OffsetCommitPartitionResponse(topic, partition, error))
    return tuple(out)


def _finished(r: _Reader, what: str) -> None:
    if r.pos != len(r.buf):
        raise ProtocolDecodeError(f"{what} response has {len(r.buf) - r.pos} unexpected trailing bytes")


# --------------------------------------------------------------------------- GroupCoordinator v0

@dataclass(frozen=True)
class GroupCoordinatorResponse:
    """Which broker coordinates the group; ``coordinator_id`` -1 with a non-zero ``error_code``.

    Error 15 (GROUP_COORDINATOR_NOT_AVAILABLE) while ``__consumer_offsets`` is
    being created or its partition has no leader: ask again later.
    """

    error_code: int
    coordinator_id: int
    host: str
    port: int


@dataclass(frozen=True)
class GroupCoordinatorRequest(Request[GroupCoordinatorResponse]):
    """GroupCoordinator v0 (Kafka 0.8.2's ConsumerMetadataRequest); any live broker answers."""

    group_id: str

    API_KEY: ClassVar[int] = API_GROUP_COORDINATOR

    def encode_body(self) -> bytes:
        return _string(self.group_id)

    def decode_response(self, body: memoryview) -> GroupCoordinatorResponse:
        r = _Reader(body)
        error = r.int16()
        coordinator_id = r.int32()
        host = r.string() or ""
        response = GroupCoordinatorResponse(error, coordinator_id, host, r.int32())
        _finished(r, "GroupCoordinator")
        return response


# --------------------------------------------------------------------------- OffsetCommit v1/v2

@dataclass(frozen=True)
class OffsetCommitEntry:
    """One offset to commit: the next offset to consume of ``topic``/``partition``."""

    topic: str
    partition: int
    offset: int
    metadata: str = ""


@dataclass(frozen=True)
class OffsetCommitPartitionResponse:
    """The broker's verdict on one committed partition (0: stored)."""

    topic: str
    partition: int
    error_code: int


@dataclass(frozen=True)
class OffsetCommitResponse:
    """OffsetCommit v0-v2 response: one error code per partition."""

    partitions: Tuple[OffsetCommitPartitionResponse, ...]

    def errors(self) -> dict:
        """``{(topic, partition): error code}``."""
        return {(p.topic, p.partition): p.error_code for p in self.partitions}


class _OffsetCommitRequest(Request[OffsetCommitResponse]):
    API_KEY: ClassVar[int] = API_OFFSET_COMMIT

    def decode_response(self, body: memoryview) -> OffsetCommitResponse:
        r = _Reader(body)
        response = OffsetCommitResponse(_read_partition_errors(r))
        _finished(r, "OffsetCommit")
        return response


@dataclass(frozen=True)
class OffsetCommitRequestV1(_OffsetCommitRequest):
    """OffsetCommit v1: what Kafka 0.8.2's ZooKeeper consumer sends with ``offsets.storage=kafka``.

    ``generation_id`` -1 and ``member_id`` ``""`` for a group whose membership is
    in ZooKeeper; each entry's timestamp is :data:`DEFAULT_TIMESTAMP` (broker time).
    """

    group_id: str
    offsets: Sequence[OffsetCommitEntry]
    generation_id: int = DEFAULT_GENERATION_ID
    member_id: str = UNKNOWN_MEMBER_ID

    API_VERSION: ClassVar[int] = 1

    def encode_body(self) -> bytes:
        entries = [(e.topic, _COMMIT_V1_PARTITION.pack(e.partition, e.offset, DEFAULT_TIMESTAMP) + _string(e.metadata))
                   for e in self.offsets]
        return (_string(self.group_id) + _INT32.pack(self.generation_id) + _string(self.member_id)
                + _topic_arrays(entries))


@dataclass(frozen=True)
class OffsetCommitRequestV2(_OffsetCommitRequest):
    """OffsetCommit v2: a generation-fenced commit by a member of a broker-managed group."""

    group_id: str
    generation_id: int
    member_id: str
    offsets: Sequence[OffsetCommitEntry]
    retention_time_ms: int = DEFAULT_RETENTION_TIME

    API_VERSION: ClassVar[int] = 2

    def encode_body(self) -> bytes:
        entries = [(e.topic, _COMMIT_V2_PARTITION.pack(e.partition, e.offset) + _string(e.metadata))
                   for e in self.offsets]
        return (_string(self.group_id) + _INT32.pack(self.generation_id) + _string(self.member_id)
                + _INT64.pack(self.retention_time_ms) + _topic_arrays(entries))


# --------------------------------------------------------------------------- OffsetFetch v1

@dataclass(frozen=True)
class OffsetFetchPartitionResponse:
    """A committed offset; ``offset`` -1 (with error 0) means none was committed."""

    topic: str
    partition: int
    offset: int
    metadata: str
    error_code: int


@dataclass(frozen=True)
class OffsetFetchResponse:
    """OffsetFetch v1 response."""

    partitions: Tuple[OffsetFetchPartitionResponse, ...]


@dataclass(frozen=True)
class OffsetFetchRequest(Request[OffsetFetchResponse]):
    """OffsetFetch v1: committed offsets of ``partitions`` from the group's coordinator."""

    group_id: str
    partitions: Sequence[Tuple[str, int]]

    API_KEY: ClassVar[int] = API_OFFSET_FETCH
    API_VERSION: ClassVar[int] = 1

    def encode_body(self) -> bytes:
        return _string(self.group_id) + _topic_arrays([(t, _INT32.pack(p)) for t, p in self.partitions])

    def decode_response(self, body: memoryview) -> OffsetFetchResponse:
        r = _Reader(body)
        out = []
        for _ in range(r.count()):
            topic = r.string() or ""
            for _ in range(r.count()):
                partition, offset = r.unpack(_FETCH_PARTITION)
                metadata = r.string() or ""
                out.append(OffsetFetchPartitionResponse(topic, partition, offset, metadata, r.int16()))
        _finished(r, "OffsetFetch")
        return OffsetFetchResponse(tuple(out))


# --------------------------------------------------------------------------- JoinGroup v0

@dataclass(frozen=True)
class GroupMember:
    """A member as the leader's JoinGroup response lists it: id and protocol metadata."""

    member_id: str
    metadata: bytes


@dataclass(frozen=True)
class JoinGroupResponse:
    """JoinGroup v0 response. ``members`` is empty except for the leader."""

    error_code: int
    generation_id: int
    group_protocol: str
    leader_id: str
    member_id: str
    members: Tuple[GroupMember, ...]

    @property
    def is_leader(self) -> bool:
        return self.error_code == NO_ERROR and self.leader_id == self.member_id


@dataclass(frozen=True)
class JoinGroupRequest(Request[JoinGroupResponse]):
    """JoinGroup v0. The broker answers once every known member rejoined (or the rebalance timed out).

    ``protocols`` are ``(name, metadata)`` in preference order; the coordinator
    picks one every member supports.
    """

    group_id: str
    session_timeout_ms: int
    member_id: str
    protocol_type: str
    protocols: Sequence[Tuple[str, bytes]]

    API_KEY: ClassVar[int] = API_JOIN_GROUP

    def encode_body(self) -> bytes:
        protocols = _array([_string(name) + _bytes(metadata) for name, metadata in self.protocols])
        return (_string(self.group_id) + _INT32.pack(self.session_timeout_ms) + _string(self.member_id)
                + _string(self.protocol_type) + protocols)

    def decode_response(self, body: memoryview) -> JoinGroupResponse:
        r = _Reader(body)
        error = r.int16()
        generation = r.int32()
        protocol = r.string() or ""
        leader = r.string() or ""
        member = r.string() or ""
        members = []
        for _ in range(r.count()):
            member_id = r.string() or ""
            members.append(GroupMember(member_id, _read_bytes(r)))
        _finished(r, "JoinGroup")
        return JoinGroupResponse(error, generation, protocol, leader, member, tuple(members))


# --------------------------------------------------------------------------- SyncGroup v0

@dataclass(frozen=True)
class SyncGroupResponse:
    """This member's assignment (opaque bytes of the group's protocol)."""

    error_code: int
    assignment: bytes


@dataclass(frozen=True)
class SyncGroupRequest(Request[SyncGroupResponse]):
    """SyncGroup v0. The leader sends every member's assignment; followers send none."""

    group_id: str
    generation_id: int
    member_id: str
    assignments: Sequence[Tuple[str, bytes]] = ()

    API_KEY: ClassVar[int] = API_SYNC_GROUP

    def encode_body(self) -> bytes:
        assignments = _array([_string(member) + _bytes(data) for member, data in self.assignments])
        return _string(self.group_id) + _INT32.pack(self.generation_id) + _string(self.member_id) + assignments

    def decode_response(self, body: memoryview) -> SyncGroupResponse:
        r = _Reader(body)
        response = SyncGroupResponse(r.int16(), _read_bytes(r))
        _finished(r, "SyncGroup")
        return response


# --------------------------------------------------------------------------- Heartbeat, LeaveGroup v0

@dataclass(frozen=True)
class HeartbeatResponse:
    error_code: int


@dataclass(frozen=True)
class HeartbeatRequest(Request[HeartbeatResponse]):
    """Heartbeat v0: keeps the member in the group; REBALANCE_IN_PROGRESS asks it to rejoin."""

    group_id: str
    generation_id: int
    member_id: str

    API_KEY: ClassVar[int] = API_HEARTBEAT

    def encode_body(self) -> bytes:
        return _string(self.group_id) + _INT32.pack(self.generation_id) + _string(self.member_id)

    def decode_response(self, body: memoryview) -> HeartbeatResponse:
        r = _Reader(body)
        response = HeartbeatResponse(r.int16())
        _finished(r, "Heartbeat")
        return response


@dataclass(frozen=True)
class LeaveGroupResponse:
    error_code: int


@dataclass(frozen=True)
class LeaveGroupRequest(Request[LeaveGroupResponse]):
    """LeaveGroup v0: the coordinator rebalances the rest of the group at once."""

    group_id: str
    member_id: str

    API_KEY: ClassVar[int] = API_LEAVE_GROUP

    def encode_body(self) -> bytes:
        return _string(self.group_id) + _string(self.member_id)

    def decode_response(self, body: memoryview) -> LeaveGroupResponse:
        r = _Reader(body)
        response = LeaveGroupResponse(r.int16())
        _finished(r, "LeaveGroup")
        return response
