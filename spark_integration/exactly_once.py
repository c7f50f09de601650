"""Exactly-once results: store each batch's results and its offsets in one database transaction.

Spark's old direct Kafka stream documented this pattern and left it to users:
the offsets that say what has been processed live *in the same database as the
results*, and both are written in one transaction. ZooKeeper is then only a
mirror for lag monitors; the database is the truth. With PostgreSQL::

    conn = psycopg.connect(dsn)                 # autocommit off (the default)
    create_offsets_table(conn)
    while True:
        batch = next_batch(conn, props, ["events"], max_messages_per_partition=1000)
        if not batch.changes_offsets:
            break                               # caught up
        rdd = create_rdd_for_ranges(sc, props, batch.ranges)
        rows = rdd.map(lambda m: (m.topic, m.partition, m.offset, m.message)).collect()
        commit_batch(conn, batch, lambda cur: cur.executemany("INSERT INTO results ...", rows))

1. :func:`next_batch` reads the offsets stored for the group (table
   ``offsets``: ``group_id, topic, partition, next_offset``) and plans one
   :class:`~spark_integration.ranges.OffsetRange` per partition from there to
   the log end (``auto.offset.reset`` where none is stored; a stored offset
   outside the log is a data loss, see ``fail_on_data_loss``).
2. :func:`create_rdd_for_ranges` reads exactly those ranges (Spark's
   ``KafkaUtils.createRDD(sc, kafkaParams, offsetRanges)``); recomputing a
   partition reads the same messages again.
3. :func:`commit_batch` runs, in one transaction, a compare-and-set of every
   range's offset (stored value must still be what the batch was planned
   from, else :class:`OffsetsChangedError` and a rollback: another job of the
   same group committed in between) and then ``write_results(cursor)``, and
   commits.

Whatever kills the job (a crash, SIGKILL, a lost connection) before the commit
leaves neither the results nor the offsets; the next run plans from the last
committed offsets and reads the same messages again. After the commit both are
there. So each message's result is stored exactly once, without deduplication
in the results table. The results must be a deterministic function of the
batch only if you need re-runs to store the *same* results; they are stored
once either way.

SQL is PostgreSQL's (``ON CONFLICT``), through a DB-API connection with the
``%s`` parameter style (psycopg 3 or psycopg2) that is not in autocommit mode.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from zkconsumer.errors import ZkConsumerError
from zkconsumer.structs import TopicPartition

from .connect import spark_context
from .credentials import consumer_config
from .data_loss import initial_positions, report
from .group_view import GroupView
from .options import PropsLike, plain_props
from .ranges import OffsetRange, plan_ranges
from .rdd import read_ranges

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import RDD, SparkContext

__all__ = [
    "Batch", "OffsetsChangedError", "create_offsets_table", "load_offsets", "next_batch",
    "create_rdd_for_ranges", "commit_batch",
]

log = logging.getLogger(__name__)

#: Cursor -> None: writes a batch's results inside the batch's transaction.
ResultWriter = Callable[[Any], None]


class OffsetsChangedError(ZkConsumerError):
    """The stored offsets moved since the batch was planned (another job of the group committed); rolled back.

    Retriable: plan a new batch (:func:`next_batch`) and process that.
    ``conflicts`` maps each partition to ``(expected, found)`` stored offsets (``None``: no row).
    """

    retriable = True

    def __init__(self, group: str, conflicts: Mapping[TopicPartition, Tuple[Optional[int], Optional[int]]]) -> None:
        self.group = group
        self.conflicts = dict(conflicts)
        detail = ", ".join(f"{t}/{p}: expected {e}, found {f}" for (t, p), (e, f) in sorted(self.conflicts.items()))
        super().__init__(f"group {group}: stored offsets changed since the batch was planned ({detail}); "
                         "the batch was rolled back, plan a new one")


@dataclass(frozen=True)
class Batch:
    """What one run of the loop processes: ``ranges``, planned from the ``stored`` offsets of ``group``.

    ``stored`` holds, per partition of ``ranges``, the offset the table held
    when the batch was planned (``None``: no row yet); :func:`commit_batch`
    writes only if it still holds exactly that.
    """

    group: str
    ranges: Tuple[OffsetRange, ...]
    stored: Mapping[TopicPartition, Optional[int]] = field(default_factory=dict)

    @property
    def count(self) -> int:
        """Offsets covered (the number of messages, unless the topic is compacted)."""
        return sum(r.count for r in self.ranges)

    @property
    def changes_offsets(self) -> bool:
        """Whether committing the batch changes a stored offset (False: caught up, nothing to do)."""
        return any(self.stored.get(r.topic_partition) != r.until_offset for r in self.ranges)


def _check_transactional(conn: Any) -> None:
    if getattr(conn, "autocommit", False):
        raise ValueError("the connection is in autocommit mode: results and offsets would not be one transaction")


def create_offsets_table(conn: Any, table: str = "offsets") -> None:
    """Create ``table (group_id, topic, partition, next_offset)`` if it does not exist, and commit."""
    _check_transactional(conn)
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE IF NOT EXISTS {table} ("
                    "group_id text NOT NULL, topic text NOT NULL, partition integer NOT NULL, "
                    "next_offset bigint NOT NULL CHECK (next_offset >= 0), "
                    "PRIMARY KEY (group_id, topic, partition))")
    conn.commit()


def load_offsets(conn: Any, group: str, topics: Sequence[str], table: str = "offsets") -> Dict[TopicPartition, int]:
    """The next offset to process of each partition of ``topics`` stored for ``group`` (read-only; ends its transaction)."""
    _check_transactional(conn)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT topic, partition, next_offset FROM {table} WHERE group_id = %s AND topic = ANY(%s)",
                        (group, list(topics)))
            return {(topic, int(partition)): int(offset) for topic, partition, offset in cur.fetchall()}
    finally:
        conn.rollback()  # nothing was written; do not hold a snapshot open while Spark works


def next_batch(conn: Any, props: PropsLike, topics: Sequence[str], *,
               max_messages_per_partition: Optional[int] = None, fail_on_data_loss: bool = True,
               table: str = "offsets") -> Batch:
    """Plan the next batch of ``props``'s group from the offsets stored in ``table`` to the log end.

    One range per partition of ``topics`` (in topic/partition order), capped at
    ``max_messages_per_partition``. A partition with no stored offset starts per
    ``auto.offset.reset``. A stored offset outside the log (retention deleted
    it, the topic was re-created) raises
    :class:`~spark_integration.data_loss.DataLossError`, or with
    ``fail_on_data_loss=False`` is logged and restarts per ``auto.offset.reset``.
    """
    if isinstance(topics, str):
        raise TypeError("topics must be a list of topic names, not a string")
    config = consumer_config(props)
    topics = list(dict.fromkeys(topics))
    stored = load_offsets(conn, str(config.group_id), topics, table)
    with GroupView(config) as view:
        partitions = view.topic_partitions(topics)
        starts, ends = view.log_starts(partitions), view.log_ends(partitions)
    positions, losses = initial_positions({tp: stored.get(tp) for tp in partitions}, starts, ends,
                                          config.auto_offset_reset)
    report(str(config.group_id), losses, fail_on_data_loss, log)
    ranges = plan_ranges(positions, ends, max_messages_per_partition)
    return Batch(str(config.group_id), tuple(ranges), {tp: stored.get(tp) for tp in partitions})


def create_rdd_for_ranges(sc: "SparkContext", props: PropsLike, ranges: Sequence[OffsetRange]) -> "RDD[Any]":
    """An RDD of exactly the messages of ``ranges``: Spark partition ``i`` reads ``ranges[i]``.

    Rows are :class:`~zkconsumer.MessageAndMetadata`; the RDD has
    ``offset_ranges``. Like :func:`~spark_integration.create_rdd` but with
    ranges the caller chose, and it reads no offsets from ZooKeeper. ``sc``
    may be a classic SparkSession; a Spark Connect session raises
    :class:`~spark_integration.connect.SparkConnectUnsupportedError`.
    """
    sc = spark_context(sc, "create_rdd_for_ranges")
    ranges = [OffsetRange(*r) for r in ranges]
    plain = plain_props(props)
    with GroupView(consumer_config(plain)) as view:
        brokers = view.brokers()
    reader = functools.partial(read_ranges, plain, brokers)
    rdd = sc.parallelize([tuple(r) for r in ranges], max(1, len(ranges))).mapPartitions(reader)
    rdd.offset_ranges = ranges  # type: ignore[attr-defined]
    return rdd


def commit_batch(conn: Any, batch: Batch, write_results: Optional[ResultWriter], table: str = "offsets") -> None:
    """In one transaction: move each range's stored offset from where it was planned to ``until_offset``,
    run ``write_results(cursor)``, commit.

    Raises :class:`OffsetsChangedError` (after a rollback) if a stored offset
    is no longer what ``batch.stored`` says. Any error from ``write_results``
    or the database rolls the whole transaction back and propagates: nothing
    of the batch is stored.
    """
    _check_transactional(conn)
    conflicts: Dict[TopicPartition, Tuple[Optional[int], Optional[int]]] = {}
    try:
        with conn.cursor() as cur:
            # Offsets first: the row locks serialise concurrent batches of the group before any result is written.
            for r in batch.ranges:
                expected = batch.stored.get(r.topic_partition)
                if expected is None:
                    cur.execute(f"INSERT INTO {table} (group_id, topic, partition, next_offset) "
                                "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                                (batch.group, r.topic, r.partition, r.until_offset))
                else:
                    cur.execute(f"UPDATE {table} SET next_offset = %s "
                                "WHERE group_id = %s AND topic = %s AND partition = %s AND next_offset = %s",
                                (r.until_offset, batch.group, r.topic, r.partition, expected))
                if cur.rowcount != 1:
                    cur.execute(f"SELECT next_offset FROM {table} WHERE group_id = %s AND topic = %s AND partition = %s",
                                (batch.group, r.topic, r.partition))
                    found = cur.fetchone()
                    conflicts[r.topic_partition] = (expected, None if found is None else int(found[0]))
            if conflicts:
                raise OffsetsChangedError(batch.group, conflicts)
            if write_results is not None:
                write_results(cur)
        conn.commit()
    except BaseException:
        try:
            conn.rollback()
        except Exception as error:  # the connection is gone: the server rolls the transaction back itself
            log.warning("rollback failed (%s); the server discards the open transaction", error)
        raise
