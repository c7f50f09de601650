#!/usr/bin/env python3
"""Example: consume a topic from Spark with one group member per task (KafkaStreamSource.foreach_stream).

Starts a local ZooKeeper + 1 Kafka broker (unless --zookeeper is given), produces
sample messages to a 4-partition topic, then runs 2 Spark tasks on local[2], each a
member of the consumer group with one stream. Every handler counts words; offsets
are committed when it returns. Prints what each task handled and the group's
committed offsets; exits 0 if every message was handled.

    .venv/bin/python examples/spark_foreach_stream.py [--zookeeper host:port] [--messages 40]
"""

from __future__ import annotations

import collections
import sys
import time
from pathlib import Path
from typing import Dict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.common import example_cluster, example_parser, local_spark  # noqa: E402
from spark_integration import KafkaStreamSource  # noqa: E402
from spark_integration.group_view import GroupView  # noqa: E402
from zkconsumer import ConsumerConfig  # noqa: E402

STREAMS = 2


def count_words(stream) -> Dict[str, int]:
    """The handler: runs on an executor, once per stream; its result goes back to the driver."""
    words: Dict[str, int] = collections.Counter()
    for message in stream:
        words.update(message.message.decode().split())
    return dict(words)


def main() -> int:
    args = example_parser(__doc__.splitlines()[1], "spark-foreach").parse_args()
    started = time.monotonic()
    with example_cluster(args.zookeeper) as cluster:
        cluster.create_topic(args.topic, partitions=4)
        values = [f"event {i % 5} from user-{i % 3}".encode() for i in range(args.messages)]
        cluster.produce(args.topic, values)
        print(f"Produced {len(values)} messages to {args.topic!r}")

        props = {
            "zookeeper.connect": cluster.zk_connect,
            "group.id": args.group,
            "auto.offset.reset": "smallest",
            "consumer.timeout.ms": 3000,       # a stream ends after 3 s without messages
            "rebalance.backoff.ms": 1000,
        }
        spark = local_spark("zkconsumer foreach_stream example")
        try:
            source = KafkaStreamSource(props, {args.topic: STREAMS})
            results = source.foreach_stream(spark.sparkContext, count_words)
        finally:
            spark.stop()

        total = collections.Counter()
        for r in sorted(results, key=lambda r: r.stream_index):
            print(f"  stream {r.stream_index} ({r.consumer_id}): {r.messages} messages, "
                  f"partitions {sorted(p for _, p in r.positions)}")
            total.update(r.value)
        with GroupView(ConsumerConfig(props)) as view:
            partitions = view.topic_partitions([args.topic])
            committed = view.committed(partitions)
            log_ends = view.log_ends(partitions)
        handled = sum(r.messages for r in results)
        print(f"Word counts: {dict(sorted(total.items()))}")
        listed = ", ".join(f"{p}: {o}" for (_, p), o in sorted(committed.items()))
        print(f"Committed offsets of group {args.group!r}: {{{listed}}}")
    ok = handled >= len(values) and committed == log_ends
    print(f"{'OK' if ok else 'MISMATCH'}: {handled} of {len(values)} messages handled by {STREAMS} tasks "
          f"in {time.monotonic() - started:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
