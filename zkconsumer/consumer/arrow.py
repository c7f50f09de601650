"""Arrow record batches of consumed messages (used by :meth:`KafkaStream.batches` and the Spark paths).

Needs pyarrow (``pip install pyarrow``; the ``spark`` extra brings it); importing this module
without it raises an ``ImportError`` that says so.

Every batch has the schema :data:`SCHEMA`::

    topic: string, partition: int32, offset: int64, key: binary, value: binary

which is what Spark's ``StringType``, ``IntegerType``, ``LongType`` and
``BinaryType`` columns map to. :data:`NOT_NULL_SCHEMA` has the same columns
with ``topic``, ``partition`` and ``offset`` marked not null: the Arrow schema
of the ``zkconsumer`` Spark source's columns (PySpark's Python data sources
accept a ``RecordBatch`` only if its schema equals that exactly). From a :class:`~zkconsumer.wire.messageset.MessageBlock`
(the C decoder's output) the offset, key and value columns wrap the block's
buffers without copying; from a list of ``(offset, key, value)`` tuples they
are built the ordinary way.

Example::

    >>> batch = record_batch("t", 0, [(5, None, b"a"), (6, b"k", b"bc")])
    >>> batch.num_rows, batch.column("offset").to_pylist(), value_bytes(batch)
    (2, [5, 6], 3)
"""

from __future__ import annotations

from array import array
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

try:
    import pyarrow as pa
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "Arrow batches need pyarrow, which is not installed: pip install pyarrow"
    ) from exc

from ..wire.messageset import MessageBlock, RawMessage, speedups

#: pyarrow's importer of the Arrow C data interface (underscored, but there since pyarrow 0.17).
_import_from_c = getattr(pa.RecordBatch, "_import_from_c", None)
#: The C builder of small batches, or ``None`` without the extension (or a build older than it), or
#: without pyarrow's importer, which the builder hands its batch to.
_arrow_batch: Optional[Callable[..., "pa.RecordBatch"]] = (
    getattr(speedups, "arrow_batch", None) if _import_from_c is not None else None)

__all__ = ["SCHEMA", "NOT_NULL_SCHEMA", "block_rows", "record_batch", "value_bytes"]

#: The columns of every batch.
SCHEMA = pa.schema([
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
])

#: :data:`SCHEMA` with ``topic``, ``partition`` and ``offset`` not nullable (they never are null).
NOT_NULL_SCHEMA = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
])


def record_batch(topic: str, partition: int, messages: Sequence[RawMessage], start: int = 0,
                 stop: Optional[int] = None, schema: "pa.Schema" = SCHEMA) -> "pa.RecordBatch":
    """``messages[start:stop]`` of ``topic``/``partition`` as a record batch with ``schema``.

    ``start`` and ``stop`` are clamped to ``[0, len(messages)]``. ``schema`` is
    :data:`SCHEMA` or :data:`NOT_NULL_SCHEMA` (same columns and types).
    """
    end = len(messages)
    stop = end if stop is None else max(0, min(stop, end))
    start = max(0, min(start, stop))
    if MessageBlock is not None and type(messages) is MessageBlock:
        return block_rows(topic, partition, messages, start, stop, schema)
    rows = messages[start:stop] if start or stop != end else messages
    offsets = pa.array([m[0] for m in rows], pa.int64())
    keys = pa.array([m[1] for m in rows], pa.binary())
    values = pa.array([m[2] for m in rows], pa.binary())
    return _with_constant_columns(topic, partition, offsets, keys, values, schema)


def block_rows(topic: str, partition: int, block: Any, start: int, stop: int,
               schema: "pa.Schema" = SCHEMA) -> "pa.RecordBatch":
    """Rows ``[start, stop)`` of a C :class:`~zkconsumer.wire.messageset.MessageBlock` as a batch with
    ``schema``, for callers that already hold ``0 <= start <= stop <= len(block)`` (a stream's
    hand-out, and :func:`record_batch` after its checks).

    Up to :data:`_CONSTANT_ROWS` rows (a live stream's batches, one row each, issue 44) the C
    builder makes the batch and hands it to Arrow in one call, about 3 µs against 10 for the
    arrays below; larger ones wrap the block's buffers and slice them.
    """
    if stop - start <= _CONSTANT_ROWS and _arrow_batch is not None:
        return _arrow_batch(block, topic, partition, start, stop, _import_from_c, schema)
    offsets, keys, values = _block_columns(block)
    if start or stop != len(block):
        offsets, keys, values = (a.slice(start, stop - start) for a in (offsets, keys, values))
    return _with_constant_columns(topic, partition, offsets, keys, values, schema)


def _with_constant_columns(topic: str, partition: int, offsets: "pa.Array", keys: "pa.Array",
                           values: "pa.Array", schema: "pa.Schema") -> "pa.RecordBatch":
    """The batch of these rows, with the topic and partition columns added (cached when small)."""
    n = len(offsets)
    constant = _constant_columns.get((topic, partition, n))
    if constant is None:
        constant = (_topic_column(topic, n), _partition_column(partition, n))
        if n <= _CONSTANT_ROWS:
            if len(_constant_columns) >= _CONSTANT_CACHE_SIZE:
                _constant_columns.clear()
            _constant_columns[(topic, partition, n)] = constant
    return pa.RecordBatch.from_arrays([constant[0], constant[1], offsets, keys, values], schema=schema)


#: ``(topic, partition, rows)`` -> the topic and partition columns of a batch of that many rows, for
#: small batches (at most :data:`_CONSTANT_ROWS` rows: a live stream's, often one row each), whose
#: cost is mostly building these two arrays. Arrow arrays are immutable, so batches share them.
#: Bounded: cleared when it holds :data:`_CONSTANT_CACHE_SIZE` entries.
_constant_columns: Dict[Tuple[str, int, int], Tuple["pa.Array", "pa.Array"]] = {}
_CONSTANT_ROWS = 16
_CONSTANT_CACHE_SIZE = 1024


#: ``topic`` -> (rows, int32 offsets buffer, data buffer) of a column repeating it, reused for any
#: batch of at most ``rows`` rows. Bounded: cleared when it holds :data:`_TOPIC_CACHE_SIZE` topics.
_topic_buffers: Dict[str, Tuple[int, "pa.Buffer", "pa.Buffer"]] = {}
_TOPIC_CACHE_SIZE = 64
_INT32_MAX = (1 << 31) - 1


def _topic_column(topic: str, n: int) -> "pa.Array":
    """``n`` times ``topic`` as a string array, built from buffers.

    Not ``pa.repeat(pa.scalar(topic))``: ``pa.scalar`` (and ``pa.array``) import pandas
    on first use when it is installed, inside the first batch (the documentation's
    *Performance* page has the cost); ``from_buffers`` does not.
    """
    cached = _topic_buffers.get(topic)
    if cached is None or cached[0] < n:
        data = topic.encode("utf-8")
        rows = max(n, 2 * cached[0] if cached is not None else 1024)
        if (rows + 1) * len(data) > _INT32_MAX:
            rows = n
            if (rows + 1) * len(data) > _INT32_MAX:  # beyond a string array's int32 offsets anyway
                return pa.repeat(pa.scalar(topic, pa.string()), n)
        offsets = array("i", range(0, (rows + 1) * len(data), len(data))) if data else array("i", [0]) * (rows + 1)
        if len(_topic_buffers) >= _TOPIC_CACHE_SIZE:
            _topic_buffers.clear()
        cached = (rows, pa.py_buffer(offsets), pa.py_buffer(data * rows))
        _topic_buffers[topic] = cached
    return pa.Array.from_buffers(pa.string(), n, [None, cached[1], cached[2]], null_count=0)


def _partition_column(partition: int, n: int) -> "pa.Array":
    """``n`` times ``partition`` as an int32 array (no ``pa.scalar``: see :func:`_topic_column`)."""
    return pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(array("i", [partition]) * n)], null_count=0)


def _block_columns(block: Any) -> Any:
    """The offset, key and value arrays of a MessageBlock, wrapping its buffers (no copy).

    Through ``block.buffers()``: the arrays then keep the block alive rather than its
    ``bytes`` objects, so the C decoder recycles those once the arrays are gone (fresh
    buffers cost a page fault per 4 KB; see ``release_bytes`` in ``_speedups_block.c``).
    """
    n = len(block)
    offsets, key_validity, key_offsets, key_data, value_validity, value_offsets, value_data = block.buffers()
    offsets = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets)], null_count=0)
    keys = _binary(n, key_validity, key_offsets, key_data, block.key_null_count)
    values = _binary(n, value_validity, value_offsets, value_data, block.value_null_count)
    return offsets, keys, values


def _binary(n: int, validity: Any, offsets: Any, data: Any, nulls: int) -> "pa.Array":
    buffers = [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.binary(), n, buffers, null_count=nulls)


def value_bytes(batch: "pa.RecordBatch") -> int:
    """Total length of the ``value`` column (what Kafka's ConsumerPerformance counts as data)."""
    values = batch.column(4)
    if len(values) == 0:
        return 0
    offsets = memoryview(values.buffers()[1]).cast("i")  # int32 value offsets; the array may be a slice
    return int(offsets[values.offset + len(values)] - offsets[values.offset])
