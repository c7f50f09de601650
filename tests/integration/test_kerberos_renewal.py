"""Kerberos logins that outlive their tickets: a realm whose tickets last 60 s.

A member logged in from its keytab consumes and commits across more than two ticket
lifetimes while its broker and ZooKeeper restart (every new connection needs fresh
tickets: re-authentication after a reconnection is what would fail without renewal), and
a ticket cache whose ticket has expired is named; a member whose tickets expire while the
KDC is down, and whose ZooKeeper connection drops then, recovers by itself once the KDC is
back. Takes about four minutes (it waits for tickets to expire).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest
from support.common import Drainer, consumer_props, unique, wait_until

from zkconsumer import ZookeeperConsumerConnector
from zkconsumer.errors import ConfigurationError

pytest.importorskip("gssapi", reason="the Kerberos tests need the kerberos extra: pip install -e '.[kerberos]'")

from support.kerberos import kerberized_or_skip  # noqa: E402

from harness.cluster import KerberosOptions, ProjectCluster  # noqa: E402
from harness.cluster.kerberos import CLIENT  # noqa: E402
from harness.cluster.proxy import TcpProxy  # noqa: E402

LIFETIME = 60


@pytest.fixture(scope="module")
def short_tickets() -> Iterator[ProjectCluster]:
    yield from kerberized_or_skip(brokers=1, partitions=1, kerberos=KerberosOptions(ticket_lifetime=LIFETIME))


def test_keytab_login_outlives_its_tickets_across_reconnections(short_tickets: ProjectCluster, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = short_tickets
    topic, group = cluster.create_topic(unique("renew"), partitions=1), unique("g-renew")
    cluster.produce(topic, [b"m0"], partition=0)
    cached = f"FILE:{tmp_path / 'ccache'}"
    cluster.kdc.kinit(CLIENT, cluster.kdc.keytab(CLIENT), cached)  # for the expired-cache case below

    props = consumer_props(cluster, group)
    props.update(cluster.kerberos_consumer_properties(CLIENT))
    props["zookeeper.acl.enable"] = "true"
    offset_node = f"/consumers/{group}/offsets/{topic}/0"
    reader = cluster.kazoo_client()
    with ZookeeperConsumerConnector(props) as member:
        drainer = Drainer(member.create_message_streams({topic: 1})[topic])
        drainer.wait_for(1)
        member.commit_offsets()
        for round_ in (1, 2):
            time.sleep(LIFETIME + 5)  # every ticket obtained so far has expired
            cluster.restart_zookeeper()  # kazoo reconnects: a new SASL exchange, fresh ZooKeeper ticket
            cluster.kill_broker(0)
            cluster.start_broker(0)  # the fetcher reconnects: a fresh broker service ticket
            cluster.wait_for_leaders(topic)
            cluster.produce(topic, [f"m{round_}".encode()], partition=0)
            drainer.wait_for(1 + round_, timeout=60)
            member.commit_offsets()
            committed = str(1 + round_).encode()
            wait_until(lambda want=committed: reader.get(offset_node)[0] == want, 30, f"offset {committed!r} committed")
        assert [m.message for m in drainer.stop()] == [b"m0", b"m1", b"m2"]

    # The kinit'd cache's ticket expired two lifetimes ago: the error says to renew it or use a keytab.
    monkeypatch.setenv("KRB5CCNAME", cached)
    expired = consumer_props(cluster, unique("g-expired"))
    expired.update({"security.protocol": "SASL_PLAINTEXT", "zookeeper.sasl.enabled": "true"})
    with pytest.raises(ConfigurationError) as info:
        ZookeeperConsumerConnector(expired)
    assert info.value.property == "sasl.kerberos.keytab"
    assert "has expired: renew it" in str(info.value)


def test_member_recovers_by_itself_when_the_kdc_returns_after_its_tickets_expired(
        short_tickets: ProjectCluster) -> None:
    """The KDC is down long enough for every ticket to expire, then the member's ZooKeeper connection
    drops (a proxy resets it): its reconnection cannot authenticate (no ticket can be had). That must
    stay a dropped connection kazoo retries: after AUTH_FAILED, or an error kazoo does not know,
    kazoo never reconnects. (ZooKeeper itself cannot restart meanwhile: its own login needs the KDC.)"""
    cluster = short_tickets
    topic, group = cluster.create_topic(unique("kdc-back"), partitions=1), unique("g-kdc-back")
    cluster.produce(topic, [b"m0"], partition=0)
    reader = cluster.kazoo_client()
    with TcpProxy("127.0.0.1", cluster.zk_port) as proxy:
        props = consumer_props(cluster, group)
        props.update(cluster.kerberos_consumer_properties(CLIENT))
        props["zookeeper.connect"] = proxy.address
        with ZookeeperConsumerConnector(props) as member:
            drainer = Drainer(member.create_message_streams({topic: 1})[topic])
            drainer.wait_for(1)
            member.commit_offsets()
            cluster.kdc.stop_server()
            try:
                time.sleep(LIFETIME + 5)  # every ticket the member holds has expired; no new one can be had
                proxy.cut("reset")  # the member's ZooKeeper connection drops
                time.sleep(1)
                proxy.heal()  # its reconnections reach ZooKeeper, and need a ticket
                time.sleep(10)  # they fail meanwhile
            finally:
                cluster.kdc.start_server()
            cluster.produce(topic, [b"m1"], partition=0)
            drainer.wait_for(2, timeout=90)
            member.commit_offsets()
            wait_until(lambda: reader.get(f"/consumers/{group}/offsets/{topic}/0")[0] == b"2", 30,
                       "offset 2 committed")
            assert [m.message for m in drainer.stop()] == [b"m0", b"m1"]
