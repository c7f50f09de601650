"""Kerberos logins that outlive their tickets: a realm whose tickets last 60 s.

A member logged in from its keytab consumes and commits across more than two ticket
lifetimes while its broker and ZooKeeper restart (every new connection needs fresh
tickets: re-authentication after a reconnection is what would fail without renewal), and
a ticket cache whose ticket has expired is named. Takes about three minutes (it waits for
tickets to expire).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Iterator

import pytest
from support import Drainer, consumer_props, unique, wait_until

from zkconsumer import ZookeeperConsumerConnector
from zkconsumer.errors import ConfigurationError

pytest.importorskip("gssapi", reason="the Kerberos tests need the kerberos extra: pip install -e '.[kerberos]'")

from benchmarks.cluster import KerberosOptions, ProjectCluster  # noqa: E402
from benchmarks.cluster.kdc import find_kdc_tools  # noqa: E402
from benchmarks.cluster.kerberos import CLIENT  # noqa: E402

LIFETIME = 60


@pytest.fixture(scope="module")
def short_tickets() -> Iterator[ProjectCluster]:
    try:
        find_kdc_tools()
    except Exception as error:  # MissingDependencyError: a machine without krb5-kdc
        if os.environ.get("ZKCONSUMER_REQUIRE_TOOLS") == "1":
            raise
        pytest.skip(str(error))
    with ProjectCluster(brokers=1, partitions=1, kerberos=KerberosOptions(ticket_lifetime=LIFETIME)) as cluster:
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
