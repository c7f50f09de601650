"""Kafka's consumer-group requests: coordinator lookup, offsets in Kafka, and group membership.

Each request is a :class:`~zkconsumer.wire.protocol.KafkaPythonRequest`: kafka-python's
``kafka.protocol`` classes (``FindCoordinatorRequest``, ``OffsetCommitRequest``,
``OffsetFetchRequest``, ``JoinGroupRequest``, ``SyncGroupRequest``,
``HeartbeatRequest``, ``LeaveGroupRequest``, built from Kafka's own message
schemas) write and read the bytes; this module fixes the versions, gives the
requests and responses typed, frozen shapes and names the error codes its
callers act on. A request here is sent with
:meth:`zkconsumer.wire.connection.BrokerConnection.send` like any other.

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
DescribeGroups      15       0        a group's state and members, as the coordinator sees them (admin)
ListGroups          16       0        the groups a broker coordinates (admin: ``groups list``)
==================  =======  =======  ===================================================

Version choices, from Kafka 0.9.0.1's ``KafkaApis``: OffsetCommit v0 and
OffsetFetch v0 make the *broker* read and write ZooKeeper, so offsets in Kafka
need v1 and up. Kafka 0.8.2's ZooKeeper consumer sends OffsetCommit v1 with
generation ``-1`` and member id ``""`` (a group the coordinator does not manage;
0.8.2 brokers know no v2); a broker-managed group's members send v2 with their
generation and member id, and the coordinator rejects a stale one with
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID or REBALANCE_IN_PROGRESS.

Worked example (what a member sends first, without a socket)::

    >>> req = JoinGroupRequest("g1", 6000, UNKNOWN_MEMBER_ID, "zkconsumer", (("range", b"{}"),))
    >>> req.encode_body().hex()
    '00026731000017700000000a7a6b636f6e73756d657200000001000572616e6765000000027b7d'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Sequence, Tuple

from kafka.protocol.admin import DescribeGroupsRequest as _KDescribeGroupsRequest
from kafka.protocol.admin import DescribeGroupsResponse as _KDescribeGroupsResponse
from kafka.protocol.admin import ListGroupsRequest as _KListGroupsRequest
from kafka.protocol.admin import ListGroupsResponse as _KListGroupsResponse
from kafka.protocol.consumer import HeartbeatRequest as _KHeartbeatRequest
from kafka.protocol.consumer import HeartbeatResponse as _KHeartbeatResponse
from kafka.protocol.consumer import JoinGroupRequest as _KJoinGroupRequest
from kafka.protocol.consumer import JoinGroupResponse as _KJoinGroupResponse
from kafka.protocol.consumer import LeaveGroupRequest as _KLeaveGroupRequest
from kafka.protocol.consumer import LeaveGroupResponse as _KLeaveGroupResponse
from kafka.protocol.consumer import OffsetCommitRequest as _KOffsetCommitRequest
from kafka.protocol.consumer import OffsetCommitResponse as _KOffsetCommitResponse
from kafka.protocol.consumer import OffsetFetchRequest as _KOffsetFetchRequest
from kafka.protocol.consumer import OffsetFetchResponse as _KOffsetFetchResponse
from kafka.protocol.consumer import SyncGroupRequest as _KSyncGroupRequest
from kafka.protocol.consumer import SyncGroupResponse as _KSyncGroupResponse
from kafka.protocol.metadata import FindCoordinatorRequest as _KFindCoordinatorRequest
from kafka.protocol.metadata import FindCoordinatorResponse as _KFindCoordinatorResponse

from .broker_errors import ERROR_NAMES
from .protocol import KafkaPythonRequest, field_bytes, field_items, field_text, group_by_topic

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
    "API_DESCRIBE_GROUPS", "DescribeGroupsRequest", "DescribedGroup", "DescribedMember",
    "API_LIST_GROUPS", "ListGroupsRequest", "ListedGroups",
]

API_OFFSET_COMMIT = 8
API_OFFSET_FETCH = 9
API_GROUP_COORDINATOR = 10
API_JOIN_GROUP = 11
API_HEARTBEAT = 12
API_LEAVE_GROUP = 13
API_SYNC_GROUP = 14
API_DESCRIBE_GROUPS = 15
API_LIST_GROUPS = 16

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

def error_name(code: int) -> str:
    """Kafka 0.9's name for a broker error code (``"UNKNOWN_<code>"`` if unknown).

    >>> error_name(16), error_name(27)
    ('NOT_COORDINATOR_FOR_GROUP', 'REBALANCE_IN_PROGRESS')
    """
    return _GROUP_ERROR_NAMES.get(code) or ERROR_NAMES.get(code, f"UNKNOWN_{code}")


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
class GroupCoordinatorRequest(KafkaPythonRequest[GroupCoordinatorResponse]):
    """GroupCoordinator v0 (Kafka 0.8.2's ConsumerMetadataRequest, kafka-python's FindCoordinator); any live broker answers."""

    group_id: str

    API_KEY: ClassVar[int] = API_GROUP_COORDINATOR
    RESPONSE: ClassVar[Any] = _KFindCoordinatorResponse

    def message(self) -> Any:
        return _KFindCoordinatorRequest(key=self.group_id, version=self.API_VERSION)

    def convert(self, response: Any) -> GroupCoordinatorResponse:
        return GroupCoordinatorResponse(int(response.error_code), int(response.node_id), field_text(response.host),
                                        int(response.port))


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

    def errors(self) -> Dict[Tuple[str, int], int]:
        """``{(topic, partition): error code}``."""
        return {(p.topic, p.partition): p.error_code for p in self.partitions}


class _OffsetCommitRequest(KafkaPythonRequest[OffsetCommitResponse]):
    """OffsetCommit at :attr:`API_VERSION` 1 or 2 (the fields of the other are left at their defaults)."""

    API_KEY: ClassVar[int] = API_OFFSET_COMMIT
    RESPONSE: ClassVar[Any] = _KOffsetCommitResponse

    group_id: str
    generation_id: int
    member_id: str
    offsets: Sequence[OffsetCommitEntry]

    def _fields(self) -> Dict[str, Any]:
        """Top-level fields besides group, generation, member and topics."""
        return {}

    def message(self) -> Any:
        topic = _KOffsetCommitRequest.OffsetCommitRequestTopic
        partition = topic.OffsetCommitRequestPartition
        entries = [(e.topic, partition(partition_index=e.partition, committed_offset=e.offset,
                                       commit_timestamp=DEFAULT_TIMESTAMP, committed_metadata=e.metadata))
                   for e in self.offsets]
        return _KOffsetCommitRequest(
            group_id=self.group_id, generation_id_or_member_epoch=self.generation_id, member_id=self.member_id,
            topics=[topic(name=t, partitions=ps) for t, ps in group_by_topic(entries)], version=self.API_VERSION,
            **self._fields())

    def convert(self, response: Any) -> OffsetCommitResponse:
        return OffsetCommitResponse(tuple(
            OffsetCommitPartitionResponse(field_text(t.name), int(p.partition_index), int(p.error_code))
            for t in field_items(response.topics) for p in field_items(t.partitions)))


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


@dataclass(frozen=True)
class OffsetCommitRequestV2(_OffsetCommitRequest):
    """OffsetCommit v2: a generation-fenced commit by a member of a broker-managed group."""

    group_id: str
    generation_id: int
    member_id: str
    offsets: Sequence[OffsetCommitEntry]
    retention_time_ms: int = DEFAULT_RETENTION_TIME

    API_VERSION: ClassVar[int] = 2

    def _fields(self) -> Dict[str, Any]:
        return {"retention_time_ms": self.retention_time_ms}


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
class OffsetFetchRequest(KafkaPythonRequest[OffsetFetchResponse]):
    """OffsetFetch v1: committed offsets of ``partitions`` from the group's coordinator."""

    group_id: str
    partitions: Sequence[Tuple[str, int]]

    API_KEY: ClassVar[int] = API_OFFSET_FETCH
    API_VERSION: ClassVar[int] = 1
    RESPONSE: ClassVar[Any] = _KOffsetFetchResponse

    def message(self) -> Any:
        topic = _KOffsetFetchRequest.OffsetFetchRequestTopic
        return _KOffsetFetchRequest(group_id=self.group_id, version=self.API_VERSION, topics=[
            topic(name=t, partition_indexes=ps) for t, ps in group_by_topic(list(self.partitions))])

    def convert(self, response: Any) -> OffsetFetchResponse:
        return OffsetFetchResponse(tuple(
            OffsetFetchPartitionResponse(field_text(t.name), int(p.partition_index), int(p.committed_offset),
                                         field_text(p.metadata), int(p.error_code))
            for t in field_items(response.topics) for p in field_items(t.partitions)))


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
class JoinGroupRequest(KafkaPythonRequest[JoinGroupResponse]):
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
    RESPONSE: ClassVar[Any] = _KJoinGroupResponse

    def message(self) -> Any:
        protocol = _KJoinGroupRequest.JoinGroupRequestProtocol
        return _KJoinGroupRequest(
            group_id=self.group_id, session_timeout_ms=self.session_timeout_ms, member_id=self.member_id,
            protocol_type=self.protocol_type, version=self.API_VERSION,
            protocols=[protocol(name=name, metadata=bytes(metadata)) for name, metadata in self.protocols])

    def convert(self, response: Any) -> JoinGroupResponse:
        members = tuple(GroupMember(field_text(m.member_id), field_bytes(m.metadata)) for m in field_items(response.members))
        return JoinGroupResponse(int(response.error_code), int(response.generation_id), field_text(response.protocol_name),
                                 field_text(response.leader), field_text(response.member_id), members)


# --------------------------------------------------------------------------- SyncGroup v0

@dataclass(frozen=True)
class SyncGroupResponse:
    """This member's assignment (opaque bytes of the group's protocol)."""

    error_code: int
    assignment: bytes


@dataclass(frozen=True)
class SyncGroupRequest(KafkaPythonRequest[SyncGroupResponse]):
    """SyncGroup v0. The leader sends every member's assignment; followers send none."""

    group_id: str
    generation_id: int
    member_id: str
    assignments: Sequence[Tuple[str, bytes]] = ()

    API_KEY: ClassVar[int] = API_SYNC_GROUP
    RESPONSE: ClassVar[Any] = _KSyncGroupResponse

    def message(self) -> Any:
        assignment = _KSyncGroupRequest.SyncGroupRequestAssignment
        return _KSyncGroupRequest(
            group_id=self.group_id, generation_id=self.generation_id, member_id=self.member_id,
            version=self.API_VERSION,
            assignments=[assignment(member_id=member, assignment=bytes(data)) for member, data in self.assignments])

    def convert(self, response: Any) -> SyncGroupResponse:
        return SyncGroupResponse(int(response.error_code), field_bytes(response.assignment))


# --------------------------------------------------------------------------- Heartbeat, LeaveGroup v0

@dataclass(frozen=True)
class HeartbeatResponse:
    error_code: int


@dataclass(frozen=True)
class HeartbeatRequest(KafkaPythonRequest[HeartbeatResponse]):
    """Heartbeat v0: keeps the member in the group; REBALANCE_IN_PROGRESS asks it to rejoin."""

    group_id: str
    generation_id: int
    member_id: str

    API_KEY: ClassVar[int] = API_HEARTBEAT
    RESPONSE: ClassVar[Any] = _KHeartbeatResponse

    def message(self) -> Any:
        return _KHeartbeatRequest(group_id=self.group_id, generation_id=self.generation_id, member_id=self.member_id,
                                  version=self.API_VERSION)

    def convert(self, response: Any) -> HeartbeatResponse:
        return HeartbeatResponse(int(response.error_code))


@dataclass(frozen=True)
class LeaveGroupResponse:
    error_code: int


@dataclass(frozen=True)
class LeaveGroupRequest(KafkaPythonRequest[LeaveGroupResponse]):
    """LeaveGroup v0: the coordinator rebalances the rest of the group at once."""

    group_id: str
    member_id: str

    API_KEY: ClassVar[int] = API_LEAVE_GROUP
    RESPONSE: ClassVar[Any] = _KLeaveGroupResponse

    def message(self) -> Any:
        return _KLeaveGroupRequest(group_id=self.group_id, member_id=self.member_id, version=self.API_VERSION)

    def convert(self, response: Any) -> LeaveGroupResponse:
        return LeaveGroupResponse(int(response.error_code))


# --------------------------------------------------------------------------- DescribeGroups v0


@dataclass(frozen=True)
class DescribedMember:
    """A member of a broker-managed group, as DescribeGroups reports it."""

    member_id: str
    client_id: str
    client_host: str


@dataclass(frozen=True)
class DescribedGroup:
    """One group's state (``Stable``, ``PreparingRebalance``, ``AwaitingSync``, ``Dead``, ...) and members."""

    group_id: str
    error_code: int
    state: str
    protocol_type: str
    members: Tuple[DescribedMember, ...]


@dataclass(frozen=True)
class DescribeGroupsRequest(KafkaPythonRequest[Tuple[DescribedGroup, ...]]):
    """DescribeGroups v0 (Kafka 0.9): sent to each group's coordinator."""

    groups: Sequence[str]

    API_KEY: ClassVar[int] = API_DESCRIBE_GROUPS
    RESPONSE: ClassVar[Any] = _KDescribeGroupsResponse

    def message(self) -> Any:
        return _KDescribeGroupsRequest(groups=list(self.groups), version=self.API_VERSION)

    def convert(self, response: Any) -> Tuple[DescribedGroup, ...]:
        return tuple(
            DescribedGroup(field_text(g.group_id), int(g.error_code), field_text(g.group_state),
                           field_text(g.protocol_type),
                           tuple(DescribedMember(field_text(m.member_id), field_text(m.client_id),
                                                 field_text(m.client_host)) for m in field_items(g.members)))
            for g in field_items(response.groups))


# --------------------------------------------------------------------------- ListGroups v0


@dataclass(frozen=True)
class ListedGroups:
    """A broker's answer to ListGroups: an error code and ``(group_id, protocol_type)`` of each
    group it coordinates (in Kafka 0.9: the groups with coordinator members)."""

    error_code: int
    groups: Tuple[Tuple[str, str], ...]


@dataclass(frozen=True)
class ListGroupsRequest(KafkaPythonRequest[ListedGroups]):
    """ListGroups v0 (Kafka 0.9): sent to every broker, each answers for the groups it coordinates."""

    API_KEY: ClassVar[int] = API_LIST_GROUPS
    RESPONSE: ClassVar[Any] = _KListGroupsResponse

    def message(self) -> Any:
        return _KListGroupsRequest(version=self.API_VERSION)

    def convert(self, response: Any) -> ListedGroups:
        return ListedGroups(int(response.error_code), tuple(
            (field_text(g.group_id), field_text(g.protocol_type)) for g in field_items(response.groups)))
