#!/usr/bin/env python3
"""Example: the "zkconsumer" source from a Spark Connect client (SparkSession.builder.remote).

Starts a local ZooKeeper + 1 Kafka broker (unless --zookeeper is given) and,
unless --remote is given, a Spark Connect server from the installed PySpark
(local[2], a free loopback port, its Python workers importing this checkout).
The client registers the data source with the server (register_data_source
sends the class; the server's Python workers run it), runs an availableNow
streaming query into a Parquet table and reads the table back. Exits 0 if it
holds every produced message exactly once.

    .venv/bin/python examples/spark_connect_source.py [--zookeeper host:port] [--remote sc://host:port]

foreach_stream and create_rdd need the RDD API, which Spark Connect lacks:
with a Connect session they raise SparkConnectUnsupportedError.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.common import example_cluster, example_parser  # noqa: E402
from spark_integration import register_data_source  # noqa: E402


@contextlib.contextmanager
def connect_server(remote: Optional[str], workdir: Path) -> Iterator[str]:
    if remote:
        yield remote
        return
    from spark_integration.connect_server import LocalConnectServer

    print("Starting a Spark Connect server (local[2]) ...", flush=True)
    with LocalConnectServer(workdir) as server:
        print(f"  Spark Connect: {server.url}")
        yield server.url


def main() -> int:
    parser = example_parser(__doc__.splitlines()[1], "spark-connect")
    parser.add_argument("--remote", help="use this Spark Connect server (sc://host:port) instead of starting one")
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, example_cluster(args.zookeeper) as cluster, \
            connect_server(args.remote, Path(tmp) / "server") as url:
        cluster.create_topic(args.topic, partitions=4)
        values = [f"connect-{i:04d}" for i in range(args.messages)]
        cluster.produce(args.topic, values)
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.remote(url).getOrCreate()
        try:
            register_data_source(spark)
            df = (spark.readStream.format("zkconsumer")
                  .option("zookeeper.connect", cluster.zk_connect).option("group.id", args.group)
                  .option("topics", args.topic).option("auto.offset.reset", "smallest").load())
            table = str(Path(tmp) / "table")
            query = (df.selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
                     .writeStream.format("parquet").option("path", table)
                     .option("checkpointLocation", str(Path(tmp) / "checkpoint"))
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            got = sorted(r.value for r in spark.read.parquet(table).collect())
        finally:
            spark.stop()
    ok = got == sorted(values)
    print(f"{'OK' if ok else 'MISMATCH'}: {len(got)} rows for {len(values)} messages through Spark Connect, "
          f"in {time.monotonic() - started:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
