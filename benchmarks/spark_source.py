"""The ``zkconsumer`` streaming source on a real Spark cluster against ``zkconsumer perf --batch``, one run.

On a LocalCluster (1 broker) it fills a topic of ``--partitions`` (6) partitions with
``--messages`` N (20,000,000) messages of ``--size`` (100) bytes (Kafka's
ProducerPerformance), starts a LocalSparkCluster (2 Workers x 1 core, one 1-core
executor each) and measures, each as a new consumer group reading the whole topic:

* ``perf --batch``: ``python -m zkconsumer perf --batch`` alone (1 stream, Arrow record
  batches; ``--perf-threads`` to change), its own consume-phase rate;
* ``source -> noop``: ``readStream.format("zkconsumer")`` with ``trigger(availableNow=True)``
  into the ``noop`` sink, rows / seconds from ``start()`` to the query's end (query
  planning, ZooKeeper, executors and tasks included);
* ``source -> parquet``: the same into Parquet files in a temporary directory.

Before any clock starts, a tiny streaming query makes the first use of the source, and a
batch read of ``--warmup`` (2,000,000) messages warms the executors' JVMs up (JIT), as
in a long-running query. ``--rounds`` R repeats the three measurements in turn (the
machine's load changes between them); the table shows medians, and each round's rates
and ratios.

The default N is large on purpose: ``perf --batch`` reads about 2M msg/s here, so N must
be ~20M for about 10 s of timed consumption per path; the source's fixed cost per query
(about 2 s before its first micro-batch: Spark's Python planner processes start and
import PySpark) would otherwise weigh on its rate far more than on a long-running query.

Prints a Markdown table with the ratio of each source rate to perf's, and saves JSON
(``--json``, default ``bench-spark.json``) with each query's progress and durations.

Usage::

    scripts/bench-spark [--messages 20000000] [--size 100] [--partitions 6] [--perf-threads 1]
                        [--rounds 1] [--warmup 2000000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent


def log(message: str) -> None:
    sys.stderr.write(f"[bench-spark {time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


def produce(cluster: Any, topic: str, n: int, size: int, partitions: int) -> float:
    cluster.create_topic(topic, partitions=partitions, replication=1)
    start = time.monotonic()
    argv = cluster.tool_command("org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                                "--num-records", str(n), "--record-size", str(size), "--throughput", "-1",
                                "--producer-props", f"bootstrap.servers={cluster.bootstrap_servers}", "acks=1",
                                "batch.size=262144", "linger.ms=5", "buffer.memory=134217728",
                                jvm_options=["-Xmx512m"])
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=1800)
    return time.monotonic() - start


def run_perf(cluster: Any, topic: str, n: int, threads: int) -> Dict[str, Any]:
    argv = [sys.executable, "-m", "zkconsumer", "perf", "--zookeeper", cluster.zk_connect, "--topic", topic,
            "--messages", str(n), "--threads", str(threads), "--batch", "--group", f"bench-perf-{uuid.uuid4().hex[:8]}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"perf exited {done.returncode}:\n{done.stderr[-3000:]}")
    data = json.loads([line for line in done.stdout.splitlines() if line.strip()][-1])
    return {"rows": data["messages"], "seconds": data["seconds"], "rows_per_sec": data["msgs_per_sec"],
            "mb_per_sec": data["mb_per_sec"], "cpu_seconds": data["cpu_seconds"], "perf": data}


def run_query(spark: Any, cluster: Any, topic: str, sink: str, scratch: Path,
              options: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    group = f"bench-source-{sink}-{uuid.uuid4().hex[:8]}"
    df = (spark.readStream.format("zkconsumer").option("zookeeper.connect", cluster.zk_connect)
          .option("group.id", group).option("topics", topic).option("auto.offset.reset", "smallest")
          .options(**(options or {})).load())
    writer = df.writeStream.format(sink).option("checkpointLocation", str(scratch / f"checkpoint-{sink}"))
    if sink == "parquet":
        writer = writer.option("path", str(scratch / "table"))
    start = time.monotonic()
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.monotonic() - start
    if query.exception() is not None:
        raise RuntimeError(f"the {sink} query failed: {query.exception()}")
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    return {"rows": rows, "seconds": round(seconds, 3), "rows_per_sec": round(rows / seconds, 1),
            "batches": len(batches), "group": group,
            "durations_ms": [p.get("durationMs", {}) for p in batches],
            "progress": [{"timestamp": p["timestamp"], "numInputRows": p["numInputRows"],
                          "durationMs": dict(p["durationMs"])} for p in query.recentProgress]}


def cpu_times() -> Dict[str, int]:
    """Machine-wide CPU ticks from /proc/stat (``steal``: taken by the hypervisor), for the run's load figures."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
    return {name: int(value) for name, value in zip(names, fields)}


def warm_up(spark: Any, cluster: Any, topic: str, per_partition: int) -> float:
    """A batch read of the first ``per_partition`` messages of each partition into ``noop``; seconds taken.

    The same executor code path as the streaming source (Python workers, Arrow
    hand-over, Spark's row conversion), so the timed queries run on JIT-compiled
    executors, as a long-running query does: a 1,000-row warm-up left the first
    timed query paying the executors' JIT compilation (about twice the executor
    CPU of a later identical query).
    """
    start = time.monotonic()
    (spark.read.format("zkconsumer").option("zookeeper.connect", cluster.zk_connect)
     .option("group.id", f"bench-warmup-{uuid.uuid4().hex[:8]}").option("topics", topic)
     .option("auto.offset.reset", "smallest").option("max.messages.per.partition", str(per_partition))
     .load().write.format("noop").mode("overwrite").save())
    return time.monotonic() - start


def median(values: List[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--perf-threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=1, help="repeat perf, noop, parquet in turn; medians shown")
    parser.add_argument("--warmup", type=int, default=2_000_000, help="messages read by the warm-up batch query")
    parser.add_argument("--json", default="bench-spark.json")
    args = parser.parse_args()

    from harness.cluster import ProjectCluster
    from spark_integration import register_data_source
    from spark_integration.testing import LocalSparkCluster

    scratch = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    results: Dict[str, Any] = {"messages": args.messages, "size": args.size, "partitions": args.partitions,
                               "cpus": os.cpu_count(), "rounds": args.rounds, "load_before": os.getloadavg()[0],
                               "perf_batch_runs": [], "source_noop_runs": [], "source_parquet_runs": []}
    try:
        with ProjectCluster(brokers=1, partitions=args.partitions) as cluster, LocalSparkCluster(2, 1) as spark_cluster:
            topic = f"bench-spark-{uuid.uuid4().hex[:6]}"
            log(f"producing {args.messages:,} x {args.size} B into {topic} ({args.partitions} partitions)")
            results["produce_seconds"] = round(produce(cluster, topic, args.messages, args.size, args.partitions), 1)
            spark = spark_cluster.session("bench-spark")
            spark.sparkContext.setLogLevel("ERROR")
            register_data_source(spark)
            spark.sparkContext.parallelize(range(2), 2).count()  # executors up before any clock starts
            warm = cluster.create_topic(f"bench-warmup-{uuid.uuid4().hex[:6]}", partitions=2, replication=1)
            cluster.produce(warm, [b"x" * args.size] * 1000)
            run_query(spark, cluster, warm, "noop", scratch / "warmup")  # first use of the streaming source
            log(f"warm-up: {args.warmup:,} messages in a batch read into noop")
            results["warmup_seconds"] = round(warm_up(spark, cluster, topic, max(1, args.warmup // args.partitions)), 1)
            ticks = cpu_times()
            for round_ in range(args.rounds):
                log(f"round {round_ + 1}/{args.rounds}: zkconsumer perf --batch")
                results["perf_batch_runs"].append(run_perf(cluster, topic, args.messages, args.perf_threads))
                for sink in ("noop", "parquet"):
                    log(f"round {round_ + 1}/{args.rounds}: source -> {sink}")
                    shutil.rmtree(scratch / f"checkpoint-{sink}", ignore_errors=True)
                    shutil.rmtree(scratch / "table", ignore_errors=True)
                    results[f"source_{sink}_runs"].append(run_query(spark, cluster, topic, sink, scratch))
            after = cpu_times()
            spark.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results["load_after"] = os.getloadavg()[0]
    total = sum(after.values()) - sum(ticks.values())
    results["steal_percent"] = round(100.0 * (after["steal"] - ticks["steal"]) / max(1, total), 1)
    results["idle_percent"] = round(100.0 * (after["idle"] - ticks["idle"]) / max(1, total), 1)
    for name in ("perf_batch", "source_noop", "source_parquet"):
        runs = results[f"{name}_runs"]
        if name != "perf_batch" and any(r["rows"] != args.messages for r in runs):
            raise SystemExit(f"{name} read {[r['rows'] for r in runs]} rows, expected {args.messages}")
        results[name] = {"rows": args.messages, "rows_per_sec": median([r["rows_per_sec"] for r in runs]),
                         "seconds": median([r["seconds"] for r in runs]),
                         "all_rows_per_sec": [r["rows_per_sec"] for r in runs]}
    perf_rate = results["perf_batch"]["rows_per_sec"]
    for name in ("source_noop", "source_parquet"):
        results[name]["ratio_to_perf"] = round(results[name]["rows_per_sec"] / perf_rate, 3)
        # Within each round too: the machine's load changes between rounds.
        results[name]["ratio_per_round"] = [round(r["rows_per_sec"] / p["rows_per_sec"], 3) for r, p in
                                            zip(results[f"{name}_runs"], results["perf_batch_runs"])]
    Path(args.json).write_text(json.dumps(results, indent=2))

    print(f"#### {args.messages:,} x {args.size} B, {args.partitions} partitions; Spark: 2 workers x 1 core; "
          f"{args.rounds} round(s), medians; load {results['load_before']:.1f} -> {results['load_after']:.1f} "
          f"on {os.cpu_count()} CPUs, steal {results['steal_percent']}%, idle {results['idle_percent']}%\n")
    print("| reader | rows | seconds | rows/s | × perf --batch | each round (rows/s; ×) |")
    print("|---|---:|---:|---:|---:|---|")
    rows = [("zkconsumer perf --batch" + (f" ({args.perf_threads} threads)" if args.perf_threads > 1 else ""),
             "perf_batch"), ("source, availableNow -> noop", "source_noop"),
            ("source, availableNow -> parquet", "source_parquet")]
    for label, name in rows:
        r = results[name]
        ratio = r.get("ratio_to_perf")
        each = ", ".join(f"{v:,.0f}" for v in r["all_rows_per_sec"])
        if ratio is not None:
            each += "; " + ", ".join(f"{x:.2f}" for x in r["ratio_per_round"])
        print(f"| {label} | {r['rows']:,} | {r['seconds']:.1f} | {r['rows_per_sec']:,.0f} | "
              f"{'1' if ratio is None else f'{ratio:.2f}'} | {each} |")
    print(f"\nJSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
