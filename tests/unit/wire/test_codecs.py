"""Issue 15 item 3: decoding compressed wrappers per codec, in C and in pure Python.

Wrappers are built by kafka-python's ``LegacyRecordBatchBuilder`` (gzip, snappy
in xerial framing, lz4 in Kafka 0.8/0.9's framing with its wrong header
checksum for magic 0, a standard LZ4 frame for magic 1) or by hand around a
payload compressed here (raw snappy, several gzip members, damaged data). The C
path (:func:`decode_message_set`) and the pure-Python reference must return the
same messages; damaged compressed data raises ``CorruptMessageError`` from both;
and decompression lets other Python threads run.
"""

from __future__ import annotations

import gzip
import random
import struct
import threading
import time
import zlib
from typing import Callable, List, Optional, Sequence, Tuple

import cramjam
import lz4.frame
import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from zkconsumer.errors import CorruptMessageError
from zkconsumer.wire import codecs, messageset
from zkconsumer.wire.messageset import ACCELERATED, decode_message_set, decode_message_set_python, speedups

GZIP, SNAPPY, LZ4 = 1, 2, 3
Msg = Tuple[int, Optional[bytes], Optional[bytes]]

pytestmark = pytest.mark.usefixtures("old_kafka_lz4")

DECODERS = [pytest.param(decode_message_set_python, id="python"),
            pytest.param(decode_message_set, id="c", marks=pytest.mark.skipif(
                not ACCELERATED, reason="the C extension zkconsumer.wire._speedups is not built"))]


def plain(msgs: Sequence[Msg], magic: int = 0) -> bytes:
    """Uncompressed entries with absolute offsets (what a decompressed magic-0 wrapper holds)."""
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 30)
    for offset, key, value in msgs:
        b.append(offset, 1_600_000_000_000 if magic else None, key, value)
    return bytes(b.build())


def wrapped(codec: int, msgs: Sequence[Msg], magic: int = 0) -> bytes:
    """A wrapper as a broker stores it: kafka-python's builder, the wrapper offset set to the last inner one."""
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 30)
    for i, (offset, key, value) in enumerate(msgs):
        b.append(i if magic else offset, 1_600_000_000_000 if magic else None, key, value)
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, msgs[-1][0])
    return bytes(buf)


def wrapper_entry(offset: int, codec: int, payload: bytes) -> bytes:
    """A magic-0 wrapper entry around an arbitrary (maybe broken) compressed payload, with a valid CRC."""
    body = struct.pack(">bbii", 0, codec, -1, len(payload)) + payload
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


def messages(n: int, start: int = 0, seed: int = 0, size: int = 100) -> List[Msg]:
    rng = random.Random(seed)
    out: List[Msg] = []
    for i in range(n):
        key = None if i % 3 == 0 else b"key-%d" % i
        value = None if i % 17 == 5 else bytes(rng.randrange(65, 91) for _ in range(rng.randrange(0, size)))
        out.append((start + i, key, value))
    return out


def decode_both(data: bytes, fetch_offset: int = 0) -> Sequence[Msg]:
    """Decode with every available decoder; they must agree exactly (types included). The C one is asked twice:
    alone, and given the first C decode of the set as a fetcher has it (``first``)."""
    reference = decode_message_set_python(data, "t", 0, fetch_offset)
    results = [decode_message_set(data, "t", 0, fetch_offset),
               decode_message_set(data, "t", 0, fetch_offset, speedups.decode(data, 0, fetch_offset, True))
               ] if ACCELERATED else []
    for result in results:
        assert list(result.messages) == list(reference.messages)
        assert (result.valid_bytes, result.next_offset) == (reference.valid_bytes, reference.next_offset)
        for _, key, value in result.messages:
            assert type(key) in (bytes, type(None)) and type(value) in (bytes, type(None))
    return list(reference.messages)


@pytest.mark.skipif(not ACCELERATED, reason="the C extension zkconsumer.wire._speedups is not built")
def test_a_first_decode_given_is_not_decoded_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """``first``'s promise: the set is decoded on from where the given decode stopped, never from its start."""
    head = [(0, b"k", b"plain")]
    data = plain(head) + wrapped(GZIP, messages(5, start=1))
    first = speedups.decode(data, 0, 0, True)
    positions: List[int] = []  # where ``data`` itself was decoded from (not a decompressed inner set)

    class Spy:
        def __getattr__(self, name: str) -> object:
            return getattr(speedups, name)

        def decode(self, buf: bytes, pos: int, *rest: object) -> object:
            if buf is data:
                positions.append(pos)
            return speedups.decode(buf, pos, *rest)

    monkeypatch.setattr(messageset, "_speedups", Spy())
    result = decode_message_set(data, "t", 0, 0, first)
    assert list(result.messages) == head + messages(5, start=1)
    assert 0 not in positions  # the given decode was used, not repeated
    positions.clear()
    decode_message_set(data, "t", 0, 0)
    assert positions[0] == 0  # without it, the set is decoded from byte 0 (the spy sees every decode)


# --------------------------------------------------------------------------- each codec decodes

@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4], ids=["gzip", "snappy-xerial", "lz4"])
def test_wrappers_of_each_codec_decode_in_c_and_python_alike(codec: int, magic: int) -> None:
    first = messages(150, start=0, seed=codec)
    second = messages(40, start=150, seed=codec + 10)
    data = wrapped(codec, first, magic) + plain([(190, b"k", b"plain")], magic) + wrapped(codec, second, magic)
    assert decode_both(data) == first + [(190, b"k", b"plain")] + second
    # fetched in the middle of a wrapper: the earlier inner messages are dropped
    assert decode_both(data, fetch_offset=100) == first[100:] + [(190, b"k", b"plain")] + second


def test_kafka_08_lz4_framing_has_the_wrong_header_checksum_and_still_decodes() -> None:
    data = wrapped(LZ4, messages(20), 0)
    payload = data[12 + 4 + 2 + 4 + 4:]
    assert payload[:4] == b"\x04\x22\x4d\x18"
    with pytest.raises(RuntimeError):  # a standard decoder rejects Kafka 0.8/0.9's header checksum
        lz4.frame.decompress(payload)
    assert decode_both(data) == messages(20)


def test_large_xerial_snappy_payload_spans_several_blocks() -> None:
    msgs = messages(3000, size=200)  # ~350 KB inner set: eleven 32 KB xerial blocks
    data = wrapped(SNAPPY, msgs)
    assert data.count(b"\x82SNAPPY\x00") == 1
    assert decode_both(data) == msgs


def test_raw_snappy_without_xerial_framing() -> None:
    msgs = messages(60)
    data = wrapper_entry(59, SNAPPY, bytes(cramjam.snappy.compress_raw(plain(msgs))))
    assert decode_both(data) == msgs


def test_gzip_payload_of_several_members_decodes_them_all() -> None:
    """java.util.zip.GZIPInputStream reads concatenated members; so does zkconsumer."""
    msgs = messages(50)
    inner = plain(msgs)
    cut = len(plain(msgs[:20]))
    data = wrapper_entry(49, GZIP, gzip.compress(inner[:cut]) + gzip.compress(inner[cut:]))
    assert decode_both(data) == msgs


# --------------------------------------------------------------------------- damaged compressed data

BROKEN = ["gzip-garbage", "gzip-cut", "gzip-flipped", "gzip-bad-crc", "snappy-garbage", "snappy-xerial-cut",
          "snappy-xerial-overrun", "lz4-garbage", "lz4-not-a-frame", "lz4-cut"]


def _broken_payloads() -> List[Tuple[str, int, bytes]]:
    """Damaged compressed payloads (built at test time: Kafka's lz4 framing needs the old_kafka_lz4 fixture)."""
    inner = plain(messages(30))
    gz = gzip.compress(inner)
    xerial = wrapped(SNAPPY, messages(30))[26:]
    lz = wrapped(LZ4, messages(30))[26:]
    flipped_gz = bytearray(gz)
    flipped_gz[len(gz) // 2] ^= 0xFF
    return [
        ("gzip-garbage", GZIP, b"not gzip at all"),
        ("gzip-cut", GZIP, gz[:-9]),
        ("gzip-flipped", GZIP, bytes(flipped_gz)),
        ("gzip-bad-crc", GZIP, gz[:-8] + struct.pack("<I", zlib.crc32(inner) ^ 1) + gz[-4:]),
        ("snappy-garbage", SNAPPY, b"\xff\xff\xff\xff\x0f garbage"),
        ("snappy-xerial-cut", SNAPPY, xerial[:-10]),
        ("snappy-xerial-overrun", SNAPPY, xerial[:16] + struct.pack(">i", 1 << 20) + xerial[20:]),
        ("lz4-garbage", LZ4, b"\x04\x22\x4d\x18 garbage"),
        ("lz4-not-a-frame", LZ4, b"garbage garbage"),
        ("lz4-cut", LZ4, lz[:-12]),
    ]


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("name", BROKEN)
def test_damaged_compressed_data_raises_corrupt_message_error(
        decoder: Callable[..., messageset.DecodedMessageSet], name: str) -> None:
    codec, payload = {n: (c, p) for n, c, p in _broken_payloads()}[name]
    with pytest.raises(CorruptMessageError) as info:
        decoder(wrapper_entry(7, codec, payload), "t", 2, 0)
    assert info.value.offset == 7 and not isinstance(info.value, messageset.UnsupportedCompressionError)


@pytest.mark.parametrize("decoder", DECODERS)
def test_damaged_wrapper_after_good_messages_returns_the_good_prefix(
        decoder: Callable[..., messageset.DecodedMessageSet]) -> None:
    good = wrapped(GZIP, messages(10))
    data = good + wrapper_entry(10, GZIP, b"broken")
    result = decoder(data, "t", 0, 0)
    assert list(result.messages) == messages(10) and result.valid_bytes == len(good) and result.next_offset == 10


# --------------------------------------------------------------------------- the GIL

def _progress_while(work: Callable[[], object]) -> Tuple[int, int]:
    """(spinner iterations during ``work()``, spinner iterations during an idle sleep as long as it).

    The spinner is a pure-Python loop in a second thread: it can only count
    while the main thread does not hold the GIL.
    """
    count = [0]
    stop = threading.Event()
    started = threading.Event()

    def spin() -> None:
        started.set()
        while not stop.is_set():
            count[0] += 1

    thread = threading.Thread(target=spin, name="gil-spinner", daemon=True)
    thread.start()
    try:
        assert started.wait(10)
        before = count[0]
        t0 = time.perf_counter()
        work()
        elapsed = time.perf_counter() - t0
        during = count[0] - before
        before = count[0]
        time.sleep(elapsed)
        idle = count[0] - before
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
    return during, idle


def _big_wrapper(codec: int) -> bytes:
    """One wrapper of ~24 MB inner messages (Kafka's ProducerPerformance payload: one value repeated)."""
    value = bytes(random.Random(0).randrange(65, 91) for _ in range(1000))
    return wrapped(codec, [(i, None, value) for i in range(24_000)])


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4], ids=["gzip", "snappy", "lz4"])
def test_decompression_lets_another_thread_run(codec: int) -> None:
    """While a large wrapper is decompressed, a second Python thread keeps counting.

    Decompression of a big payload is repeated for long enough to take a good
    fraction of a second; if it held the GIL the spinner could only run in the
    gaps between calls. The bound is generous (a fifth of what the spinner
    manages while the main thread sleeps) to stay clear of a loaded machine.
    """
    entry = _big_wrapper(codec)
    payload = entry[26:]  # magic 0, null key: value starts after offset, size, crc, magic, attr, klen, vlen

    def work() -> None:
        deadline = time.perf_counter() + 0.3
        while time.perf_counter() < deadline:
            codecs.decompress(codec, 0, payload)

    during, idle = _progress_while(work)
    assert idle > 0
    assert during >= idle // 5, (during, idle)


@pytest.mark.skipif(not ACCELERATED, reason="the C extension zkconsumer.wire._speedups is not built")
def test_decoding_a_large_compressed_chunk_lets_another_thread_run() -> None:
    entry = _big_wrapper(GZIP)
    assert len(decode_message_set(entry, "t", 0, 0).messages) == 24_000

    def work() -> None:
        deadline = time.perf_counter() + 0.3
        while time.perf_counter() < deadline:
            decode_message_set(entry, "t", 0, 0)

    during, idle = _progress_while(work)
    assert idle > 0
    assert during >= idle // 5, (during, idle)
