"""ZooKeeper paths and znode bytes as Kafka 0.8.2's consumer and tools write and read them (byte for byte)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from zkconsumer.errors import MalformedZnodeError, ZkConsumerError
from zkconsumer.structs import Broker
from zkconsumer.zookeeper.zkformat import (
    BROKER_IDS_PATH,
    BROKER_TOPICS_PATH,
    CONSUMERS_PATH,
    GroupPaths,
    PartitionState,
    Registration,
    broker_path,
    decode_broker,
    decode_offset,
    decode_owner,
    decode_partition_state,
    decode_registration,
    decode_topic_partitions,
    encode_offset,
    encode_owner,
    encode_registration,
    partition_state_path,
    topic_path,
)

# Every decoder, with a path, for the "any bad bytes" tests.
DECODERS = {
    "broker": lambda d: decode_broker("/brokers/ids/1", d),
    "topic": lambda d: decode_topic_partitions("/brokers/topics/t", d),
    "state": lambda d: decode_partition_state("/brokers/topics/t/partitions/0/state", d),
    "registration": lambda d: decode_registration("/consumers/g/ids/c", d),
    "offset": lambda d: decode_offset("/consumers/g/offsets/t/0", d),
    "owner": lambda d: decode_owner("/consumers/g/owners/t/0", d),
}
DECODER_PATHS = {
    "broker": "/brokers/ids/1",
    "topic": "/brokers/topics/t",
    "state": "/brokers/topics/t/partitions/0/state",
    "registration": "/consumers/g/ids/c",
    "offset": "/consumers/g/offsets/t/0",
    "owner": "/consumers/g/owners/t/0",
}


# --------------------------------------------------------------------------- paths


def test_root_paths() -> None:
    assert CONSUMERS_PATH == "/consumers"
    assert BROKER_IDS_PATH == "/brokers/ids"
    assert BROKER_TOPICS_PATH == "/brokers/topics"


def test_group_paths() -> None:
    p = GroupPaths("g1")
    assert p.root == "/consumers/g1"
    assert p.ids == "/consumers/g1/ids"
    assert p.member("g1_host-1700000000000-ab12cd34") == "/consumers/g1/ids/g1_host-1700000000000-ab12cd34"
    assert p.owners == "/consumers/g1/owners"
    assert p.owners_topic("events") == "/consumers/g1/owners/events"
    assert p.owner("events", 7) == "/consumers/g1/owners/events/7"
    assert p.offsets == "/consumers/g1/offsets"
    assert p.offsets_topic("events") == "/consumers/g1/offsets/events"
    assert p.offset("events", 7) == "/consumers/g1/offsets/events/7"


def test_group_paths_is_frozen() -> None:
    p = GroupPaths("g1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.group = "g2"  # type: ignore[misc]
    assert p == GroupPaths("g1") and hash(p) == hash(GroupPaths("g1"))


def test_broker_paths() -> None:
    assert topic_path("events") == "/brokers/topics/events"
    assert partition_state_path("events", 3) == "/brokers/topics/events/partitions/3/state"
    assert broker_path(2) == "/brokers/ids/2"


@pytest.mark.parametrize(
    "build",
    [
        lambda: GroupPaths(""),
        lambda: GroupPaths("a/b"),
        lambda: GroupPaths("g").member(""),
        lambda: GroupPaths("g").owner("a/b", 0),
        lambda: GroupPaths("g").owner("t", -1),
        lambda: GroupPaths("g").offset("t", True),
        lambda: GroupPaths("g").offsets_topic(".."),
        lambda: topic_path(""),
        lambda: partition_state_path("t", "0"),
        lambda: broker_path(-1),
    ],
)
def test_bad_path_components_raise_value_error(build) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        build()


# --------------------------------------------------------------------------- registration


def test_encode_registration_exact_bytes_static() -> None:
    data = encode_registration({"events": 2}, "static", 1700000000000)
    assert data == b'{"version":1,"subscription":{"events":2},"pattern":"static","timestamp":"1700000000000"}'


def test_encode_registration_keeps_subscription_order() -> None:
    data = encode_registration({"b": 1, "a": 3}, "static", 5)
    assert data == b'{"version":1,"subscription":{"b":1,"a":3},"pattern":"static","timestamp":"5"}'


def test_encode_registration_wildcard_escapes_like_kafka() -> None:
    # Kafka's JSONEscapeString: backslash, quote and '/' escaped; control chars as \u00xx.
    data = encode_registration({'a\\d+|"x"/y\t\x01': 3}, "white_list", 9)
    assert data == (
        b'{"version":1,"subscription":{"a\\\\d+|\\"x\\"\\/y\\t\\u0001":3},"pattern":"white_list","timestamp":"9"}'
    )
    assert json.loads(data)["subscription"] == {'a\\d+|"x"/y\t\x01': 3}
    assert encode_registration({"ev.*": 1}, "black_list", 0) == (
        b'{"version":1,"subscription":{"ev.*":1},"pattern":"black_list","timestamp":"0"}'
    )


def test_encode_registration_non_ascii_is_utf8() -> None:
    data = encode_registration({"caf\u00e9": 1}, "static", 1)
    assert b'"caf\xc3\xa9":1' in data


@pytest.mark.parametrize(
    "subscription,pattern,ts,message",
    [
        ({"t": 1}, "regex", 1, "pattern"),
        ({"t": 0}, "static", 1, ">= 1"),
        ({"t": True}, "static", 1, ">= 1"),
        ({"t": 1.0}, "static", 1, ">= 1"),
        ({"a": 1, "b": 1}, "white_list", 1, "exactly one"),
        ({}, "black_list", 1, "exactly one"),
        ({"t": 1}, "static", -1, "timestamp_ms"),
        ({"t": 1}, "static", "1", "timestamp_ms"),
        ({"": 1}, "static", 1, "non-empty"),
    ],
)
def test_encode_registration_rejects_bad_input(subscription, pattern, ts, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        encode_registration(subscription, pattern, ts)


def test_decode_registration_roundtrip() -> None:
    data = encode_registration({"events": 2, "logs": 1}, "static", 1700000000000)
    reg = decode_registration("/consumers/g/ids/c", data)
    assert reg == Registration({"events": 2, "logs": 1}, "static", "1700000000000", 1)
    wild = decode_registration("/consumers/g/ids/c", encode_registration({"a/b\\d": 4}, "black_list", 1))
    assert wild == Registration({"a/b\\d": 4}, "black_list", "1", 1)


def test_decode_registration_tolerates_order_unknown_keys_and_numeric_timestamp() -> None:
    data = b'{"timestamp":1700000000000,"extra":{"x":[1]},"pattern":"white_list","subscription":{"ev.*":3},"version":2}'
    reg = decode_registration("/consumers/g/ids/c", data)
    assert reg == Registration({"ev.*": 3}, "white_list", "1700000000000", 2)


def test_decode_registration_without_timestamp_or_version() -> None:
    reg = decode_registration("/p", b'{"subscription":{"t":1},"pattern":"static"}')
    assert reg.timestamp is None and reg.version == 1


def test_decode_registration_kafka_written_node() -> None:
    # What Kafka 0.8.2.2's ZookeeperConsumerConnector.registerConsumerInZK writes.
    data = b'{"version":1,"subscription":{"test":1},"pattern":"static","timestamp":"1446562335413"}'
    assert decode_registration("/p", data) == Registration({"test": 1}, "static", "1446562335413", 1)


@pytest.mark.parametrize(
    "data,fragment",
    [
        (b'{"pattern":"static"}', 'missing key "subscription"'),
        (b'{"subscription":{"t":1}}', 'missing key "pattern"'),
        (b'{"subscription":[1],"pattern":"static"}', '"subscription" must be an object'),
        (b'{"subscription":{"t":0},"pattern":"static"}', "must be an integer >= 1"),
        (b'{"subscription":{"t":"1"},"pattern":"static"}', "must be an integer >= 1"),
        (b'{"subscription":{"t":1.5},"pattern":"static"}', "must be an integer >= 1"),
        (b'{"subscription":{"t":true},"pattern":"static"}', "must be an integer >= 1"),
        (b'{"subscription":{"":1},"pattern":"static"}', "empty topic name"),
        (b'{"subscription":{"t":1},"pattern":"regex"}', '"pattern" must be one of'),
        (b'{"subscription":{"a":1,"b":1},"pattern":"white_list"}', "one regex entry"),
        (b'{"subscription":{"t":1},"pattern":"static","timestamp":[1]}', '"timestamp" must be'),
        (b'{"subscription":{"t":1},"pattern":"static","version":"1"}', '"version" must be an integer'),
        (b"[1,2]", "expected a JSON object, got an array"),
        (b'"static"', "expected a JSON object, got a string"),
        (b"{not json", "not JSON"),
    ],
)
def test_decode_registration_errors_name_the_path_and_problem(data: bytes, fragment: str) -> None:
    with pytest.raises(MalformedZnodeError) as info:
        decode_registration("/consumers/g/ids/c1", data)
    assert info.value.path == "/consumers/g/ids/c1"
    assert "/consumers/g/ids/c1" in str(info.value)
    assert fragment in str(info.value)


# --------------------------------------------------------------------------- any bad bytes


@pytest.mark.parametrize("kind", sorted(DECODERS))
@pytest.mark.parametrize(
    "data,fragment",
    [
        (None, "no data"),
        (b"", "empty"),
        (b"  \n", "empty"),
        (b"\xff\xfe\x00", "not UTF-8"),
    ],
)
def test_every_decoder_rejects_missing_empty_and_binary_data(kind: str, data, fragment: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(MalformedZnodeError) as info:
        DECODERS[kind](data)
    assert info.value.path == DECODER_PATHS[kind]
    assert fragment in str(info.value)


@pytest.mark.parametrize("kind", ["broker", "topic", "state", "registration"])
@pytest.mark.parametrize(
    "data",
    [b"{", b"null", b"42", b"NaN", b'{"a":NaN}', b"[" * 100000, b"\x00", b'{"x":1}', b"true", b'"s"'],
)
def test_json_decoders_never_leak_other_exceptions(kind: str, data: bytes) -> None:
    with pytest.raises(MalformedZnodeError):
        DECODERS[kind](data)


def test_decoders_accept_str_and_bytearray() -> None:
    assert decode_offset("/o", "17") == 17
    assert decode_owner("/o", bytearray(b"c-0")) == "c-0"
    assert decode_offset("/o", memoryview(b"3")) == 3
    with pytest.raises(MalformedZnodeError, match="expected bytes"):
        decode_offset("/o", 17)  # type: ignore[arg-type]


def test_malformed_znode_error_is_a_zkconsumer_error() -> None:
    with pytest.raises(ZkConsumerError):
        decode_offset("/o", b"x")


# --------------------------------------------------------------------------- offsets and owners


def test_offsets() -> None:
    assert encode_offset(0) == b"0"
    assert encode_offset(1234567890123) == b"1234567890123"
    assert decode_offset("/o", b"1234567890123") == 1234567890123
    assert decode_offset("/o", b" 42 \n") == 42
    assert decode_offset("/o", b"-1") == -1
    assert decode_offset("/o", str(2**63 - 1).encode()) == 2**63 - 1


@pytest.mark.parametrize("data", [b"abc", b"1.5", b"1e3", b"0x10", b"4 2", b"+", b"9223372036854775808", b"\xd9\xa3"])
def test_decode_offset_rejects_non_numbers(data: bytes) -> None:
    with pytest.raises(MalformedZnodeError) as info:
        decode_offset("/consumers/g/offsets/t/0", data)
    assert info.value.path == "/consumers/g/offsets/t/0"


@pytest.mark.parametrize("offset", [-1, True, 1.0, "1", 2**63])
def test_encode_offset_rejects_bad_offsets(offset) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        encode_offset(offset)


def test_owners() -> None:
    assert encode_owner("g1_host-1700000000000-ab12cd34-0") == b"g1_host-1700000000000-ab12cd34-0"
    assert decode_owner("/o", b"g1_host-1-ab12cd34-0\n") == "g1_host-1-ab12cd34-0"
    for bad in ("", "  ", None):
        with pytest.raises(ValueError):
            encode_owner(bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- brokers


def test_broker_dataclass_shape() -> None:
    assert [f.name for f in dataclasses.fields(Broker)] == ["id", "host", "port"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Broker(1, "h", 1).port = 2  # type: ignore[misc]


def test_decode_broker_v1() -> None:
    data = b'{"jmx_port":-1,"timestamp":"1446562335413","host":"kafka1","version":1,"port":9092}'
    assert decode_broker("/brokers/ids/3", data) == Broker(3, "kafka1", 9092)


def test_decode_broker_v2_kafka_0_9() -> None:
    # What Kafka 0.9.0.1 writes (ZkUtils.registerBrokerInZk).
    data = (
        b'{"jmx_port":-1,"timestamp":"1700000000000","endpoints":["PLAINTEXT://127.0.0.1:29092",'
        b'"SSL://broker.example:29093"],"host":"127.0.0.1","version":2,"port":29092}'
    )
    assert decode_broker("/brokers/ids/0", data) == Broker(0, "127.0.0.1", 29092)
    assert decode_broker("/brokers/ids/0", data, "SSL") == Broker(0, "broker.example", 29093)
    assert decode_broker("/brokers/ids/0", data, "ssl") == Broker(0, "broker.example", 29093)


def test_decode_broker_v3_newer_keys_and_ipv6() -> None:
    data = (
        b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"endpoints":["PLAINTEXT://[::1]:9092"],'
        b'"rack":"r1","jmx_port":-1,"host":null,"timestamp":"1","port":-1,"version":4}'
    )
    assert decode_broker("/brokers/ids/7", data) == Broker(7, "::1", 9092)


def test_decode_broker_plaintext_falls_back_to_host_port() -> None:
    data = b'{"version":2,"host":"h","port":9092,"endpoints":["SSL://h:9093"]}'
    assert decode_broker("/brokers/ids/1", data) == Broker(1, "h", 9092)


@pytest.mark.parametrize(
    "path,data,protocol,fragment",
    [
        ("/brokers/ids/x", b'{"version":1,"host":"h","port":1}', "PLAINTEXT", "not a broker id"),
        ("/brokers/ids/1", b'{"version":2,"host":null,"port":-1,"endpoints":["SSL://h:1"]}', "PLAINTEXT",
         "no PLAINTEXT endpoint"),
        ("/brokers/ids/1", b'{"version":2,"host":"h","port":1,"endpoints":["PLAINTEXT://h:1"]}', "SSL", "no SSL endpoint"),
        ("/brokers/ids/1", b'{"version":1,"host":"h"}', "PLAINTEXT", 'missing "host"/"port"'),
        ("/brokers/ids/1", b'{"version":1,"host":"h","port":"9092"}', "PLAINTEXT", "invalid host/port"),
        ("/brokers/ids/1", b'{"version":1,"host":"h","port":70000}', "PLAINTEXT", "invalid host/port"),
        ("/brokers/ids/1", b'{"version":2,"endpoints":"PLAINTEXT://h:1"}', "PLAINTEXT", '"endpoints" must be an array'),
        ("/brokers/ids/1", b'{"version":2,"endpoints":["h:1"]}', "PLAINTEXT", "unparseable endpoint"),
        ("/brokers/ids/1", b'{"version":2,"endpoints":["PLAINTEXT://h:0"]}', "PLAINTEXT", "invalid port"),
        ("/brokers/ids/1", b'{"version":"2","host":"h","port":1}', "PLAINTEXT", '"version" must be an integer'),
    ],
)
def test_decode_broker_errors(path: str, data: bytes, protocol: str, fragment: str) -> None:
    with pytest.raises(MalformedZnodeError) as info:
        decode_broker(path, data, protocol)
    assert info.value.path == path
    assert fragment in str(info.value)


# --------------------------------------------------------------------------- topics and partition state


def test_decode_topic_partitions() -> None:
    data = b'{"version":1,"partitions":{"2":[3,1],"10":[1],"0":[1,2,3],"1":[]}}'
    assert decode_topic_partitions("/brokers/topics/t", data) == {0: [1, 2, 3], 1: [], 2: [3, 1], 10: [1]}
    assert list(decode_topic_partitions("/brokers/topics/t", data)) == [0, 1, 2, 10]


def test_decode_topic_partitions_newer_versions() -> None:
    data = b'{"adding_replicas":{},"removing_replicas":{},"partitions":{"0":[1]},"version":2}'
    assert decode_topic_partitions("/brokers/topics/t", data) == {0: [1]}


@pytest.mark.parametrize(
    "data,fragment",
    [
        (b'{"version":1}', 'missing key "partitions"'),
        (b'{"partitions":[[1]]}', '"partitions" must be an object'),
        (b'{"partitions":{"a":[1]}}', "not a partition id"),
        (b'{"partitions":{"-1":[1]}}', "not a partition id"),
        (b'{"partitions":{"0":1}}', "array of integers"),
        (b'{"partitions":{"0":["1"]}}', "array of integers"),
    ],
)
def test_decode_topic_partitions_errors(data: bytes, fragment: str) -> None:
    with pytest.raises(MalformedZnodeError) as info:
        decode_topic_partitions("/brokers/topics/t", data)
    assert info.value.path == "/brokers/topics/t"
    assert fragment in str(info.value)


def test_decode_partition_state() -> None:
    data = b'{"controller_epoch":1,"leader":2,"version":1,"leader_epoch":7,"isr":[2,1,3]}'
    state = decode_partition_state("/s", data)
    assert state == PartitionState(2, 7, (2, 1, 3))
    assert isinstance(state.isr, tuple)
    no_leader = decode_partition_state("/s", b'{"leader":-1,"leader_epoch":3,"isr":[]}')
    assert no_leader.leader == -1 and no_leader.isr == ()


@pytest.mark.parametrize(
    "data,fragment",
    [
        (b'{"leader_epoch":1,"isr":[1]}', 'missing key "leader"'),
        (b'{"leader":1,"isr":[1]}', 'missing key "leader_epoch"'),
        (b'{"leader":1,"leader_epoch":1}', 'missing key "isr"'),
        (b'{"leader":"1","leader_epoch":1,"isr":[1]}', '"leader" must be an integer'),
        (b'{"leader":1,"leader_epoch":1,"isr":[1.5]}', "array of integers"),
    ],
)
def test_decode_partition_state_errors(data: bytes, fragment: str) -> None:
    with pytest.raises(MalformedZnodeError) as info:
        decode_partition_state("/brokers/topics/t/partitions/0/state", data)
    assert info.value.path == "/brokers/topics/t/partitions/0/state"
    assert fragment in str(info.value)
