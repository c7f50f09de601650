"""spark_integration against the real cluster and a real local SparkSession (local[2], maxFailures 4).

One SparkSession serves the whole module. Handlers run in Spark's Python
workers, so this module is pickled by value (its handlers must not use test-only
modules such as ``support``); what they saw comes back as the handler's return
value (successful attempts) or through files (failed attempts).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict, Iterable, List, Sequence, Tuple

import pytest
from kazoo.client import KazooClient
from support.common import consumer_props, members, owners, produced_values, unique, wait_until

from spark_integration import (
    DataLossError,
    GroupInUseError,
    KafkaStreamSource,
    commit_offset_ranges,
    create_rdd,
)
from spark_integration.datasource import ZkConsumerStreamReader
from spark_integration.group_view import open_zookeeper
from spark_integration.options import SourceOptions
from spark_integration.ownership import QueryOwnership
from spark_integration.schema import SCHEMA
from spark_integration.streams import StreamSpec, run_member
from zkconsumer.admin import UnknownTopicError

pytestmark = pytest.mark.spark

Placed = Sequence[Tuple[int, int]]
SPARK_MASTER = "local[2,4]"  # spark.task.maxFailures 4: failed tasks are retried
SPARK_PICKLE_BY_VALUE = True


# --------------------------------------------------------------------------- fixtures




def zk_offsets(zk: KazooClient, group: str, topic: str) -> Dict[int, int]:
    """The group's committed offsets of ``topic``, read straight from Kafka's ZooKeeper layout."""
    base = f"/consumers/{group}/offsets/{topic}"
    if not zk.exists(base):
        return {}
    return {int(p): int(zk.get(f"{base}/{p}")[0]) for p in zk.get_children(base)}


def log_ends(placed: Iterable[Tuple[int, int]]) -> Dict[int, int]:
    ends: Dict[int, int] = {}
    for partition, offset in placed:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    return ends


def assert_committed_at_log_end(zk: KazooClient, group: str, topic: str, placed: Placed, partitions: int = 4) -> None:
    committed = zk_offsets(zk, group, topic)
    ends = log_ends(placed)
    assert {p: committed.get(p, 0) for p in range(partitions)} == {p: ends.get(p, 0) for p in range(partitions)}
    assert sum(committed.values()) == len(placed)


def member_props(cluster, group: str) -> Dict[str, object]:
    # A stream ends after 2 s without messages: well above a rebalance on this cluster.
    return consumer_props(cluster, group, consumer_timeout_ms=2000)


# --------------------------------------------------------------------------- handlers (run on executors)


def collect_messages(stream) -> List[Tuple[int, int, bytes]]:
    return [(m.partition, m.offset, m.message) for m in stream]


def fail_first_attempt_of_task_0(record_dir: str, stream) -> List[Tuple[int, int, bytes]]:
    """Consume the whole stream; on task 0's first attempt, record what was seen and raise."""
    from pyspark import TaskContext

    seen = [(m.partition, m.offset, m.message) for m in stream]
    context = TaskContext.get()
    if context.partitionId() == 0 and context.attemptNumber() == 0:
        Path(record_dir, "failed-attempt.json").write_text(json.dumps([(p, o, v.decode()) for p, o, v in seen]))
        raise RuntimeError("handler fails on its first attempt (on purpose)")
    return seen


def consume_then_raise(stream) -> None:
    for _ in stream:
        pass
    raise RuntimeError("handler failed after consuming (on purpose)")


# --------------------------------------------------------------------------- 1. foreach_stream


def test_foreach_stream_two_members_split_the_topic_and_commit_exactly(spark, cluster, make_topic, group_id, zk) -> None:
    topic = make_topic(partitions=4)
    values = produced_values(40)
    placed = cluster.produce(topic, values)

    source = KafkaStreamSource(member_props(cluster, group_id), {topic: 2}, settle_timeout_s=30)
    results = source.foreach_stream(spark.sparkContext, collect_messages)

    assert sorted(r.stream_index for r in results) == [0, 1]
    assert len({r.consumer_id for r in results}) == 2  # two distinct group members
    seen = [v for r in results for _, _, v in r.value]
    assert sorted(seen) == sorted(values)  # the union is exactly what was produced, each message once
    owned = [{p for p, _, _ in r.value} for r in results]
    assert owned[0].isdisjoint(owned[1])
    assert all(r.messages == len(r.value) for r in results)
    assert_committed_at_log_end(zk, group_id, topic, placed)
    assert members(zk, group_id) == []  # every member left the group


def test_foreach_stream_retries_a_failed_handler_without_loss_or_overcommit(
    spark, cluster, make_topic, group_id, zk, tmp_path: Path
) -> None:
    topic = make_topic(partitions=4)
    values = produced_values(40)
    placed = cluster.produce(topic, values)

    source = KafkaStreamSource(member_props(cluster, group_id), {topic: 2}, settle_timeout_s=30)
    handler = functools.partial(fail_first_attempt_of_task_0, str(tmp_path))
    results = source.foreach_stream(spark.sparkContext, handler)

    failed = [(p, o, v.encode()) for p, o, v in json.loads((tmp_path / "failed-attempt.json").read_text())]
    assert failed, "task 0's first attempt consumed messages before failing"
    assert [r.attempt for r in results if r.stream_index == 0] == [1]  # Spark retried it once
    succeeded = [m for r in results for m in r.value]
    assert sorted({v for _, _, v in succeeded}) == sorted(values)  # nothing lost
    assert set(failed) <= set(succeeded)  # what the failed attempt saw was read again by a successful one
    # Offsets moved exactly to what successful attempts processed (here: the log end), never further.
    processed = log_ends((p, o) for p, o, _ in succeeded)
    committed = zk_offsets(zk, group_id, topic)
    assert {p: committed.get(p, 0) for p in range(4)} == {p: processed.get(p, 0) for p in range(4)}
    assert_committed_at_log_end(zk, group_id, topic, placed)
    for r in results:
        assert all(processed[p] >= end for (_, p), end in r.positions.items())


def test_foreach_stream_with_more_streams_than_task_slots_runs_in_waves_without_loss(
    spark, cluster, make_topic, group_id, zk
) -> None:
    topic = make_topic(partitions=4)
    values = produced_values(40)
    placed = cluster.produce(topic, values)

    source = KafkaStreamSource(member_props(cluster, group_id), {topic: 3}, settle_timeout_s=30)
    results = source.foreach_stream(spark.sparkContext, collect_messages)  # 3 tasks on 2 slots

    assert sorted(r.stream_index for r in results) == [0, 1, 2]
    seen = [v for r in results for _, _, v in r.value]
    # The union is exact. A member joining while another still holds uncommitted messages may
    # re-read some of them (at-least-once), so duplicates are allowed here, loss is not.
    assert set(seen) == set(values)
    assert_committed_at_log_end(zk, group_id, topic, placed)
    assert members(zk, group_id) == []


def test_member_whose_handler_raises_commits_nothing_and_a_later_member_rereads(cluster, make_topic, group_id, zk) -> None:
    """No Spark: one member, as a task runs it. Shutdown with auto.commit.enable=false commits nothing."""
    topic = make_topic(partitions=2)
    values = produced_values(12)
    placed = cluster.produce(topic, values)
    props = {k: str(v) for k, v in member_props(cluster, group_id).items()}

    with pytest.raises(RuntimeError, match="on purpose"):
        run_member(props, StreamSpec(topic, 0), consume_then_raise)
    assert zk_offsets(zk, group_id, topic) == {}
    assert members(zk, group_id) == []

    result = run_member(props, StreamSpec(topic, 0), collect_messages)
    assert sorted(v for _, _, v in result.value) == sorted(values)
    assert_committed_at_log_end(zk, group_id, topic, placed, partitions=2)


# --------------------------------------------------------------------------- 2. create_rdd


def test_create_rdd_reads_exactly_the_new_messages_and_commits_to_the_log_end(
    spark, cluster, make_topic, group_id, zk
) -> None:
    sc = spark.sparkContext
    topic = make_topic(partitions=4)
    props = consumer_props(cluster, group_id)
    first = produced_values(20, "first")
    placed = cluster.produce(topic, first)

    rdd = create_rdd(sc, props, [topic])
    assert rdd.getNumPartitions() == 4
    assert [(r.topic, r.partition, r.from_offset) for r in rdd.offset_ranges] == [(topic, p, 0) for p in range(4)]
    for r, rows in zip(rdd.offset_ranges, rdd.glom().collect()):  # Spark partition i = Kafka partition i
        assert [(m.topic, m.partition, m.offset) for m in rows] == [
            (topic, r.partition, o) for o in range(r.from_offset, r.until_offset)]
    assert sorted(m.message for m in rdd.collect()) == sorted(first)
    commit_offset_ranges(props, rdd.offset_ranges)
    assert_committed_at_log_end(zk, group_id, topic, placed)

    second = produced_values(30, "second")
    placed += cluster.produce(topic, second, keys=[b"k%d" % i for i in range(30)])
    again = create_rdd(sc, props, [topic])
    assert [r.from_offset for r in again.offset_ranges] == [r.until_offset for r in rdd.offset_ranges]
    rows = again.collect()
    assert sorted(m.message for m in rows) == sorted(second)  # exactly the new ones
    topic_, partition, offset, key, message = rows[0]  # a plain tuple of the five fields
    assert (topic_, key) == (topic, b"k%d" % second.index(message)) and offset >= 0 <= partition
    commit_offset_ranges(props, again.offset_ranges)
    assert_committed_at_log_end(zk, group_id, topic, placed)
    assert create_rdd(sc, props, [topic]).count() == 0


def test_create_rdd_caps_each_partition_and_rejects_unknown_topics(spark, cluster, make_topic, group_id) -> None:
    topic = make_topic(partitions=2)
    placed = cluster.produce(topic, produced_values(10), partition=1)
    props = consumer_props(cluster, group_id)
    rdd = create_rdd(spark.sparkContext, props, [topic], max_messages_per_partition=3)
    assert [(r.partition, r.from_offset, r.until_offset) for r in rdd.offset_ranges] == [(0, 0, 0), (1, 0, 3)]
    assert sorted(m.offset for m in rdd.collect()) == [0, 1, 2] and len(placed) == 10
    with pytest.raises(UnknownTopicError):
        create_rdd(spark.sparkContext, props, [unique("no-such-topic")])


# --------------------------------------------------------------------------- 3. the streaming source


def run_available_now(spark, cluster, group: str, topic: str, table: Path, checkpoint: Path):
    df = (spark.readStream.format("zkconsumer")
          .option("zookeeper.connect", cluster.zk_connect)
          .option("group.id", group)
          .option("topics", topic)
          .option("auto.offset.reset", "smallest")
          .option("max.messages.per.trigger", "20")
          .load())
    query = (df.selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value")
             .writeStream.format("parquet")
             .option("path", str(table))
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True)
             .start())
    query.awaitTermination(180)
    assert not query.isActive and query.exception() is None
    return query


def test_streaming_source_available_now_commits_and_restarts_from_the_checkpoint(
    spark, cluster, make_topic, group_id, zk, tmp_path: Path
) -> None:
    topic = make_topic(partitions=4)
    table, checkpoint = tmp_path / "table", tmp_path / "checkpoint"
    first = [v.decode() for v in produced_values(30, "first")]
    placed = cluster.produce(topic, first)

    query = run_available_now(spark, cluster, group_id, topic, table, checkpoint)
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    assert len(batches) >= 2  # max.messages.per.trigger=20 split the 30 messages
    rows = spark.read.parquet(str(table)).collect()
    assert sorted(r.value for r in rows) == sorted(first)
    assert_committed_at_log_end(zk, group_id, topic, placed)

    # A restarted query resumes from its checkpoint, not from ZooKeeper: rewinding the
    # group's offsets there must not make it read anything twice.
    for p in zk_offsets(zk, group_id, topic):
        zk.set(f"/consumers/{group_id}/offsets/{topic}/{p}", b"0")
    second = [v.decode() for v in produced_values(25, "second")]
    placed += cluster.produce(topic, second)
    run_available_now(spark, cluster, group_id, topic, table, checkpoint)
    rows = spark.read.parquet(str(table)).collect()
    assert sorted(r.value for r in rows) == sorted(first + second)  # each exactly once: only the new were read
    assert len({(r.partition, r.offset) for r in rows}) == len(rows)
    assert_committed_at_log_end(zk, group_id, topic, placed)


def test_batch_read_by_whitelist_reads_uncommitted_messages_and_commits_nothing(spark, cluster, group_id, zk) -> None:
    prefix = unique("wl")
    topics = [cluster.create_topic(f"{prefix}-{name}", partitions=2) for name in ("a", "b")]
    cluster.create_topic(f"x{prefix}-c", partitions=1)  # does not match the whole-name regex
    for t in topics:
        cluster.produce(t, [f"{t}:{i}" for i in range(5)], keys=[b"key"] * 5)
    df = (spark.read.format("zkconsumer")
          .option("zookeeper.connect", cluster.zk_connect)
          .option("group.id", group_id)
          .option("topic.whitelist", f"{prefix}-.*")
          .option("auto.offset.reset", "smallest")
          .load())
    assert df.schema == SCHEMA
    rows = df.collect()
    assert sorted((r.topic, r.value.decode()) for r in rows) == sorted((t, f"{t}:{i}") for t in topics for i in range(5))
    assert {bytes(r.key) for r in rows} == {b"key"}
    assert all(zk_offsets(zk, group_id, t) == {} for t in topics)


# --------------------------------------------------------------------------- 4. the streaming source under faults (item 12)


def source_options(cluster, group: str, topic: str, **extra: str) -> Dict[str, str]:
    return {"zookeeper.connect": cluster.zk_connect, "group.id": group, "topics": topic,
            "auto.offset.reset": "smallest", **extra}


def start_query(spark, options: Dict[str, str], table: Path, checkpoint: Path, trigger: Dict[str, object]):
    reader = spark.readStream.format("zkconsumer")
    for key, value in options.items():
        reader = reader.option(key, value)
    return (reader.load().selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value")
            .writeStream.format("parquet")
            .option("path", str(table))
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start())


def delete_and_recreate(cluster, zk: KazooClient, topic: str, partitions: int) -> None:
    """Delete ``topic`` as kafka-topics.sh --delete does (brokers run with delete.topic.enable=true), create it again."""
    zk.create(f"/admin/delete_topics/{topic}", makepath=True)
    wait_until(lambda: not zk.exists(f"/brokers/topics/{topic}") and not zk.exists(f"/admin/delete_topics/{topic}"),
               60, f"the controller to delete {topic}")
    cluster.create_topic(topic, partitions=partitions, replication=1)


def produce_per_partition(cluster, topic: str, per_partition: int, prefix: str, partitions: int = 2) -> List[str]:
    values = []
    for p in range(partitions):
        batch = [f"{prefix}-{p}-{i}" for i in range(per_partition)]
        cluster.produce(topic, batch, partition=p)
        values += batch
    return values


def test_item12_streaming_source_on_a_recreated_topic_fails_by_default_and_goes_on_from_its_start_otherwise(
    spark, cluster, group_id, zk, tmp_path: Path, caplog
) -> None:
    """Issue item 12: a topic deleted and re-created with fewer messages moves each log end below the query's offset.

    Default (failOnDataLoss=true): the query fails with an error naming the topic,
    the partition and both offsets. failOnDataLoss=false (the same checkpoint,
    copied): a warning, and the re-created partitions are read from their start.
    """
    topic = cluster.create_topic(unique("recreated"), partitions=2, replication=1)
    first = produce_per_partition(cluster, topic, 10, "old")
    table, checkpoint = tmp_path / "table", tmp_path / "checkpoint"
    query = start_query(spark, source_options(cluster, group_id, topic), table, checkpoint, {"availableNow": True})
    query.awaitTermination(180)
    assert query.exception() is None
    assert sorted(r.value for r in spark.read.parquet(str(table)).collect()) == sorted(first)

    delete_and_recreate(cluster, zk, topic, partitions=2)
    second = produce_per_partition(cluster, topic, 3, "new")  # log ends 3 < the query's offsets 10
    table_b, checkpoint_b = tmp_path / "table-b", tmp_path / "checkpoint-b"
    shutil.copytree(checkpoint, checkpoint_b)  # the same query state, for the other setting

    failing = start_query(spark, source_options(cluster, group_id, topic), table, checkpoint, {"availableNow": True})
    from pyspark.errors import StreamingQueryException

    with pytest.raises(StreamingQueryException):  # awaitTermination re-raises the query's failure
        failing.awaitTermination(180)
    error = failing.exception()
    assert error is not None, "the query went on past data it never read"
    message = str(error)
    assert DataLossError.__name__ in message and "failOnDataLoss" in message
    assert f"{topic}/0: the log now ends at offset 3, before offset 10" in message
    assert f"{topic}/1: the log now ends at offset 3, before offset 10" in message
    assert sorted(r.value for r in spark.read.parquet(str(table)).collect()) == sorted(first)  # nothing skipped into it

    going_on = start_query(spark, source_options(cluster, group_id, topic, failOnDataLoss="false"), table_b,
                           checkpoint_b, {"availableNow": True})
    going_on.awaitTermination(180)
    assert going_on.exception() is None
    # Its own output directory; a glob reads the files without the sink's log (which starts at batch 0).
    assert sorted(r.value for r in spark.read.parquet(f"{table_b}/part-*").collect()) == sorted(second)  # all, once
    assert zk_offsets(zk, group_id, topic) == {0: 3, 1: 3}

    # The warning (logged in Spark's planner process above) comes from the reader itself: run it here.
    delete_and_recreate(cluster, zk, topic, partitions=2)
    reader = ZkConsumerStreamReader(SourceOptions.from_options(
        source_options(cluster, unique("g-warn"), topic, failOnDataLoss="false")))
    try:
        with caplog.at_level(logging.WARNING, logger="spark_integration.datasource"):
            end = reader.latestOffset({f"{topic}/0": 3, f"{topic}/1": 3}, None)
        assert end == {topic: {"0": 0, "1": 0}}
        assert any(f"{topic}/0: the log now ends at offset 0, before offset 3" in r.getMessage()
                   and "failOnDataLoss=false: going on from offset 0" in r.getMessage() for r in caplog.records)
    finally:
        reader.stop()


def test_item12_a_second_streaming_query_on_the_same_group_is_refused_naming_the_group(
    spark, cluster, make_topic, group_id, zk, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce_per_partition(cluster, topic, 5, "m")
    first = start_query(spark, source_options(cluster, group_id, topic), tmp_path / "t1", tmp_path / "c1",
                        {"processingTime": "1 second"})
    try:
        wait_until(lambda: zk_offsets(zk, group_id, topic) == {0: 5, 1: 5} or not first.isActive, 120,
                   "the first query to commit the group's offsets")
        assert first.isActive

        second = start_query(spark, source_options(cluster, group_id, topic), tmp_path / "t2", tmp_path / "c2",
                             {"processingTime": "1 second"})
        try:
            from pyspark.errors import StreamingQueryException

            with pytest.raises(StreamingQueryException):  # else a second query on the same group was let in
                second.awaitTermination(90)
        finally:
            second.stop()
        holder = owners(zk, group_id, topic).get(0, "")
        assert holder.startswith("zkconsumer-spark-query_")
        message = str(second.exception())
        assert "GroupInUseError" in message and f"group {group_id} is in use" in message and holder in message

        assert first.isActive  # the first query is untouched and keeps its partitions
        assert owners(zk, group_id, topic) == {0: holder, 1: holder}
        more = produce_per_partition(cluster, topic, 2, "more")
        wait_until(lambda: zk_offsets(zk, group_id, topic) == {0: 7, 1: 7}, 120, "the first query to go on")
        assert len(more) == 4
    finally:
        first.stop()
    wait_until(lambda: owners(zk, group_id, topic) == {}, 30, "the stopped query to release its partitions")


CRASHING_DRIVER = textwrap.dedent("""
    import os, sys
    from spark_integration.datasource import ZkConsumerStreamReader
    from spark_integration.options import SourceOptions
    options = dict(arg.split("=", 1) for arg in sys.argv[1:])
    reader = ZkConsumerStreamReader(SourceOptions.from_options(options))
    print(reader.initialOffset(), flush=True)
    os._exit(0)  # a crash: the ZooKeeper session is never closed
""")


def test_item12_a_crashed_drivers_partitions_are_taken_over_once_its_session_expires(
    cluster, make_topic, group_id, zk
) -> None:
    topic = make_topic(partitions=2)
    options = source_options(cluster, group_id, topic, **{"zookeeper.session.timeout.ms": "6000"})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                    os.environ.get("PYTHONPATH")])))
    crashed = subprocess.run([sys.executable, "-c", CRASHING_DRIVER, *[f"{k}={v}" for k, v in options.items()]],
                             env=env, capture_output=True, text=True, timeout=60)
    assert crashed.returncode == 0, crashed.stderr
    left = owners(zk, group_id, topic)
    assert set(left) == {0, 1}, "the crashed driver's owner nodes live on until its session expires"

    restarted = ZkConsumerStreamReader(SourceOptions.from_options(options))
    try:
        began = time.monotonic()
        assert restarted.initialOffset() == {topic: {"0": 0, "1": 0}}
        waited = time.monotonic() - began
        taken = owners(zk, group_id, topic)
        assert set(taken) == {0, 1} and set(taken.values()).isdisjoint(left.values())
        assert waited < 30
    finally:
        restarted.stop()


def test_item12_a_query_whose_session_expired_never_overwrites_the_new_holders_offsets(
    cluster, make_topic, group_id, zk
) -> None:
    topic = make_topic(partitions=1)
    options = SourceOptions.from_options(source_options(cluster, group_id, topic))
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
        stale.commit({f"{topic}/0": 0})
        cluster.expire_session(clients[0])  # the stale query's driver was cut off from ZooKeeper
        assert fresh.initialOffset() == {topic: {"0": 0}}
        fresh.commit({f"{topic}/0": 4})
        with pytest.raises(GroupInUseError, match=f"group {group_id} is in use"):
            stale.commit({f"{topic}/0": 9})
        assert zk_offsets(zk, group_id, topic) == {0: 4}
    finally:
        stale.stop()
        fresh.stop()
