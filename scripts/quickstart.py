#!/usr/bin/env python3
"""Quick start: a local ZooKeeper + 3 Kafka 0.9.0.1 brokers, sample data in, zkconsumer reads it.

Produces keyed sample events to a replicated topic, consumes them with a zkconsumer group
member (two streams, each iterated on its own thread), commits the offsets to ZooKeeper,
and asks Kafka's own ConsumerOffsetChecker what it sees: lag 0 on every partition.
Exits 0 if every event came back. Run it through ``scripts/quickstart``.
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
from pathlib import Path
from typing import List

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's benchmarks/ (not installed)

from harness.cluster import ProjectCluster  # noqa: E402  (after the path)
from zkconsumer import ConsumerTimeoutError, KafkaStream, MessageAndMetadata, ZookeeperConsumerConnector  # noqa: E402

TOPIC = "quickstart-events"
GROUP = "quickstart"
EVENTS = 40


def drain(stream: KafkaStream, into: List[MessageAndMetadata], lock: threading.Lock) -> None:
    """Iterate one stream until it has been idle for consumer.timeout.ms."""
    try:
        for message in stream:
            with lock:
                into.append(message)
    except ConsumerTimeoutError:
        pass


def main() -> int:
    argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0]).parse_args()
    started = time.monotonic()
    print("Starting ZooKeeper and 3 Kafka brokers (first run: downloads Kafka 0.9.0.1) ...", flush=True)
    with ProjectCluster(brokers=3, partitions=4) as cluster:
        print(f"  ZooKeeper: {cluster.zk_connect}")
        print(f"  brokers:   {cluster.bootstrap_servers}")
        cluster.create_topic(TOPIC, partitions=4, replication=2)
        values = [f"event-{i:03d}" for i in range(EVENTS)]
        keys = [f"user-{i % 7}" for i in range(EVENTS)]
        placed = cluster.produce(TOPIC, values, keys=keys)
        per_partition = collections.Counter(partition for partition, _ in placed)
        print(f"Produced {len(placed)} events to {TOPIC!r}: per partition {dict(sorted(per_partition.items()))}")

        config = {
            "zookeeper.connect": cluster.zk_connect,
            "group.id": GROUP,
            "auto.offset.reset": "smallest",  # a new group starts at the beginning
            "consumer.timeout.ms": 2000,      # streams end after 2 s without messages
        }
        consumed: List[MessageAndMetadata] = []
        lock = threading.Lock()
        with ZookeeperConsumerConnector(config) as connector:
            streams = connector.create_message_streams({TOPIC: 2})[TOPIC]
            owned = connector.status.owned if connector.status else {}
            print(f"Joined group {GROUP!r} as {connector.consumer_id}; owns {sorted(p for _, p in owned)}")
            threads = [threading.Thread(target=drain, args=(s, consumed, lock)) for s in streams]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            connector.commit_offsets()
            print(f"zkconsumer read {len(consumed)} events, e.g.:")
            for m in sorted(consumed, key=lambda m: (m.partition, m.offset))[:3]:
                print(f"    partition {m.partition} offset {m.offset}: {m.key.decode()} -> {m.message.decode()}")

            checker = cluster.run_tool("kafka.tools.ConsumerOffsetChecker", "--zookeeper", cluster.zk_connect,
                                       "--group", GROUP, timeout=120)
            print("Kafka's ConsumerOffsetChecker on the offsets zkconsumer committed:")
            for line in checker.stdout.splitlines():
                print(f"    {line}")

    ok = sorted(m.message.decode() for m in consumed) == sorted(values)
    print(f"{'OK' if ok else 'MISMATCH'}: {len(consumed)}/{EVENTS} events round-tripped "
          f"in {time.monotonic() - started:.1f}s; cluster stopped and cleaned up.")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
