"""zkconsumer.testing.properties: .properties rendering and the cluster's settings (and an ensemble's peers)."""

from __future__ import annotations

from harness.cluster.ensemble import peer_properties
from harness.cluster.tools import log4j_properties
from zkconsumer.testing.properties import SERVER_LOG4J, broker_properties, merge, render_properties, zookeeper_properties


def test_render_properties_uses_java_spellings_and_escapes() -> None:
    text = render_properties({
        "plain": "127.0.0.1:2181",
        "flag": False,
        "number": 6000,
        "key with=odd:chars": "v",
        "leading": " space",
        "path": "C:\\dir",
        "multi": "a\nb",
        "unicode": "é€",
    })
    assert text.splitlines() == [
        "plain=127.0.0.1:2181",
        "flag=false",
        "number=6000",
        "key\\ with\\=odd\\:chars=v",
        "leading=\\ space",
        "path=C:\\\\dir",
        "multi=a\\nb",
        "unicode=\\u00e9\\u20ac",
    ]


def test_merge_overrides_and_removes() -> None:
    assert merge({"a": 1, "b": True}, {"b": False, "a": None, "c": "x"}) == {"b": "false", "c": "x"}
    assert merge({"a": 1}, None) == {"a": "1"}


def test_broker_properties_for_tests() -> None:
    props = broker_properties(2, 9093, "/data/b2", "127.0.0.1:2181", cluster_size=3, partitions=4)
    assert props["broker.id"] == "2"
    assert props["port"] == props["advertised.port"] == "9093"
    assert props["host.name"] == props["advertised.host.name"] == "127.0.0.1"
    assert props["log.dirs"] == "/data/b2"
    assert props["zookeeper.connect"] == "127.0.0.1:2181"
    assert props["num.partitions"] == "4"
    assert props["default.replication.factor"] == "1"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["delete.topic.enable"] == props["auto.create.topics.enable"] == "true"
    assert props["zookeeper.session.timeout.ms"] == "6000"
    assert int(props["log.cleaner.dedupe.buffer.size"]) <= 32 * 1024 * 1024


def test_broker_properties_offsets_replication_follows_cluster_size_and_overrides_win() -> None:
    props = broker_properties(0, 9092, "/d", "zk:1", cluster_size=1, partitions=1,
                              overrides={"offsets.topic.replication.factor": 1, "num.io.threads": None,
                                         "message.max.bytes": 2048})
    assert props["offsets.topic.replication.factor"] == "1"
    assert "num.io.threads" not in props
    assert props["message.max.bytes"] == "2048"
    two = broker_properties(0, 1, "/d", "zk:1", cluster_size=2, partitions=1)
    assert two["offsets.topic.replication.factor"] == "2"


def test_zookeeper_properties_allow_short_sessions_and_many_clients() -> None:
    props = zookeeper_properties("/zk", 2181)
    assert props["clientPort"] == "2181" and props["clientPortAddress"] == "127.0.0.1"
    assert props["dataDir"] == "/zk"
    assert int(props["minSessionTimeout"]) <= 1000 <= 6000 <= int(props["maxSessionTimeout"])
    assert props["maxClientCnxns"] == "0"


def test_log4j_properties_target_and_levels() -> None:
    props = log4j_properties("WARN", "System.err", {"kafka.request.logger": "ERROR"})
    assert props["log4j.rootLogger"] == "WARN, console"
    assert props["log4j.appender.console.Target"] == "System.err"
    assert props["log4j.logger.kafka.request.logger"] == "ERROR"
    assert "log4j.logger.org.I0Itec.zkclient" not in props
    assert props["log4j.appender.console.layout"] == SERVER_LOG4J["log4j.appender.console.layout"]


def test_ensemble_peers_list_every_node_and_keep_the_tick() -> None:
    peers = {1: (3001, 4001), 2: (3002, 4002), 3: (3003, 4003)}
    props = zookeeper_properties("/zk-2", 2182, peer_properties(peers))
    assert props["server.1"] == "127.0.0.1:3001:4001" and props["server.3"] == "127.0.0.1:3003:4003"
    assert props["initLimit"] == "10" and props["syncLimit"] == "5"
    assert props["tickTime"] == zookeeper_properties("/zk", 2181)["tickTime"]
    assert props["clientPort"] == "2182" and props["dataDir"] == "/zk-2"
    assert "server.1" not in zookeeper_properties("/zk", 2181)  # a single server stays standalone
