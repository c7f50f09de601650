"""The three ways in on a real standalone Spark cluster (Master + 2 Workers x 1 core), with executors killed.

Executors are JVMs of their own (``CoarseGrainedExecutorBackend``, children of the
Workers) with their own Python workers; the session allows 4 attempts per task. Each
fault test records, on the executors, every message a task attempt handled into a file
of that attempt (line-buffered, so a SIGKILL loses nothing written), SIGKILLs one executor
JVM once some messages were handled, and checks after the job:

* lost = 0: every produced message was handled by a successful attempt;
* duplicates (handled twice) within the bound of the way in:
  - ``foreach_stream``: members commit only when their handler returns, so a message is
    handled again only if it was handed out, uncommitted, on a partition that then changed
    owner: the killed member's messages, and a peer's on partitions the retry's rebalance
    took from it;
  - ``create_rdd``: a retried task re-reads its whole offset range: at most the killed
    attempts' ranges; the job's output itself has none, and the offsets committed after the
    job equal what was produced;
  - the streaming source into an idempotent sink (``foreachBatch`` overwriting its batch's
    directory): 0 duplicates in the sink, offsets committed at the log end.

Each test prints ``produced, read, distinct, duplicates, bound, committed`` (``pytest -s``).
This module is pickled by value (executors cannot import test modules).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import pytest
from support.common import consumer_props, wait_until

from spark_integration import KafkaStreamSource, commit_offset_ranges, create_rdd, register_data_source

pytestmark = pytest.mark.spark

Record = Tuple[int, int]  # (partition, offset)


@pytest.fixture(scope="module")
def spark(spark_cluster):
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    session = spark_cluster.session("zkconsumer spark cluster tests")
    session.sparkContext.setLogLevel("ERROR")
    register_data_source(session)
    yield session
    session.stop()
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def committed_total(zk, group: str, topic: str) -> int:
    base = f"/consumers/{group}/offsets/{topic}"
    return sum(int(zk.get(f"{base}/{p}")[0]) for p in zk.get_children(base)) if zk.exists(base) else 0


def produce(cluster, topic: str, n: int, partitions: int = 0) -> List[Record]:
    """``n`` messages, sorted by (partition, offset). With ``partitions``, spread round-robin over that
    many partitions (kafka-python's partitioner picks among the partitions whose leader its metadata
    knows, so a test that needs every partition filled must not leave placement to it)."""
    if not partitions:
        return sorted(cluster.produce(topic, [f"m{i}" for i in range(n)]))
    placed: List[Record] = []
    for p in range(partitions):
        placed += cluster.produce(topic, [f"m{i}" for i in range(p, n, partitions)], partition=p)
    return sorted(placed)


# --------------------------------------------------------------------------- executor side


def attempt_file(record_dir: str, suffix: str) -> Path:
    """``<partition>-<attempt>-<task attempt id><suffix>``: one file per task attempt."""
    from pyspark import TaskContext

    c = TaskContext.get()
    return Path(record_dir, f"{c.partitionId()}-{c.attemptNumber()}-{c.taskAttemptId()}{suffix}")


def handle_stream(record_dir: str, delay: float, stream) -> int:
    """foreach_stream handler: record each message, slowly; mark the attempt done when returning."""
    with open(attempt_file(record_dir, ".rec"), "a", buffering=1) as out:
        for m in stream:
            out.write(f"{m.partition} {m.offset} {time.time()}\n")
            time.sleep(delay)
    attempt_file(record_dir, ".done").touch()
    return stream.count


def handle_range(record_dir: str, delay: float, messages: Iterable) -> Iterator[Record]:
    """create_rdd mapPartitions: record each message, slowly; mark the attempt done at the end."""
    with open(attempt_file(record_dir, ".rec"), "a", buffering=1) as out:
        for m in messages:
            out.write(f"{m.partition} {m.offset}\n")
            time.sleep(delay)
            yield (m.partition, m.offset)
    attempt_file(record_dir, ".done").touch()


def executor_jvm() -> int:
    """The pid of the executor JVM this Python worker serves (its daemon's parent)."""
    return int(Path(f"/proc/{os.getppid()}/stat").read_text().rsplit(")", 1)[1].split()[1])


def record_row(record_dir: str, delay: float, partition: int, offset: int) -> int:
    """A UDF over the streaming source's rows: record the row, slowly, and which executor ran the attempt."""
    jvm = attempt_file(record_dir, ".jvm")
    if not jvm.exists():
        jvm.write_text(str(executor_jvm()))
    with open(attempt_file(record_dir, ".rec"), "a", buffering=1) as out:
        out.write(f"{partition} {offset}\n")
    time.sleep(delay)
    return offset


# --------------------------------------------------------------------------- driver side


def read_records(record_dir: Path) -> Dict[str, List[Record]]:
    """Per attempt (file stem), the (partition, offset) it recorded, in order."""
    return {a: [(p, o) for p, o, _ in rs] for a, rs in read_timed_records(record_dir).items()}


def read_timed_records(record_dir: Path) -> Dict[str, List[Tuple[int, int, float]]]:
    """Per attempt (file stem), the (partition, offset, time or 0) it recorded, in order."""
    out = {}
    for path in record_dir.glob("*.rec"):
        rows = [line.split() for line in path.read_text().splitlines() if line]
        out[path.stem] = [(int(r[0]), int(r[1]), float(r[2]) if len(r) > 2 else 0.0) for r in rows]
    return out


def count_records(record_dir: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in record_dir.glob("*.rec"))


class ExecutorKiller(threading.Thread):
    """SIGKILLs one executor of ``spark_cluster`` once ``after`` records exist in ``record_dir``."""

    def __init__(self, spark_cluster, record_dir: Path, after: int, timeout: float = 150.0,
                 target: Optional[Callable[[], Optional[int]]] = None) -> None:
        """``target``: which executor to kill (``None`` from it: not yet); default the first one found."""
        super().__init__(name="executor-killer", daemon=True)
        self.spark_cluster, self.record_dir, self.after, self.timeout = spark_cluster, record_dir, after, timeout
        self.target = target
        self.killed: Optional[int] = None
        self.records_at_kill = 0

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if count_records(self.record_dir) >= self.after:
                pid = self.target() if self.target is not None else None
                if self.target is None or pid in self.spark_cluster.executor_pids():
                    self.killed = self.spark_cluster.kill_executor(pid)
                    self.records_at_kill = count_records(self.record_dir)
                    return
            time.sleep(0.02)

    def finish(self) -> int:
        self.join(self.timeout + 5)
        assert self.killed is not None, f"the job ended before {self.after} records: no executor was killed"
        return self.killed


def both_executors_up(spark, spark_cluster) -> None:
    """Wait until the cluster runs 2 executors for this application (Workers relaunch killed ones)."""
    spark.sparkContext.parallelize(range(2), 2).count()
    wait_until(lambda: len(spark_cluster.executor_pids()) == 2, 90, "two executors")


def report(way: str, produced: int, read: int, distinct: int, bound: int, committed: int) -> None:
    print(f"\n[executor kill] {way}: produced={produced} read={read} distinct={distinct} "
          f"duplicates={read - distinct} bound={bound} committed={committed}")


# --------------------------------------------------------------------------- tests


def test_executors_are_their_own_jvms_and_python_workers_import_this_checkout(
    spark, spark_cluster, cluster, make_topic, group_id
) -> None:
    """Also: the batch ``zkconsumer`` source reads on those executors."""
    both_executors_up(spark, spark_cluster)

    def where(_: object) -> Tuple[int, str]:
        import zkconsumer
        parent = int(Path(f"/proc/{os.getppid()}/stat").read_text().rsplit(")", 1)[1].split()[1])
        return parent, zkconsumer.__file__  # the Python daemon's parent: the executor JVM

    seen = spark.sparkContext.parallelize(range(8), 8).map(where).collect()
    executors = set(spark_cluster.executor_pids())
    assert {pid for pid, _ in seen} <= executors and os.getpid() not in executors
    root = Path(__file__).resolve().parents[2]
    assert {Path(f).resolve().parents[1] for _, f in seen} == {root}

    topic = make_topic(partitions=4)
    placed = produce(cluster, topic, 40)
    df = (spark.read.format("zkconsumer").option("zookeeper.connect", cluster.zk_connect)
          .option("group.id", group_id).option("topics", topic).option("auto.offset.reset", "smallest").load())
    assert sorted((r.partition, r.offset) for r in df.collect()) == placed


def test_foreach_stream_survives_an_executor_kill_without_loss(
    spark, spark_cluster, cluster, make_topic, group_id, zk, tmp_path: Path
) -> None:
    both_executors_up(spark, spark_cluster)
    topic = make_topic(partitions=4)
    placed = produce(cluster, topic, 1200)
    # Long enough for a retry to outwait the dead member's session (4 s) and rebalance.
    props = consumer_props(cluster, group_id, consumer_timeout_ms=12000, zookeeper_session_timeout_ms=4000,
                           rebalance_max_retries=10)
    source = KafkaStreamSource(props, {topic: 2}, settle_timeout_s=30)
    killer = ExecutorKiller(spark_cluster, tmp_path, after=200)
    killer.start()
    results = source.foreach_stream(spark.sparkContext, functools.partial(handle_stream, str(tmp_path), 0.01))
    killer.finish()

    records = read_records(tmp_path)
    done = {p.stem for p in tmp_path.glob("*.done")}
    killed = [a for a in records if a not in done]
    assert killed, "an attempt was cut off by the kill"
    handled = {r for a in done for r in records[a]}
    assert set(placed) - handled == set()  # lost = 0
    # Members commit only when their handler returns, so whatever a member was handed of a
    # partition that then moved (to a retry, or in the rebalance a retry's joining causes) may be
    # handled again: per partition, everything recorded by attempts other than the last one to
    # start reading it (its final owner, which read it to the log end and committed).
    timed, bound = read_timed_records(tmp_path), 0
    for partition in {p for p, _ in placed}:
        starts = {a: min(t for p, _, t in rs if p == partition) for a, rs in timed.items()
                  if any(p == partition for p, _, _ in rs)}
        final = max(starts, key=starts.__getitem__)
        assert final in done
        bound += sum(1 for a, rs in records.items() if a != final for p, _ in rs if p == partition)
    read = sum(len(r) for r in records.values())
    distinct = len({r for rs in records.values() for r in rs})
    committed = committed_total(zk, group_id, topic)
    report("foreach_stream", len(placed), read, distinct, bound, committed)
    print(f"  killed attempt(s) {killed} had handled {sum(len(records[a]) for a in killed)} messages")
    assert distinct == len(placed) and read - distinct <= bound
    assert committed == len(placed)
    assert sum(r.messages for r in results) >= len(placed)


def test_create_rdd_survives_an_executor_kill_without_loss(
    spark, spark_cluster, cluster, make_topic, group_id, zk, tmp_path: Path
) -> None:
    both_executors_up(spark, spark_cluster)
    topic = make_topic(partitions=4)
    placed = produce(cluster, topic, 1200)
    props = consumer_props(cluster, group_id)
    rdd = create_rdd(spark.sparkContext, props, [topic])
    killer = ExecutorKiller(spark_cluster, tmp_path, after=200)
    killer.start()
    output = rdd.mapPartitions(functools.partial(handle_range, str(tmp_path), 0.01)).collect()
    killer.finish()

    assert sorted(output) == placed  # the job's output: everything, once
    records = read_records(tmp_path)
    done = {p.stem for p in tmp_path.glob("*.done")}
    killed = [a for a in records if a not in done]
    assert killed, "an attempt was cut off by the kill"
    sizes = [r.until_offset - r.from_offset for r in rdd.offset_ranges]  # Spark partition i reads range i
    bound = sum(sizes[int(a.split("-")[0])] for a in killed)  # a retried task re-reads its whole range
    read = sum(len(r) for r in records.values())
    distinct = len({r for rs in records.values() for r in rs})
    commit_offset_ranges(props, rdd.offset_ranges)
    committed = committed_total(zk, group_id, topic)
    report("create_rdd", len(placed), read, distinct, bound, committed)
    assert distinct == len(placed) and read - distinct <= bound
    assert committed == len(placed)


def test_streaming_source_survives_an_executor_kill_with_no_duplicate_in_an_idempotent_sink(
    spark, spark_cluster, cluster, make_topic, group_id, zk, tmp_path: Path
) -> None:
    from pyspark.sql.functions import col, udf
    from pyspark.sql.types import LongType

    both_executors_up(spark, spark_cluster)
    topic = make_topic(partitions=4)
    placed = produce(cluster, topic, 1200)
    records_dir, sink, checkpoint = tmp_path / "records", tmp_path / "sink", tmp_path / "checkpoint"
    records_dir.mkdir()
    recorded = udf(functools.partial(record_row, str(records_dir), 0.01), LongType())

    def write_batch(batch, batch_id: int) -> None:  # idempotent: a batch run again replaces its own files
        batch.write.mode("overwrite").parquet(str(sink / f"batch={batch_id}"))

    df = (spark.readStream.format("zkconsumer").option("zookeeper.connect", cluster.zk_connect)
          .option("group.id", group_id).option("topics", topic).option("auto.offset.reset", "smallest")
          .option("max.messages.per.trigger", "400").load())
    def mid_attempt() -> Optional[int]:
        """The executor of an attempt recording rows right now, with most of its rows still ahead."""
        now = time.time()
        for rec in records_dir.glob("*.rec"):
            jvm = rec.with_suffix(".jvm")
            try:
                live = now - rec.stat().st_mtime < 0.2 and rec.read_bytes().count(b"\n") < 40
                if live and jvm.exists():
                    return int(jvm.read_text())
            except (OSError, ValueError):
                continue
        return None

    # killed mid-attempt (streaming tasks are short, and an executor between two of them has nothing
    # to cut off): the attempt it ran must be cut off and its rows handled again by another
    killer = ExecutorKiller(spark_cluster, records_dir, after=200, target=mid_attempt)
    killer.start()
    query = (df.select("partition", recorded(col("partition"), col("offset")).alias("offset"))
             .writeStream.foreachBatch(write_batch).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(240)
    killer.finish()
    assert not query.isActive and query.exception() is None

    rows = [(r.partition, r.offset) for r in spark.read.parquet(str(sink)).collect()]
    records = read_records(records_dir)
    # as in the two tests above, the kill must have cut off a running attempt: one on the killed
    # executor whose rows another attempt (its retry) handled again
    on_killed = {p.stem for p in records_dir.glob("*.jvm") if p.read_text().strip() == str(killer.killed)}
    redone = {r for a, rs in records.items() if a not in on_killed for r in rs}
    cut_off = [a for a in on_killed if set(records.get(a, ())) & redone]
    assert cut_off, f"no running attempt was cut off by the kill (attempts on executor {killer.killed}: {on_killed})"
    read = sum(len(r) for r in records.values())
    distinct = len(set(rows))
    committed = committed_total(zk, group_id, topic)
    report("streaming source -> foreachBatch overwrite", len(placed), read, distinct, 0, committed)
    assert sorted(rows) == placed  # lost = 0, and 0 duplicates in the sink
    assert read >= len(placed)
    assert committed == len(placed)
    assert Counter(p for p, _ in rows) == Counter(p for p, _ in placed)


def test_item6_sparks_source_options_on_the_standalone_cluster(
    spark, spark_cluster, cluster, make_topic, group_id, tmp_path: Path
) -> None:
    """Issue 41 item 6 on the real cluster: a streaming query with ``assign``, ``startingOffsets`` JSON,
    ``maxRecordsPerPartition`` and ``maxOffsetsPerTrigger``, whose checkpointed position (Spark's
    Kafka-source JSON, through :mod:`spark_integration.checkpoint`) is then the ``startingOffsets`` of a
    batch read with ``endingOffsets`` and ``minPartitions``: Spark's schema, every message once."""
    from pyspark.sql import functions as F

    from spark_integration.checkpoint import starting_offsets_json

    both_executors_up(spark, spark_cluster)
    topic = make_topic(partitions=4)
    placed = produce(cluster, topic, 60, partitions=4)
    assign = f'{{"{topic}":[0,1,2]}}'
    checkpoint, sink = tmp_path / "cp", tmp_path / "sink"
    df = (spark.readStream.format("zkconsumer").option("zookeeper.connect", cluster.zk_connect)
          .option("group.id", group_id).option("assign", assign)
          .option("startingOffsets", f'{{"{topic}":{{"0":-2,"1":2,"2":-2}}}}')
          .option("maxRecordsPerPartition", "3").option("maxOffsetsPerTrigger", "12").load())
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    query = (df.writeStream.format("parquet").option("path", str(sink)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(240)
    assert not query.isActive and query.exception() is None
    streamed = spark.read.parquet(str(sink)).select("partition", "offset", "timestampType",
                                                    F.input_file_name().alias("file")).collect()
    expected = sorted((p, o) for p, o in placed if p in (0, 1, 2) and (p != 1 or o >= 2))
    assert sorted((r.partition, r.offset) for r in streamed) == expected  # every message once
    assert {r.timestampType for r in streamed} == {-1}
    per_file = Counter(r.file for r in streamed)  # one file per task: no task read more than 3 messages
    assert max(per_file.values()) <= 3 and len(per_file) >= len(expected) // 3
    ends = {p: max(o for q, o in placed if q == p) + 1 for p in (0, 1, 2)}
    handover = starting_offsets_json(str(checkpoint))
    assert handover == '{"%s":{"0":%d,"1":%d,"2":%d}}' % (topic, ends[0], ends[1], ends[2])

    later = produce(cluster, topic, 100, partitions=4)  # sorted (partition, offset) of the new messages
    batch = (spark.read.format("zkconsumer").option("zookeeper.connect", cluster.zk_connect)
             .option("group.id", group_id).option("assign", assign).option("startingOffsets", handover)
             .option("endingOffsets", "latest").option("minPartitions", "6").load()
             .select(F.spark_partition_id().alias("task"), "partition", "offset").collect())
    assert sorted((r.partition, r.offset) for r in batch) == [(p, o) for p, o in later if p in (0, 1, 2)]
    assert len({r.task for r in batch}) >= 5  # 3 ranges cut into about 6 tasks
