"""Where a zkconsumer member's CPU goes at a steady rate: user and system time, context switches (issue 44).

``python -m benchmarks.cpu_split [--rate 1000] [--window 15] [--profile] iterator batch ...``

Starts a one-broker :class:`~zkconsumer.testing.LocalCluster` (6 partitions), and per kind named
(``iterator``: ``for m in stream``; ``batch``: ``stream.batches()``) one member of a new group with
the library's defaults (``auto.offset.reset=largest``, ``consumer.timeout.ms=100``), while a
kafka-python producer in another process sends 100 B messages at ``--rate`` msg/s round-robin over
the partitions. Over ``--window`` seconds (after 4 s of warm-up) it prints, per message delivered,
the process's user and system CPU (``getrusage``: every thread of the member, none of the
producer's) and its voluntary and involuntary context switches. With ``--profile``, cProfile
runs on the consuming thread (where, with ``fetch.on.consumer.thread``, the fetch rounds run
too) and its top functions are printed; the CPU figures then include cProfile's own cost, so
measure with and without it.

Hold ``/tmp/zkconsumer-cluster.lock`` while it runs (``flock``): a loaded machine's figures mean
little. The latency benchmark (``scripts/bench-latency``) gives the same CPU per message beside
the peers; this one splits it.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import resource
import subprocess
import sys
import time
from typing import Any, List, Optional

from zkconsumer import ConsumerConfig, ConsumerTimeoutError, ZookeeperConsumerConnector
from zkconsumer.testing import LocalCluster

PARTITIONS = 6

PRODUCER = r"""
import sys, time
from kafka import KafkaProducer
producer = KafkaProducer(bootstrap_servers=sys.argv[1], api_version=(0, 9), linger_ms=0, acks=1)
rate, seconds = int(sys.argv[3]), float(sys.argv[4])
start = time.monotonic()
for i in range(int(rate * seconds)):
    ahead = start + i / rate - time.monotonic()
    if ahead > 0:
        time.sleep(ahead)
    producer.send(sys.argv[2], value=b"x" * 100, partition=i % int(sys.argv[5]))
producer.flush()
producer.close()
"""


def consume(stream: Any, kind: str, seconds: float) -> int:
    """Messages delivered in ``seconds`` through the iterator or as batches."""
    delivered, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            if kind == "batch":
                for batch in stream.batches():
                    delivered += batch.num_rows
                    if time.monotonic() >= end:
                        break
            else:
                for _ in stream:
                    delivered += 1
                    if time.monotonic() >= end:
                        break
        except ConsumerTimeoutError:
            continue
    return delivered


def measure(cluster: LocalCluster, topic: str, kind: str, rate: int, window: float, profile: bool) -> None:
    props = {"zookeeper.connect": cluster.zk_connect, "group.id": f"cpu-split-{kind}-{time.time_ns()}",
             "auto.offset.reset": "largest", "auto.commit.enable": "false", "consumer.timeout.ms": "100"}
    with ZookeeperConsumerConnector(ConsumerConfig(props)) as connector:
        stream = connector.create_message_streams({topic: 1})[topic][0]
        producer = subprocess.Popen([sys.executable, "-c", PRODUCER, cluster.bootstrap_servers, topic, str(rate),
                                     str(window + 8), str(PARTITIONS)])
        try:
            consume(stream, kind, 4.0)  # warm-up
            profiler: Optional[cProfile.Profile] = cProfile.Profile() if profile else None
            before = resource.getrusage(resource.RUSAGE_SELF)
            if profiler is not None:
                profiler.enable()
            n = max(1, consume(stream, kind, window))
            if profiler is not None:
                profiler.disable()
            after = resource.getrusage(resource.RUSAGE_SELF)
        finally:
            producer.wait(window + 60)
    user, system = (after.ru_utime - before.ru_utime) / n * 1e6, (after.ru_stime - before.ru_stime) / n * 1e6
    print(f"{kind}: {n} messages in {window:.0f} s; CPU {user + system:.1f} us/msg (user {user:.1f}, system "
          f"{system:.1f}); context switches per message: voluntary {(after.ru_nvcsw - before.ru_nvcsw) / n:.2f}, "
          f"involuntary {(after.ru_nivcsw - before.ru_nivcsw) / n:.2f}; cProfile {'on' if profiler else 'off'}")
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
        print(out.getvalue())


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("kinds", nargs="+", choices=["iterator", "batch"])
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--window", type=float, default=15.0)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    with LocalCluster(brokers=1, partitions=PARTITIONS) as cluster:
        topic = cluster.create_topic("cpu-split", PARTITIONS)
        for kind in args.kinds:
            measure(cluster, topic, kind, args.rate, args.window, args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
