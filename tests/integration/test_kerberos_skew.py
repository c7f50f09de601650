"""A KDC whose clock is an hour ahead of the servers' (libfaketime, Debian's ``faketime``).

MIT's client library corrects its own skew against the KDC, so logins and service tickets
succeed; the servers then refuse those tickets ("Clock skew too great" in their logs) and say
nothing more to the client. The errors must name clock skew; once the KDC runs on the right
time again, the same process logs in afresh and reads everything, nothing lost.
"""

from __future__ import annotations

import os
from typing import Iterator

import pytest
from support.common import unique

from zkconsumer import ConsumerConfig, ZookeeperConsumerConnector, kerberos
from zkconsumer.errors import BrokerUnavailableError, ZooKeeperUnavailableError
from zkconsumer.testing.errors import MissingDependencyError
from zkconsumer.testing.kdc import find_libfaketime
from zkconsumer.wire.connection import BrokerConnection

pytest.importorskip("gssapi", reason="the Kerberos tests need the kerberos extra: pip install -e '.[kerberos]'")

from support.kerberos import consume, kerberized_or_skip, kerberos_props  # noqa: E402

from harness.cluster import KerberosOptions, ProjectCluster  # noqa: E402

SKEW_S = 3600
#: Principals first logged in while the KDC is skewed (this process's other tests log in as others).
ZK_MEMBER, BROKER_CLIENT = "skewed", "skewedbroker"


@pytest.fixture(scope="module")
def cluster() -> Iterator[ProjectCluster]:
    try:
        find_libfaketime()
    except MissingDependencyError as error:  # a machine without faketime (CI installs it: no skip there)
        if os.environ.get("ZKCONSUMER_REQUIRE_TOOLS") == "1":
            raise
        pytest.skip(str(error))
    yield from kerberized_or_skip(brokers=1, partitions=1, kerberos=KerberosOptions(principals=(ZK_MEMBER, BROKER_CLIENT)))


def test_a_kdc_skewed_against_the_servers_is_named_and_fixing_it_recovers(cluster: ProjectCluster) -> None:
    topic, group = cluster.create_topic(unique("skew"), partitions=1), unique("g-skew")
    cluster.produce(topic, [b"m0", b"m1"], partition=0)
    props = kerberos_props(cluster, group, ZK_MEMBER)
    broker_config = ConsumerConfig(kerberos_props(cluster, group, BROKER_CLIENT))
    broker = BrokerConnection("127.0.0.1", cluster.sasl_port(0), "skew-test", 10000, 0,
                              authenticate=kerberos.broker_authenticator(broker_config))
    cluster.kdc.stop_server()
    try:
        cluster.kdc.start_server(clock_offset=SKEW_S)
        with pytest.raises(ZooKeeperUnavailableError) as zookeeper_refused:
            ZookeeperConsumerConnector(props)
        with pytest.raises(BrokerUnavailableError) as broker_refused:
            broker.metadata([])
    finally:
        cluster.kdc.stop_server()
        cluster.kdc.start_server()
    text = str(zookeeper_refused.value)
    assert "refused our Kerberos ticket (AUTH_FAILED" in text, text
    assert "agree within the KDC's clock skew" in text
    text = str(broker_refused.value)
    assert broker_refused.value.retriable and "closed the connection during SASL authentication" in text, text
    assert "the broker refused our Kerberos ticket" in text and "agree within the KDC's clock skew" in text

    try:  # the same process and logins, the KDC on time again
        assert broker.metadata([]).brokers
    finally:
        broker.close()
    assert consume(props, topic, 2) == [b"m0", b"m1"]
    reader = cluster.kazoo_client()
    assert reader.get(f"/consumers/{group}/offsets/{topic}/0")[0] == b"2"
