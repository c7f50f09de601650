"""The ``zkconsumer`` source's columns: Spark's Kafka-source schema, and the Arrow batches that fill it.

The columns are those of Spark's own Kafka source, in its order::

    key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int

Kafka 0.8/0.9 messages (magic byte 0) carry no timestamp. Spark's own source,
reading such a message through Kafka's Java client, gets the client's "no
timestamp" (``-1`` ms, ``TimestampType.NO_TIMESTAMP_TYPE`` whose id is ``-1``)
and shows ``timestamp`` = ``1969-12-31 23:59:59.999`` UTC and
``timestampType`` = ``-1``. This source writes exactly the same values, so a
query reads the same rows before and after a migration to Spark's source;
filter on ``timestampType = -1`` (or ``>= 0``) to tell them apart from real
timestamps. ``topic``, ``partition``, ``offset``, ``timestamp`` and
``timestampType`` are never null (Spark declares every column nullable; the
types are the same).

    >>> [f.name for f in SCHEMA.fields]
    ['key', 'value', 'topic', 'partition', 'offset', 'timestamp', 'timestampType']
"""

from __future__ import annotations

from array import array
from typing import Any, Optional, Tuple

from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

__all__ = ["SCHEMA", "NO_TIMESTAMP_MS", "NO_TIMESTAMP_TYPE", "Row", "spark_batch", "spark_row"]

#: What Kafka's Java client reports as the timestamp of a message without one (ms since the epoch).
NO_TIMESTAMP_MS = -1
#: ``TimestampType.NO_TIMESTAMP_TYPE.id`` of Kafka's Java client (0: CreateTime, 1: LogAppendTime).
NO_TIMESTAMP_TYPE = -1

#: The source's columns: Spark's Kafka-source schema (``key``/``value`` null when the message has none).
SCHEMA = StructType([
    StructField("key", BinaryType(), True),
    StructField("value", BinaryType(), True),
    StructField("topic", StringType(), False),
    StructField("partition", IntegerType(), False),
    StructField("offset", LongType(), False),
    StructField("timestamp", TimestampType(), False),
    StructField("timestampType", IntegerType(), False),
])

Row = Tuple[Optional[bytes], Optional[bytes], str, int, int, Any, int]

_ARROW_SCHEMA: Any = None


def arrow_schema() -> Any:
    """:data:`SCHEMA` as an Arrow schema (``timestamp`` in microseconds, UTC, as PySpark maps TimestampType)."""
    global _ARROW_SCHEMA
    if _ARROW_SCHEMA is None:
        import pyarrow as pa

        _ARROW_SCHEMA = pa.schema([
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("topic", pa.string(), nullable=False),
            pa.field("partition", pa.int32(), nullable=False),
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field("timestampType", pa.int32(), nullable=False),
        ])
    return _ARROW_SCHEMA


#: ``(rows, timestamp buffer, timestampType buffer)`` of the constant columns, shared by every batch of at
#: most ``rows`` rows (an array may use the start of a longer buffer), so a batch allocates nothing for them.
_constants: Tuple[int, Any, Any] = (0, None, None)


def _constant_buffers(n: int) -> Tuple[Any, Any]:
    global _constants
    rows, stamps, types = _constants
    if rows < n:
        import pyarrow as pa

        rows = max(n, 2 * rows, 4096)
        stamps = pa.py_buffer(array("q", [NO_TIMESTAMP_MS * 1000]) * rows)
        types = pa.py_buffer(array("i", [NO_TIMESTAMP_TYPE]) * rows)
        _constants = (rows, stamps, types)
    return stamps, types


def spark_batch(batch: Any) -> Any:
    """A batch of :data:`zkconsumer.consumer.arrow.SCHEMA` (``topic, partition, offset, key, value``) with
    :data:`SCHEMA`'s columns: the same arrays reordered (no copy) and two constant columns.

    >>> from zkconsumer.consumer.arrow import record_batch
    >>> out = spark_batch(record_batch("t", 3, [(5, None, b"a"), (6, b"k", b"bc")]))
    >>> out.column("timestampType").to_pylist(), out.column("timestamp").cast("int64").to_pylist()
    ([-1, -1], [-1000, -1000])
    """
    import pyarrow as pa

    n = batch.num_rows
    stamps, types = _constant_buffers(n)
    timestamps = pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, stamps], null_count=0)
    types = pa.Array.from_buffers(pa.int32(), n, [None, types], null_count=0)
    columns = [batch.column("key"), batch.column("value"), batch.column("topic"), batch.column("partition"),
               batch.column("offset"), timestamps, types]
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema())


def spark_row(topic: str, partition: int, offset: int, key: Optional[bytes], value: Optional[bytes]) -> Row:
    """One message as a row of :data:`SCHEMA` (``timestamp``: -1 ms as a UTC datetime, ``timestampType`` -1)."""
    import datetime

    stamp = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(
        milliseconds=NO_TIMESTAMP_MS)
    return (key, value, topic, partition, offset, stamp, NO_TIMESTAMP_TYPE)
