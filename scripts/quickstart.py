#!/usr/bin/env python3
"""Quick start: a local ZooKeeper + 3 Kafka 0.9.0.1 brokers, sample data in, data back out.

Produces keyed sample events to a replicated topic, reads them back with Kafka's own
ZooKeeper-based consumer (kafka.tools.ConsoleConsumer) and prints a short summary.
Exits 0 if every event came back. Run it through ``scripts/quickstart``.
"""

from __future__ import annotations

import collections
import sys
import time
from typing import List

from zkconsumer.testing import LocalCluster

TOPIC = "quickstart-events"
EVENTS = 40


def main() -> int:
    started = time.monotonic()
    print("Starting ZooKeeper and 3 Kafka brokers (first run: downloads Kafka 0.9.0.1) ...", flush=True)
    with LocalCluster(brokers=3, partitions=4) as cluster:
        print(f"  ZooKeeper: {cluster.zk_connect}")
        print(f"  brokers:   {cluster.bootstrap_servers}")
        cluster.create_topic(TOPIC, partitions=4, replication=2)
        leaders = {p: cluster.leader(TOPIC, p) for p in range(4)}
        print(f"Created topic {TOPIC!r}: 4 partitions, replication 2, leaders {leaders}")

        values = [f"event-{i:03d}" for i in range(EVENTS)]
        keys = [f"user-{i % 7}" for i in range(EVENTS)]
        placed = cluster.produce(TOPIC, values, keys=keys)
        per_partition = collections.Counter(partition for partition, _ in placed)
        print(f"Produced {len(placed)} events: per partition {dict(sorted(per_partition.items()))}")

        result = cluster.run_tool("kafka.tools.ConsoleConsumer", "--zookeeper", cluster.zk_connect,
                                  "--topic", TOPIC, "--from-beginning", "--max-messages", str(EVENTS),
                                  "--property", "print.key=true", timeout=120)
        consumed: List[str] = [line.split("\t", 1)[-1] for line in result.stdout.splitlines() if line.strip()]
        print(f"Kafka's ConsoleConsumer read back {len(consumed)} events, e.g.:")
        for line in result.stdout.splitlines()[:3]:
            print(f"    {line}")

    ok = sorted(consumed) == sorted(values)
    print(f"{'OK' if ok else 'MISMATCH'}: {len(consumed)}/{EVENTS} events round-tripped "
          f"in {time.monotonic() - started:.1f}s; cluster stopped and cleaned up.")
    if not ok and result.stderr:
        print(result.stderr, file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
