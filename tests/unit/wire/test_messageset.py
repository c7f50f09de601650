"""zkconsumer.wire.messageset against kafka-python's LegacyRecordBatch on the same bytes."""

from __future__ import annotations

import gzip
import struct
import zlib
from typing import List, Optional, Sequence, Tuple

import lz4.frame
import pytest
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder

from zkconsumer.errors import CorruptMessageError
from zkconsumer.wire.codecs import xxh32
from zkconsumer.wire.messageset import UnsupportedCompressionError, decode_message_set

GZIP, SNAPPY, LZ4 = 1, 2, 3
Msg = Tuple[int, Optional[bytes], Optional[bytes]]


pytestmark = pytest.mark.usefixtures("old_kafka_lz4")


# --------------------------------------------------------------------------- fixtures

def entry(magic: int, offset: int, key: Optional[bytes], value: Optional[bytes], ts: int = 1_600_000_000_000) -> bytes:
    """One uncompressed entry, built by kafka-python."""
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 30)
    b.append(offset, ts if magic else None, key, value)
    return bytes(b.build())


def wrapper(magic: int, codec: int, messages: Sequence[Msg], wrapper_offset: int) -> bytes:
    """A compressed wrapper as a broker stores it: inner offsets absolute (magic 0) or relative (magic 1)."""
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 30)
    for i, (offset, key, value) in enumerate(messages):
        b.append(i if magic else offset, 1_600_000_000_000 if magic else None, key, value)
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, wrapper_offset)  # outside the CRC, stamped by the broker
    return bytes(buf)


def reference(data: bytes, fetch_offset: int) -> List[Msg]:
    """kafka-python's decoding of every complete entry, filtered like a consumer must."""
    out: List[Msg] = []
    pos = 0
    view = memoryview(data)
    while pos + 12 <= len(data):
        size = struct.unpack_from(">i", data, pos + 8)[0]
        if pos + 12 + size > len(data):
            break
        magic = data[pos + 16]
        for record in LegacyRecordBatch(view[pos:pos + 12 + size], magic):
            assert record.validate_crc()
            if record.offset >= fetch_offset:
                out.append((record.offset, record.key, record.value))
        pos += 12 + size
    return out


def values(n: int, start: int = 0) -> List[Msg]:
    return [(start + i, None if i % 3 == 0 else b"k%d" % i, b"value-%d" % i * (1 + i % 4)) for i in range(n)]


# --------------------------------------------------------------------------- uncompressed

@pytest.mark.parametrize("magic", [0, 1])
def test_plain_messages_match_kafka_python(magic: int) -> None:
    msgs = [(5, None, b"a"), (6, b"", b""), (7, b"key", None), (8, None, None), (9, b"k" * 300, b"v" * 5000)]
    data = b"".join(entry(magic, *m) for m in msgs)
    result = decode_message_set(data, "t", 0, 5)
    assert result.messages == reference(data, 5) == msgs
    assert result.valid_bytes == result.size == len(data)
    assert result.next_offset == 10
    assert not result.too_large


def test_types_are_bytes_or_none_and_input_may_be_a_view() -> None:
    data = entry(0, 0, b"k", b"v") + entry(0, 1, None, b"w")
    for buf in (data, bytearray(data), memoryview(data), memoryview(b"xx" + data)[2:]):
        msgs = decode_message_set(buf, "t", 0, 0).messages
        assert msgs == [(0, b"k", b"v"), (1, None, b"w")]
        assert all(type(k) in (bytes, type(None)) and type(v) is bytes for _, k, v in msgs)


def test_messages_below_fetch_offset_are_dropped() -> None:
    data = b"".join(entry(0, *m) for m in values(5, start=10))
    assert [m[0] for m in decode_message_set(data, "t", 0, 12).messages] == [12, 13, 14]


def test_empty_buffer() -> None:
    result = decode_message_set(b"", "t", 0, 42)
    assert result.messages == [] and result.valid_bytes == 0 and result.next_offset == 42
    assert not result.too_large


# --------------------------------------------------------------------------- compressed

@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4], ids=["gzip", "snappy", "lz4"])
@pytest.mark.parametrize("magic", [0, 1])
def test_compressed_wrappers_match_kafka_python(magic: int, codec: int) -> None:
    data = (wrapper(magic, codec, values(7, start=100), 106)     # 100..106
            + entry(magic, 111, b"plain", b"x")                      # a gap, as after compaction
            + wrapper(magic, codec, values(3, start=112), 114))     # 112..114
    result = decode_message_set(data, "t", 0, 100)
    assert result.messages == reference(data, 100)
    assert [m[0] for m in result.messages] == list(range(100, 107)) + [111, 112, 113, 114]
    assert result.next_offset == 115


def test_magic1_inner_offsets_are_relative_to_the_wrapper() -> None:
    msgs = values(5)  # relative 0..4
    data = wrapper(1, GZIP, msgs, 1000)  # the broker gives the wrapper the last absolute offset
    result = decode_message_set(data, "t", 0, 0)
    assert [m[0] for m in result.messages] == [996, 997, 998, 999, 1000]
    assert result.messages == reference(data, 0)


@pytest.mark.parametrize("magic", [0, 1])
def test_wrapper_fetched_midway_skips_earlier_messages(magic: int) -> None:
    data = wrapper(magic, SNAPPY, values(10, start=50), 59)
    result = decode_message_set(data, "t", 0, 56)
    assert [m[0] for m in result.messages] == [56, 57, 58, 59]
    assert result.messages == reference(data, 56)
    assert result.next_offset == 60


def test_wrapper_entirely_below_fetch_offset_yields_nothing_but_counts_as_valid() -> None:
    data = wrapper(0, GZIP, values(3, start=0), 2)
    result = decode_message_set(data, "t", 0, 3)
    assert result.messages == [] and result.valid_bytes == len(data) and result.next_offset == 3
    assert not result.too_large


def test_large_lz4_wrapper_with_linked_blocks() -> None:
    msgs = [(i, None, (b"%08d" % i) * 50) for i in range(2000)]  # ~800 KB: many LZ4 blocks
    for magic in (0, 1):
        data = wrapper(magic, LZ4, msgs, 1999)
        assert decode_message_set(data, "t", 0, 0).messages == msgs


def test_raw_snappy_without_xerial_framing() -> None:
    import cramjam

    inner = b"".join(entry(0, *m) for m in values(3))
    payload = bytes(cramjam.snappy.compress_raw(inner))
    data = _wrap_payload(0, SNAPPY, payload, 2)
    assert decode_message_set(data, "t", 0, 0).messages == values(3)


def test_lz4_frame_with_kafka09_broken_header_checksum() -> None:
    inner = b"".join(entry(0, *m) for m in values(4))
    frame = bytearray(lz4.frame.compress(inner, content_checksum=False, store_size=True))
    descriptor_end = 4 + 2 + 8  # FLG, BD, content size
    # Kafka 0.8/0.9 hashed the magic number too (KAFKA-3160):
    frame[descriptor_end] = (xxh32(bytes(frame[0:descriptor_end])) >> 8) & 0xFF
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(bytes(frame))
    data = _wrap_payload(0, LZ4, bytes(frame), 3)
    assert decode_message_set(data, "t", 0, 0).messages == values(4)


#: Message sets written by Kafka 0.9.0.1's own Java producer (ConsoleProducer
#: --compression-codec lz4 / snappy, values m1..m5) and fetched from a 0.9.0.1 broker.
#: The LZ4 frame carries Kafka 0.9's wrong header checksum (KAFKA-3160).
KAFKA09_LZ4 = bytes.fromhex(
    "00000000000000040000007a576c35e40003ffffffff0000006c04224d1860401a5d00000016000100f30210e5a990580000"
    "ffffffff000000026d311b009701000000107ca0c1e21c0013321c0010021c00470ba7f1741c0013331c0010031c004795c3"
    "64d71c0013341c0010041c00f001e2c454410000ffffffff000000026d3500000000")
KAFKA09_SNAPPY = bytes.fromhex(
    "00000000000000040000007f2c109b4b0002ffffffff0000007182534e415050590000000001000000010000005d8c010000"
    "19014010e5a990580000ffffffff000000026d310d1b2001000000107ca0c1e21d1c00320d1c0002011c0c0ba7f1741d1c00"
    "330d1c0003011c0c95c364d71d1c00340d1c0004011c3ce2c454410000ffffffff000000026d35")


@pytest.mark.parametrize("data", [KAFKA09_LZ4, KAFKA09_SNAPPY], ids=["lz4", "snappy"])
def test_sets_written_by_kafka09_java_producer(data: bytes) -> None:
    expected = [(i, None, b"m%d" % (i + 1)) for i in range(5)]
    assert decode_message_set(data, "t", 0, 0).messages == expected
    assert decode_message_set(data, "t", 0, 3).messages == expected[3:]
    if data is KAFKA09_LZ4:
        with pytest.raises(RuntimeError, match="headerChecksum"):
            lz4.frame.decompress(data[26:])  # a standard decoder rejects Kafka 0.9's frame


def _wrap_payload(magic: int, codec: int, payload: bytes, offset: int) -> bytes:
    body = struct.pack(">bb", magic, codec) + (struct.pack(">q", 0) if magic else b"")
    body += struct.pack(">i", -1) + struct.pack(">i", len(payload)) + payload
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


# --------------------------------------------------------------------------- truncation and size

def test_truncated_tail_is_dropped_at_every_cut() -> None:
    msgs = values(4)
    data = b"".join(entry(0, *m) for m in msgs)
    last = len(data) - len(entry(0, *msgs[-1]))
    for cut in range(last, len(data)):
        result = decode_message_set(data[:cut], "t", 0, 0)
        assert result.messages == msgs[:3], cut
        assert result.valid_bytes == last and result.next_offset == 3
        assert not result.too_large


def test_single_message_larger_than_the_buffer_is_too_large() -> None:
    big = entry(0, 7, None, b"x" * 10_000)
    for cut in (1, 12, 25, 1000, len(big) - 1):
        result = decode_message_set(big[:cut], "t", 0, 7)
        assert result.too_large and result.messages == [] and result.valid_bytes == 0
        assert result.next_offset == 7


def test_oversized_compressed_wrapper_is_too_large() -> None:
    data = wrapper(0, GZIP, [(i, None, bytes([i % 251]) * 1000) for i in range(50)], 49)
    assert decode_message_set(data[: len(data) // 2], "t", 0, 0).too_large


# --------------------------------------------------------------------------- corruption

def _corrupt(data: bytes, at: int) -> bytes:
    buf = bytearray(data)
    buf[at] ^= 0xFF
    return bytes(buf)


def test_crc_mismatch_raises_naming_topic_partition_offset() -> None:
    data = _corrupt(entry(0, 7, None, b"hello"), -1)
    with pytest.raises(CorruptMessageError) as info:
        decode_message_set(data, "events", 3, 7)
    assert (info.value.topic, info.value.partition, info.value.offset) == ("events", 3, 7)
    text = str(info.value)
    assert "events" in text and "partition 3" in text and "offset 7" in text and "CRC" in text


def test_corruption_after_good_messages_returns_the_good_prefix_then_raises_from_there() -> None:
    good = entry(0, 0, None, b"a") + entry(0, 1, None, b"b")
    data = good + _corrupt(entry(0, 2, None, b"c"), -1) + entry(0, 3, None, b"d")
    result = decode_message_set(data, "t", 1, 0)
    assert result.messages == [(0, None, b"a"), (1, None, b"b")]
    assert result.valid_bytes == len(good) and result.next_offset == 2
    with pytest.raises(CorruptMessageError, match="offset 2"):
        decode_message_set(data[len(good):], "t", 1, 2)


def test_corruption_below_the_fetch_offset_still_raises_when_nothing_was_decoded() -> None:
    data = _corrupt(entry(0, 0, None, b"a"), -1) + entry(0, 1, None, b"b")
    with pytest.raises(CorruptMessageError):
        decode_message_set(data, "t", 0, 1)


@pytest.mark.parametrize("size", [0, 5, 13, -1])
def test_impossible_message_size_is_corrupt(size: int) -> None:
    data = struct.pack(">qi", 4, size) + b"\0" * 30
    with pytest.raises(CorruptMessageError, match="size"):
        decode_message_set(data, "t", 0, 0)


def test_unknown_magic_is_corrupt() -> None:
    body = struct.pack(">bbii", 7, 0, -1, 1) + b"x"
    message = struct.pack(">I", zlib.crc32(body)) + body
    with pytest.raises(CorruptMessageError, match="magic"):
        decode_message_set(struct.pack(">qi", 0, len(message)) + message, "t", 0, 0)


def test_undecompressable_payload_is_corrupt() -> None:
    with pytest.raises(CorruptMessageError, match="gzip"):
        decode_message_set(_wrap_payload(0, GZIP, b"not gzip at all", 0), "t", 0, 0)


def test_truncated_inner_message_set_is_corrupt() -> None:
    inner = b"".join(entry(0, *m) for m in values(3))
    with pytest.raises(CorruptMessageError, match="inside compressed"):
        decode_message_set(_wrap_payload(0, GZIP, gzip.compress(inner[:-3]), 2), "t", 0, 0)


def test_nested_compression_is_corrupt() -> None:
    inner = wrapper(0, GZIP, values(2), 1)
    with pytest.raises(CorruptMessageError, match="nested"):
        decode_message_set(_wrap_payload(0, GZIP, gzip.compress(inner), 1), "t", 0, 0)


def test_unknown_codec_is_unsupported() -> None:
    with pytest.raises(UnsupportedCompressionError, match="codec 5"):
        decode_message_set(_wrap_payload(0, 5, b"whatever", 0), "t", 0, 0)


# --------------------------------------------------------------------------- xxh32

@pytest.mark.parametrize("data, expected", [
    (b"", 0x02CC5D05),
    (b"a", 0x550D7456),
    (b"abc", 0x32D153FF),
    (b"Nobody inspects the spammish repetition", 0xE2293B2F),
])
def test_xxh32_known_values(data: bytes, expected: int) -> None:
    assert xxh32(data) == expected


def test_xxh32_agrees_with_lz4_header_checks() -> None:
    """lz4 validates frame header checksums with its own XXH32: our fix-up must satisfy it."""
    for store_size in (False, True):
        inner = entry(0, 0, None, b"abc" * 1000)
        frame = bytearray(lz4.frame.compress(inner, store_size=store_size))
        frame[4 + 2 + (8 if store_size else 0)] ^= 0x5A  # break the header checksum
        data = _wrap_payload(0, LZ4, bytes(frame), 0)
        assert decode_message_set(data, "t", 0, 0).messages == [(0, None, b"abc" * 1000)]
