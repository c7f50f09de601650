#!/usr/bin/env python3
"""Example: read a group's new messages as batch RDDs (create_rdd) and commit them (commit_offset_ranges).

Starts a local ZooKeeper + 1 Kafka broker (unless --zookeeper is given), produces a
first batch of sample messages, reads it with create_rdd (one Spark partition per
Kafka partition) on local[2], commits the offset ranges to ZooKeeper, produces a
second batch and reads again: the second RDD holds exactly the new messages.
Exits 0 if both batches came back exactly.

    .venv/bin/python examples/spark_create_rdd.py [--zookeeper host:port] [--messages 40]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import List

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.common import example_cluster, example_parser, local_spark  # noqa: E402
from spark_integration import commit_offset_ranges, create_rdd  # noqa: E402


def main() -> int:
    args = example_parser(__doc__.splitlines()[1], "spark-rdd").parse_args()
    started = time.monotonic()
    ok = True
    with example_cluster(args.zookeeper) as cluster:
        cluster.create_topic(args.topic, partitions=4)
        props = {"zookeeper.connect": cluster.zk_connect, "group.id": args.group, "auto.offset.reset": "smallest"}
        spark = local_spark("zkconsumer create_rdd example")
        try:
            sc = spark.sparkContext
            for batch in (1, 2):
                values: List[bytes] = [f"batch{batch}-{i:04d}".encode() for i in range(args.messages)]
                cluster.produce(args.topic, values)
                rdd = create_rdd(sc, props, [args.topic])
                print(f"Batch {batch}: produced {len(values)}; RDD has {rdd.getNumPartitions()} partitions:")
                for r in rdd.offset_ranges:
                    print(f"    {r.topic}/{r.partition}: offsets [{r.from_offset}, {r.until_offset})")
                got = sorted(rdd.map(lambda m: m.message).collect())
                print(f"  read {len(got)} messages, e.g. {got[:2]}")
                ok = ok and got == sorted(values)
                commit_offset_ranges(props, rdd.offset_ranges)
                print(f"  committed {sum(r.count for r in rdd.offset_ranges)} offsets to ZooKeeper")
            leftover = create_rdd(sc, props, [args.topic])
            remaining = leftover.count()
            print(f"After committing: {remaining} messages left for group {args.group!r}")
            ok = ok and remaining == 0
        finally:
            spark.stop()
    print(f"{'OK' if ok else 'MISMATCH'}: each batch read exactly its new messages in {time.monotonic() - started:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
