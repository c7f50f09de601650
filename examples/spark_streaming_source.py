#!/usr/bin/env python3
"""Example: Structured Streaming from a ZooKeeper consumer group (the "zkconsumer" data source).

Starts a local ZooKeeper + 1 Kafka broker (unless --zookeeper is given), produces
sample messages, then runs a streaming query with trigger(availableNow=True) on
local[2] that writes the messages to a Parquet table, with a checkpoint. Produces
more and runs the query again from the same checkpoint: it reads only the new
messages. After each run the group's offsets in ZooKeeper equal the log end.
Exits 0 if the table holds every message exactly once.

    .venv/bin/python examples/spark_streaming_source.py [--zookeeper host:port] [--messages 40]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.common import example_cluster, example_parser, local_spark  # noqa: E402
from spark_integration import register_data_source  # noqa: E402
from spark_integration.group_view import GroupView  # noqa: E402
from zkconsumer import ConsumerConfig  # noqa: E402


def run_query(spark, zk_connect: str, group: str, topic: str, table: Path, checkpoint: Path) -> None:
    """One availableNow run: everything new since the checkpoint (or the group's offsets) into ``table``."""
    df = (spark.readStream.format("zkconsumer")
          .option("zookeeper.connect", zk_connect)
          .option("group.id", group)
          .option("topics", topic)
          .option("auto.offset.reset", "smallest")
          .load())
    query = (df.selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
             .writeStream.format("parquet")
             .option("path", str(table))
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True)
             .start())
    query.awaitTermination()


def main() -> int:
    args = example_parser(__doc__.splitlines()[1], "spark-stream").parse_args()
    started = time.monotonic()
    with example_cluster(args.zookeeper) as cluster, tempfile.TemporaryDirectory() as tmp:
        cluster.create_topic(args.topic, partitions=4)
        table, checkpoint = Path(tmp) / "table", Path(tmp) / "checkpoint"
        config = ConsumerConfig({"zookeeper.connect": cluster.zk_connect, "group.id": args.group})
        spark = local_spark("zkconsumer streaming source example")
        produced = []
        try:
            register_data_source(spark)
            for run in (1, 2):
                values = [f"run{run}-{i:04d}" for i in range(args.messages)]
                cluster.produce(args.topic, values)
                produced += values
                run_query(spark, cluster.zk_connect, args.group, args.topic, table, checkpoint)
                rows = spark.read.parquet(str(table)).collect()
                with GroupView(config) as view:
                    partitions = view.topic_partitions([args.topic])
                    in_sync = view.committed(partitions) == view.log_ends(partitions)
                print(f"Run {run}: produced {len(values)}; the table now holds {len(rows)} rows; "
                      f"ZooKeeper offsets {'equal' if in_sync else 'DIFFER FROM'} the log end")
            values_read = sorted(r.value for r in rows)
        finally:
            spark.stop()
    ok = values_read == sorted(produced) and in_sync
    print(f"{'OK' if ok else 'MISMATCH'}: {len(values_read)} rows for {len(produced)} messages, "
          f"each exactly once, in {time.monotonic() - started:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
