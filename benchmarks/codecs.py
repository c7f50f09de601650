"""Compressed topics: Kafka's ZooKeeper consumer against zkconsumer, per codec, on one LocalCluster.

For each codec (default gzip, snappy, lz4) and message size it creates a
6-partition topic on a one-broker Kafka 0.9.0.1 LocalCluster and fills it with
Kafka's ``ProducerPerformance`` with ``compression.type=<codec>`` (the broker
keeps the producer's codec: message format 0 wrappers, gzip, snappy in xerial
framing, lz4 in Kafka 0.8/0.9's framing). Then, in rotating order for
``--rounds`` rounds, from the log start as a new group member each:

* ``kafka.tools.ConsumerPerformance --zookeeper`` (1 thread) with the JVM
  options of ``kafka-consumer-perf-test.sh``;
* ``python -m zkconsumer perf`` (per-message iterator, 1 stream);
* ``python -m zkconsumer perf --batch`` (Arrow record batches, 1 stream).

Each tool reports its own consume-phase rate (clock started one second after the
streams exist, stopped at the N-th message). ``CPU s/M`` is the whole process's
user+sys CPU seconds (``wait4``) per million messages; ``steal`` is the share of
the machine's CPU time stolen by the hypervisor during the run (``/proc/stat``).
``x Kafka`` is the median of the per-round ratios to Kafka's rate in the same round.
A run that stopped before N messages (consumer timeout) is left out and counted.

Usage::

    scripts/bench-codecs [--codecs gzip,snappy,lz4] [--sizes 100,1000]
                         [--messages 100=10000000,1000=2000000] [--rounds 3]
                         [--batch-size 16384] [--skip perf-batch] [--json FILE]

Progress goes to stderr, a Markdown table per codec and size to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from .runner import Run, child_env, log

PARTITIONS = 6
TOOLS = ("kafka", "perf", "perf-batch")
TOOL_NAMES = {
    "kafka": "Kafka ConsumerPerformance --zookeeper",
    "perf": "zkconsumer perf (iterator)",
    "perf-batch": "zkconsumer perf --batch",
}
#: kafka-consumer-perf-test.sh: KAFKA_HEAP_OPTS and KAFKA_JVM_PERFORMANCE_OPTS of kafka-run-class.sh.
KAFKA_SCRIPT_JVM = ("-Xmx512M", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+DisableExplicitGC", "-Djava.awt.headless=true")


def size_map(text: str) -> Dict[int, int]:
    """``100=5000000,1000=1000000`` -> {100: 5000000, 1000: 1000000}."""
    out = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        out[int(key)] = int(value)
    return out


def result(run: Run, messages: int, msgs_per_sec: float, seconds: float) -> Dict[str, Any]:
    return {"messages": messages, "msgs_per_sec": msgs_per_sec, "seconds": round(seconds, 2),
            "cpu_seconds": round(run.cpu, 2), "cpu_per_million": run.cpu / max(messages, 1) * 1e6,
            "steal": (run.steal_pct or 0.0) / 100.0, "wall_seconds": round(run.wall, 2)}


def run_kafka(cluster: Any, java: str, topic: str, n: int) -> Dict[str, Any]:
    log4j = Path(cluster.kafka_home) / "config" / "tools-log4j.properties"
    argv = [java, *KAFKA_SCRIPT_JVM, f"-Dlog4j.configuration=file:{log4j}", "-cp", cluster.classpath,
            "kafka.tools.ConsumerPerformance", "--zookeeper", cluster.zk_connect, "--topic", topic,
            "--messages", str(n), "--threads", "1", "--group", f"bench-kafka-{uuid.uuid4().hex[:8]}"]
    run = Run(argv, timeout=900).check()
    # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec
    fields = [f.strip() for f in run.last_line().split(",")]
    count, rate = int(fields[4]), float(fields[5])
    return result(run, count, rate, count / rate if rate else 0.0)


def run_perf(cluster: Any, topic: str, n: int, batch: bool, timeout_ms: int) -> Dict[str, Any]:
    argv = [sys.executable, "-m", "zkconsumer", "perf", "--zookeeper", cluster.zk_connect, "--topic", topic,
            "--messages", str(n), "--threads", "1", "--group", f"bench-zk-{uuid.uuid4().hex[:8]}",
            "--timeout-ms", str(timeout_ms)]
    if batch:
        argv.append("--batch")
    run = Run(argv, timeout=900, env=child_env()).check()
    data = json.loads(run.last_line())
    if not data["accelerated"]:
        raise RuntimeError("zkconsumer perf ran without the C extension")
    return result(run, data["messages"], data["msgs_per_sec"], data["seconds"])


def produce(cluster: Any, topic: str, n: int, size: int, codec: str, batch_size: int) -> float:
    """Fill ``topic`` with Kafka's ProducerPerformance using ``compression.type=codec``; seconds taken."""
    cluster.create_topic(topic, partitions=PARTITIONS, replication=1)
    start = time.monotonic()
    argv = cluster.tool_command("org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                                "--num-records", str(n), "--record-size", str(size), "--throughput", "-1",
                                "--producer-props", f"bootstrap.servers={cluster.bootstrap_servers}", "acks=1",
                                f"compression.type={codec}", f"batch.size={batch_size}", "linger.ms=5",
                                "buffer.memory=134217728", jvm_options=["-Xmx512m"])
    Run(argv, timeout=1800).check()
    elapsed = time.monotonic() - start
    total = sum(log_end(cluster, topic).values())
    if total != n:
        raise RuntimeError(f"{topic}: produced {total} messages, wanted {n}")
    return elapsed


def log_end(cluster: Any, topic: str) -> Dict[int, int]:
    from zkconsumer.wire.connection import BrokerConnection
    from zkconsumer.wire.protocol import LATEST_TIME

    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with BrokerConnection(host, int(port), "bench", 30000, 65536) as conn:
        return {p: conn.list_offsets(topic, p, LATEST_TIME) for p in range(PARTITIONS)}


def table(codec: str, size: int, n: int, rounds: List[Dict[str, Dict[str, Any]]], tools: Sequence[str]) -> str:
    lines = [f"#### {codec}, {size}-byte messages: {PARTITIONS} partitions, N = {n:,}, {len(rounds)} rounds",
             "",
             "| consumer | msgs/s: median (min–max) | × Kafka: median (min–max) | seconds | CPU s/M msgs | steal |",
             "|---|---:|---:|---:|---:|---:|"]
    for tool in tools:
        runs = [r[tool] for r in rounds if tool in r and r[tool]["messages"] >= n]
        incomplete = sum(1 for r in rounds if tool in r and r[tool]["messages"] < n)
        if not runs:
            lines.append(f"| {TOOL_NAMES[tool]} | no complete run ({incomplete} stopped early) | | | | |")
            continue
        rates = [x["msgs_per_sec"] for x in runs]
        ratios = [r[tool]["msgs_per_sec"] / r["kafka"]["msgs_per_sec"] for r in rounds
                  if tool in r and "kafka" in r and r[tool]["messages"] >= n and r["kafka"]["messages"] >= n]
        ratio = "–" if not ratios else f"{statistics.median(ratios):.2f}"
        if len(ratios) > 1 and tool != "kafka":
            ratio += f" ({min(ratios):.2f}–{max(ratios):.2f})"
        lines.append(
            f"| {TOOL_NAMES[tool]} | {statistics.median(rates):,.0f} ({min(rates) / 1e3:,.0f}k–{max(rates) / 1e3:,.0f}k)"
            f" | {ratio} | {statistics.median(x['seconds'] for x in runs):.1f}"
            f" | {statistics.median(x['cpu_per_million'] for x in runs):.2f}"
            f" | {max(x['steal'] for x in runs):.1%}"
            + (f" ({incomplete} run(s) stopped early, left out)" if incomplete else "") + " |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--codecs", default="gzip,snappy,lz4")
    parser.add_argument("--sizes", default="100,1000", help="message sizes in bytes (default 100,1000)")
    parser.add_argument("--messages", type=size_map, default=size_map("100=10000000,1000=2000000"),
                        help="messages per size (default 100=10000000,1000=2000000)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16384,
                        help="the producer's batch.size: uncompressed bytes per wrapper (default 16384, Kafka's)")
    parser.add_argument("--perf-timeout-ms", type=int, default=5000,
                        help="zkconsumer perf --timeout-ms (default 5000: one 1 MiB fetch of gzip can inflate to "
                             "~100 MB and take over a second to decode on a loaded machine)")
    parser.add_argument("--skip", action="append", default=[], choices=TOOLS, help="leave a consumer out")
    parser.add_argument("--json", metavar="FILE", help="also write every measurement to FILE")
    args = parser.parse_args(argv)

    from harness.cluster import ProjectCluster
    from zkconsumer.testing import find_java
    from zkconsumer.wire import messageset

    codecs = [c for c in args.codecs.split(",") if c]
    sizes = [int(s) for s in args.sizes.split(",")]
    tools = [t for t in TOOLS if t not in args.skip]
    java = find_java()
    results: Dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "codecs": {}}
    report: List[str] = []
    with ProjectCluster(brokers=1, partitions=PARTITIONS, heap="512m") as cluster:
        for codec in codecs:
            for size in sizes:
                n = args.messages.get(size, 1_000_000)
                topic = f"bench-{codec}-{size}-{uuid.uuid4().hex[:6]}"
                log(f"producing {n:,} x {size} B with {codec} to {topic}")
                log(f"produced in {produce(cluster, topic, n, size, codec, args.batch_size):.1f} s")
                rounds: List[Dict[str, Dict[str, Any]]] = []
                for r in range(args.rounds):
                    order = tools[r % len(tools):] + tools[:r % len(tools)]  # rotate who goes first
                    this: Dict[str, Dict[str, Any]] = {}
                    for tool in order:
                        if tool == "kafka":
                            this[tool] = run_kafka(cluster, java, topic, n)
                        else:
                            this[tool] = run_perf(cluster, topic, n, tool == "perf-batch", args.perf_timeout_ms)
                        x = this[tool]
                        log(f"{codec} {size} B round {r + 1} {tool:>10}: {x['msgs_per_sec']:>11,.0f} msgs/s over "
                            f"{x['seconds']:.1f} s, cpu {x['cpu_per_million']:.2f} s/M, steal {x['steal']:.1%}")
                    rounds.append(this)
                results["codecs"].setdefault(codec, {})[size] = {"messages": n, "rounds": rounds}
                report.append(table(codec, size, n, rounds, tools))
    command = " ".join(["scripts/bench-codecs", *(argv if argv is not None else sys.argv[1:])])
    print(f"`{command}`\n\nOne Kafka 0.9.0.1 broker (LocalCluster), {os.cpu_count()} cores; Python "
          f"{sys.version.split()[0]}, C accelerator {'on' if messageset.ACCELERATED else 'OFF'}, producer "
          f"batch.size {args.batch_size}.\n")
    print("\n\n".join(report))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
