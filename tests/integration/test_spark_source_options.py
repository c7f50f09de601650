"""The ``zkconsumer`` streaming source's Spark Kafka-source options and Arrow batches, on local[2] PySpark
and the real cluster ("Spark for real" items 3 and 5).

Queries write to a parquet sink; what each micro-batch read comes from the
query's progress. Timings are only ever bounded from below by the source's own
rule (``maxTriggerDelay``), never from above.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from kazoo.client import KazooClient
from support.common import unique, wait_until

pytestmark = pytest.mark.spark




def fill(cluster, topic: str, per_partition: Dict[int, int], prefix: str = "m") -> None:
    for partition, n in per_partition.items():
        cluster.produce(topic, [f"{prefix}-{partition}-{i}" for i in range(n)], partition=partition)


def set_committed(zk: KazooClient, group: str, topic: str, offsets: Dict[int, int]) -> None:
    for partition, offset in offsets.items():
        path = f"/consumers/{group}/offsets/{topic}/{partition}"
        zk.ensure_path(path)
        zk.set(path, str(offset).encode())


def start(spark, cluster, group: str, topic: str, checkpoint: Path, trigger: Dict[str, object], **options: str):
    reader = (spark.readStream.format("zkconsumer").option("zookeeper.connect", cluster.zk_connect)
              .option("group.id", group).option("topics", topic))
    for key, value in options.items():
        reader = reader.option(key, value)
    table = str(checkpoint) + "-table"  # a parquet sink: unlike memory, it can restart from its checkpoint
    query = (reader.load().writeStream.format("parquet").option("path", table)
             .option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())
    return query, table


def read_table(spark, table: str):
    return spark.read.schema("topic string, partition int, offset long, key binary, value binary").parquet(table)


def available_now(spark, cluster, group: str, topic: str, checkpoint: Path, **options: str):
    """Run an availableNow query to its end; return (sorted (partition, offset) it read, row counts per batch)."""
    query, name = start(spark, cluster, group, topic, checkpoint, {"availableNow": True}, **options)
    query.awaitTermination(120)
    assert not query.isActive and query.exception() is None
    rows = sorted((r.partition, r.offset) for r in read_table(spark, name).collect())
    return rows, [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def offsets(per_partition: Dict[int, Tuple[int, int]]) -> List[Tuple[int, int]]:
    return sorted((p, o) for p, (a, b) in per_partition.items() for o in range(a, b))


# --------------------------------------------------------------------------- startingOffsets


def test_item5_starting_offsets_earliest_and_unset_without_a_checkpoint(spark, cluster, make_topic, group_id, zk,
                                                                        tmp_path: Path) -> None:
    topic = make_topic(partitions=2)
    fill(cluster, topic, {0: 6, 1: 4})
    set_committed(zk, group_id, topic, {0: 5, 1: 1})
    rows, _ = available_now(spark, cluster, group_id, topic, tmp_path / "a", startingOffsets="earliest")
    assert rows == offsets({0: (0, 6), 1: (0, 4)})
    # unset: the group's committed offsets (the query above left them at the log end; set them back)
    set_committed(zk, group_id, topic, {0: 5, 1: 1})
    rows, _ = available_now(spark, cluster, group_id, topic, tmp_path / "b")
    assert rows == offsets({0: (5, 6), 1: (1, 4)})


def test_item5_starting_offsets_latest_applies_only_to_a_query_without_a_checkpoint(
        spark, cluster, make_topic, group_id, tmp_path: Path) -> None:
    topic = make_topic(partitions=2)
    fill(cluster, topic, {0: 3, 1: 3})
    checkpoint = tmp_path / "cp"
    rows, _ = available_now(spark, cluster, group_id, topic, checkpoint, startingOffsets="latest")
    assert rows == []
    fill(cluster, topic, {0: 2}, prefix="later")
    # the same checkpoint: the query goes on from it (startingOffsets=earliest is ignored now)
    rows, _ = available_now(spark, cluster, group_id, topic, checkpoint, startingOffsets="earliest")
    assert rows == offsets({0: (3, 5)})


def test_item5_starting_offsets_json_with_minus_one_and_minus_two(spark, cluster, make_topic, group_id,
                                                                  tmp_path: Path) -> None:
    topic = make_topic(partitions=3)
    fill(cluster, topic, {0: 5, 1: 5, 2: 5})
    rows, _ = available_now(spark, cluster, group_id, topic, tmp_path / "cp",
                            startingOffsets=f'{{"{topic}":{{"0":3,"1":-2,"2":-1}}}}')
    assert rows == offsets({0: (3, 5), 1: (0, 5)})
    query, _ = start(spark, cluster, unique("g"), topic, tmp_path / "bad", {"availableNow": True},
                     startingOffsets=f'{{"{topic}":{{"0":3}}}}')
    with pytest.raises(Exception, match="does not name"):
        query.awaitTermination(120)


# --------------------------------------------------------------------------- maxOffsetsPerTrigger, exact Arrow reads


def test_item5_max_offsets_per_trigger_bounds_every_batch_and_item3_reads_exactly(
        spark, cluster, make_topic, group_id, tmp_path: Path) -> None:
    topic = make_topic(partitions=2)
    fill(cluster, topic, {0: 60, 1: 40})
    rows, batches = available_now(spark, cluster, group_id, topic, tmp_path / "cp",
                                  startingOffsets="earliest", maxOffsetsPerTrigger="30")
    assert rows == offsets({0: (0, 60), 1: (0, 40)})  # every message once: no gap, no duplicate
    assert sum(batches) == 100 and len(batches) >= 4
    assert all(n <= 30 + 2 for n in batches)  # Spark's split may round a share up by one per partition
    assert batches[0] == 30  # 18 + 12 (proportional to the backlogs 60 and 40)


def test_item3_gzip_compressed_message_sets_cut_by_the_trigger_limit_are_read_exactly(
        spark, cluster, make_topic, group_id, tmp_path: Path) -> None:
    from kafka import KafkaProducer

    topic = make_topic(partitions=1)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, api_version=(0, 9),
                             compression_type="gzip", linger_ms=200, batch_size=1 << 20)
    try:
        for i in range(500):
            producer.send(topic, value=f"gz-{i}".encode() * 5, key=None if i % 3 else b"k%d" % i, partition=0)
        producer.flush(30)
    finally:
        producer.close(5)
    rows, batches = available_now(spark, cluster, group_id, topic, tmp_path / "cp",
                                  startingOffsets="earliest", maxOffsetsPerTrigger="77")
    assert rows == offsets({0: (0, 500)})
    assert batches[:6] == [77] * 6 and sum(batches) == 500  # range ends fall inside compressed sets


# --------------------------------------------------------------------------- minOffsetsPerTrigger + maxTriggerDelay


def _seconds(progress) -> float:
    stamp = progress["timestamp"].rstrip("Z")
    return datetime.datetime.fromisoformat(stamp).replace(tzinfo=datetime.timezone.utc).timestamp()


def test_item5_min_offsets_per_trigger_waits_for_enough_messages_or_max_trigger_delay(
        spark, cluster, make_topic, group_id, tmp_path: Path) -> None:
    delay = 6.0
    topic = make_topic(partitions=1)
    fill(cluster, topic, {0: 10})
    query, name = start(spark, cluster, group_id, topic, tmp_path / "cp", {"processingTime": "250 milliseconds"},
                        startingOffsets="earliest", minOffsetsPerTrigger="50", maxTriggerDelay=f"{delay:g}s")
    try:
        count = lambda: read_table(spark, name).count()  # noqa: E731
        wait_until(lambda: count() == 10, 90, "the first micro-batch (always goes ahead)")
        fill(cluster, topic, {0: 10}, prefix="few")  # 10 < 50: held back until maxTriggerDelay
        wait_until(lambda: count() == 20, 90, "the held-back micro-batch after maxTriggerDelay")
        fill(cluster, topic, {0: 60}, prefix="many")  # >= 50: goes ahead without waiting for the delay
        wait_until(lambda: count() == 80, 90, "the micro-batch with enough messages")
        batches = [p for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
    assert [p["numInputRows"] for p in batches][:2] == [10, 10]
    assert sum(p["numInputRows"] for p in batches) == 80
    for before, after in zip(batches, batches[1:]):
        # a batch below the minimum only ever runs once maxTriggerDelay has passed since the previous one
        if after["numInputRows"] < 50:
            assert _seconds(after) - _seconds(before) >= delay - 1.0, (before["timestamp"], after["timestamp"])


# --------------------------------------------------------------------------- lag in the progress, includeHeaders


def test_item5_progress_reports_the_log_end_as_latest_offset_for_the_lag(
        spark, cluster, make_topic, group_id, tmp_path: Path) -> None:
    from spark_integration.datasource import source_lag

    topic = make_topic(partitions=2)
    fill(cluster, topic, {0: 40, 1: 10})
    query, _ = start(spark, cluster, group_id, topic, tmp_path / "cp", {"availableNow": True},
                     startingOffsets="earliest", maxOffsetsPerTrigger="20")
    query.awaitTermination(120)
    first = next(p for p in query.recentProgress if p["numInputRows"])
    source = first["sources"][0]
    assert source["latestOffset"] is not None, source
    lag = source_lag(first)
    # the first batch read 16 + 4 of 40 + 10: 24 and 6 behind
    assert lag == {"minOffsetsBehindLatest": "6", "maxOffsetsBehindLatest": "24", "avgOffsetsBehindLatest": "15.0"}


def test_item5_include_headers_true_is_refused_at_load(spark, cluster) -> None:
    from zkconsumer import ConfigurationError

    reader = (spark.readStream.format("zkconsumer").option("zookeeper.connect", cluster.zk_connect)
              .option("group.id", "g").option("topics", "t").option("includeHeaders", "true"))
    with pytest.raises(Exception, match="no headers") as err:
        reader.load()
    assert isinstance(err.value, ConfigurationError) or "includeHeaders" in str(err.value)


# --------------------------------------------------------------------------- issue 41 item 6: Spark's options in full


def test_item6_batch_read_with_assign_starting_and_ending_offsets_min_partitions_and_sparks_schema(
        spark, cluster, make_topic, group_id, zk) -> None:
    from pyspark.sql import functions as F

    from spark_integration.schema import SCHEMA

    topic = make_topic(partitions=3)
    fill(cluster, topic, {0: 10, 1: 4, 2: 6})
    df = (spark.read.format("zkconsumer").option("zookeeper.connect", cluster.zk_connect)
          .option("group.id", group_id).option("assign", f'{{"{topic}":[0,2]}}')
          .option("startingOffsets", f'{{"{topic}":{{"0":2,"2":-2}}}}')
          .option("endingOffsets", f'{{"{topic}":{{"0":8,"2":-1}}}}').option("minPartitions", "4").load())
    assert df.schema == SCHEMA
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    rows = df.select(F.spark_partition_id().alias("task"), "partition", "offset", "key", "value",
                     F.unix_millis("timestamp").alias("ms"), "timestampType").collect()  # the one Spark job
    assert sorted((r.partition, r.offset) for r in rows) == offsets({0: (2, 8), 2: (0, 6)})
    assert {r.value for r in rows if r.partition == 0} == {f"m-0-{i}".encode() for i in range(2, 8)}
    assert {(r.key, r.ms, r.timestampType) for r in rows} == {(None, -1, -1)}  # 0.9 messages: no timestamp
    # two ranges of 6 over minPartitions 4: each cut in two, one Spark task per piece
    tasks: Dict[int, List[Tuple[int, int]]] = {}
    for r in rows:
        tasks.setdefault(r.task, []).append((r.partition, r.offset))
    assert sorted(sorted(t) for t in tasks.values()) == [[(0, o) for o in range(2, 5)], [(0, o) for o in range(5, 8)],
                                                         [(2, o) for o in range(0, 3)], [(2, o) for o in range(3, 6)]]
    assert not zk.exists(f"/consumers/{group_id}/offsets/{topic}")  # a batch read commits nothing
    # Spark's batch-only rules and an unknown option fail on the driver, before any Spark job
    base = (spark.read.format("zkconsumer").option("zookeeper.connect", cluster.zk_connect)
            .option("group.id", group_id).option("subscribe", topic))
    with pytest.raises(Exception, match="starting offset can't be latest for batch queries on Kafka"):
        base.option("startingOffsets", "latest").load().collect()
    with pytest.raises(Exception, match="did you mean startingOffsets"):
        base.option("startingOffset", "earliest").load()


def test_item6_stream_by_timestamp_with_subscribe_pattern_checkpoints_sparks_offset_json(
        spark, cluster, make_topic, group_id, tmp_path: Path) -> None:
    """On a 0.9 broker the offsets-before-time lookup answers with log-segment boundaries (segments rolled by
    time here): a time between two segments' last writes starts at the older segment's base offset."""
    import json
    import time

    from spark_integration.checkpoint import checkpoint_offsets, completed_batch, starting_offsets_json
    from spark_integration.group_view import GroupView
    from zkconsumer import ConsumerConfig

    topic = make_topic(partitions=1, config={"segment.ms": 1000})
    fill(cluster, topic, {0: 3}, prefix="a")  # segment [0, 3)
    time.sleep(2.2)
    fill(cluster, topic, {0: 3}, prefix="b")  # older than segment.ms: rolls, segment [3, 6)
    time.sleep(2.2)
    between = int(time.time() * 1000)
    time.sleep(2.2)
    fill(cluster, topic, {0: 3}, prefix="c")  # rolls again: segment [6, 9)
    with GroupView(ConsumerConfig({"zookeeper.connect": cluster.zk_connect, "group.id": group_id})) as view:
        tp = (topic, 0)
        assert view.offsets_before({tp: 0}) == {tp: None}  # before every segment: the log start
        assert view.offsets_before({tp: between}) == {tp: 3}  # the base of the newest segment written before
        assert view.offsets_before({tp: between + 3_600_000}) == {tp: 9}  # later than every write: the log end
    checkpoint = tmp_path / "cp"
    rows, batches = available_now(spark, cluster, group_id, topic, checkpoint, topics="",  # unset: not a 2nd way
                                  subscribePattern=topic,
                                  startingOffsetsByTimestamp=f'{{"{topic}":{{"0":{between}}}}}',
                                  maxOffsetsPerTrigger="4")
    assert rows == offsets({0: (3, 9)}) and batches == [4, 2]
    # the checkpoint holds Spark's Kafka-source JSON; the helper hands it over as startingOffsets
    last = completed_batch(str(checkpoint))
    source_line = (checkpoint / "offsets" / str(last)).read_text().splitlines()[2]
    assert json.loads(source_line) == {topic: {"0": 9}}
    assert checkpoint_offsets(str(checkpoint)) == {(topic, 0): 9}
    assert starting_offsets_json(str(checkpoint)) == f'{{"{topic}":{{"0":9}}}}'
