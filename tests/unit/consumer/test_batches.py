"""KafkaStream.batches(): Arrow record batches with the iterator's semantics, and the per-message hand-out under races.

Chunks are what fetchers queue: the decoder's output for a message set built by
kafka-python (a MessageBlock with the C extension, a list without), so the
batch columns are compared with kafka-python's own decoding of the same bytes.
"""

from __future__ import annotations

import gc
import random
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import pytest
from kafka.record import MemoryRecords
from kafka.record.legacy_records import LegacyRecordBatchBuilder

import zkconsumer.consumer
from zkconsumer.consumer.stream import KafkaStream
from zkconsumer.errors import ConsumerTimeoutError, CorruptMessageError
from zkconsumer.fetch.handoff import ChunkQueue, FetchedDataChunk, PartitionTopicInfo
from zkconsumer.wire.messageset import ACCELERATED, decode_message_set

pa = pytest.importorskip("pyarrow")

GZIP, SNAPPY, LZ4 = 1, 2, 3
Msg = Tuple[int, Optional[bytes], Optional[bytes]]


pytestmark = pytest.mark.usefixtures("old_kafka_lz4")


def never() -> bool:
    return False


def message_set(magic: int, codec: int, msgs: Sequence[Msg]) -> bytes:
    if not codec:
        parts = []
        for offset, key, value in msgs:
            b = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 30)
            b.append(offset, 1_600_000_000_000 if magic else None, key, value)
            parts.append(bytes(b.build()))
        return b"".join(parts)
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 30)
    for i, (offset, key, value) in enumerate(msgs):
        b.append(i if magic else offset, 1_600_000_000_000 if magic else None, key, value)
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, msgs[-1][0])
    return bytes(buf)


def kafka_python(data: bytes) -> List[Msg]:
    records, out = MemoryRecords(data), []
    while True:
        batch = records.next_batch()
        if batch is None:
            return out
        out.extend((r.offset, r.key, r.value) for r in batch)


def msgs(n: int, start: int = 0) -> List[Msg]:
    return [(start + i, None if i % 3 == 0 else b"k%d" % i, None if i % 7 == 6 else b"v%d" % i * (i % 5))
            for i in range(n)]


def setup(offset: int = 0, capacity: int = 8, timeout_ms: int = 50, topic: str = "t", partition: int = 0):
    queue = ChunkQueue(capacity)
    info = PartitionTopicInfo(topic, partition, queue, offset=offset, fetch_size=1 << 20)
    return queue, info, KafkaStream(queue, timeout_ms)


def enqueue(info: PartitionTopicInfo, data: bytes) -> None:
    fetch_offset = info.fetched_offset
    decoded = decode_message_set(data, info.topic, info.partition, fetch_offset)
    assert info.enqueue(fetch_offset, decoded.messages, never)


def rows(batch) -> List[Msg]:
    return list(zip(*(batch.column(c).to_pylist() for c in ("offset", "key", "value"))))


# --------------------------------------------------------------------------- contents

@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, GZIP, SNAPPY, LZ4], ids=["plain", "gzip", "snappy", "lz4"])
def test_batches_hold_exactly_what_kafka_python_decodes(magic: int, codec: int) -> None:
    queue, info, stream = setup()
    data = message_set(magic, codec, msgs(40))
    enqueue(info, data)
    queue.put_shutdown()
    batches = list(stream.batches())
    assert len(batches) == 1
    batch = batches[0]
    assert batch.schema.names == ["topic", "partition", "offset", "key", "value"]
    assert [f.type for f in batch.schema] == [pa.string(), pa.int32(), pa.int64(), pa.binary(), pa.binary()]
    assert rows(batch) == kafka_python(data) == msgs(40)
    assert set(batch.column("topic").to_pylist()) == {"t"} and set(batch.column("partition").to_pylist()) == {0}
    batch.validate(full=True)


def test_random_sets_batch_like_kafka_python() -> None:
    rng = random.Random(3)
    queue, info, stream = setup()
    expected: List[Msg] = []
    for _ in range(6):
        start = info.fetched_offset
        chunk = [(start + i, rng.choice([None, b"", rng.randbytes(5)]), rng.choice([None, b"", rng.randbytes(300)]))
                 for i in range(rng.randrange(1, 50))]
        data = message_set(rng.choice([0, 1]), rng.choice([0, 0, GZIP, SNAPPY]), chunk)
        enqueue(info, data)
        expected.extend(kafka_python(data))
    queue.put_shutdown()
    got = [row for batch in stream.batches() for row in rows(batch)]
    assert got == expected


def test_batches_and_iteration_hand_out_the_same_messages() -> None:
    data = message_set(1, GZIP, msgs(30, start=100)) + message_set(0, 0, msgs(5, start=130))
    q1, i1, s1 = setup(offset=100)
    q2, i2, s2 = setup(offset=100)
    for info, queue in ((i1, q1), (i2, q2)):
        enqueue(info, data)
        queue.put_shutdown()
    by_message = [(m.offset, m.key, m.message) for m in s1]
    by_batch = [row for batch in s2.batches() for row in rows(batch)]
    assert by_message == by_batch == msgs(30, start=100) + msgs(5, start=130)
    assert s1.delivered == s2.delivered


def test_a_list_chunk_works_too() -> None:
    queue, info, stream = setup(offset=10)
    assert info.enqueue(10, [(10, b"k", b"a"), (11, None, None)], never)
    queue.put_shutdown()
    assert [rows(b) for b in stream.batches()] == [[(10, b"k", b"a"), (11, None, None)]]


# --------------------------------------------------------------------------- offsets and counters

def test_a_batch_is_handed_out_when_yielded() -> None:
    queue, info, stream = setup(offset=5)
    enqueue(info, message_set(0, 0, msgs(10, start=5)))
    gen = stream.batches()
    assert info.consumed_offset == 5 and stream.delivered == (0, 0)
    batch = next(gen)
    assert batch.num_rows == 10 and info.consumed_offset == 15
    payload = sum(len(k or b"") + len(v or b"") for _, k, v in msgs(10, start=5))
    assert stream.delivered == (10, payload)


def test_messages_below_the_consumed_offset_are_left_out() -> None:
    queue, info, stream = setup(offset=0)
    data = message_set(0, 0, msgs(10))
    enqueue(info, data)
    it = iter(stream)
    assert [next(it).offset for _ in range(3)] == [0, 1, 2]
    # the same range fetched again (a re-homed partition) after the iterator handed out 0..5
    assert [next(it).offset for _ in range(3)] == [3, 4, 5]
    queue.put(FetchedDataChunk(info, 0, decode_message_set(data, "t", 0, 0).messages), never)
    queue.put_shutdown()
    got = [row[0] for batch in stream.batches() for row in rows(batch)]
    assert got == [6, 7, 8, 9]
    assert info.consumed_offset == 10 and stream.delivered[0] == 10


def test_max_rows_splits_a_chunk_and_each_part_commits_its_own_offsets() -> None:
    queue, info, stream = setup(offset=0)
    enqueue(info, message_set(1, SNAPPY, msgs(10)))
    gen = stream.batches(max_rows=4)
    sizes = []
    for expected_consumed in (4, 8, 10):
        sizes.append(next(gen).num_rows)
        assert info.consumed_offset == expected_consumed
    assert sizes == [4, 4, 2]
    with pytest.raises(ValueError):
        stream.batches(max_rows=0)


def test_iteration_after_a_partial_batch_continues_where_the_batch_ended() -> None:
    queue, info, stream = setup(offset=0)
    enqueue(info, message_set(0, 0, msgs(6)))
    assert next(stream.batches(max_rows=2)).num_rows == 2
    queue.put_shutdown()
    assert [m.offset for m in stream] == [2, 3, 4, 5]


def test_a_fetch_offset_jump_is_followed() -> None:
    queue, info, stream = setup(offset=0)
    # auto.offset.reset moved the fetch position on: the chunk starts past consumed_offset
    queue.put(FetchedDataChunk(info, 50, decode_message_set(message_set(0, 0, msgs(3, start=50)), "t", 0, 50).messages),
              never)
    queue.put_shutdown()
    assert [rows(b)[0][0] for b in stream.batches()] == [50] and info.consumed_offset == 53


# --------------------------------------------------------------------------- errors, timeouts, shutdown, clear

def test_an_error_chunk_is_raised_after_the_batches_before_it() -> None:
    queue, info, stream = setup(offset=0)
    enqueue(info, message_set(0, 0, msgs(3)))
    info.enqueue_error(3, CorruptMessageError("t", 0, 3, "CRC mismatch"), never)
    gen = stream.batches()
    assert next(gen).num_rows == 3
    with pytest.raises(CorruptMessageError, match="offset 3"):
        next(gen)


def test_timeout_raises_and_a_new_batches_call_goes_on() -> None:
    queue, info, stream = setup(offset=0, timeout_ms=30)
    with pytest.raises(ConsumerTimeoutError):
        next(stream.batches())
    enqueue(info, message_set(0, 0, msgs(2)))
    assert next(stream.batches()).num_rows == 2


def test_shutdown_ends_batches_for_good() -> None:
    queue, info, stream = setup(offset=0, timeout_ms=-1)
    enqueue(info, message_set(0, 0, msgs(2)))
    queue.put_shutdown()
    assert [b.num_rows for b in stream.batches()] == [2]
    assert list(stream.batches()) == [] and list(stream) == []


def test_clear_drops_the_rest_of_a_split_chunk() -> None:
    queue, info, stream = setup(offset=0, timeout_ms=30)
    enqueue(info, message_set(0, 0, msgs(10)))
    assert next(stream.batches(max_rows=3)).num_rows == 3
    queue.clear()
    stream.clear()
    with pytest.raises(ConsumerTimeoutError):
        next(stream.batches())
    assert info.consumed_offset == 3


def test_a_stale_chunk_is_dropped() -> None:
    queue, info, stream = setup(offset=0, timeout_ms=30)
    enqueue(info, message_set(0, 0, msgs(2)))
    chunk = queue.get(0)
    queue.clear()  # a rebalance: the chunk taken before it is stale
    queue.put(chunk, never)
    chunk.epoch -= 1  # (put stamped the current epoch; make it the old one again)
    with pytest.raises(ConsumerTimeoutError):
        next(stream.batches())
    assert info.consumed_offset == 0


def test_batches_without_pyarrow_raise_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, stream = setup()
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.delitem(sys.modules, "zkconsumer.consumer.arrow", raising=False)
    monkeypatch.delattr(zkconsumer.consumer, "arrow", raising=False)
    with pytest.raises(ImportError, match="pyarrow"):
        stream.batches()


# --------------------------------------------------------------------------- the hand-out under races

@pytest.mark.skipif(not ACCELERATED, reason="the lock-free hand-out is the C extension's")
def test_a_clear_that_runs_inside_the_hand_out_wins() -> None:
    """A collection inside the C ``__next__`` (its first tracked allocation is the message tuple, made
    before the hand-out) runs a finalizer that clears the stream, as a rebalancer thread switched in
    right there would: that message must not be handed out, and nothing else of the chunk either.
    The first message is kept, so the next one is a new tuple rather than the first one recycled."""
    queue, info, stream = setup(offset=0, timeout_ms=30)
    enqueue(info, message_set(0, 0, msgs(3)))
    it = iter(stream)
    first = next(it)
    assert first.offset == 0

    class ClearsTheStream:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            stream.clear()

    threshold = gc.get_threshold()
    handed_out = []
    gc.collect()
    gc.disable()
    try:
        gc.set_threshold(1)
        keep = [[] for _ in range(10)]  # pending tracked allocations: the next one collects
        ClearsTheStream()
        gc.enable()  # nothing may allocate between here and the collection inside next()
        try:
            handed_out.append(next(it))
        except ConsumerTimeoutError:
            pass
    finally:
        gc.enable()
        gc.set_threshold(*threshold)
    del keep
    assert handed_out == []
    assert info.consumed_offset == 1 and stream.delivered[0] == 1


class _Cyclic:
    """Cyclic garbage whose finalizer releases the GIL: a collection triggered by an allocation
    inside the iterator's C hand-out then lets the rebalancer thread in right there."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        time.sleep(0)


def test_no_message_of_a_cleared_chunk_is_handed_out_after_the_commit() -> None:
    """A rebalancer clears and commits, hundreds of times, while the iterator runs flat out.

    For each cycle (a new PartitionTopicInfo, as after a real rebalance) the
    offsets handed out must be exactly ``range(committed)``, where
    ``committed`` is what the rebalancer read right after clear(): nothing
    handed out after the commit, nothing twice, nothing skipped. The
    rebalancer wakes at a random moment and, with a 1 ms switch interval, does
    clear-then-commit while the iterator is stopped wherever it was.
    """
    old_interval = sys.getswitchinterval()
    old_threshold = gc.get_threshold()
    sys.setswitchinterval(1e-3)
    gc.set_threshold(100, 5, 5)
    cycles, per_chunk, chunks = 200, 500, 4
    try:
        queue = ChunkQueue(chunks)
        stream = KafkaStream(queue, -1)
        got: List[Tuple[int, int]] = []
        committed = {}

        def consume() -> None:
            append = got.append
            for i, m in enumerate(stream):
                append((m.partition, m.offset))
                if i % 20 == 0:
                    _Cyclic()

        def rebalance(rng: random.Random) -> None:
            for cycle in range(cycles):
                info = PartitionTopicInfo("t", cycle, queue, offset=0, fetch_size=1 << 20)
                for start in range(0, per_chunk * chunks, per_chunk):
                    enqueue(info, message_set(0, 0, [(o, None, b"x") for o in range(start, start + per_chunk)]))
                time.sleep(rng.uniform(0, 0.002))
                queue.clear()  # the rebalancer: clear the queue, clear the stream, commit
                stream.clear()
                committed[cycle] = info.consumed_offset
            queue.put_shutdown()

        consumer = threading.Thread(target=consume)
        rebalancer = threading.Thread(target=rebalance, args=(random.Random(5),))
        consumer.start()
        rebalancer.start()
        rebalancer.join(120)
        consumer.join(60)
        assert not consumer.is_alive() and not rebalancer.is_alive()
        cut = 0
        for cycle in range(cycles):
            offsets = [o for p, o in got if p == cycle]
            assert offsets == list(range(committed[cycle])), (cycle, committed[cycle], offsets[-3:])
            cut += committed[cycle] < per_chunk * chunks
        assert cut > cycles // 4  # most clears did interrupt the iterator
    finally:
        sys.setswitchinterval(old_interval)
        gc.set_threshold(*old_threshold)


def test_topic_and_partition_columns_fit_every_batch_size() -> None:
    """The repeated topic/partition columns (built from cached buffers) are right for any row count."""
    from zkconsumer.consumer import arrow

    arrow._topic_buffers.clear()
    rows = [(i, None, b"v") for i in range(5000)]
    for n in (1, 3, 1024, 1025, 5000, 17):
        for topic in ("t", "a-longer-topic-name", "ü"):
            batch = arrow.record_batch(topic, 7, rows[:n], schema=arrow.NOT_NULL_SCHEMA)
            batch.validate(full=True)
            assert batch.column("topic").to_pylist() == [topic] * n
            assert batch.column("partition").to_pylist() == [7] * n
    assert len(arrow._topic_buffers) == 3


def test_record_batches_do_not_import_pandas() -> None:
    """pa.scalar/pa.array import pandas on first use (a third of a second in the first batch); the block path avoids them."""
    code = ("import sys; from zkconsumer.consumer import arrow; from zkconsumer.wire.messageset import decode_message_set; "
            "from kafka.record.legacy_records import LegacyRecordBatchBuilder as B; b = B(0, 0, 1 << 20); "
            "[b.append(i, None, None, b'v') for i in range(10)]; "
            "m = decode_message_set(bytes(b.build()), 't', 0, 0).messages; "
            "arrow.record_batch('t', 0, m, 2, 8).validate(full=True); print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(Path(zkconsumer.__file__).parent.parent))
    assert out.stdout.strip() == ("False" if ACCELERATED else out.stdout.strip())


@pytest.mark.skipif(not ACCELERATED, reason="needs the C extension")
def test_a_batch_keeps_its_block_and_its_bytes_while_blocks_are_recycled() -> None:
    """Arrow arrays hold the block (block.buffers()), so its buffers are recycled only after the batch is gone."""
    from zkconsumer.consumer import arrow

    def big(seed: int) -> bytes:
        b = LegacyRecordBatchBuilder(magic=0, compression_type=0, batch_size=1 << 22)
        for i in range(70):
            b.append(i, None, None, bytes([seed]) * 1000 + b"%d" % i)
        return bytes(b.build())

    block = decode_message_set(big(1), "t", 0, 0).messages
    batch = arrow.record_batch("t", 0, block, 0, len(block))
    value_buffer = block.value_data
    del block, value_buffer
    for seed in range(2, 14):  # more same-sized blocks than the decoder keeps buffers for
        other = decode_message_set(big(seed), "t", 0, 0).messages
        assert other[0][2] == bytes([seed]) * 1000 + b"0"
        del other
    assert batch.column("value").to_pylist() == [b"\x01" * 1000 + b"%d" % i for i in range(70)]
    assert arrow.value_bytes(batch) == sum(1000 + len(b"%d" % i) for i in range(70))
    views = decode_message_set(big(1), "t", 0, 0).messages.buffers()
    assert views[4] is None  # no null value: no value bitmap, as block.value_validity
    assert bytes(memoryview(views[6]))[:1000] == b"\x01" * 1000


# --------------------------------------------------------------------------- recycled messages

def test_recycled_messages_and_values_read_like_new_ones() -> None:
    """The C iterator refills a dropped message, and its equal-sized key and value, in place: each
    message still reads (and hashes) as its own, and whatever the application keeps never changes."""
    data = [(i, b"k%04d" % (i % 3), b"value-%06d" % i) for i in range(300)]
    queue, info, stream = setup(offset=0)
    enqueue(info, message_set(0, 0, data))
    kept_messages, kept_values, hashes = [], [], {}
    for m in stream:
        assert (m.offset, m.key, m.message) == data[m.offset]
        fresh = (m.topic, m.partition, m.offset, bytes(bytearray(m.key)), bytes(bytearray(m.message)))
        assert hash(m.message) == hash(fresh[4]) and hash(m) == hash(fresh)
        if m.offset % 10 == 0:
            kept_messages.append(m)
        elif m.offset % 10 == 5:
            kept_values.append(m.message)
            hashes[m.message] = m.offset  # caches the value's hash
        if m.offset == len(data) - 1:
            break
    assert [(m.offset, m.key, m.message) for m in kept_messages] == data[::10]
    assert kept_values == [v for o, _, v in data if o % 10 == 5]
    assert all(hashes[v] == int(v[6:]) for v in kept_values)
