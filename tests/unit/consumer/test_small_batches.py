"""Small record batches built in C (``_speedups.arrow_batch``, through Arrow's C data interface).

``arrow.block_rows`` (which ``arrow.record_batch`` calls for a MessageBlock) hands the rows to C
when a batch has at most ``arrow._CONSTANT_ROWS`` rows (a live stream's batches). What it returns must be the batch the
Python path builds, row for row and null for null, for either schema and any slice; it must keep
the block's buffers alive for as long as any of its arrays lives, whichever thread drops them last;
and it must give every reference and byte back when it goes, or when Arrow refuses it.
"""

from __future__ import annotations

import ctypes
import gc
import random
import sys
import threading
import tracemalloc
from typing import List, Optional, Tuple

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from zkconsumer.wire.messageset import ACCELERATED, decode_message_set

pa = pytest.importorskip("pyarrow")
pytestmark = pytest.mark.skipif(not ACCELERATED, reason="needs the C extension")

Msg = Tuple[int, Optional[bytes], Optional[bytes]]


def block_of(msgs: List[Msg]):
    data = b""
    for offset, key, value in msgs:
        b = LegacyRecordBatchBuilder(magic=0, compression_type=0, batch_size=1 << 30)
        b.append(offset, None, key, value)
        data += bytes(b.build())
    return decode_message_set(data, "t", 0, msgs[0][0]).messages


def random_msgs(rng: random.Random, n: int) -> List[Msg]:
    def field(null_share: float) -> Optional[bytes]:
        return None if rng.random() < null_share else bytes(rng.randrange(256) for _ in range(rng.randrange(12)))
    key_nulls, value_nulls = rng.choice([0.0, 0.3, 1.0]), rng.choice([0.0, 0.2, 1.0])
    return [(1000 + i, field(key_nulls), field(value_nulls)) for i in range(n)]


def test_a_small_batch_from_c_is_the_batch_python_builds() -> None:
    from zkconsumer.consumer import arrow

    rng = random.Random(44)
    for _ in range(40):
        msgs = random_msgs(rng, rng.randrange(1, 20))
        block = block_of(msgs)
        for schema in (arrow.SCHEMA, arrow.NOT_NULL_SCHEMA):
            for start in range(len(msgs) + 1):
                for stop in range(start, min(len(msgs), start + arrow._CONSTANT_ROWS) + 1):
                    topic = rng.choice(["t", "", "ü-topic", "a" * 200])
                    got = arrow.record_batch(topic, 2**31 - 1, block, start, stop, schema=schema)
                    want = arrow.record_batch(topic, 2**31 - 1, msgs, start, stop, schema=schema)
                    got.validate(full=True)
                    assert got.schema.equals(schema)
                    assert got.equals(want), (start, stop, got.to_pylist(), want.to_pylist())
                    assert arrow.value_bytes(got) == sum(len(v or b"") for _, _, v in msgs[start:stop])
                    assert got.column("key").null_count == sum(k is None for _, k, _ in msgs[start:stop])


@pytest.mark.parametrize("c_builder", [True, False], ids=["c-builder", "arrays"])
def test_block_rows_is_record_batch_for_every_slice_of_a_block(c_builder: bool,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream's hand-out calls ``block_rows`` (no argument checks): the same batch, small or large,
    with the C builder or without it (an extension built before it, or a pyarrow without its importer)."""
    from zkconsumer.consumer import arrow

    if not c_builder:
        monkeypatch.setattr(arrow, "_arrow_batch", None)
    rng = random.Random(4444)
    for _ in range(20):
        msgs = random_msgs(rng, rng.randrange(1, 2 * arrow._CONSTANT_ROWS + 3))
        block = block_of(msgs)
        for schema in (arrow.SCHEMA, arrow.NOT_NULL_SCHEMA):
            for start in range(len(msgs)):
                stop = rng.randrange(start + 1, len(msgs) + 1)
                got = arrow.block_rows("tp", 7, block, start, stop, schema)
                got.validate(full=True)
                assert got.schema.equals(schema)
                assert got.equals(arrow.record_batch("tp", 7, msgs, start, stop, schema)), (start, stop)


def test_the_c_path_is_the_one_taken_for_small_batches_only() -> None:
    from zkconsumer.consumer import arrow

    block = block_of([(i, None, b"v") for i in range(arrow._CONSTANT_ROWS + 1)])
    small = arrow.record_batch("t", 0, block, 0, arrow._CONSTANT_ROWS)
    large = arrow.record_batch("t", 0, block, 0, arrow._CONSTANT_ROWS + 1)
    assert small.column("offset").offset == 0 and large.num_rows == arrow._CONSTANT_ROWS + 1
    before = sys.getrefcount(block)
    third = arrow.record_batch("t", 0, block, 1, 2)
    assert third.column("value").offset == 1  # the block's own buffer, its array offset at the row
    assert sys.getrefcount(block) == before + 1  # the C path holds the block itself, once per batch
    del third
    assert sys.getrefcount(block) == before


def test_a_batch_keeps_its_block_alive_and_lets_it_go_with_its_last_array() -> None:
    from zkconsumer.consumer import arrow

    block = block_of([(5, b"k", b"v" * 1000), (6, None, b"w" * 1000)])
    before = sys.getrefcount(block)
    batch = arrow.record_batch("t", 3, block, 0, 2)
    column = batch.column("value")
    del batch
    gc.collect()
    assert sys.getrefcount(block) == before + 1  # the column alone still holds the batch's memory
    for _ in range(12):  # other blocks decoded (and recycled) meanwhile do not touch it
        assert block_of([(5, b"k", b"x" * 1000), (6, None, b"y" * 1000)])[0][2] == b"x" * 1000
    assert column.to_pylist() == [b"v" * 1000, b"w" * 1000]
    del column
    gc.collect()
    assert sys.getrefcount(block) == before


def test_a_batch_dropped_by_another_thread_or_by_arrow_releases_everything() -> None:
    from zkconsumer.consumer import arrow

    block = block_of([(i, b"k%d" % i, b"v%d" % i) for i in range(8)])
    before = sys.getrefcount(block)
    batches = [arrow.record_batch("t", 1, block, i, i + 1) for i in range(8)]
    table = pa.Table.from_batches(batches)
    del batches
    assert sys.getrefcount(block) == before + 8
    combined = table.combine_chunks()  # Arrow's own copies, then the originals dropped in its threads
    done = threading.Event()

    def drop() -> None:
        nonlocal table
        del table
        done.set()
    threading.Thread(target=drop).start()
    assert done.wait(10)
    gc.collect()
    assert sys.getrefcount(block) == before
    assert combined.column("value").to_pylist() == [b"v%d" % i for i in range(8)]


def test_small_batches_leak_nothing_and_a_refused_one_gives_its_block_back() -> None:
    from zkconsumer.consumer import arrow
    from zkconsumer.wire import _speedups

    block = block_of([(i, None, b"v" * 100) for i in range(4)])
    before = sys.getrefcount(block)
    for _ in range(2000):
        arrow.record_batch("topic", 0, block, 1, 3)
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for _ in range(20000):
            assert arrow.record_batch("topic", 0, block, 1, 3).num_rows == 2
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, grown
    with pytest.raises(pa.ArrowInvalid, match="5 children"):
        _speedups.arrow_batch(block, "t", 0, 0, 1, pa.RecordBatch._import_from_c,
                              pa.schema([pa.field("a", pa.int64())]))
    with pytest.raises(IndexError, match=r"rows \[2, 9\) of a block of 4"):
        _speedups.arrow_batch(block, "t", 0, 2, 9, pa.RecordBatch._import_from_c, arrow.SCHEMA)
    with pytest.raises(OverflowError, match="partition"):
        _speedups.arrow_batch(block, "t", 2**31, 0, 1, pa.RecordBatch._import_from_c, arrow.SCHEMA)
    gc.collect()
    assert sys.getrefcount(block) == before


class _ArrowArray(ctypes.Structure):
    """The C data interface's ArrowArray, for a test that is its own consumer."""


_Release = ctypes.CFUNCTYPE(None, ctypes.POINTER(_ArrowArray))
_ArrowArray._fields_ = [
    ("length", ctypes.c_int64), ("null_count", ctypes.c_int64), ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64), ("n_children", ctypes.c_int64), ("buffers", ctypes.c_void_p),
    ("children", ctypes.POINTER(ctypes.POINTER(_ArrowArray))), ("dictionary", ctypes.c_void_p),
    ("release", ctypes.c_void_p), ("private_data", ctypes.c_void_p),
]


def test_a_child_moved_out_keeps_the_block_until_it_is_released_from_another_thread() -> None:
    """The interface lets a consumer move a child out and release it apart from its parent, from any thread:
    the parent's release leaves that child's memory (and the block) alone, and the child's release, last,
    gives everything back."""
    from zkconsumer.consumer import arrow
    from zkconsumer.wire import _speedups

    block = block_of([(7, b"key", b"value"), (8, None, b"other")])
    before = sys.getrefcount(block)
    parent, moved = _ArrowArray(), _ArrowArray()

    def take(address: int, schema: object) -> None:  # moves the parent out, then its value child
        ctypes.memmove(ctypes.addressof(parent), address, ctypes.sizeof(_ArrowArray))
        ctypes.cast(address, ctypes.POINTER(_ArrowArray)).contents.release = None
        value = parent.children[4].contents
        ctypes.memmove(ctypes.addressof(moved), ctypes.addressof(value), ctypes.sizeof(_ArrowArray))
        value.release = None

    _speedups.arrow_batch(block, "t", 2, 0, 2, take, arrow.SCHEMA)
    assert sys.getrefcount(block) == before + 1
    _Release(parent.release)(ctypes.pointer(parent))
    assert parent.release is None
    assert sys.getrefcount(block) == before + 1  # the moved child still holds the batch's memory
    buffers = ctypes.cast(moved.buffers, ctypes.POINTER(ctypes.c_void_p))
    offsets = ctypes.cast(buffers[1], ctypes.POINTER(ctypes.c_int32))
    assert ctypes.string_at(buffers[2] + offsets[0], offsets[2] - offsets[0]) == b"valueother"
    released = threading.Thread(target=lambda: _Release(moved.release)(ctypes.pointer(moved)))
    released.start()
    released.join(10)
    assert not released.is_alive() and moved.release is None
    assert sys.getrefcount(block) == before
