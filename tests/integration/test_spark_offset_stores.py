"""Issue 39 item 1: the Spark paths follow ``offsets.storage`` / ``dual.commit.enabled`` on real 0.9 brokers.

``create_rdd`` starts from the group's offsets in the store the properties name,
``commit_offset_ranges`` and the streaming source's group commits write there, and
kafka-python's ``KafkaConsumer(group_id=..., api_version=(0, 9)).committed()``
(OffsetFetch v1) referees Kafka's side; ZooKeeper's nodes are read directly. A
kafka-python member subscribed to the group (a coordinator member) makes Kafka refuse
Spark's generation-less commits, and the error names the cause.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import pytest
from kafka import KafkaConsumer
from kazoo.client import KazooClient
from support.common import consumer_props, unique, wait_until
from support.offsets import kafka_committed, zookeeper_committed

from spark_integration import GroupInUseError, commit_offset_ranges, create_rdd
from spark_integration.datasource import ZkConsumerStreamReader
from spark_integration.group_view import open_zookeeper
from spark_integration.options import SourceOptions
from spark_integration.ownership import QueryOwnership
from spark_integration.rdd import plan_offset_ranges
from zkconsumer.admin.stores import CoordinatorOffsets
from zkconsumer.errors import OffsetStorageError

pytestmark = pytest.mark.spark

PARTITIONS = range(4)




def fill(cluster, topic: str, per_partition: int, prefix: str = "m") -> Dict[int, int]:
    """``per_partition`` messages into each partition; returns the log end of each."""
    for p in PARTITIONS:
        cluster.produce(topic, [f"{prefix}-{p}-{i}" for i in range(per_partition)], partition=p)
    return {p: per_partition for p in PARTITIONS}


def commit_in_kafka(zk: KazooClient, group: str, topic: str, offsets: Dict[int, int]) -> None:
    with CoordinatorOffsets(zk, group) as kafka:
        assert set(kafka.commit({(topic, p): o for p, o in offsets.items()}).values()) == {0}


def commit_in_zookeeper(zk: KazooClient, group: str, topic: str, offsets: Dict[int, int]) -> None:
    for p, o in offsets.items():
        path = f"/consumers/{group}/offsets/{topic}/{p}"
        zk.ensure_path(path)
        zk.set(path, str(o).encode())


def test_create_rdd_and_commit_offset_ranges_with_offsets_in_kafka_only(spark, cluster, zk, make_topic,
                                                                         group_id) -> None:
    topic = make_topic(partitions=4)
    ends = fill(cluster, topic, 6)
    commit_in_kafka(zk, group_id, topic, {0: 2, 1: 6})
    commit_in_zookeeper(zk, group_id, topic, {0: 5, 2: 4})  # a stale ZooKeeper store: never read, never written
    props = consumer_props(cluster, group_id, offsets_storage="kafka", dual_commit_enabled="false")

    rdd = create_rdd(spark.sparkContext, props, [topic])
    assert [(r.partition, r.from_offset, r.until_offset) for r in rdd.offset_ranges] == [
        (0, 2, 6), (1, 6, 6), (2, 0, 6), (3, 0, 6)]  # Kafka's offsets; smallest where it has none
    assert sorted(m.message for m in rdd.collect()) == sorted(
        f"m-{p}-{i}".encode() for p, start in ((0, 2), (2, 0), (3, 0)) for i in range(start, 6))
    commit_offset_ranges(props, rdd.offset_ranges)

    assert kafka_committed(cluster, group_id, topic, PARTITIONS) == ends
    assert zookeeper_committed(zk, group_id, topic, PARTITIONS) == {0: 5, 1: None, 2: 4, 3: None}
    assert create_rdd(spark.sparkContext, props, [topic]).count() == 0


def test_dual_commit_reads_the_larger_and_writes_kafka_then_zookeeper(spark, cluster, zk, make_topic,
                                                                        group_id) -> None:
    topic = make_topic(partitions=4)
    fill(cluster, topic, 5)
    commit_in_kafka(zk, group_id, topic, {0: 4, 1: 1})
    commit_in_zookeeper(zk, group_id, topic, {0: 2, 1: 3, 2: 2})
    props = consumer_props(cluster, group_id, offsets_storage="kafka")  # dual.commit.enabled defaults to true

    rdd = create_rdd(spark.sparkContext, props, [topic], max_messages_per_partition=2)
    assert [(r.partition, r.from_offset, r.until_offset) for r in rdd.offset_ranges] == [
        (0, 4, 5), (1, 3, 5), (2, 2, 4), (3, 0, 2)]  # per partition the larger of the two stores
    assert rdd.count() == 7
    commit_offset_ranges(props, rdd.offset_ranges)
    written = {0: 5, 1: 5, 2: 4, 3: 2}
    assert kafka_committed(cluster, group_id, topic, PARTITIONS) == written
    assert zookeeper_committed(zk, group_id, topic, PARTITIONS) == written


def test_commits_without_a_generation_are_refused_while_coordinator_members_hold_the_group(
        cluster, zk, make_topic, group_id) -> None:
    topic = make_topic(partitions=4)
    fill(cluster, topic, 3)
    commit_in_zookeeper(zk, group_id, topic, {0: 1})
    props = consumer_props(cluster, group_id, offsets_storage="kafka")  # dual commit
    ranges = plan_offset_ranges(props, [topic])  # a driver-only plan: no Spark needed to commit
    member = KafkaConsumer(group_id=group_id, bootstrap_servers=cluster.bootstrap_servers, api_version=(0, 9),
                           enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        member.subscribe([topic])
        wait_until(lambda: member.poll(timeout_ms=200) is not None and member.assignment(), 30,
                   "kafka-python's member to join the group at its coordinator")
        with pytest.raises(OffsetStorageError) as refused:
            commit_offset_ranges(props, ranges)
        message = str(refused.value)
        assert group_id in message and "UNKNOWN_MEMBER_ID" in message
        assert "coordinator members are running" in message and "kafka-python" in message
        assert not refused.value.retriable
        # Dual commit writes ZooKeeper only what Kafka accepted: nothing.
        assert zookeeper_committed(zk, group_id, topic, PARTITIONS) == {0: 1, 1: None, 2: None, 3: None}
    finally:
        member.close()
    assert kafka_committed(cluster, group_id, topic, PARTITIONS) == {p: None for p in PARTITIONS}

    def commits() -> bool:  # once the member left, the coordinator forgets the group
        try:
            commit_offset_ranges(props, ranges)
        except OffsetStorageError:
            return False
        return True

    wait_until(commits, 30, "the commit to be accepted once the coordinator member left")
    assert kafka_committed(cluster, group_id, topic, PARTITIONS) == {p: 3 for p in PARTITIONS}


def test_streaming_source_with_dual_commit_starts_from_the_larger_and_commits_to_both(
        spark, cluster, zk, make_topic, tmp_path: Path) -> None:
    topic, group = make_topic(partitions=4), unique("g-spark-kafka")
    ends = fill(cluster, topic, 5)
    commit_in_kafka(zk, group, topic, {p: 2 for p in PARTITIONS})
    commit_in_zookeeper(zk, group, topic, {0: 1, 1: 1})  # behind Kafka: the larger (Kafka's) wins
    reader = (spark.readStream.format("zkconsumer").option("zookeeper.connect", cluster.zk_connect)
              .option("group.id", group).option("topics", topic).option("auto.offset.reset", "smallest")
              .option("offsets.storage", "kafka").option("dual.commit.enabled", "true")
              .option("maxOffsetsPerTrigger", "8"))
    query = (reader.load().selectExpr("partition", "offset").writeStream.format("parquet")
             .option("path", str(tmp_path / "table")).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert not query.isActive and query.exception() is None
    rows = spark.read.parquet(str(tmp_path / "table")).collect()
    assert sorted((r.partition, r.offset) for r in rows) == [(p, o) for p in PARTITIONS for o in range(2, 5)]
    assert kafka_committed(cluster, group, topic, PARTITIONS) == ends  # Kafka, then ZooKeeper (fenced by the
    assert zookeeper_committed(zk, group, topic, PARTITIONS) == ends  # query's owner nodes) got every batch's end


def test_a_query_whose_session_expired_never_overwrites_the_new_holders_offsets_in_kafka(
        cluster, zk, make_topic, group_id) -> None:
    """The owner nodes fence the Kafka commits too: a query that lost them takes nothing back and writes nothing."""
    topic = make_topic(partitions=1)
    cluster.produce(topic, [f"m-{i}" for i in range(10)], partition=0)
    options = SourceOptions.from_options({"zookeeper.connect": cluster.zk_connect, "group.id": group_id,
                                          "topics": topic, "auto.offset.reset": "smallest",
                                          "offsets.storage": "kafka", "dual.commit.enabled": "false"})
    clients: List[KazooClient] = []

    def recording(config):
        def connect(cfg):
            clients.append(open_zookeeper(cfg))
            return clients[-1]
        return QueryOwnership(config, connect=connect, wait_s=1.0)

    stale = ZkConsumerStreamReader(options, ownership_factory=recording)
    fresh = ZkConsumerStreamReader(options, ownership_factory=recording)
    try:
        assert stale.initialOffset() == {topic: {"0": 0}}
        stale.commit({topic: {"0": 1}})
        assert kafka_committed(cluster, group_id, topic, [0]) == {0: 1}
        cluster.expire_session(clients[0])  # the stale query's driver was cut off from ZooKeeper
        assert fresh.initialOffset() == {topic: {"0": 1}}  # from Kafka
        fresh.commit({topic: {"0": 4}})
        with pytest.raises(GroupInUseError, match=f"group {group_id} is in use"):
            stale.commit({topic: {"0": 9}})
        assert kafka_committed(cluster, group_id, topic, [0]) == {0: 4}
        assert zookeeper_committed(zk, group_id, topic, [0]) == {0: None}
    finally:
        stale.stop()
        fresh.stop()
