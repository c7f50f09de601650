"""zkconsumer.wire.protocol: byte-exact against kafka-python's protocol classes, and the error table."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.old.fetch import FetchRequest_v0, FetchResponse_v0
from kafka.protocol.old.list_offsets import ListOffsetsRequest_v0, ListOffsetsResponse_v0
from kafka.protocol.old.metadata import MetadataRequest_v0, MetadataResponse_v0

from zkconsumer.errors import BrokerError
from zkconsumer.wire import broker_errors as be
from zkconsumer.wire import protocol as p


def test_request_frame_header() -> None:
    frame = p.encode_request(p.MetadataRequest(["a"]), correlation_id=42, client_id="cli")
    size, api_key, version, cid = struct.unpack_from(">ihhi", frame)
    assert (size, api_key, version, cid) == (len(frame) - 4, 3, 0, 42)
    assert frame[12:17] == b"\x00\x03cli"
    assert frame[17:] == MetadataRequest_v0(topics=["a"]).encode()


def test_null_client_id() -> None:
    frame = p.encode_request(p.MetadataRequest([]), 1, None)
    assert frame[12:14] == b"\xff\xff"


def test_metadata_request_matches_kafka_python() -> None:
    assert p.MetadataRequest(["a", "bé"]).encode_body() == MetadataRequest_v0(topics=["a", "bé"]).encode()
    assert p.MetadataRequest([]).encode_body() == b"\x00\x00\x00\x00"


def test_fetch_request_matches_kafka_python_grouping_partitions_by_topic() -> None:
    ours = p.FetchRequest(250, 1, [
        p.FetchPartition("t1", 0, 10, 1024),
        p.FetchPartition("t2", 3, 1 << 40, 2048),
        p.FetchPartition("t1", 1, 0, 1024),
    ]).encode_body()
    theirs = FetchRequest_v0(replica_id=-1, max_wait_ms=250, min_bytes=1, topics=[
        ("t1", [(0, 10, 1024), (1, 0, 1024)]),
        ("t2", [(3, 1 << 40, 2048)]),
    ]).encode()
    assert ours == theirs


def test_list_offsets_request_matches_kafka_python() -> None:
    ours = p.ListOffsetsRequest([("t", 0, p.EARLIEST_TIME), ("t", 1, p.LATEST_TIME)]).encode_body()
    theirs = ListOffsetsRequest_v0(replica_id=-1, topics=[("t", [(0, -2, 1), (1, -1, 1)])]).encode()
    assert ours == theirs


def test_metadata_response_decoding() -> None:
    raw = MetadataResponse_v0(
        brokers=[(1, "h1", 9092), (2, "h2", 9093)],
        topics=[(0, "t", [(0, 0, 1, [1, 2], [1]), (9, 1, 2, [2, 3], [2]), (5, 2, -1, [3], [])]),
                (3, "missing", [])],
    ).encode()
    resp = p.MetadataRequest(["t", "missing"]).decode_response(memoryview(raw))
    assert resp.brokers == (p.BrokerMetadata(1, "h1", 9092), p.BrokerMetadata(2, "h2", 9093))
    t, missing = resp.topics
    assert t.topic == "t" and t.error_code == 0
    assert t.partitions[0] == p.PartitionMetadata(0, 0, 1, (1, 2), (1,))
    assert t.partitions[1] == p.PartitionMetadata(1, 9, 2, (2, 3), (2,))
    assert t.partitions[2].leader == p.NO_LEADER and t.partitions[2].isr == ()
    assert (missing.error_code, missing.partitions) == (3, ())
    assert resp.broker(2) == p.BrokerMetadata(2, "h2", 9093) and resp.broker(3) is None


def test_fetch_response_decoding_gives_views_without_copying() -> None:
    raw = bytearray(FetchResponse_v0(topics=[
        ("t", [(0, 0, 100, b"abc"), (1, 6, -1, b"")]),
        ("u", [(7, 1, 5, b"\x01\x02")]),
    ]).encode())
    resp = p.FetchRequest(0, 0, []).decode_response(memoryview(raw))
    a, b, c = resp.partitions
    assert (a.topic, a.partition, a.error_code, a.high_watermark, bytes(a.message_set)) == ("t", 0, 0, 100, b"abc")
    assert (b.error_code, b.high_watermark, bytes(b.message_set)) == (6, -1, b"")
    assert (c.topic, c.partition, c.error_code, bytes(c.message_set)) == ("u", 7, 1, b"\x01\x02")
    assert isinstance(a.message_set, memoryview) and a.message_set.obj is raw


def test_list_offsets_response_decoding_and_offset_lookup() -> None:
    raw = ListOffsetsResponse_v0(topics=[("t", [(0, 0, [42]), (1, 3, [])])]).encode()
    resp = p.ListOffsetsRequest([("t", 0, -1), ("t", 1, -1)]).decode_response(memoryview(raw))
    assert resp.offset("t", 0) == 42
    with pytest.raises(be.UnknownTopicOrPartitionError) as info:
        resp.offset("t", 1)
    assert info.value.retriable and info.value.topic == "t" and info.value.partition == 1
    with pytest.raises(be.ProtocolDecodeError):
        resp.offset("t", 9)


def test_truncated_response_raises_decode_error() -> None:
    raw = MetadataResponse_v0(brokers=[(1, "h1", 9092)], topics=[]).encode()
    with pytest.raises(be.ProtocolDecodeError):
        p.MetadataRequest([]).decode_response(memoryview(raw[:-3]))
    fetch = FetchResponse_v0(topics=[("t", [(0, 0, 100, b"abcdef")])]).encode()
    with pytest.raises(be.ProtocolDecodeError):
        p.FetchRequest(0, 0, []).decode_response(memoryview(fetch[:-2]))


def test_a_fetch_response_cut_anywhere_or_with_a_negative_size_is_a_decode_error() -> None:
    fetch = FetchResponse_v0(topics=[("t", [(0, 0, 100, b"abcdef"), (1, 0, 7, b"")]), ("u", [(2, 1, -1, b"x")])]).encode()
    whole = p.FetchRequest(0, 0, []).decode_response(memoryview(fetch))
    assert [(q.topic, q.partition, q.error_code, q.high_watermark, bytes(q.message_set)) for q in whole.partitions] == [
        ("t", 0, 0, 100, b"abcdef"), ("t", 1, 0, 7, b""), ("u", 2, 1, -1, b"x")]
    for cut in range(len(fetch)):
        with pytest.raises(be.ProtocolDecodeError):
            p.FetchRequest(0, 0, []).decode_response(memoryview(fetch[:cut]))
    negative = bytearray(fetch)
    negative[4 + 2 + 1 + 4 + 4 + 2 + 8:4 + 2 + 1 + 4 + 4 + 2 + 8 + 4] = b"\xff\xff\xff\xfe"
    with pytest.raises(be.ProtocolDecodeError):
        p.FetchRequest(0, 0, []).decode_response(memoryview(bytes(negative)))


def test_response_header() -> None:
    cid, body = p.decode_response_header(memoryview(b"\x00\x00\x00\x07rest"))
    assert cid == 7 and bytes(body) == b"rest"
    with pytest.raises(be.ProtocolDecodeError):
        p.decode_response_header(memoryview(b"\x00"))


@pytest.mark.parametrize("code, cls, retriable", [
    (1, be.OffsetOutOfRangeError, False),
    (2, be.InvalidMessageError, False),
    (3, be.UnknownTopicOrPartitionError, True),
    (5, be.LeaderNotAvailableError, True),
    (6, be.NotLeaderForPartitionError, True),
    (7, be.RequestTimedOutError, True),
    (9, be.ReplicaNotAvailableError, True),
    (10, be.BrokerMessageTooLargeError, False),
])
def test_error_table(code: int, cls: type, retriable: bool) -> None:
    err = be.error_for_code(code, "detail", "t", 4)
    assert type(err) is cls and isinstance(err, BrokerError)
    assert err.error_code == code and err.retriable is retriable
    assert be.ERROR_NAMES[code] in str(err) and "t-4" in str(err) and "detail" in str(err)


def test_every_known_code_maps_to_its_own_class() -> None:
    for code, name in be.ERROR_NAMES.items():
        if code <= 0:
            continue
        err = be.error_for_code(code)
        assert err.error_code == code and err.error_name == name
    assert be.error_for_code(14).retriable and not be.error_for_code(29).retriable


def test_unknown_codes() -> None:
    for code in (-1, 99):
        err = be.error_for_code(code)
        assert isinstance(err, be.UnknownServerError) and err.error_code == code and not err.retriable
    with pytest.raises(ValueError):
        be.error_for_code(0)
    be.raise_for_code(0)
    with pytest.raises(be.NotLeaderForPartitionError):
        be.raise_for_code(6)


# --------------------------------------------------------------------------- issue 17 item 4: kafka-python writes the bytes

def test_issue17_item4_metadata_and_list_offsets_are_encoded_by_kafka_python() -> None:
    from kafka.protocol.consumer import ListOffsetsRequest
    from kafka.protocol.metadata import MetadataRequest

    for ours, theirs in ((p.MetadataRequest(["a"]), MetadataRequest), (p.ListOffsetsRequest([("t", 0, -1)]), ListOffsetsRequest)):
        assert isinstance(ours, p.KafkaPythonRequest)
        message = ours.message()
        assert isinstance(message, theirs)
        assert (message.API_KEY, message.API_VERSION) == (ours.API_KEY, ours.API_VERSION) == (theirs.API_KEY, 0)
    # the hot path stays hand-written (scripts/bench-decode --fetch-response)
    assert not isinstance(p.FetchRequest(0, 0, []), p.KafkaPythonRequest)


def test_kafka_python_frame_matches_the_hand_written_header() -> None:
    request = p.ListOffsetsRequest([("t", 0, -2)])
    frame = p.encode_request(request, correlation_id=0x01020304, client_id="cli")
    assert frame[:4] == struct.pack(">i", len(frame) - 4)
    assert frame[4:12] == struct.pack(">hhi", 2, 0, 0x01020304) and frame[12:17] == b"\x00\x03cli"
    assert frame[17:] == request.encode_body()


def test_garbage_and_padding_are_decode_errors() -> None:
    bad_utf8 = struct.pack(">ii", 1, 1) + b"\x00\x02\xff\xfe" + struct.pack(">ii", 9092, 0)
    with pytest.raises(be.ProtocolDecodeError, match="does not parse"):
        p.MetadataRequest([]).decode_response(memoryview(bad_utf8))
    raw = MetadataResponse_v0(brokers=[(1, "h1", 9092)], topics=[]).encode()
    with pytest.raises(be.ProtocolDecodeError, match="2 unexpected trailing bytes"):
        p.MetadataRequest([]).decode_response(memoryview(raw + b"\x00\x00"))
    raw = ListOffsetsResponse_v0(topics=[("t", [(0, 0, [42])])]).encode()
    with pytest.raises(be.ProtocolDecodeError):
        p.ListOffsetsRequest([("t", 0, -1)]).decode_response(memoryview(raw[:-1]))
    with pytest.raises(be.ProtocolDecodeError):
        p.ListOffsetsRequest([("t", 0, -1)]).decode_response(memoryview(raw + b"\x00"))


def test_null_arrays_read_as_empty() -> None:
    assert p.MetadataRequest([]).decode_response(memoryview(b"\xff" * 8)) == p.MetadataResponse((), ())
    raw = struct.pack(">ii", 0, 1) + b"\x00\x00\x00\x01t" + struct.pack(">ihiiii", 1, 0, 0, 1, -1, -1)
    (topic,) = p.MetadataRequest(["t"]).decode_response(memoryview(raw)).topics
    assert topic.partitions == (p.PartitionMetadata(0, 0, 1, (), ()),)
