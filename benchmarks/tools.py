"""The benchmarked consumers, each run as its own process, and the topic fill.

Every ``run_*`` function consumes ``n`` messages of ``topic`` from the log start as a
new group member and returns a measurement (see :mod:`benchmarks.report`).
Each tool times itself: Kafka's ``ConsumerPerformance`` and ``zkconsumer perf`` start
their clock one second after creating their streams and stop it at the N-th message;
the confluent-kafka worker starts at its first non-empty batch, the kafka-python
worker at its first iteration.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from .runner import Run, child_env

#: kafka-consumer-perf-test.sh: KAFKA_HEAP_OPTS and KAFKA_JVM_PERFORMANCE_OPTS of kafka-run-class.sh.
#: KAFKA_JVM_PERFORMANCE_OPTS of kafka-run-class.sh, shared by its tools and the broker.
KAFKA_JVM_PERFORMANCE_OPTS = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
                              "-XX:+DisableExplicitGC")
KAFKA_SCRIPT_JVM = ("-Xmx512M", "-server", *KAFKA_JVM_PERFORMANCE_OPTS, "-Djava.awt.headless=true")

#: kafka-server-start.sh: a broker's KAFKA_HEAP_OPTS (-Xmx1G -Xms1G) and KAFKA_JVM_PERFORMANCE_OPTS,
#: as added after LocalCluster's own test options (C1 only, serial GC), which they override: a
#: throughput benchmark measures consumers against a broker configured as in production, not
#: against one kept light for tests.
KAFKA_SERVER_JVM = ("-Xms1G", "-XX:TieredStopAtLevel=4", "-XX:-UseSerialGC", *KAFKA_JVM_PERFORMANCE_OPTS)
KAFKA_SERVER_HEAP = "1g"

TIMEOUT = 1800.0


@dataclass(frozen=True)
class Tool:
    """One benchmarked consumer configuration.

    ``kind`` is kafka, confluent, perf, perf-batch, perf-pure or kafka-python; ``streams`` and
    ``fetchers`` are the consumer threads (streams) and ``num.consumer.fetchers``; ``processes``
    (perf kinds only) members of one group started together, each reading its share of the
    partitions (:func:`run_perf_processes`);
    ``slow`` tools may get a smaller N (``--slow-messages``); ``tree`` (perf kinds only) is another
    checkout whose ``zkconsumer`` the tool runs instead of this one's (``scripts/bench --compare``).
    """

    key: str
    label: str
    kind: str
    streams: int = 1
    fetchers: int = 1
    processes: int = 1
    slow: bool = False
    tree: Optional[str] = None


def run_tool(tool: Tool, cluster: Any, java: str, topic: str, n: int, kafka_jvm: str) -> Dict[str, Any]:
    """Run ``tool`` once for ``n`` messages of ``topic``; its measurement."""
    if tool.kind == "kafka":
        return run_kafka(cluster, java, topic, n, kafka_jvm, tool.streams, tool.fetchers)
    if tool.kind == "confluent":
        return run_worker("benchmarks.consumers.confluent_worker", cluster, topic, n)
    if tool.kind == "kafka-python":
        return run_worker("benchmarks.consumers.kafka_python_worker", cluster, topic, n)
    if tool.processes > 1:
        return run_perf_processes(cluster, topic, n, tool.processes, batch=tool.kind == "perf-batch")
    return run_perf(cluster, topic, n, batch=tool.kind == "perf-batch", pure=tool.kind == "perf-pure",
                    streams=tool.streams, fetchers=tool.fetchers, tree=tool.tree)


def run_kafka(cluster: Any, java: str, topic: str, n: int, jvm: str, threads: int = 1,
              fetchers: int = 1) -> Dict[str, Any]:
    """Kafka 0.9.0.1's ``kafka.tools.ConsumerPerformance --zookeeper`` (the Scala ZooKeeper consumer)."""
    args = ["--zookeeper", cluster.zk_connect, "--topic", topic, "--messages", str(n), "--threads", str(threads),
            "--num-fetch-threads", str(fetchers), "--group", f"bench-kafka-{uuid.uuid4().hex[:8]}"]
    if jvm == "script":
        log4j = Path(cluster.kafka_home) / "config" / "tools-log4j.properties"
        argv = [java, *KAFKA_SCRIPT_JVM, f"-Dlog4j.configuration=file:{log4j}", "-cp", cluster.classpath,
                "kafka.tools.ConsumerPerformance", *args]
    else:
        argv = cluster.tool_command("kafka.tools.ConsumerPerformance", *args)
    run = Run(argv, timeout=TIMEOUT).check()
    # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec
    fields = [f.strip() for f in run.last_line().split(",")]
    messages, rate = int(fields[4]), float(fields[5])
    return run.measurement(messages=messages, msgs_per_sec=rate, mb_per_sec=float(fields[3]),
                           seconds=messages / rate if rate else 0.0)


def _perf_argv(cluster: Any, topic: str, n: int, batch: bool, streams: int, fetchers: int, group: str) -> List[str]:
    argv = [sys.executable, "-m", "zkconsumer", "perf", "--zookeeper", cluster.zk_connect, "--topic", topic,
            "--messages", str(n), "--threads", str(streams), "--num-fetch-threads", str(fetchers), "--group", group]
    return argv + ["--batch"] if batch else argv


def run_perf(cluster: Any, topic: str, n: int, batch: bool, pure: bool = False, streams: int = 1,
             fetchers: int = 1, tree: Optional[str] = None) -> Dict[str, Any]:
    """``python -m zkconsumer perf`` (``--batch``: Arrow record batches; ``pure``: without the C extension;
    ``tree``: the ``zkconsumer`` of that checkout, see :func:`tree_env`)."""
    argv = _perf_argv(cluster, topic, n, batch, streams, fetchers, f"bench-zk-{uuid.uuid4().hex[:8]}")
    env = child_env({"ZKCONSUMER_PURE_PYTHON": "1"} if pure else None)
    run = Run(argv, timeout=TIMEOUT, env=tree_env(env, tree) if tree else env).check()
    data = json.loads(run.last_line())
    if data["accelerated"] == pure:
        raise RuntimeError(f"perf ran {'with' if pure else 'without'} the C extension; expected the opposite")
    return run.measurement(messages=data["messages"], msgs_per_sec=data["msgs_per_sec"],
                           mb_per_sec=data["mb_per_sec"], seconds=data["seconds"])


def tree_env(env: Dict[str, str], tree: str) -> Dict[str, str]:
    """``env`` with checkout ``tree`` first on PYTHONPATH, so a child imports that tree's ``zkconsumer``.

    The same interpreter and packages run it; only the project's code differs. ValueError
    unless ``tree`` holds a ``zkconsumer`` package.
    """
    if not (Path(tree) / "zkconsumer" / "__init__.py").is_file():
        raise ValueError(f"{tree}: not a zkconsumer checkout (no zkconsumer/__init__.py)")
    return dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(tree).resolve()), env.get("PYTHONPATH")])))


def tree_commit(tree: str) -> str:
    """The short commit a checkout is at (``?`` if git cannot say), with ``+`` if its files differ from it."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", tree, *args], capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "?"
    return commit + ("+" if git("status", "--porcelain", "--untracked-files=no") else "")


def run_perf_processes(cluster: Any, topic: str, n: int, processes: int, batch: bool) -> Dict[str, Any]:
    """``processes`` ``zkconsumer perf`` members of one new group, 1 stream each, started together.

    Each is asked for all ``n`` and reads its share of the partitions (by the group's
    assignment) until they run dry (``consumer.timeout.ms``, 1 s, which perf subtracts from its
    end, as Kafka's tool does): a share given in messages would not do, since a batch counts as
    consumed when yielded and perf counts only the part of its last batch it needs. The rate
    is all their messages over the span from the first one's timed start to the last one's
    end; CPU seconds and peak RSS are the members' sums (the memory the machine needs), steal
    and busy the widest run's.
    """
    group = f"bench-zk-{uuid.uuid4().hex[:8]}"
    argv = _perf_argv(cluster, topic, n, batch, 1, 1, group)
    runs: List[Optional[Run]] = [None] * processes

    def one(i: int) -> None:
        runs[i] = Run(argv, timeout=TIMEOUT, env=child_env())

    threads = [threading.Thread(target=one, args=(i,), name=f"bench-perf-{i}") for i in range(processes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done = [r.check() for r in runs if r is not None]
    if len(done) != processes:
        raise RuntimeError("a perf member did not run")
    data = [json.loads(r.last_line()) for r in done]
    start = min(_epoch(d["start_time"]) for d in data)
    seconds = max(_epoch(d["end_time"]) for d in data) - start
    messages = sum(d["messages"] for d in data)
    mb = sum(d["mb"] for d in data)
    widest = max(done, key=lambda r: r.wall)
    out = widest.measurement(messages=messages, msgs_per_sec=round(messages / seconds, 1),
                             mb_per_sec=round(mb / seconds, 4), seconds=round(seconds, 4))
    out["cpu_seconds"] = round(sum(r.cpu for r in done), 3)
    out["peak_rss_mb"] = round(sum(r.peak_rss_mb for r in done), 1)
    return out


def _epoch(iso: str) -> float:
    return datetime.datetime.fromisoformat(iso).timestamp()


def run_worker(module: str, cluster: Any, topic: str, n: int) -> Dict[str, Any]:
    """One of :mod:`benchmarks.consumers`' scripts."""
    argv = [sys.executable, "-m", module, cluster.bootstrap_servers, topic, str(n)]
    run = Run(argv, timeout=TIMEOUT, env=child_env()).check()
    data = json.loads(run.last_line())
    if data["messages"] < n:
        raise RuntimeError(f"{module} consumed {data['messages']} of {n} messages")
    return run.measurement(messages=data["messages"], msgs_per_sec=data["msgs_per_sec"],
                           mb_per_sec=data["mb_per_sec"], seconds=data["seconds"])


def produce(cluster: Any, topic: str, n: int, size: int, codec: str, partitions: int) -> float:
    """Create ``topic`` (partitions spread over the brokers) and fill it with ``n`` messages of ``size``
    bytes with Kafka's ``org.apache.kafka.tools.ProducerPerformance`` (``compression.type=codec``);
    return the seconds it took. RuntimeError unless the log ends add up to ``n``.
    """
    cluster.create_topic(topic, partitions=partitions, replication=1)
    start = time.monotonic()
    argv = cluster.tool_command("org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                                "--num-records", str(n), "--record-size", str(size), "--throughput", "-1",
                                "--producer-props", f"bootstrap.servers={cluster.bootstrap_servers}", "acks=1",
                                f"compression.type={codec}", "batch.size=262144", "linger.ms=5",
                                "buffer.memory=134217728", "max.request.size=4194304", jvm_options=["-Xmx512m"])
    Run(argv, timeout=3600).check()
    elapsed = time.monotonic() - start
    total = sum(log_end(cluster, topic, partitions).values())
    if total != n:
        raise RuntimeError(f"{topic}: produced {total} messages, wanted {n}")
    return elapsed


def log_end(cluster: Any, topic: str, partitions: int) -> Dict[int, int]:
    """Each partition's log end offset, asked of its leader."""
    from zkconsumer.wire.connection import BrokerConnection
    from zkconsumer.wire.protocol import LATEST_TIME

    host = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)[0]
    out = {}
    for p in range(partitions):
        leader = cluster.leader(topic, p)
        with BrokerConnection(host, cluster.broker_port(leader), "bench", 30000, 65536) as conn:
            out[p] = conn.list_offsets(topic, p, LATEST_TIME)
    return out
