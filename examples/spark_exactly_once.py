#!/usr/bin/env python3
"""Example: exactly-once results in PostgreSQL, with the offsets stored in the same transaction.

Each batch: read the offsets stored in the database (table offsets), plan offset
ranges from there to the log end, read them with Spark (local[2]), and in ONE
transaction insert the results (table results) and move the stored offsets.
Kill it at any point and run it again: every message ends up in the results
table exactly once (spark_integration.exactly_once explains why).

Without --zookeeper it starts a local ZooKeeper + 1 Kafka broker and produces
--messages sample messages; without --dsn it starts a throw-away PostgreSQL
(Debian's postgresql package). It then processes batches until it has caught up
with the log end, checks the tables and exits 0 if every message is stored once.

    .venv/bin/python examples/spark_exactly_once.py [--zookeeper host:port --topic T] [--dsn DSN]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.common import example_cluster, example_parser, local_spark  # noqa: E402
from spark_integration.exactly_once import (  # noqa: E402
    commit_batch,
    create_offsets_table,
    create_rdd_for_ranges,
    next_batch,
)
from spark_integration.group_view import GroupView  # noqa: E402
from zkconsumer import ConsumerConfig  # noqa: E402

RESULTS_DDL = ("CREATE TABLE IF NOT EXISTS results ("
               "id bigserial PRIMARY KEY, "  # deliberately no unique key on the message: duplicates would show
               "group_id text NOT NULL, topic text NOT NULL, partition integer NOT NULL, msg_offset bigint NOT NULL, "
               "value text, value_length integer NOT NULL)")
INSERT_RESULT = ("INSERT INTO results (group_id, topic, partition, msg_offset, value, value_length) "
                 "VALUES (%s, %s, %s, %s, %s, %s)")

Result = Tuple[str, int, int, str, int]


def parser() -> argparse.ArgumentParser:
    p = example_parser(__doc__.splitlines()[1], "spark-exactly-once")
    p.add_argument("--dsn", help="PostgreSQL connection string (default: start a temporary server)")
    p.add_argument("--max-per-partition", type=int, default=50, help="messages per partition and batch")
    p.add_argument("--no-produce", action="store_true", help="only process what the topic holds (no sample data)")
    p.add_argument("--pause-in-transaction", type=float, default=0.0,
                   help="seconds to wait after inserting a batch's results, before the commit (to kill it there)")
    return p


@contextlib.contextmanager
def postgres(dsn: Optional[str]) -> Iterator[str]:
    if dsn:
        yield dsn
        return
    from harness.postgres import LocalPostgres

    print("Starting a temporary PostgreSQL ...", flush=True)
    with LocalPostgres() as server:
        yield server.dsn


def process(message) -> Result:
    """The per-message work, on the executors: decode and measure."""
    text = message.message.decode("utf-8", "replace") if message.message is not None else None
    return (message.topic, message.partition, message.offset, text, len(message.message or b""))


def run_batches(spark, conn, props: dict, topic: str, max_per_partition: int, pause: float) -> int:
    """Process batches until caught up; returns how many messages were stored."""
    group = props["group.id"]
    stored = 0
    number = 0
    while True:
        batch = next_batch(conn, props, [topic], max_messages_per_partition=max_per_partition)
        if not batch.changes_offsets:
            return stored
        number += 1
        rdd = create_rdd_for_ranges(spark.sparkContext, props, batch.ranges)
        rows: List[Result] = rdd.map(process).collect()
        print(f"batch {number}: read {len(rows)} messages of {batch.count} offsets "
              f"{[(r.partition, r.from_offset, r.until_offset) for r in batch.ranges]}", flush=True)

        def write(cur, rows: List[Result] = rows, number: int = number) -> None:  # bound now (ruff B023)
            cur.executemany(INSERT_RESULT, [(group, *row) for row in rows])
            if pause:
                print(f"batch {number}: results inserted, transaction open", flush=True)
                time.sleep(pause)

        commit_batch(conn, batch, write)
        stored += len(rows)
        print(f"batch {number}: committed {len(rows)} results and the offsets", flush=True)


def check(conn, cluster_zk: str, group: str, topic: str, produced: Optional[int]) -> bool:
    """Print and check: each message stored once; stored offsets equal the log ends."""
    with conn.cursor() as cur:
        cur.execute("SELECT count(*), count(DISTINCT (topic, partition, msg_offset)) FROM results "
                    "WHERE group_id = %s AND topic = %s", (group, topic))
        rows, distinct = cur.fetchone()
        cur.execute("SELECT partition, next_offset FROM offsets WHERE group_id = %s AND topic = %s", (group, topic))
        offsets = dict(cur.fetchall())
    conn.rollback()
    with GroupView(ConsumerConfig({"zookeeper.connect": cluster_zk, "group.id": group})) as view:
        partitions = view.topic_partitions([topic])
        ends = {p: o for (_, p), o in view.log_ends(partitions).items()}
    total = sum(ends.values())
    in_sync = {p: offsets.get(p, 0) for p in ends} == ends
    print(f"results: {rows} rows, {distinct} distinct messages; the log holds {total}; "
          f"stored offsets {'equal' if in_sync else 'DIFFER FROM'} the log ends {ends}")
    return rows == distinct == total and in_sync and (produced is None or total == produced)


def main() -> int:
    args = parser().parse_args()
    started = time.monotonic()
    import psycopg

    with example_cluster(args.zookeeper) as cluster, postgres(args.dsn) as dsn:
        produced = None
        if not args.no_produce:
            cluster.create_topic(args.topic, partitions=4)
            produced = len(cluster.produce(args.topic, [f"message-{i:05d}" for i in range(args.messages)]))
            print(f"Produced {produced} messages to {args.topic!r}")
        props = {"zookeeper.connect": cluster.zk_connect, "group.id": args.group, "auto.offset.reset": "smallest"}
        print("Connecting to PostgreSQL ...", flush=True)
        with psycopg.connect(dsn) as conn:
            create_offsets_table(conn)
            with conn.cursor() as cur:
                cur.execute(RESULTS_DDL)
            conn.commit()
            print("Starting Spark (local[2]) ...", flush=True)
            spark = local_spark("zkconsumer exactly-once example")
            try:
                spark.sparkContext.setLogLevel("ERROR")
                print("READY", flush=True)
                stored = run_batches(spark, conn, props, args.topic, args.max_per_partition, args.pause_in_transaction)
            finally:
                spark.stop()
            print(f"Caught up: stored {stored} results in this run")
            ok = check(conn, cluster.zk_connect, args.group, args.topic, produced)
    print(f"{'OK' if ok else 'MISMATCH'}: every message stored exactly once, in {time.monotonic() - started:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
