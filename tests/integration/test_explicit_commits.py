"""``commit_offsets(offsets)``: exactly the positions an application names, fenced like every commit,
against a real ZooKeeper and real brokers, under both memberships.

A partition the member owns gets the offset as given (not what was handed out); a partition it does
not own (another member's, or one that does not exist) is refused and returned, never written; and
``positions()`` says what a plain ``commit_offsets()`` would commit.
"""

from __future__ import annotations

from typing import Dict, Optional

import pytest
from kafka import KafkaConsumer, TopicPartition
from support import Drainer, consumer_props, one_partition_each, produced_values, unique

from zkconsumer import ZookeeperConsumerConnector
from zkconsumer.errors import ConfigurationError

pytestmark = pytest.mark.integration


def zookeeper_offset(zk, group: str, topic: str, partition: int) -> Optional[int]:
    path = f"/consumers/{group}/offsets/{topic}/{partition}"
    return int(zk.get(path)[0]) if zk.exists(path) else None


def kafka_offset(cluster, group: str, topic: str, partition: int) -> Optional[int]:
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group, api_version=(0, 9),
                             enable_auto_commit=False)
    try:
        return consumer.committed(TopicPartition(topic, partition))
    finally:
        consumer.close()


@pytest.mark.parametrize("membership", ["zookeeper", "kafka"])
def test_explicit_offsets_are_written_for_owned_partitions_and_refused_for_the_others(cluster, zk,
                                                                                      membership: str) -> None:
    topic, group = unique("explicit"), unique("g-explicit")
    cluster.create_topic(topic, partitions=2, replication=1)
    for p in (0, 1):
        cluster.produce(topic, produced_values(10, f"p{p}-"), partition=p)
    extra: Dict[str, object] = {"auto_commit_enable": "false"}
    if membership == "kafka":
        extra.update(group_membership="kafka", offsets_storage="kafka", dual_commit_enabled="false",
                     session_timeout_ms=6000, heartbeat_interval_ms=500)
    props = consumer_props(cluster, group, **extra)
    read = (lambda p: zookeeper_offset(zk, group, topic, p)) if membership == "zookeeper" \
        else (lambda p: kafka_offset(cluster, group, topic, p))
    first = ZookeeperConsumerConnector(props)
    second: Optional[ZookeeperConsumerConnector] = None
    drainers = [Drainer(first.create_message_streams({topic: 1})[topic])]
    try:
        drainers[0].wait_for(20)
        assert first.positions() == {(topic, 0): 10, (topic, 1): 10}  # everything handed out

        with pytest.raises(ConfigurationError, match="must be a whole number"):
            first.commit_offsets({(topic, 0): -4})
        assert first.commit_offsets({(topic, 0): 3, (topic, 7): 1}) == [(topic, 7)]  # no such partition: refused
        assert read(0) == 3 and read(1) is None and read(7) is None  # exactly as named, and only that

        second = ZookeeperConsumerConnector(props)  # the group rebalances: one partition each
        drainers.append(Drainer(second.create_message_streams({topic: 1})[topic]))
        mine, theirs = one_partition_each(first, second)
        before = read(theirs[1])
        assert first.commit_offsets({mine: 5, theirs: 9}) == [theirs]  # another member's: refused
        assert read(mine[1]) == 5 and read(theirs[1]) == before
    finally:
        for drainer in drainers:
            drainer.stop()
        first.shutdown()
        if second is not None:
            second.shutdown()
