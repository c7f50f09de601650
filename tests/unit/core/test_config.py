"""ConsumerConfig: Kafka 0.8.2.2's properties and defaults, parsing, validation, .properties files."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any, Dict

import pytest

from zkconsumer.config import PROPERTIES, ConsumerConfig, Property
from zkconsumer.errors import ConfigurationError, ZkConsumerError

BASE: Dict[str, Any] = {"zookeeper.connect": "127.0.0.1:2181/kafka", "group.id": "g1"}

# Kafka 0.8.2.2 ConsumerConfig/ZKConfig defaults (ConsumerConfig.scala, ZkUtils.scala), written out
# independently of the table, plus zkconsumer's extensions.
KAFKA_DEFAULTS: Dict[str, Any] = {
    "consumer.id": None,
    "client.id": "g1",  # = group.id
    "socket.timeout.ms": 30000,
    "socket.receive.buffer.bytes": 65536,
    "fetch.message.max.bytes": 1048576,
    "num.consumer.fetchers": 1,
    "auto.commit.enable": True,
    "auto.commit.interval.ms": 60000,
    "queued.max.message.chunks": 2,
    "rebalance.max.retries": 4,
    "fetch.min.bytes": 1,
    "fetch.wait.max.ms": 100,
    "rebalance.backoff.ms": 2000,  # = zookeeper.sync.time.ms
    "refresh.leader.backoff.ms": 200,
    "auto.offset.reset": "largest",
    "consumer.timeout.ms": -1,
    "exclude.internal.topics": True,
    "partition.assignment.strategy": "range",
    "zookeeper.session.timeout.ms": 6000,
    "zookeeper.connection.timeout.ms": 6000,  # = zookeeper.session.timeout.ms
    "zookeeper.sync.time.ms": 2000,
    "offsets.storage": "zookeeper",
    "offsets.channel.backoff.ms": 1000,
    "offsets.channel.socket.timeout.ms": 10000,
    "offsets.commit.max.retries": 5,
    "dual.commit.enabled": False,  # true only when offsets.storage=kafka
}
EXTENSION_DEFAULTS: Dict[str, Any] = {
    "zookeeper.auth": None,
    "zookeeper.acl.enable": False,
    "ssl.cafile": None,
    "ssl.certfile": None,
    "ssl.keyfile": None,
    "ssl.check.hostname": True,
    "security.protocol": "PLAINTEXT",
    "sasl.kerberos.service.name": "kafka",
    "sasl.kerberos.keytab": None,
    "sasl.kerberos.principal": None,
    "zookeeper.sasl.enabled": False,
    "zookeeper.sasl.service.name": "zookeeper",
    "offsets.commit.timeout.ms": 60000,
    "commit.processed.only": False,
    "group.membership": "zookeeper",
    "session.timeout.ms": 6000,  # = zookeeper.session.timeout.ms
    "heartbeat.interval.ms": 2000,  # = session.timeout.ms / 3
    "fetcher.connections": 3,
    "fetch.on.consumer.thread": True,
    "zookeeper.heartbeat": "kafka",
}


def make(**extra: Any) -> ConsumerConfig:
    props = dict(BASE)
    props.update(extra)
    return ConsumerConfig(props)


def error_for(props: Dict[str, Any]) -> ConfigurationError:
    merged = dict(BASE)
    merged.update(props)
    with pytest.raises(ConfigurationError) as info:
        ConsumerConfig(merged)
    assert isinstance(info.value, ZkConsumerError) and isinstance(info.value, ValueError)
    return info.value


# --------------------------------------------------------------------------- defaults and access


@pytest.mark.parametrize("name,expected", sorted({**KAFKA_DEFAULTS, **EXTENSION_DEFAULTS}.items()))
def test_every_default(name: str, expected: Any) -> None:
    config = ConsumerConfig(BASE)
    assert config.get(name) == expected
    assert getattr(config, name.replace(".", "_")) == expected
    assert type(config.get(name)) is type(expected)


def test_table_lists_exactly_the_documented_properties() -> None:
    expected = {"zookeeper.connect", "group.id"} | set(KAFKA_DEFAULTS) | set(EXTENSION_DEFAULTS)
    assert set(PROPERTIES) == expected
    assert ConsumerConfig.PROPERTIES is PROPERTIES
    assert {p.name for p in PROPERTIES.values() if not p.kafka} == set(EXTENSION_DEFAULTS)
    for prop in PROPERTIES.values():
        assert isinstance(prop, Property) and prop.doc and prop.type in ("str", "int", "bool", "enum")


def test_default_texts_for_documentation() -> None:
    assert PROPERTIES["zookeeper.connect"].default_text == "(required)"
    assert PROPERTIES["client.id"].default_text == "= group.id"
    assert PROPERTIES["rebalance.backoff.ms"].default_text == "= zookeeper.sync.time.ms"
    assert PROPERTIES["socket.timeout.ms"].default_text == "30000"
    assert PROPERTIES["auto.commit.enable"].default_text == "true"
    assert PROPERTIES["consumer.id"].default_text == "(none)"
    assert "offsets.storage=kafka" in PROPERTIES["dual.commit.enabled"].default_text


def test_attribute_names_from_the_brief() -> None:
    c = make()
    assert c.group_id == "g1"
    assert c.zookeeper_connect == "127.0.0.1:2181/kafka"
    assert c.fetch_message_max_bytes == 1048576
    assert c.auto_offset_reset == "largest"
    assert c.consumer_timeout_ms == -1
    assert c.num_consumer_fetchers == 1
    assert c.refresh_leader_backoff_ms == 200
    assert c.rebalance_max_retries == 4
    assert c.rebalance_backoff_ms == 2000
    assert c.queued_max_message_chunks == 2
    assert c.partition_assignment_strategy == "range"
    assert "group_id" in dir(c)


def test_to_dict_has_every_property_typed() -> None:
    d = make(**{"socket.timeout.ms": "5000"}).to_dict()
    assert list(d) == list(PROPERTIES)
    assert d["socket.timeout.ms"] == 5000 and d["group.id"] == "g1"


def test_unknown_attribute_and_get() -> None:
    c = make()
    with pytest.raises(AttributeError, match="did you mean group_id"):
        c.grop_id  # noqa: B018
    with pytest.raises(ConfigurationError) as info:
        c.get("grup.id")
    assert info.value.property == "grup.id" and "did you mean group.id?" in str(info.value)


# --------------------------------------------------------------------------- parsing values


def test_values_as_strings_from_properties_or_spark() -> None:
    c = make(
        **{
            "socket.timeout.ms": "40000",
            "fetch.wait.max.ms": "+500",
            "auto.commit.enable": "false",
            "exclude.internal.topics": "true",
            "auto.offset.reset": "smallest",
            "partition.assignment.strategy": "roundrobin",
            "offsets.storage": "Kafka",
            "security.protocol": "ssl",
            "zookeeper.acl.enable": " FALSE ",
            "consumer.timeout.ms": "-1",
            "consumer.id": "  fixed ",
        }
    )
    assert c.socket_timeout_ms == 40000
    assert c.fetch_wait_max_ms == 500
    assert c.auto_commit_enable is False
    assert c.exclude_internal_topics is True
    assert c.auto_offset_reset == "smallest"
    assert c.partition_assignment_strategy == "roundrobin"
    assert c.offsets_storage == "kafka"
    assert c.security_protocol == "SSL"
    assert c.zookeeper_acl_enable is False
    assert c.consumer_id == "fixed"


# Issue "Correct under faults", item 4: Kafka's own properties are spelled as Kafka's consumer
# (0.8.2.2 ConsumerConfig/VerifiableProperties) reads them; anything else is refused, naming the
# property, instead of being read differently from Kafka's members sharing the file.
@pytest.mark.parametrize(
    "name, value",
    [
        ("partition.assignment.strategy", "RoundRobin"),
        ("partition.assignment.strategy", "ROUNDROBIN"),
        ("partition.assignment.strategy", "Range"),
        ("partition.assignment.strategy", "roundrobin "),
        ("partition.assignment.strategy", " range"),
        ("partition.assignment.strategy", "round-robin"),
        ("partition.assignment.strategy", ""),
        ("auto.offset.reset", "Smallest"),
        ("auto.offset.reset", "LARGEST"),
        ("auto.offset.reset", "largest "),
        ("auto.offset.reset", "earliest"),
        ("offsets.storage", "kafka "),
        ("offsets.storage", "zk"),
        ("auto.commit.enable", "True"),
        ("auto.commit.enable", "FALSE"),
        ("auto.commit.enable", "true "),
        ("auto.commit.enable", "yes"),
        ("dual.commit.enabled", "TRUE"),
        ("exclude.internal.topics", " false"),
        ("socket.timeout.ms", " 40000"),
        ("socket.timeout.ms", "40000 "),
        ("consumer.timeout.ms", "1_000"),
        ("fetch.min.bytes", "0x10"),
    ],
)
def test_item4_kafka_properties_refuse_what_kafka_refuses_or_reads_differently(name: str, value: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        make(**{name: value})
    assert info.value.property == name
    assert repr(value) in str(info.value)


@pytest.mark.parametrize(
    "name, value, expected",
    [
        ("partition.assignment.strategy", "range", "range"),
        ("partition.assignment.strategy", "roundrobin", "roundrobin"),
        ("auto.offset.reset", "smallest", "smallest"),
        ("auto.offset.reset", "largest", "largest"),
        ("offsets.storage", "ZooKeeper", "zookeeper"),  # Kafka lower-cases offsets.storage
        ("offsets.storage", "KAFKA", "kafka"),
        ("auto.commit.enable", "false", False),
        ("exclude.internal.topics", "true", True),
        ("fetch.min.bytes", "+5", 5),  # Integer.parseInt accepts a sign
        ("consumer.timeout.ms", "-007", -7),
    ],
)
def test_item4_kafka_properties_accept_what_kafka_accepts(name: str, value: str, expected: object) -> None:
    assert make(**{name: value}).get(name) == expected


def test_item4_error_explains_kafka_spelling() -> None:
    with pytest.raises(ConfigurationError) as info:
        make(**{"partition.assignment.strategy": "roundrobin "})
    text = str(info.value)
    assert "partition.assignment.strategy" in text and "exactly range and roundrobin" in text
    assert "whitespace" in text


def test_item4_extensions_stay_lenient() -> None:
    c = make(**{"security.protocol": " ssl ", "zookeeper.acl.enable": "False", "ssl.check.hostname": " TRUE "})
    assert c.security_protocol == "SSL" and c.zookeeper_acl_enable is False and c.ssl_check_hostname is True
    assert make(**{"group.membership": "ZooKeeper"}).group_membership == "zookeeper"


def test_item4_properties_file_keeps_trailing_whitespace_as_java(tmp_path: Path) -> None:
    path = tmp_path / "shared.properties"
    path.write_text("zookeeper.connect=zk:2181\ngroup.id=g1 \npartition.assignment.strategy=roundrobin \n")
    with pytest.raises(ConfigurationError) as info:
        ConsumerConfig.from_properties(path)
    assert info.value.property == "partition.assignment.strategy"
    path.write_text("zookeeper.connect=zk:2181\ngroup.id=g1 \npartition.assignment.strategy=  roundrobin\n")
    assert ConsumerConfig.from_properties(path).partition_assignment_strategy == "roundrobin"


def test_values_as_python_types() -> None:
    c = make(**{"consumer.timeout.ms": 5000, "auto.commit.enable": False, "fetch.message.max.bytes": 2048.0})
    assert c.consumer_timeout_ms == 5000 and c.auto_commit_enable is False and c.fetch_message_max_bytes == 2048
    assert type(c.fetch_message_max_bytes) is int
    assert make(**{"group.id": 42}).group_id == "42"


def test_consumer_timeout_may_be_any_negative_as_in_kafka() -> None:
    assert make(**{"consumer.timeout.ms": -5}).consumer_timeout_ms == -5
    assert make(**{"consumer.timeout.ms": 0}).consumer_timeout_ms == 0


def test_none_and_empty_optional_strings_mean_unset() -> None:
    c = make(**{"consumer.id": None, "ssl.cafile": "", "client.id": " "})
    assert c.consumer_id is None and c.ssl_cafile is None and c.client_id == "g1"
    assert c.explicit_properties() == BASE
    assert c.with_overrides(**{"group.id": "g9"}).client_id == "g9"


# --------------------------------------------------------------------------- derived defaults


def test_derived_defaults_follow_their_source() -> None:
    c = make(**{"zookeeper.sync.time.ms": "300", "zookeeper.session.timeout.ms": 9000})
    assert c.rebalance_backoff_ms == 300
    assert c.zookeeper_connection_timeout_ms == 9000
    assert c.client_id == "g1"
    explicit = make(**{"rebalance.backoff.ms": 10, "zookeeper.connection.timeout.ms": 1, "client.id": "me"})
    assert explicit.rebalance_backoff_ms == 10
    assert explicit.zookeeper_connection_timeout_ms == 1
    assert explicit.client_id == "me"


def test_dual_commit_default_depends_on_offsets_storage() -> None:
    assert make().dual_commit_enabled is False
    assert make(**{"offsets.storage": "kafka"}).dual_commit_enabled is True
    assert make(**{"offsets.storage": "kafka", "dual.commit.enabled": "false"}).dual_commit_enabled is False
    assert make(**{"dual.commit.enabled": True}).dual_commit_enabled is True


def test_with_overrides_rederives_and_keeps_explicit_values() -> None:
    c = make(**{"client.id": "fixed-client"})
    c2 = c.with_overrides(**{"group.id": "g2", "zookeeper.sync.time.ms": 50})
    assert c2.group_id == "g2" and c2.client_id == "fixed-client" and c2.rebalance_backoff_ms == 50
    c3 = make().with_overrides(**{"group.id": "g3"})
    assert c3.client_id == "g3"
    c4 = c.with_overrides(**{"client.id": None})  # back to the default
    assert c4.client_id == "g1"
    assert c.group_id == "g1"  # the original is unchanged
    with pytest.raises(ConfigurationError, match="did you mean group.id"):
        c.with_overrides(**{"group.idd": "x"})


def test_kwargs_accept_dotted_and_attribute_names() -> None:
    c = ConsumerConfig(BASE, **{"auto.offset.reset": "smallest"}, consumer_timeout_ms=10)
    assert c.auto_offset_reset == "smallest" and c.consumer_timeout_ms == 10
    c = ConsumerConfig(zookeeper_connect="zk:2181", group_id="g")
    assert c.group_id == "g"
    # overrides win over props
    assert ConsumerConfig(BASE, **{"group.id": "other"}).group_id == "other"


def test_config_from_config() -> None:
    c = make(**{"fetch.min.bytes": 5})
    assert ConsumerConfig(c) == c
    assert ConsumerConfig(c, **{"fetch.min.bytes": 6}).fetch_min_bytes == 6


# --------------------------------------------------------------------------- errors


def test_unknown_property_with_suggestion() -> None:
    err = error_for({"grup.id": "x"})
    assert err.property == "grup.id"
    assert str(err) == "grup.id: unknown property 'grup.id'; did you mean group.id?"


def test_underscore_name_in_mapping_suggests_dotted_name() -> None:
    err = error_for({"auto_offset_reset": "smallest"})
    assert err.property == "auto_offset_reset" and "did you mean auto.offset.reset?" in str(err)


def test_unknown_property_without_close_match() -> None:
    err = error_for({"bootstrap.servers": "b:9092"})
    assert err.property == "bootstrap.servers"
    assert "unknown property 'bootstrap.servers'" in str(err) and "did you mean" not in str(err)


def test_close_misspellings() -> None:
    assert "did you mean zookeeper.connect?" in str(error_for({"zookeeper.conect": "x"}))
    assert "did you mean fetch.message.max.bytes?" in str(error_for({"fetch.message.max.byte": 1}))


def test_non_string_property_name() -> None:
    with pytest.raises(ConfigurationError, match="property names must be strings"):
        ConsumerConfig({**BASE, 5: "x"})  # type: ignore[dict-item]


def test_props_must_be_a_mapping() -> None:
    with pytest.raises(TypeError):
        ConsumerConfig([("group.id", "g")])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name,value,fragment",
    [
        ("socket.timeout.ms", "abc", "invalid value 'abc': expected an integer"),
        ("socket.timeout.ms", "1_000", "invalid value '1_000': expected an integer"),
        ("socket.timeout.ms", "1.5", "invalid value '1.5': expected an integer"),
        ("socket.timeout.ms", 1.5, "invalid value 1.5: expected an integer"),
        ("socket.timeout.ms", True, "invalid value True: expected an integer, not a boolean"),
        ("socket.timeout.ms", [1], "invalid value [1]: expected an integer"),
        ("fetch.min.bytes", "2147483648", "invalid value '2147483648': out of range for a 32-bit integer"),
        ("consumer.timeout.ms", -(2**31) - 1, "out of range for a 32-bit integer"),
        ("auto.commit.enable", "yes", "invalid value 'yes': expected exactly true or false"),
        ("auto.commit.enable", 1, "invalid value 1: expected true or false"),
        ("auto.offset.reset", "earliest", "invalid value 'earliest': valid values are exactly smallest and largest"),
        ("partition.assignment.strategy", "sticky", "valid values are exactly range and roundrobin"),
        ("offsets.storage", "file", "valid values are in any case zookeeper and kafka"),
        ("security.protocol", "SASL_SCRAM", "valid values are PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL"),
        ("security.protocol", 1, "valid values are PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL"),
        ("ssl.cafile", 1.5, "expected a string"),
        ("ssl.cafile", True, "expected a string"),
    ],
)
def test_bad_values_name_property_and_value(name: str, value: Any, fragment: str) -> None:
    err = error_for({name: value})
    assert err.property == name
    assert str(err).startswith(f"{name}: ")
    assert fragment in str(err)


@pytest.mark.parametrize(
    "name,minimum",
    [
        ("socket.timeout.ms", 1),
        ("socket.receive.buffer.bytes", 1),
        ("fetch.message.max.bytes", 1),
        ("num.consumer.fetchers", 1),
        ("auto.commit.interval.ms", 1),
        ("queued.max.message.chunks", 1),
        ("rebalance.max.retries", 1),
        ("fetch.min.bytes", 0),
        ("fetch.wait.max.ms", 0),
        ("rebalance.backoff.ms", 0),
        ("refresh.leader.backoff.ms", 0),
        ("offsets.channel.backoff.ms", 0),
        ("offsets.channel.socket.timeout.ms", 1),
        ("offsets.commit.max.retries", 0),
        ("zookeeper.session.timeout.ms", 1),
        ("zookeeper.connection.timeout.ms", 1),
        ("zookeeper.sync.time.ms", 0),
    ],
)
def test_ranges(name: str, minimum: int) -> None:
    extra = {"fetch.wait.max.ms": 0} if name == "socket.timeout.ms" else {}
    assert make(**{name: minimum}, **extra).get(name) == minimum
    err = error_for({name: str(minimum - 1)})
    assert err.property == name and f"must be >= {minimum}" in str(err) and repr(str(minimum - 1)) in str(err)


@pytest.mark.parametrize("name", ["group.id", "client.id"])
@pytest.mark.parametrize("value", ["my group", "g/1", "g:1", "gé", "g\n1"])
def test_group_and_client_id_characters(name: str, value: str) -> None:
    err = error_for({name: value})
    assert err.property == name
    assert "contains a character other than ASCII alphanumerics, '.', '_' and '-'" in str(err)


def test_legal_ids() -> None:
    c = make(**{"group.id": "A-z_0.9", "client.id": "c.l-i_3"})
    assert c.group_id == "A-z_0.9" and c.client_id == "c.l-i_3"


@pytest.mark.parametrize("missing", ["zookeeper.connect", "group.id"])
def test_required_properties(missing: str) -> None:
    props = {k: v for k, v in BASE.items() if k != missing}
    with pytest.raises(ConfigurationError) as info:
        ConsumerConfig(props)
    assert info.value.property == missing and "required property is missing" in str(info.value)
    with pytest.raises(ConfigurationError) as info:
        ConsumerConfig({**props, missing: "  "})
    assert info.value.property == missing and "must not be empty" in str(info.value)
    with pytest.raises(ConfigurationError) as info:
        ConsumerConfig()
    assert info.value.property == "zookeeper.connect"


def test_fetch_wait_must_not_exceed_socket_timeout() -> None:
    assert make(**{"fetch.wait.max.ms": 30000}).fetch_wait_max_ms == 30000
    err = error_for({"fetch.wait.max.ms": "30001"})
    assert err.property == "fetch.wait.max.ms"
    assert "30001 exceeds socket.timeout.ms (30000)" in str(err)
    err = error_for({"socket.timeout.ms": 50})
    assert err.property == "fetch.wait.max.ms" and "socket.timeout.ms (50)" in str(err)


def test_zookeeper_acl_needs_auth() -> None:
    err = error_for({"zookeeper.acl.enable": "true"})
    assert err.property == "zookeeper.acl.enable" and "zookeeper.auth" in str(err)
    c = make(**{"zookeeper.acl.enable": "true", "zookeeper.auth": "user:secret"})
    assert c.zookeeper_acl_enable is True and c.zookeeper_auth == "user:secret"


@pytest.mark.parametrize("value", ["nocolon", ":secret"])
def test_zookeeper_auth_format_error_masks_the_secret(value: str) -> None:
    err = error_for({"zookeeper.auth": value})
    assert err.property == "zookeeper.auth" and "user:password" in str(err)
    assert value not in str(err) and "secret" not in str(err)


def test_ssl_keyfile_needs_certfile() -> None:
    err = error_for({"ssl.keyfile": "/k.pem"})
    assert err.property == "ssl.keyfile" and "ssl.certfile" in str(err)
    c = make(**{"ssl.keyfile": "/k.pem", "ssl.certfile": "/c.pem", "ssl.cafile": "/ca.pem",
                "ssl.check.hostname": "false", "security.protocol": "SSL"})
    assert (c.ssl_keyfile, c.ssl_certfile, c.ssl_cafile, c.ssl_check_hostname) == ("/k.pem", "/c.pem", "/ca.pem", False)


@pytest.mark.parametrize("value", ["a/b", "..", "x\ty"])
def test_consumer_id_must_be_a_node_name(value: str) -> None:
    err = error_for({"consumer.id": value})
    assert err.property == "consumer.id" and repr(value) in str(err)


@pytest.mark.parametrize("value", ["/chroot", ",zk:2181", "zk:2181,", "zk:2181/a/", "zk:2181/a//b"])
def test_zookeeper_connect_shape(value: str) -> None:
    err = error_for({"zookeeper.connect": value})
    assert err.property == "zookeeper.connect" and value in str(err)


def test_zookeeper_connect_accepted_shapes() -> None:
    for value in ("zk:2181", "zk1:2181,zk2:2181", "zk:2181/", "zk:2181/kafka/prod", "localhost", "[::1]:2181",
                  "10.0.0.1:2181,10.0.0.2/kafka"):
        assert make(**{"zookeeper.connect": value}).zookeeper_connect == value


@pytest.mark.parametrize("value, says", [
    ("zk:notaport", "invalid server 'zk:notaport'"),
    ("zk:99999", "invalid server 'zk:99999'"),
    ("zk:", "invalid server 'zk:'"),
    ("http://zk:2181", "no http:// scheme"),
    ("zookeeper://zk:2181/kafka", "no zookeeper:// scheme"),
    ("user@zk:2181", "invalid server 'user@zk:2181'"),
])
def test_a_server_kazoo_could_not_use_is_refused_at_once_naming_the_form(value: str, says: str) -> None:
    """Before, ``zk:notaport`` raised kazoo's raw ValueError at connect and ``http://zk:2181`` passed and
    timed out later."""
    err = error_for({"zookeeper.connect": value})
    assert err.property == "zookeeper.connect" and says in str(err) and "e.g. zk1:2181,zk2:2181/kafka" in str(err)


@pytest.mark.parametrize("name, says", [
    ("bootstrap.servers", "finds the brokers through zookeeper.connect"),
    ("enable.auto.commit", "did you mean auto.commit.enable"),
    ("value.deserializer", "value_decoder="),
])
def test_properties_of_kafkas_newer_clients_say_what_to_use_instead(name: str, says: str) -> None:
    err = error_for({name: "x"})
    assert err.property == name and f"unknown property {name!r}" in str(err) and says in str(err)


def test_a_bad_value_in_a_properties_file_names_the_file_and_its_line(tmp_path: Path) -> None:
    path = tmp_path / "consumer.properties"
    path.write_text("# shared settings\nzookeeper.connect=zk:2181\n\ngroup.id=g1\nauto.offset.reset = earliest\n")
    with pytest.raises(ConfigurationError) as info:
        ConsumerConfig.from_properties(path)
    assert info.value.property == "auto.offset.reset"
    assert str(info.value).endswith(f"(in {path}, line 5)")
    path.write_text("zookeeper.connect=zk:2181\ngroup.id=g1\nbootstrap.servers=b:9092\n")
    with pytest.raises(ConfigurationError, match=r"zookeeper.connect, as Kafka 0.8's does \(in .*, line 3\)$"):
        ConsumerConfig.from_properties(path)
    with pytest.raises(ConfigurationError, match=r"group.id: .*\(in .*, line 3\)$"):  # after a value over two lines
        path.write_text("zookeeper.connect=zk:2181,\\\n  zk2:2181\ngroup.id=bad/id\n")
        ConsumerConfig.from_properties(path)
    path.write_text("zookeeper.connect=zk:2181\ngroup.id=g1\n")
    with pytest.raises(ConfigurationError) as info:  # an override's error is the override's, not the file's
        ConsumerConfig.from_properties(path, **{"auto.offset.reset": "earliest"})
    assert "(in " not in str(info.value)


# --------------------------------------------------------------------------- object behaviour


def test_immutable() -> None:
    c = make()
    with pytest.raises(AttributeError, match="immutable"):
        c.group_id = "x"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="immutable"):
        del c.group_id
    d = c.to_dict()
    d["group.id"] = "changed"
    assert c.group_id == "g1"


def test_repr_masks_zookeeper_auth() -> None:
    c = make(**{"zookeeper.auth": "admin:hunter2", "consumer.timeout.ms": "5"})
    text = repr(c)
    assert "hunter2" not in text and "admin" not in text and "'zookeeper.auth': '***'" in text
    assert "'group.id': 'g1'" in text and "'consumer.timeout.ms': 5" in text
    assert "hunter2" not in str(c)


def test_equality_hash_pickle_copy() -> None:
    a = make(**{"socket.timeout.ms": "5000"})
    b = make(**{"socket.timeout.ms": 5000})
    assert a == b and hash(a) == hash(b)
    assert a != make()
    assert pickle.loads(pickle.dumps(a)) == a
    assert copy.deepcopy(a) == a and copy.copy(a) == a
    assert ConsumerConfig(a.explicit_properties()) == a
    assert a.explicit_properties() == {**BASE, "socket.timeout.ms": 5000}


# --------------------------------------------------------------------------- .properties files

def test_from_properties(tmp_path: Path) -> None:
    path = tmp_path / "consumer.properties"
    path.write_text(
        "# Kafka consumer\n"
        "zookeeper.connect=127.0.0.1:2181,\\\n"
        "    127.0.0.2:2181/kafka\n"
        "group.id: g1\n"
        "! another comment\n"
        "consumer.timeout.ms   5000\n"
        "auto.offset.reset = smallest\n"
        "zookeeper.connection.timeout.ms=6000\n",
        encoding="utf-8",
    )
    c = ConsumerConfig.from_properties(path, **{"group.id": "g2"})
    assert c.zookeeper_connect == "127.0.0.1:2181,127.0.0.2:2181/kafka"
    assert c.group_id == "g2" and c.client_id == "g2"
    assert c.consumer_timeout_ms == 5000
    assert c.auto_offset_reset == "smallest"
    assert ConsumerConfig.from_properties(str(path)).group_id == "g1"


def test_from_properties_unknown_key_names_it(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    path.write_text("zookeeper.connect=zk:2181\ngroup.id=g\nauto.comit.enable=false\n")
    with pytest.raises(ConfigurationError) as info:
        ConsumerConfig.from_properties(path)
    assert info.value.property == "auto.comit.enable" and "did you mean auto.commit.enable?" in str(info.value)


def test_from_properties_encodings(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    path.write_bytes("\ufeffzookeeper.connect=zk:2181\ngroup.id=g\nssl.cafile=/caf\u00e9.pem\n".encode("utf-8"))
    assert ConsumerConfig.from_properties(path).ssl_cafile == "/caf\u00e9.pem"
    path.write_bytes("zookeeper.connect=zk:2181\ngroup.id=g\nssl.cafile=/caf\u00e9.pem\n".encode("iso-8859-1"))
    assert ConsumerConfig.from_properties(path).ssl_cafile == "/caf\u00e9.pem"


def test_from_properties_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        ConsumerConfig.from_properties(tmp_path / "nope.properties")
