"""Kerberos: SASL/GSSAPI to Kafka 0.9.0.1 brokers and to ZooKeeper 3.4.6, against a real MIT KDC.

One module-scoped kerberized cluster (``ProjectCluster(kerberos=True, ssl=True)``: Debian's
``krb5kdc`` on loopback, ZooKeeper with the SASL auth provider, one broker with PLAINTEXT,
SASL_PLAINTEXT and SASL_SSL listeners) serves every test. Messages are produced through the
PLAINTEXT listener; consumers read through SASL_PLAINTEXT, one through SASL_SSL. This process points MIT's library at
the test realm with ``KRB5_CONFIG`` for the module.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions
from support.common import Cli, Drainer, offset_checker, owners, produced_values, unique, wait_until

from zkconsumer import ZookeeperConsumerConnector
from zkconsumer.admin.access import BrokerAccess
from zkconsumer.config import ConsumerConfig
from zkconsumer.errors import BrokerUnavailableError, ConfigurationError, ZooKeeperUnavailableError
from zkconsumer.kerberos import broker_authenticator, zookeeper_sasl_options
from zkconsumer.monitoring.exporter import LagExporter
from zkconsumer.wire.connection import BrokerConnection

pytest.importorskip("gssapi", reason="the Kerberos tests need the kerberos extra: pip install -e '.[kerberos]'")

from support.kerberos import consume, kerberized_or_skip, kerberos_props, produce_topic  # noqa: E402

from harness.cluster import ProjectCluster  # noqa: E402
from harness.cluster.kerberos import CLIENT, OTHER_CLIENT  # noqa: E402


@pytest.fixture(scope="module")
def kerberized() -> Iterator[ProjectCluster]:
    """ZooKeeper (SASL) + one broker (PLAINTEXT, SASL_PLAINTEXT and SASL_SSL listeners) in a real KDC's realm."""
    yield from kerberized_or_skip(brokers=1, partitions=2, ssl=True)


def sasl_zookeeper(cluster: ProjectCluster, principal: str) -> KazooClient:
    """A kazoo client authenticated to ZooKeeper as ``principal`` (zkconsumer's GSSAPI mechanism)."""
    config = ConsumerConfig(kerberos_props(cluster, unique("g-kazoo"), principal))
    return cluster.kazoo_client(sasl_options=zookeeper_sasl_options(config))


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


def test_consumes_and_commits_over_sasl_ssl(kerberized: ProjectCluster) -> None:
    """SASL_SSL: TLS to the broker's SASL_SSL listener (trusting the test CA), then GSSAPI inside it."""
    topic, group = produce_topic(kerberized, "krb-ssl"), unique("g-krb-ssl")
    props = kerberos_props(kerberized, group, protocol="SASL_SSL")
    assert sorted(consume(props, topic, 10)) == sorted(produced_values(5, "p0") + produced_values(5, "p1"))
    reader = kerberized.kazoo_client()
    assert [reader.get(f"/consumers/{group}/offsets/{topic}/{p}")[0] for p in (0, 1)] == [b"5", b"5"]
    # The member fetched from the SASL_SSL port: the broker's registration lists it, and the
    # same keytab over the SASL_SSL port without TLS is refused (the listener really is TLS).
    assert f"SASL_SSL://127.0.0.1:{kerberized.ssl_port(0)}" in reader.get("/brokers/ids/0")[0].decode()
    config = ConsumerConfig(kerberos_props(kerberized, group))  # SASL_PLAINTEXT: no TLS
    plain = BrokerConnection("127.0.0.1", kerberized.ssl_port(0), "c", 10000, 0, None,
                             authenticate=broker_authenticator(config))
    with plain, pytest.raises(BrokerUnavailableError):
        plain.metadata([])


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


def test_an_expired_ticket_in_the_cache_is_named(kerberized: ProjectCluster, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A ticket-cache login whose only ticket has expired: the error says so and how to renew it."""
    ccache = f"FILE:{tmp_path / 'short-ccache'}"
    kerberized.kdc.kinit(CLIENT, kerberized.kdc.keytab(CLIENT), ccache, lifetime="3s")
    monkeypatch.setenv("KRB5CCNAME", ccache)
    props = kerberos_props(kerberized, unique("g-expired"))
    del props["sasl.kerberos.keytab"], props["sasl.kerberos.principal"]
    wait_until(lambda: _ticket_expired(ccache), timeout=30, what="the 3 s ticket to expire")
    with pytest.raises(ConfigurationError) as info:
        ZookeeperConsumerConnector(props)
    assert info.value.property == "sasl.kerberos.keytab"
    assert "the Kerberos ticket in the ticket cache has expired: renew it" in str(info.value), str(info.value)


def _ticket_expired(ccache: str) -> bool:
    """Whether MIT's ``klist -s`` finds no valid ticket in ``ccache`` any more."""
    return subprocess.run(["klist", "-s", "-c", ccache], check=False).returncode != 0


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


# =========================================================================== the CLI and the exporter


def test_admin_commands_and_the_exporter_take_kerberos_and_tls_settings(kerberized: ProjectCluster, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``--consumer-config``/``--property`` carry SASL_SSL (Kerberos inside TLS) and ZooKeeper SASL to the admin
    commands and the exporter: the group's sasl-ACL'd nodes can be written as its principal, and a wrong
    broker service name fails, so the brokers really are reached with GSSAPI."""
    topic, group = produce_topic(kerberized, "krb-cli"), unique("g-krb-cli")
    consume(kerberos_props(kerberized, group, **{"zookeeper.acl.enable": "true"}), topic, 10)
    settings = kerberized.kerberos_consumer_properties(protocol="SASL_SSL")
    config = tmp_path / "client.properties"
    config.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    cli, secure = Cli(kerberized, capsys), ("--consumer-config", str(config))

    code, out, err = cli("groups", "describe", "--group", group, "--format", "json", *secure)
    assert code == 0, err
    assert json.loads(out)["total_lag"] == 0
    code, out, err = cli("groups", "list", *secure)
    assert code == 0 and group in out.split(), err
    code, out, err = cli("groups", "status", "--group", group, "--samples", "2", "--interval-ms", "100", *secure)
    assert code == 0, err

    # ZooKeeper SASL: only the group's principal may write its offsets (sasl ACLs).
    reset = ("offsets", "reset", "--group", group, "--topic", topic, "--to", "earliest", "--execute")
    code, out, err = cli(*reset)
    assert code != 0
    with capsys.disabled():  # the error text, for the record
        print("\nreset without Kerberos:", code, err.strip())
    code, out, err = cli(*reset, *secure)
    assert code == 0, err
    reader = kerberized.kazoo_client()
    assert [reader.get(f"/consumers/{group}/offsets/{topic}/{p}")[0] for p in (0, 1)] == [b"0", b"0"]

    # The brokers are reached with GSSAPI: a wrong service name is named.
    code, out, err = cli("groups", "describe", "--group", group, *secure, "--property", "sasl.kerberos.service.name=kfk")
    assert code != 0 and "kfk/localhost" in err, (code, err)
    with capsys.disabled():
        print("\ndescribe with a wrong service name:", code, err.strip())

    # The exporter's poller, with the same settings.
    client = ConsumerConfig(kerberos_props(kerberized, group, protocol="SASL_SSL"))
    exporter = LagExporter(reader, groups=[group], access=BrokerAccess.from_config(client))
    assert exporter.poll_once()[group].total_lag == 10
    wrong = ConsumerConfig(kerberos_props(kerberized, group, protocol="SASL_SSL",
                                          **{"sasl.kerberos.service.name": "kfk"}))
    assert group not in LagExporter(reader, groups=[group], access=BrokerAccess.from_config(wrong)).poll_once()
