"""What the Kerberos tests share: the kerberized cluster (skipped only where MIT's KDC is missing
and CI's ``ZKCONSUMER_REQUIRE_TOOLS`` is unset), consumer properties, producing and consuming."""

from __future__ import annotations

import os
from typing import Any, Iterator, List

import pytest

from harness.cluster import ProjectCluster
from harness.cluster.kerberos import CLIENT, kerberized_cluster
from support.common import Drainer, consumer_props, produced_values, unique
from zkconsumer import ZookeeperConsumerConnector
from zkconsumer.testing.errors import MissingDependencyError
from zkconsumer.testing.kdc import find_kdc_tools


def kerberized_or_skip(**options: Any) -> Iterator[ProjectCluster]:
    """For a module fixture: ``yield from kerberized_or_skip(brokers=1, ...)``."""
    try:
        find_kdc_tools()
    except MissingDependencyError as error:  # a machine without krb5-kdc
        if os.environ.get("ZKCONSUMER_REQUIRE_TOOLS") == "1":
            raise
        pytest.skip(str(error))
    with kerberized_cluster(**options) as cluster:
        yield cluster


def kerberos_props(cluster: ProjectCluster, group: str, principal: str = CLIENT, *,
                   protocol: str = "SASL_PLAINTEXT", **extra: object) -> dict:
    """consumer_props logging in as ``principal`` from its keytab, SASL to ZooKeeper and the brokers."""
    props = consumer_props(cluster, group)
    props.update(cluster.kerberos_consumer_properties(principal, protocol=protocol))
    props.update(extra)
    return props


def produce_topic(cluster: ProjectCluster, name: str, per_partition: int = 5) -> str:
    """A new two-partition topic with ``per_partition`` messages in each partition."""
    topic = cluster.create_topic(unique(name), partitions=2)
    for partition in (0, 1):
        cluster.produce(topic, produced_values(per_partition, f"p{partition}"), partition=partition)
    return topic


def consume(props: dict, topic: str, count: int) -> List[bytes]:
    """Join with ``props``, read ``count`` messages of ``topic``, commit them, leave; their values."""
    with ZookeeperConsumerConnector(props) as connector:
        drainer = Drainer(connector.create_message_streams({topic: 1})[topic])
        drainer.wait_for(count)
        drainer.stop()
        connector.commit_offsets()
        return [m.message for m in drainer.messages]
