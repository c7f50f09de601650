"""zkconsumer.wire.group_protocol: byte-exact against kafka-python's classes, both directions, and framing."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.old.commit import (
    OffsetCommitRequest_v1,
    OffsetCommitRequest_v2,
    OffsetCommitResponse_v2,
    OffsetFetchRequest_v1,
    OffsetFetchResponse_v1,
)
from kafka.protocol.old.find_coordinator import FindCoordinatorRequest_v0, FindCoordinatorResponse_v0
from kafka.protocol.old.group import (
    HeartbeatRequest_v0,
    HeartbeatResponse_v0,
    JoinGroupRequest_v0,
    JoinGroupResponse_v0,
    LeaveGroupRequest_v0,
    LeaveGroupResponse_v0,
    SyncGroupRequest_v0,
    SyncGroupResponse_v0,
)

from zkconsumer.wire import group_protocol as g
from zkconsumer.wire.broker_errors import ProtocolDecodeError
from zkconsumer.wire.protocol import decode_response_header, encode_request


def decoded(request_class, ours):  # type: ignore[no-untyped-def]
    """Our request body, parsed by kafka-python (which rejects any byte too many or too few)."""
    return request_class.decode(ours.encode_body()).to_object()


def test_group_coordinator_request_and_response() -> None:
    assert g.GroupCoordinatorRequest("grp").encode_body() == FindCoordinatorRequest_v0(key="grp").encode()
    body = FindCoordinatorResponse_v0(error_code=0, node_id=2, host="broker-2", port=9093).encode()
    assert g.GroupCoordinatorRequest("grp").decode_response(memoryview(body)) == \
        g.GroupCoordinatorResponse(0, 2, "broker-2", 9093)
    body = FindCoordinatorResponse_v0(error_code=15, node_id=-1, host="", port=-1).encode()
    assert g.GroupCoordinatorRequest("grp").decode_response(memoryview(body)).error_code == 15


def test_offset_commit_v1_is_what_a_zookeeper_managed_group_sends() -> None:
    request = g.OffsetCommitRequestV1("grp", [g.OffsetCommitEntry("t", 0, 42), g.OffsetCommitEntry("u", 3, 1 << 40),
                                              g.OffsetCommitEntry("t", 1, 7)])
    assert request.API_KEY == 8 and request.API_VERSION == 1
    theirs = OffsetCommitRequest_v1(group_id="grp", generation_id_or_member_epoch=-1, member_id="", topics=[
        ("t", [(0, 42, -1, ""), (1, 7, -1, "")]), ("u", [(3, 1 << 40, -1, "")])])
    assert request.encode_body() == theirs.encode()


def test_offset_commit_v2_carries_generation_member_and_default_retention() -> None:
    request = g.OffsetCommitRequestV2("grp", 5, "m-1", [g.OffsetCommitEntry("t", 2, 9, "meta")])
    assert request.API_VERSION == 2
    parsed = decoded(OffsetCommitRequest_v2, request)
    assert (parsed["group_id"], parsed["generation_id_or_member_epoch"], parsed["member_id"],
            parsed["retention_time_ms"]) == ("grp", 5, "m-1", -1)
    assert parsed["topics"] == [{"name": "t", "partitions": [
        {"partition_index": 2, "committed_offset": 9, "committed_metadata": "meta"}]}]


def test_offset_commit_response_errors_per_partition() -> None:
    body = OffsetCommitResponse_v2(topics=[("t", [(0, 0), (1, 22)]), ("u", [(3, 16)])]).encode()
    response = g.OffsetCommitRequestV2("grp", 1, "m", []).decode_response(memoryview(body))
    assert response.errors() == {("t", 0): 0, ("t", 1): 22, ("u", 3): 16}


def test_offset_fetch_v1_request_and_response() -> None:
    request = g.OffsetFetchRequest("grp", [("t", 0), ("u", 1), ("t", 2)])
    assert request.API_KEY == 9 and request.API_VERSION == 1
    assert request.encode_body() == OffsetFetchRequest_v1(group_id="grp", topics=[("t", [0, 2]), ("u", [1])]).encode()
    body = OffsetFetchResponse_v1(topics=[("t", [(0, 42, "", 0), (2, -1, "", 0)]), ("u", [(1, -1, "", 14)])]).encode()
    parts = request.decode_response(memoryview(body)).partitions
    assert [(p.topic, p.partition, p.offset, p.error_code) for p in parts] == [
        ("t", 0, 42, 0), ("t", 2, -1, 0), ("u", 1, -1, 14)]


def test_join_group_request_and_leader_response() -> None:
    request = g.JoinGroupRequest("grp", 6000, "", "zkconsumer", [("range", b'{"a":1}'), ("roundrobin", b"")])
    theirs = JoinGroupRequest_v0(group_id="grp", session_timeout_ms=6000, member_id="", protocol_type="zkconsumer",
                                 protocols=[("range", b'{"a":1}'), ("roundrobin", b"")])
    assert request.encode_body() == theirs.encode()
    body = JoinGroupResponse_v0(error_code=0, generation_id=3, protocol_name="range", leader="m-1", member_id="m-1",
                                members=[("m-1", b"x"), ("m-2", b"")]).encode()
    response = request.decode_response(memoryview(body))
    assert response == g.JoinGroupResponse(0, 3, "range", "m-1", "m-1",
                                           (g.GroupMember("m-1", b"x"), g.GroupMember("m-2", b"")))
    assert response.is_leader


def test_join_group_follower_and_error_responses() -> None:
    request = g.JoinGroupRequest("grp", 6000, "m-2", "zkconsumer", [("range", b"")])
    body = JoinGroupResponse_v0(error_code=0, generation_id=3, protocol_name="range", leader="m-1", member_id="m-2",
                                members=[]).encode()
    assert not request.decode_response(memoryview(body)).is_leader
    body = JoinGroupResponse_v0(error_code=25, generation_id=0, protocol_name="", leader="", member_id="m-2",
                                members=[]).encode()
    response = request.decode_response(memoryview(body))
    assert response.error_code == g.UNKNOWN_MEMBER and not response.is_leader


def test_sync_group_leader_and_follower() -> None:
    leader = g.SyncGroupRequest("grp", 3, "m-1", [("m-1", b"a1"), ("m-2", b"a2")])
    assert leader.encode_body() == SyncGroupRequest_v0(group_id="grp", generation_id=3, member_id="m-1",
                                                       assignments=[("m-1", b"a1"), ("m-2", b"a2")]).encode()
    follower = g.SyncGroupRequest("grp", 3, "m-2")
    assert follower.encode_body() == SyncGroupRequest_v0(group_id="grp", generation_id=3, member_id="m-2",
                                                         assignments=[]).encode()
    body = SyncGroupResponse_v0(error_code=0, assignment=b"a2").encode()
    assert follower.decode_response(memoryview(body)) == g.SyncGroupResponse(0, b"a2")
    body = SyncGroupResponse_v0(error_code=27, assignment=b"").encode()
    assert follower.decode_response(memoryview(body)) == g.SyncGroupResponse(27, b"")


def test_heartbeat_and_leave_group() -> None:
    assert g.HeartbeatRequest("grp", 4, "m-1").encode_body() == \
        HeartbeatRequest_v0(group_id="grp", generation_id=4, member_id="m-1").encode()
    assert g.HeartbeatRequest("grp", 4, "m-1").decode_response(memoryview(HeartbeatResponse_v0(error_code=27).encode())) \
        == g.HeartbeatResponse(27)
    assert g.LeaveGroupRequest("grp", "m-1").encode_body() == LeaveGroupRequest_v0(group_id="grp", member_id="m-1").encode()
    assert g.LeaveGroupRequest("grp", "m-1").decode_response(memoryview(LeaveGroupResponse_v0(error_code=0).encode())) \
        == g.LeaveGroupResponse(0)


@pytest.mark.parametrize("request_", [
    g.GroupCoordinatorRequest("grp"), g.OffsetCommitRequestV1("grp", []), g.OffsetCommitRequestV2("grp", 1, "m", []),
    g.OffsetFetchRequest("grp", [("t", 0)]), g.JoinGroupRequest("grp", 6000, "", "zkconsumer", []),
    g.SyncGroupRequest("grp", 1, "m"), g.HeartbeatRequest("grp", 1, "m"), g.LeaveGroupRequest("grp", "m"),
], ids=lambda r: type(r).__name__)
def test_frames_carry_the_api_key_and_version(request_) -> None:  # type: ignore[no-untyped-def]
    frame = encode_request(request_, correlation_id=9, client_id="cli")
    size, api_key, version, correlation = struct.unpack_from(">ihhi", frame)
    assert (size, api_key, version, correlation) == (len(frame) - 4, request_.API_KEY, request_.API_VERSION, 9)
    assert frame[12:17] == b"\x00\x03cli" and frame[17:] == request_.encode_body()


@pytest.mark.parametrize("request_,body", [
    (g.GroupCoordinatorRequest("grp"), FindCoordinatorResponse_v0(error_code=0, node_id=1, host="h", port=1).encode()),
    (g.JoinGroupRequest("grp", 6000, "", "zkconsumer", []),
     JoinGroupResponse_v0(error_code=0, generation_id=1, protocol_name="range", leader="m", member_id="m",
                          members=[("m", b"meta")]).encode()),
    (g.SyncGroupRequest("grp", 1, "m"), SyncGroupResponse_v0(error_code=0, assignment=b"abc").encode()),
    (g.OffsetFetchRequest("grp", [("t", 0)]), OffsetFetchResponse_v1(topics=[("t", [(0, 1, "", 0)])]).encode()),
    (g.HeartbeatRequest("grp", 1, "m"), HeartbeatResponse_v0(error_code=0).encode()),
], ids=lambda v: type(v).__name__ if not isinstance(v, bytes) else "body")
def test_truncated_or_padded_responses_are_decode_errors(request_, body: bytes) -> None:  # type: ignore[no-untyped-def]
    request_.decode_response(memoryview(body))
    with pytest.raises(ProtocolDecodeError):
        request_.decode_response(memoryview(body[:-1]))
    with pytest.raises(ProtocolDecodeError):
        request_.decode_response(memoryview(body + b"\x00"))


def test_a_response_frame_round_trip_through_the_header_split() -> None:
    body = HeartbeatResponse_v0(error_code=22).encode()
    correlation, rest = decode_response_header(memoryview(struct.pack(">i", 77) + body))
    assert correlation == 77 and g.HeartbeatRequest("grp", 1, "m").decode_response(rest).error_code == 22


def test_error_names_and_code_sets() -> None:
    assert g.error_name(16) == "NOT_COORDINATOR_FOR_GROUP" and g.error_name(25) == "UNKNOWN_MEMBER_ID"
    assert g.error_name(999) == "UNKNOWN_999"
    assert g.COORDINATOR_MOVED_CODES == {15, 16}
    assert g.MEMBERSHIP_LOST_CODES == {22, 25, 27}


@pytest.mark.parametrize("request_,name", [
    (g.GroupCoordinatorRequest("grp"), "FindCoordinatorRequest"), (g.OffsetCommitRequestV1("grp", []), "OffsetCommitRequest"),
    (g.OffsetCommitRequestV2("grp", 1, "m", []), "OffsetCommitRequest"), (g.OffsetFetchRequest("grp", []), "OffsetFetchRequest"),
    (g.JoinGroupRequest("grp", 6000, "", "zkconsumer", []), "JoinGroupRequest"),
    (g.SyncGroupRequest("grp", 1, "m"), "SyncGroupRequest"), (g.HeartbeatRequest("grp", 1, "m"), "HeartbeatRequest"),
    (g.LeaveGroupRequest("grp", "m"), "LeaveGroupRequest"),
], ids=lambda v: v if isinstance(v, str) else type(v).__name__)
def test_issue17_item4_group_requests_are_encoded_by_kafka_python(request_, name: str) -> None:  # type: ignore[no-untyped-def]
    from zkconsumer.wire.protocol import KafkaPythonRequest

    assert isinstance(request_, KafkaPythonRequest)
    message = request_.message()
    assert type(message).__module__.startswith("kafka.protocol.") and type(message).__name__ == name
    assert (message.API_KEY, message.API_VERSION) == (request_.API_KEY, request_.API_VERSION)
    assert request_.encode_body() == bytes(message.encode())


def test_a_truncated_bytes_field_is_caught_although_kafka_python_slices_short() -> None:
    body = SyncGroupResponse_v0(error_code=0, assignment=b"abcdef").encode()
    with pytest.raises(ProtocolDecodeError, match="truncated"):
        g.SyncGroupRequest("grp", 1, "m").decode_response(memoryview(body[:-2]))
    with pytest.raises(ProtocolDecodeError, match="trailing"):
        g.SyncGroupRequest("grp", 1, "m").decode_response(memoryview(body + b"\x00"))


def test_describe_groups_request_and_response() -> None:
    from kafka.protocol.old.admin import DescribeGroupsRequest_v0, DescribeGroupsResponse_v0

    request = g.DescribeGroupsRequest(["grp"])
    assert (request.API_KEY, request.API_VERSION) == (15, 0)
    assert request.encode_body() == DescribeGroupsRequest_v0(groups=["grp"]).encode()
    body = DescribeGroupsResponse_v0(groups=[
        (0, "grp", "Stable", "consumer", "range", [("m-1", "cli", "/10.0.0.1", b"meta", b"assign")]),
        (16, "other", "", "", "", []),
    ]).encode()
    assert request.decode_response(memoryview(body)) == (
        g.DescribedGroup("grp", 0, "Stable", "consumer", (g.DescribedMember("m-1", "cli", "/10.0.0.1"),)),
        g.DescribedGroup("other", 16, "", "", ()),
    )


def test_list_groups_request_and_response() -> None:
    from kafka.protocol.old.admin import ListGroupsRequest_v0, ListGroupsResponse_v0

    request = g.ListGroupsRequest()
    assert (request.API_KEY, request.API_VERSION) == (16, 0)
    assert request.encode_body() == ListGroupsRequest_v0().encode()
    body = ListGroupsResponse_v0(error_code=0, groups=[("grp", "consumer"), ("old", "")]).encode()
    assert request.decode_response(memoryview(body)) == g.ListedGroups(0, (("grp", "consumer"), ("old", "")))
