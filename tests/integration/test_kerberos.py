"""Kerberos: SASL/GSSAPI to Kafka 0.9.0.1 brokers and to ZooKeeper 3.4.6, against a real MIT KDC.

One module-scoped kerberized cluster (``ProjectCluster(kerberos=True)``: Debian's ``krb5kdc``
on loopback, ZooKeeper with the SASL auth provider, one broker with PLAINTEXT and
SASL_PLAINTEXT listeners) serves every test. Messages are produced through the PLAINTEXT
listener; every consumer reads through SASL_PLAINTEXT. This process points MIT's library at
the test realm with ``KRB5_CONFIG`` for the module.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Iterator, List

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions
from support import Drainer, consumer_props, offset_checker, owners, produced_values, unique, wait_until

from zkconsumer import ZookeeperConsumerConnector
from zkconsumer.config import ConsumerConfig
from zkconsumer.errors import BrokerUnavailableError, ConfigurationError, ZooKeeperUnavailableError
from zkconsumer.kerberos import broker_authenticator, zookeeper_sasl_options
from zkconsumer.wire.connection import BrokerConnection

pytest.importorskip("gssapi", reason="the Kerberos tests need the kerberos extra: pip install -e '.[kerberos]'")

from benchmarks.cluster import ProjectCluster  # noqa: E402
from benchmarks.cluster.kdc import find_kdc_tools  # noqa: E402
from benchmarks.cluster.kerberos import CLIENT, OTHER_CLIENT  # noqa: E402


@pytest.fixture(scope="module")
def kerberized() -> Iterator[ProjectCluster]:
    """ZooKeeper (SASL) + one broker (PLAINTEXT and SASL_PLAINTEXT listeners) in a real KDC's realm."""
    try:
        find_kdc_tools()
    except Exception as error:  # MissingDependencyError: a machine without krb5-kdc
        if os.environ.get("ZKCONSUMER_REQUIRE_TOOLS") == "1":
            raise
        pytest.skip(str(error))
    with ProjectCluster(brokers=1, partitions=2, kerberos=True) as cluster:
        saved = {key: os.environ.get(key) for key in cluster.kdc.environ}
        os.environ.update(cluster.kdc.environ)
        try:
            yield cluster
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def kerberos_props(cluster: ProjectCluster, group: str, principal: str = CLIENT, **extra: object) -> dict:
    props = consumer_props(cluster, group)
    props.update(cluster.kerberos_consumer_properties(principal))
    props.update(extra)
    return props


def sasl_zookeeper(cluster: ProjectCluster, principal: str) -> KazooClient:
    """A kazoo client authenticated to ZooKeeper as ``principal`` (zkconsumer's GSSAPI mechanism)."""
    config = ConsumerConfig(kerberos_props(cluster, unique("g-kazoo"), principal))
    return cluster.kazoo_client(sasl_options=zookeeper_sasl_options(config))


def produce_topic(cluster: ProjectCluster, name: str, per_partition: int = 5) -> str:
    topic = cluster.create_topic(unique(name), partitions=2)
    for partition in (0, 1):
        cluster.produce(topic, produced_values(per_partition, f"p{partition}"), partition=partition)
    return topic


def consume(props: dict, topic: str, count: int) -> List[bytes]:
    with ZookeeperConsumerConnector(props) as connector:
        drainer = Drainer(connector.create_message_streams({topic: 1})[topic])
        drainer.wait_for(count)
        drainer.stop()
        connector.commit_offsets()
        return [m.message for m in drainer.messages]


# =========================================================================== what works


def test_consumes_over_sasl_plaintext_and_commits_under_sasl_acls(kerberized: ProjectCluster) -> None:
    topic, group = produce_topic(kerberized, "krb"), unique("g-krb")
    props = kerberos_props(kerberized, group, **{"zookeeper.acl.enable": "true"})
    assert len(consume(props, topic, 10)) == 10

    ours = [ACL(Permissions.ALL, Id("sasl", f"{CLIENT}@{kerberized.kdc.realm}")),
            ACL(Permissions.READ, Id("world", "anyone"))]
    anonymous, intruder = kerberized.kazoo_client(), sasl_zookeeper(kerberized, OTHER_CLIENT)
    base = f"/consumers/{group}"
    offsets = [f"{base}/offsets/{topic}/{p}" for p in (0, 1)]
    assert [anonymous.get(path)[0] for path in offsets] == [b"5", b"5"]
    for path in [base, f"{base}/ids", f"{base}/owners", f"{base}/offsets", f"{base}/offsets/{topic}", *offsets]:
        assert anonymous.get_acls(path)[0] == ours, path
    assert anonymous.get_acls("/consumers")[0] == OPEN_ACL_UNSAFE
    for client in (anonymous, intruder):  # another Kerberos identity may read, but not write
        with pytest.raises(NoAuthError):
            client.set(offsets[0], b"0")
        with pytest.raises(NoAuthError):
            client.create(f"{base}/ids/intruder", b"{}", ephemeral=True)

    # The same identity joins again and resumes from the committed offsets (it may write its nodes).
    kerberized.produce(topic, [b"late"], partition=0)
    assert consume(props, topic, 1) == [b"late"]
    # Kafka's own tool, logged in as the same principal (JAAS Client section), reads the offsets.
    checked = offset_checker(kerberized, group, topic)
    assert {p: row[0] for p, row in checked.items()} == {0: 6, 1: 5}


def test_ticket_cache_login(kerberized: ProjectCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ccache = f"FILE:{tmp_path / 'ccache'}"
    kerberized.kdc.kinit(CLIENT, kerberized.kdc.keytab(CLIENT), ccache)
    monkeypatch.setenv("KRB5CCNAME", ccache)
    topic, group = produce_topic(kerberized, "krb-cache"), unique("g-krb-cache")
    props = kerberos_props(kerberized, group)
    del props["sasl.kerberos.keytab"], props["sasl.kerberos.principal"]
    assert len(consume(props, topic, 10)) == 10


# =========================================================================== bad input, named


def test_no_ticket_names_the_keytab_settings(kerberized: ProjectCluster, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path / 'empty-ccache'}")
    props = kerberos_props(kerberized, unique("g-noticket"))
    del props["sasl.kerberos.keytab"], props["sasl.kerberos.principal"]
    with pytest.raises(ConfigurationError) as info:
        ZookeeperConsumerConnector(props)
    assert info.value.property == "sasl.kerberos.keytab"
    assert "no Kerberos ticket: run kinit" in str(info.value)


def test_principal_not_in_keytab_is_named(kerberized: ProjectCluster) -> None:
    props = kerberos_props(kerberized, unique("g-badprinc"),
                           **{"sasl.kerberos.principal": f"nobody@{kerberized.kdc.realm}"})
    with pytest.raises(ConfigurationError) as info:
        ZookeeperConsumerConnector(props)
    assert info.value.property == "sasl.kerberos.principal"
    assert "cannot log in as 'nobody@" in str(info.value) and "klist -kt" in str(info.value)


def test_wrong_zookeeper_service_name_is_named(kerberized: ProjectCluster) -> None:
    props = kerberos_props(kerberized, unique("g-badzk"), **{"zookeeper.sasl.service.name": "zk"})
    with pytest.raises(ConfigurationError) as info:
        ZookeeperConsumerConnector(props)
    assert info.value.property == "zookeeper.sasl.service.name"
    assert "the KDC knows no service principal zk/localhost" in str(info.value)


def test_wrong_broker_service_name_is_named(kerberized: ProjectCluster) -> None:
    config = ConsumerConfig(kerberos_props(kerberized, unique("g-badkafka"), **{"sasl.kerberos.service.name": "kfk"}))
    connection = BrokerConnection("127.0.0.1", kerberized.sasl_port(0), "c", 10000, 0, None,
                                  authenticate=broker_authenticator(config))
    with connection, pytest.raises(ConfigurationError) as info:
        connection.metadata([])
    assert info.value.property == "sasl.kerberos.service.name"
    assert "the KDC knows no service principal kfk/localhost" in str(info.value)

    # A member: ZooKeeper is fine, the first broker connection is not; iterating its stream says why.
    topic = produce_topic(kerberized, "krb-badkafka")
    props = kerberos_props(kerberized, unique("g-badkafka"), **{"sasl.kerberos.service.name": "kfk"})
    with ZookeeperConsumerConnector(props) as member:
        stream = member.create_message_streams({topic: 1})[topic][0]
        with pytest.raises(ConfigurationError) as info:
            next(iter(stream))
    assert info.value.property == "sasl.kerberos.service.name"


def test_broker_not_kerberized(kerberized: ProjectCluster) -> None:
    """SASL to a PLAINTEXT port: Kafka drops the connection; the error says to check the listener."""
    config = ConsumerConfig(kerberos_props(kerberized, unique("g-plain")))
    connection = BrokerConnection("127.0.0.1", kerberized.broker_port(0), "c", 10000, 0, None,
                                  authenticate=broker_authenticator(config))
    with connection, pytest.raises(BrokerUnavailableError) as info:
        connection.metadata([])
    assert "closed the connection during SASL authentication" in str(info.value)
    assert "speaks security.protocol" in str(info.value)


def test_kdc_down_is_named_and_a_running_member_is_not_disturbed(kerberized: ProjectCluster) -> None:
    topic, group = produce_topic(kerberized, "krb-kdc"), unique("g-krb-kdc")
    newcomer = unique("newcomer")
    kerberized.kdc.add_principal(newcomer)  # an identity without tickets yet
    with ZookeeperConsumerConnector(kerberos_props(kerberized, group)) as member:
        drainer = Drainer(member.create_message_streams({topic: 1})[topic])
        drainer.wait_for(10)
        kerberized.kdc.stop_server()
        try:
            # A new identity needs the KDC: named, retriable.
            with pytest.raises(ZooKeeperUnavailableError) as info:
                ZookeeperConsumerConnector(kerberos_props(kerberized, unique("g-other"), newcomer))
            assert "cannot reach the Kerberos KDC" in str(info.value)
            # The running member keeps its tickets: it consumes and commits, and reconnects to the broker.
            kerberized.produce(topic, [b"during-outage"], partition=0)
            drainer.wait_for(11)
            member.commit_offsets()
        finally:
            kerberized.kdc.start_server()
        drainer.stop()
    # The KDC is back: the newcomer logs in (its login was not spoiled by the failure).
    assert len(consume(kerberos_props(kerberized, unique("g-back"), newcomer), topic, 11)) == 11


# =========================================================================== mixed groups


def test_mixed_group_with_kafkas_scala_consumer_over_zookeeper_sasl(kerberized: ProjectCluster,
                                                                    tmp_path: Path) -> None:
    """Kafka 0.9's old consumer (JAAS ``Client`` section: ZooKeeper SASL as the same principal; it can
    only fetch over PLAINTEXT) and a zkconsumer member (SASL to both) share a group with sasl ACLs."""
    topic, group = produce_topic(kerberized, "krb-mixed"), unique("g-krb-mixed")
    config = tmp_path / "kafka1.properties"
    config.write_text(f"group.id={group}\nconsumer.id=kafka1\nzookeeper.session.timeout.ms=6000\n"
                      "rebalance.backoff.ms=1000\nauto.commit.interval.ms=500\n")
    kafka_member = kerberized.start_tool("kafka.tools.ConsoleConsumer", "--zookeeper", kerberized.zk_connect,
                                         "--topic", topic, "--consumer.config", str(config),
                                         stdout=subprocess.DEVNULL)
    reader = kerberized.kazoo_client()
    try:
        wait_until(lambda: len(owners(reader, group, topic)) == 2, 60, "Kafka's consumer to own both partitions")
        props = kerberos_props(kerberized, group, **{"consumer.id": "zk1", "zookeeper.acl.enable": "true"})
        with ZookeeperConsumerConnector(props) as member:
            member.create_message_streams({topic: 1})
            expected = {0: f"{group}_kafka1-0", 1: f"{group}_zk1-0"}  # Kafka's range over the sorted threads
            wait_until(lambda: owners(reader, group, topic) == expected, 60, f"the owners to settle on {expected}")
            assert kafka_member.poll() is None, kerberized.tool_log(kafka_member)[-2000:]
            # Kafka's member authenticated too: it wrote its owner node with Kafka 0.9's secure ACLs.
            sasl_and_read = {ACL(Permissions.ALL, Id("sasl", f"{CLIENT}@{kerberized.kdc.realm}")),
                             ACL(Permissions.READ, Id("world", "anyone"))}
            assert set(reader.get_acls(f"/consumers/{group}/owners/{topic}/0")[0]) == sasl_and_read
            assert set(reader.get_acls(f"/consumers/{group}/owners/{topic}/1")[0]) == sasl_and_read
    finally:
        kerberized.stop_tool(kafka_member)
