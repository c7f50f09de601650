"""The smoke test each supported Python version runs (scripts/test-pythons): a connector reads a topic.

Small on purpose, but it crosses every layer a user's first read crosses, against the real
servers of :class:`~zkconsumer.testing.LocalCluster` (ZooKeeper 3.4.6 and a Kafka 0.9.0.1
broker): the group's registration and rebalance in ZooKeeper, the broker's metadata, offset and
fetch requests (encoded with kafka-python's protocol classes, so a kafka-python release that
changed them fails here), the C decoder when it is built, and the offsets committed to
ZooKeeper where Kafka's own tools read them. It uses only the runtime dependencies, so it runs in
the per-version virtualenvs, which have no Spark.
"""

from __future__ import annotations

import importlib.util
import os
import uuid
from typing import Iterator, List, Tuple

import pytest
from kazoo.client import KazooClient

from zkconsumer import ConsumerConfig, ConsumerTimeoutError, ZookeeperConsumerConnector
from zkconsumer.testing import LocalCluster


@pytest.fixture(scope="module")
def small_cluster() -> Iterator[LocalCluster]:
    """ZooKeeper and one broker, for this module only."""
    with LocalCluster(brokers=1, partitions=2) as cluster:
        yield cluster


def test_a_connector_reads_every_message_and_commits_its_offsets_to_zookeeper(small_cluster: LocalCluster) -> None:
    topic, group = f"smoke-{uuid.uuid4().hex[:8]}", f"smoke-g-{uuid.uuid4().hex[:8]}"
    small_cluster.create_topic(topic, partitions=2)
    sent = [f"m{i}" for i in range(40)]
    small_cluster.produce(topic, sent, keys=[str(i) for i in range(40)])

    config = ConsumerConfig({
        "zookeeper.connect": small_cluster.zk_connect,
        "group.id": group,
        "auto.offset.reset": "smallest",
        "consumer.timeout.ms": 2000,
        "auto.commit.enable": "false",
    })
    received: List[Tuple[int, int, str]] = []
    with ZookeeperConsumerConnector(config) as connector:
        stream = connector.create_message_streams({topic: 1})[topic][0]
        try:
            for m in stream:
                assert m.message is not None
                received.append((m.partition, m.offset, m.message.decode()))
                if len(received) == len(sent):
                    break
        except ConsumerTimeoutError:
            pass
        connector.commit_offsets()

    assert sorted(value for _, _, value in received) == sorted(sent)
    ends = {p: max(o for q, o, _ in received if q == p) + 1 for p, _, _ in received}
    zk = KazooClient(hosts=small_cluster.zk_connect)
    zk.start(timeout=30)
    try:
        committed = {p: int(zk.get(f"/consumers/{group}/offsets/{topic}/{p}")[0]) for p in ends}
    finally:
        zk.stop()
        zk.close()
    assert committed == ends  # Kafka's layout: the next offset to read, per partition


def test_the_c_extensions_are_loaded() -> None:
    """The per-version runs build them (ZKCONSUMER_REQUIRE_EXTENSIONS=1): the smoke used them."""
    if os.environ.get("ZKCONSUMER_REQUIRE_EXTENSIONS", "") in ("", "0"):
        pytest.skip("the C extensions are optional here (ZKCONSUMER_REQUIRE_EXTENSIONS is not set)")
    assert importlib.util.find_spec("zkconsumer.wire._speedups") is not None
    assert importlib.util.find_spec("zkconsumer.zookeeper._heartbeat") is not None
