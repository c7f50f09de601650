"""The fast decoder (C extension) against kafka-python's MemoryRecords and the pure-Python reference.

Every message set here is built by kafka-python's own builder (plus a broker's
wrapper offset), decoded by ``decode_message_set`` (the C path when the
extension is built), by ``decode_message_set_python`` and by kafka-python's
``MemoryRecords`` (what its consumer uses), and the three must agree exactly:
offsets, keys, values (bytes or None), ``valid_bytes``, ``next_offset``,
``too_large``, and for broken sets the same error at the same offset.
"""

from __future__ import annotations

import gzip
import random
import struct
import zlib
from typing import List, Optional, Sequence, Tuple

import pytest
from kafka.record import MemoryRecords
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from zkconsumer.errors import CorruptMessageError
from zkconsumer.wire import messageset
from zkconsumer.wire.messageset import ACCELERATED, decode_message_set, decode_message_set_python

GZIP, SNAPPY, LZ4 = 1, 2, 3
Msg = Tuple[int, Optional[bytes], Optional[bytes]]

needs_c = pytest.mark.skipif(not ACCELERATED, reason="the C extension zkconsumer.wire._speedups is not built")


pytestmark = pytest.mark.usefixtures("old_kafka_lz4")


# --------------------------------------------------------------------------- building sets

def plain(magic: int, msgs: Sequence[Msg]) -> bytes:
    out = []
    for offset, key, value in msgs:
        b = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 30)
        b.append(offset, 1_600_000_000_000 + offset if magic else None, key, value)
        out.append(bytes(b.build()))
    return b"".join(out)


def wrapped(magic: int, codec: int, msgs: Sequence[Msg]) -> bytes:
    """A compressed wrapper as a broker stores it (inner offsets absolute for magic 0, relative for 1)."""
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 30)
    for i, (offset, key, value) in enumerate(msgs):
        b.append(i if magic else offset, 1_600_000_000_000 if magic else None, key, value)
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, msgs[-1][0])
    return bytes(buf)


def random_messages(rng: random.Random, n: int, start: int) -> List[Msg]:
    out = []
    for i in range(n):
        key = rng.choice([None, b"", bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 20)))])
        value = rng.choice([None, b"", rng.randbytes(rng.choice([1, 7, 100, 1000, 5000]))])
        out.append((start + i, key, value))
    return out


def random_set(rng: random.Random, magic: int, codecs: Sequence[int]) -> Tuple[bytes, List[Msg]]:
    """A set of plain entries and wrappers with occasional offset gaps (as after compaction)."""
    parts, msgs, offset = [], [], rng.randrange(0, 1 << 40)
    for _ in range(rng.randrange(1, 8)):
        codec = rng.choice(list(codecs))
        batch = random_messages(rng, rng.randrange(1, 12), offset)
        parts.append(wrapped(magic, codec, batch) if codec else plain(magic, batch))
        msgs.extend(batch)
        offset = batch[-1][0] + 1 + rng.choice([0, 0, 0, 3])
    return b"".join(parts), msgs


def kafka_python(data: bytes, fetch_offset: int) -> List[Msg]:
    """kafka-python's consumer-side decoding: MemoryRecords, CRC checked, below-fetch-offset dropped."""
    records = MemoryRecords(data)
    out: List[Msg] = []
    while True:
        batch = records.next_batch()
        if batch is None:
            return out
        for record in batch:
            assert record.validate_crc()
            if record.offset >= fetch_offset:
                out.append((record.offset, record.key, record.value))


def check_all_agree(data: bytes, fetch_offset: int) -> messageset.DecodedMessageSet:
    fast = decode_message_set(data, "t", 0, fetch_offset)
    slow = decode_message_set_python(data, "t", 0, fetch_offset)
    expected = kafka_python(data, fetch_offset)
    assert list(fast.messages) == expected
    assert fast.messages == expected == slow.messages
    assert (fast.valid_bytes, fast.size, fast.next_offset, fast.too_large) == \
           (slow.valid_bytes, slow.size, slow.next_offset, slow.too_large)
    for _, key, value in fast.messages:
        assert type(key) in (bytes, type(None)) and type(value) in (bytes, type(None))
    return fast


# --------------------------------------------------------------------------- agreement

@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codecs", [(0,), (GZIP,), (SNAPPY,), (LZ4,), (0, GZIP, SNAPPY, LZ4)],
                         ids=["plain", "gzip", "snappy", "lz4", "mixed"])
def test_random_sets_decode_like_kafka_python(magic: int, codecs: Tuple[int, ...]) -> None:
    rng = random.Random(f"{magic}-{codecs}")
    for _ in range(25):
        data, msgs = random_set(rng, magic, codecs)
        result = check_all_agree(data, 0)
        assert result.messages == msgs
        assert result.next_offset == msgs[-1][0] + 1 and result.valid_bytes == len(data)
        # every fetch offset inside the set, as after a restart or a mid-wrapper fetch
        for fetch_offset in sorted(rng.sample([m[0] for m in msgs], min(4, len(msgs)))) + [msgs[-1][0] + 1]:
            result = check_all_agree(data, fetch_offset)
            assert result.messages == [m for m in msgs if m[0] >= fetch_offset]


@pytest.mark.parametrize("magic", [0, 1])
def test_every_cut_of_the_tail_agrees(magic: int) -> None:
    rng = random.Random(magic)
    data, _ = random_set(rng, magic, (0, GZIP))
    for cut in range(0, len(data) + 1, max(1, len(data) // 300)):
        check_all_agree(data[:cut], 0)


def test_inputs_may_be_bytes_bytearray_or_views_into_a_larger_buffer() -> None:
    data, msgs = random_set(random.Random(7), 1, (0, SNAPPY))
    padded = b"\x00" * 13 + data + b"\x01" * 5
    for buf in (data, bytearray(data), memoryview(data), memoryview(padded)[13:13 + len(data)]):
        assert decode_message_set(buf, "t", 0, 0).messages == msgs


def test_a_full_fetch_of_small_messages() -> None:
    msgs = [(i, None, b"%0100d" % i) for i in range(8000)]
    data = plain(0, msgs)
    result = check_all_agree(data[:-40], 0)  # cut inside the last entry, as a broker does
    assert len(result.messages) == 7999 and result.next_offset == 7999


def test_large_keys_and_values() -> None:
    msgs = [(0, b"k" * 70_000, b"v" * 300_000), (1, None, b""), (2, b"", None), (3, b"\x00" * 3, b"\xff" * 65_537)]
    for magic in (0, 1):
        check_all_agree(plain(magic, msgs), 0)
        check_all_agree(wrapped(magic, GZIP, msgs), 0)


# --------------------------------------------------------------------------- broken sets

def outcome(decoder, data: bytes, fetch_offset: int):
    try:
        r = decoder(data, "t", 3, fetch_offset)
    except CorruptMessageError as exc:
        return type(exc).__name__, exc.offset, str(exc)
    return list(r.messages), r.valid_bytes, r.next_offset, r.too_large


def test_every_single_byte_corruption_gives_the_same_outcome_as_the_reference() -> None:
    """Flip each byte of a small mixed set in turn: the C and Python decoders fail (or not) identically."""
    data = (plain(0, [(0, b"k", b"a"), (1, None, b"bb")])
            + wrapped(0, GZIP, [(2, None, b"c"), (3, b"x", b"dd")])
            + plain(1, [(4, b"", b"e")])
            + wrapped(1, SNAPPY, [(5, None, b"f"), (6, None, None)]))
    seen_errors = 0
    for at in range(len(data)):
        broken = bytearray(data)
        broken[at] ^= 0x5A
        for fetch_offset in (0, 3):
            fast = outcome(decode_message_set, bytes(broken), fetch_offset)
            assert fast == outcome(decode_message_set_python, bytes(broken), fetch_offset), (at, fetch_offset)
            seen_errors += fast[0] == "CorruptMessageError"
    assert seen_errors > 50  # the flips did hit CRCs, sizes and lengths


def test_crc_mismatch_after_good_messages_returns_the_prefix() -> None:
    good = plain(1, [(0, None, b"a"), (1, b"k", b"b")])
    bad = bytearray(plain(1, [(2, None, b"c")]))
    bad[-1] ^= 1
    result = decode_message_set(good + bytes(bad), "t", 0, 0)
    assert result.messages == kafka_python(good, 0) == [(0, None, b"a"), (1, b"k", b"b")]
    assert outcome(decode_message_set, good + bytes(bad), 0) == outcome(decode_message_set_python, good + bytes(bad), 0)
    assert result.valid_bytes == len(good) and result.next_offset == 2
    with pytest.raises(CorruptMessageError, match="CRC"):
        decode_message_set(bytes(bad), "t", 0, 2)


def test_corrupt_inner_set_is_reported_at_the_wrapper() -> None:
    inner = plain(0, [(0, None, b"a"), (1, None, b"b")])
    payload = gzip.compress(inner[:-2])
    body = struct.pack(">bbii", 0, GZIP, -1, len(payload)) + payload
    entry = struct.pack(">qi", 1, len(body) + 4) + struct.pack(">I", zlib.crc32(body)) + body
    for decoder in (decode_message_set, decode_message_set_python):
        with pytest.raises(CorruptMessageError, match="inside compressed message") as info:
            decoder(entry, "t", 0, 0)
        assert info.value.offset == 1


# --------------------------------------------------------------------------- the C pieces

@needs_c
def test_crc32_matches_zlib_for_every_length_and_alignment() -> None:
    from zkconsumer.wire import _speedups

    rng = random.Random(1)
    blob = rng.randbytes(4096)
    for n in range(0, 2100):
        start = rng.randrange(0, 64)
        assert _speedups.crc32(blob[start:start + n]) == zlib.crc32(blob[start:start + n]), n
    assert _speedups.crc32(memoryview(blob)) == zlib.crc32(blob)


@needs_c
def test_message_block_is_a_read_only_sequence_with_arrow_buffers() -> None:
    msgs = [(10, None, b"a"), (11, b"k", None), (12, b"", b""), (13, b"kk", b"vvv")]
    block = decode_message_set(plain(1, msgs), "t", 0, 0).messages
    assert type(block) is messageset.MessageBlock
    assert len(block) == 4 and bool(block) and block[0] == msgs[0] and block[-1] == msgs[-1]
    assert block[1:3] == msgs[1:3] and block[::-1] == msgs[::-1] and list(block) == msgs
    assert block == msgs and block == tuple(msgs) and block != msgs[:3] and not (block != msgs)
    with pytest.raises(IndexError):
        block[4]
    with pytest.raises(TypeError):
        hash(block)
    assert (block.first_offset, block.last_offset, block.offset_at(-1)) == (10, 13, 13)
    assert [block.bisect(o) for o in (0, 10, 11, 13, 14)] == [0, 0, 1, 3, 4]
    assert block.payload_bytes() == 1 + 1 + 2 + 3 and block.payload_bytes(1, 3) == 1
    assert block.value_bytes() == 4 and block.value_bytes(3, 99) == 3
    assert struct.unpack("<4q", block.offsets) == (10, 11, 12, 13)
    assert struct.unpack("<5i", block.value_offsets) == (0, 1, 1, 1, 4) and block.value_data == b"avvv"
    assert struct.unpack("<5i", block.key_offsets) == (0, 0, 1, 1, 3) and block.key_data == b"kkk"
    assert (block.key_null_count, block.value_null_count) == (1, 1)
    assert block.key_validity[0] & 0x0F == 0b1110 and block.value_validity[0] & 0x0F == 0b1101
    empty = decode_message_set(b"", "t", 0, 0).messages
    assert len(empty) == 0 and not empty and empty == [] and empty.first_offset is None
    assert struct.unpack("<i", empty.value_offsets) == (0,)


@needs_c
def test_blocks_without_nulls_have_no_validity_bitmap() -> None:
    block = decode_message_set(plain(0, [(0, b"k", b"v"), (1, b"k2", b"v2")]), "t", 0, 0).messages
    assert block.key_validity is None and block.value_validity is None


@needs_c
def test_concat_joins_blocks_in_order() -> None:
    from zkconsumer.wire import _speedups

    a = decode_message_set(plain(0, [(0, None, b"a"), (1, b"k", None)]), "t", 0, 0).messages
    b = decode_message_set(plain(0, [(2, b"x", b"yy")]), "t", 0, 0).messages
    joined = _speedups.concat([a, b])
    assert joined == [(0, None, b"a"), (1, b"k", None), (2, b"x", b"yy")]
    assert joined.payload_bytes() == 1 + 1 + 1 + 2 and _speedups.concat([]) == []
    with pytest.raises(TypeError):
        _speedups.concat([a, [(3, None, None)]])


@needs_c
def test_message_blocks_cannot_be_made_directly() -> None:
    with pytest.raises(TypeError):
        messageset.MessageBlock()


def test_accelerated_flag_matches_the_decoder_in_use() -> None:
    result = decode_message_set(plain(0, [(0, None, b"a")]), "t", 0, 0)
    assert (type(result.messages) is not list) == ACCELERATED


# --------------------------------------------------------------------------- recycled block buffers

def _big_set(seed: int) -> bytes:
    """Set of 80 messages of 1000 bytes (a value buffer above the 64 KB the decoder recycles from)."""
    rnd = random.Random(seed)
    return plain(0, [(i, None, bytes(rnd.randrange(256) for _ in range(1000))) for i in range(80)])


@needs_c
def test_a_recycled_value_buffer_never_changes_bytes_someone_still_holds() -> None:
    first, second = _big_set(1), _big_set(2)
    kept_block = decode_message_set(first, "t", 0, 0).messages
    held = kept_block.value_data      # a reference of our own: the buffer must not be recycled
    hashed_block = decode_message_set(first, "t", 0, 0).messages
    hash(hashed_block.value_data)     # a cached hash: must not be recycled either
    snapshot = bytes(held)
    del kept_block, hashed_block
    for seed in range(3, 12):         # more blocks of the same size than the decoder keeps buffers
        block = decode_message_set(_big_set(seed), "t", 0, 0).messages
        assert list(block) == decode_message_set_python(_big_set(seed), "t", 0, 0).messages
        assert block.value_data is not held
        del block
    assert held == snapshot
    again = decode_message_set(second, "t", 0, 0).messages
    assert list(again) == decode_message_set_python(second, "t", 0, 0).messages


@needs_c
def test_blocks_decoded_one_after_another_reuse_buffers_and_stay_right() -> None:
    sets = [_big_set(seed) for seed in range(4)]
    for round_ in range(3):
        for data in sets:
            block = decode_message_set(data, "t", 0, 0).messages
            assert list(block) == decode_message_set_python(data, "t", 0, 0).messages, round_
            del block
