"""ZooKeeper digest ACLs and TLS to brokers, on a real ZooKeeper 3.4.6 and a Kafka 0.9.0.1 broker.

One small module-scoped cluster (ZooKeeper + 1 broker) serves every test: the broker
has a PLAINTEXT listener (producers, Kafka's tools) and an SSL listener with
``ssl.client.auth=required``, its certificates generated at start by ProjectCluster.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Dict, Iterator, List

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions
from support.common import Drainer, by_value, consumer_props, offset_checker, owners, produced_values, unique, wait_until

from zkconsumer import ConsumerTimeoutError, ZookeeperConsumerConnector
from zkconsumer.errors import BrokerUnavailableError, ConfigurationError
from zkconsumer.wire.connection import BrokerConnection
from zkconsumer.wire.tls import broker_ssl_context
from zkconsumer.zookeeper.acl import digest_id

pytest.importorskip("cryptography", reason="ProjectCluster(ssl=...) generates certificates with cryptography")

from harness.cluster import ProjectCluster, SslOptions  # noqa: E402
from harness.cluster.tls import generate_ssl_files  # noqa: E402

CREDENTIAL = "alice:s3cret:with-colon"


@pytest.fixture(scope="module")
def secure() -> Iterator[ProjectCluster]:
    """ZooKeeper + one broker with PLAINTEXT and SSL (client certificates required) listeners."""
    with ProjectCluster(brokers=1, partitions=2, ssl=SslOptions(client_auth="required")) as cluster:
        yield cluster


@pytest.fixture
def anonymous(secure: ProjectCluster) -> KazooClient:
    """A ZooKeeper client without credentials (closed by the cluster)."""
    return secure.kazoo_client()


def secure_props(cluster: ProjectCluster, group: str, credential: str = CREDENTIAL, **extra: object) -> Dict[str, object]:
    props = consumer_props(cluster, group)
    props.update({"zookeeper.auth": credential, "zookeeper.acl.enable": "true"})
    props.update(extra)
    return props


def expected_acl() -> List[ACL]:
    return [ACL(Permissions.ALL, Id("digest", digest_id(CREDENTIAL))), ACL(Permissions.READ, Id("world", "anyone"))]


# =========================================================================== ZooKeeper digest + ACLs


def test_acl_group_is_readable_by_all_and_writable_only_with_the_credential(secure: ProjectCluster,
                                                                            anonymous: KazooClient) -> None:
    topic, group = unique("acl"), unique("g-acl")
    secure.create_topic(topic, partitions=2)
    for partition in (0, 1):
        secure.produce(topic, produced_values(5, f"p{partition}"), partition=partition)

    with ZookeeperConsumerConnector(secure_props(secure, group)) as first:
        drainer = Drainer(first.create_message_streams({topic: 1})[topic])
        drainer.wait_for(10)
        drainer.stop()
        first.commit_offsets()
        base = f"/consumers/{group}"

        # World-readable: registration, owners and offsets, with our ACL on every node we created.
        member = f"{base}/ids/{first.consumer_id}"
        owner_nodes = [f"{base}/owners/{topic}/{p}" for p in (0, 1)]
        offset_nodes = [f"{base}/offsets/{topic}/{p}" for p in (0, 1)]
        assert b'"subscription"' in anonymous.get(member)[0]
        assert owners(anonymous, group, topic) == {0: f"{first.consumer_id}-0", 1: f"{first.consumer_id}-0"}
        assert [anonymous.get(path)[0] for path in offset_nodes] == [b"5", b"5"]
        for path in [base, f"{base}/ids", member, f"{base}/owners", f"{base}/owners/{topic}", *owner_nodes,
                     f"{base}/offsets", f"{base}/offsets/{topic}", *offset_nodes]:
            assert anonymous.get_acls(path)[0] == expected_acl(), path
        assert anonymous.get_acls("/consumers")[0] == OPEN_ACL_UNSAFE  # Kafka's shared parent stays open

        # ...but not writable without the credential.
        for attempt in (lambda: anonymous.set(offset_nodes[0], b"0"),
                        lambda: anonymous.delete(offset_nodes[1]),
                        lambda: anonymous.set(owner_nodes[0], b"intruder-0"),
                        lambda: anonymous.delete(owner_nodes[0]),
                        lambda: anonymous.create(f"{base}/ids/intruder", b"{}", ephemeral=True),
                        lambda: anonymous.create(f"{base}/owners/{topic}/9", b"intruder-0")):
            with pytest.raises(NoAuthError):
                attempt()
        assert [anonymous.get(path)[0] for path in offset_nodes] == [b"5", b"5"]

        # Other groups can still be created by anyone: /consumers is not locked.
        anonymous.create(f"/consumers/{unique('g-open')}/ids", makepath=True)

        # A second member holding the credential joins: it claims, and the first releases, ACL'd owner nodes.
        with ZookeeperConsumerConnector(secure_props(secure, group)) as second:
            second.create_message_streams({topic: 1})
            expected = {0: f"{min(first.consumer_id, second.consumer_id)}-0",
                        1: f"{max(first.consumer_id, second.consumer_id)}-0"}
            wait_until(lambda: owners(anonymous, group, topic) == expected, 30, "the group to split the partitions")

    # Kafka's own tool reads what an ACL'd group wrote.
    checked = offset_checker(secure, group, topic)
    assert {p: row[0] for p, row in checked.items()} == {0: 5, 1: 5}
    assert {p: row[2] for p, row in checked.items()} == {0: 0, 1: 0}


@pytest.mark.parametrize("credential", ["alice:wrong-password", None])
def test_wrong_or_missing_credentials_fail_at_once_naming_zookeeper_auth(secure: ProjectCluster,
                                                                         credential: str) -> None:
    topic, group = unique("acl-deny"), unique("g-deny")
    secure.create_topic(topic, partitions=1)
    with ZookeeperConsumerConnector(secure_props(secure, group)) as owner:
        owner.create_message_streams({topic: 1})
        props = consumer_props(secure, group)
        if credential is not None:
            props["zookeeper.auth"] = credential
        started = time.monotonic()
        with pytest.raises(ConfigurationError) as info:
            ZookeeperConsumerConnector(props)
        assert time.monotonic() - started < 10
        message = str(info.value)
        assert info.value.property == "zookeeper.auth"
        assert f"/consumers/{group}" in message and "digest user 'alice'" in message
        assert "wrong-password" not in message and "s3cret" not in message


# =========================================================================== TLS to brokers


def ssl_consumer_props(cluster: ProjectCluster, group: str, client_cert: bool = True, **extra: object) -> Dict[str, object]:
    props = consumer_props(cluster, group)
    props.update(cluster.ssl_files.consumer_properties(client_cert))
    props.update(extra)
    return props


def connected_ports(caplog: pytest.LogCaptureFixture) -> List[int]:
    """Ports of every broker connection BrokerConnection logged as opened."""
    return [int(m.group(1)) for r in caplog.records
            if (m := re.fullmatch(r"connected to broker 127\.0\.0\.1:(\d+)", r.getMessage()))]


def test_consumes_over_tls_with_a_client_certificate(secure: ProjectCluster, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="zkconsumer.wire.connection")
    topic, group = unique("tls"), unique("g-tls")
    secure.create_topic(topic, partitions=2)
    values = produced_values(40, "tls")
    secure.produce(topic, values[:20], partition=0)
    secure.produce(topic, values[20:], partition=1)

    with ZookeeperConsumerConnector(ssl_consumer_props(secure, group)) as connector:
        drainer = Drainer(connector.create_message_streams({topic: 2})[topic])
        got = drainer.wait_for(40, timeout=60)
        drainer.stop()
        connector.commit_offsets()
    assert by_value(got) == sorted(values)
    ports = connected_ports(caplog)
    assert ports and set(ports) == {secure.ssl_port(0)}, f"connections went to {sorted(set(ports))}"
    assert {p: row[0] for p, row in offset_checker(secure, group, topic).items()} == {0: 20, 1: 20}


def test_an_unusable_ca_file_is_a_configuration_error_naming_it(secure: ProjectCluster, tmp_path) -> None:
    missing = tmp_path / "no-such-ca.pem"
    with pytest.raises(ConfigurationError) as info:
        ZookeeperConsumerConnector(ssl_consumer_props(secure, unique("g-badca"), **{"ssl.cafile": str(missing)}))
    assert info.value.property == "ssl.cafile" and str(missing) in str(info.value)
    with pytest.raises(ConfigurationError) as info:
        ZookeeperConsumerConnector(ssl_consumer_props(
            secure, unique("g-badca"), **{"ssl.cafile": str(secure.ssl_files.client_key)}))
    assert info.value.property == "ssl.cafile" and "no PEM certificate" in str(info.value)


def test_without_the_required_client_certificate_the_handshake_fails_promptly(secure: ProjectCluster) -> None:
    from zkconsumer import ConsumerConfig

    ctx = broker_ssl_context(ConsumerConfig(ssl_consumer_props(secure, "g", client_cert=False)))
    connection = BrokerConnection("127.0.0.1", secure.ssl_port(0), "no-cert", 5000, 65536, ctx)
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError) as info:
        connection.metadata([])
    assert time.monotonic() - started < 5
    assert f"127.0.0.1:{secure.ssl_port(0)}" in str(info.value) and "SSL" in str(info.value)
    connection.close()

    with_cert = BrokerConnection("127.0.0.1", secure.ssl_port(0), "with-cert", 5000, 65536,
                                 broker_ssl_context(ConsumerConfig(ssl_consumer_props(secure, "g"))))
    assert with_cert.metadata([]).brokers
    with_cert.close()


@pytest.mark.parametrize("case", ["no-client-cert", "other-ca"])
def test_a_consumer_refused_by_tls_reports_it_and_does_not_hang(
        secure: ProjectCluster, caplog: pytest.LogCaptureFixture, tmp_path, case: str) -> None:
    caplog.set_level(logging.WARNING, logger="zkconsumer.fetch")
    topic, group = unique("tls-refused"), unique("g-refused")
    secure.create_topic(topic, partitions=1)
    secure.produce(topic, [b"unreachable"], partition=0)
    if case == "no-client-cert":
        props, symptom = ssl_consumer_props(secure, group, client_cert=False), "SSL"
    else:  # a well-formed CA that did not sign the broker's certificate
        other = generate_ssl_files(tmp_path / "other-ca")
        props, symptom = ssl_consumer_props(secure, group, **{"ssl.cafile": str(other.ca)}), "certificate verify failed"
    started = time.monotonic()
    with ZookeeperConsumerConnector(props) as connector:
        stream = connector.create_message_streams({topic: 1})[topic][0]
        with pytest.raises(ConsumerTimeoutError):
            next(iter(stream))
        wait_until(lambda: "no broker answered a metadata request" in caplog.text, 20,
                   "the fetcher to report the failed TLS handshake")
    assert time.monotonic() - started < 30
    assert f"127.0.0.1:{secure.ssl_port(0)}" in caplog.text and symptom in caplog.text


def test_acls_under_a_chroot_leave_the_chroot_and_consumers_open(secure: ProjectCluster, anonymous: KazooClient) -> None:
    chroot, group, topic = f"/{unique('chroot')}", unique("g-chroot"), unique("t-chroot")
    props = secure_props(secure, group, **{"zookeeper.connect": secure.zk_connect + chroot})
    with ZookeeperConsumerConnector(props) as connector:
        connector.create_message_streams({topic: 1})  # registers; no broker topics under the chroot
        assert anonymous.exists(f"{chroot}/consumers/{group}/ids/{connector.consumer_id}") is not None
        assert anonymous.get_acls(f"{chroot}/consumers/{group}/ids")[0] == expected_acl()
    assert anonymous.get_acls(chroot)[0] == OPEN_ACL_UNSAFE
    assert anonymous.get_acls(f"{chroot}/consumers")[0] == OPEN_ACL_UNSAFE


def test_the_spark_driver_reads_log_ends_over_tls(secure: ProjectCluster) -> None:
    from spark_integration.group_view import GroupView
    from zkconsumer import ConsumerConfig

    topic = unique("tls-ends")
    secure.create_topic(topic, partitions=1)
    secure.produce(topic, produced_values(7, "e"), partition=0)
    with GroupView(ConsumerConfig(ssl_consumer_props(secure, unique("g")))) as view:
        assert view.log_ends([(topic, 0)]) == {(topic, 0): 7}
