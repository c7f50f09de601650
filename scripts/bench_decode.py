#!/usr/bin/env python3
"""Micro-benchmark: messages/s decoded by zkconsumer.wire.messageset vs kafka-python's LegacyRecordBatch.

Builds one fetch-sized message set (default: 1 MiB of 100-byte values, magic 0,
uncompressed, as a Kafka 0.9 broker returns it) and decodes it repeatedly with

* ``zkconsumer``: :func:`zkconsumer.wire.messageset.decode_message_set` (CRC checked);
* ``kafka-python``: :class:`kafka.record.legacy_records.LegacyRecordBatch` per
  entry (the shallow walk done here, then its iterator; CRC checked with
  ``validate_crc`` like its fetcher's ``check_crcs=True``).

Usage: ``python scripts/bench_decode.py [--value-size 100] [--codec none|gzip|snappy|lz4] [--magic 0|1]``
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import time
from typing import Callable, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder  # noqa: E402

from zkconsumer.wire.messageset import decode_message_set, xxh32  # noqa: E402

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}


def _enable_old_kafka_lz4() -> None:
    """kafka-python needs ``xxhash`` for Kafka 0.8/0.9 LZ4 framing; lend it our pure-Python XXH32."""
    import kafka.codec

    if kafka.codec.xxhash is None:
        class _Digest:
            def __init__(self, data: bytes) -> None:
                self._value = xxh32(bytes(data))

            def digest(self) -> bytes:
                return self._value.to_bytes(4, "big")

        kafka.codec.xxhash = type("xxhash", (), {"xxh32": staticmethod(_Digest)})


def build(total_bytes: int, value_size: int, codec: int, magic: int, batch: int) -> bytes:
    """A message set of about ``total_bytes``; compressed sets hold ``batch`` messages per wrapper."""
    value = os.urandom(value_size // 2).hex().encode()[:value_size]
    parts: List[bytes] = []
    size = offset = 0
    while size < total_bytes:
        builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 30)
        count = batch if codec else 1
        for i in range(count):
            builder.append(i if (codec and magic) else offset + i, 1_700_000_000_000, None, value)
        buf = bytearray(builder.build())
        if codec:
            struct.pack_into(">q", buf, 0, offset + count - 1)   # the broker stamps the wrapper offset
        parts.append(bytes(buf))
        size += len(buf)
        offset += count
    return b"".join(parts)


def kafka_python_decode(data: bytes, magic: int) -> int:
    """Decode like kafka-python's fetcher does per batch; returns the message count."""
    view = memoryview(data)
    pos, end, n = 0, len(data), 0
    while pos + 12 <= end:
        size = struct.unpack_from(">i", data, pos + 8)[0]
        if pos + 12 + size > end:
            break
        batch = LegacyRecordBatch(view[pos:pos + 12 + size], magic)
        for record in batch:
            if not record.validate_crc():
                raise ValueError("crc")
            _ = (record.offset, record.key, record.value)
            n += 1
        pos += 12 + size
    return n


def zk_decode(data: bytes, magic: int) -> int:
    return len(decode_message_set(data, "bench", 0, 0).messages)


def bench(name: str, fn: Callable[[bytes, int], int], data: bytes, magic: int, seconds: float) -> float:
    fn(data, magic)  # warm up
    count = 0
    start = time.perf_counter()
    while True:
        count += fn(data, magic)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
    rate = count / elapsed
    print(f"{name:>14}: {rate:12,.0f} msgs/s")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--fetch-bytes", type=int, default=1 << 20)
    parser.add_argument("--codec", choices=sorted(CODECS), default="none")
    parser.add_argument("--magic", type=int, choices=(0, 1), default=0)
    parser.add_argument("--batch", type=int, default=200, help="messages per compressed wrapper")
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    _enable_old_kafka_lz4()
    data = build(args.fetch_bytes, args.value_size, CODECS[args.codec], args.magic, args.batch)
    n = zk_decode(data, args.magic)
    assert n == kafka_python_decode(data, args.magic), "decoders disagree"
    print(f"message set: {len(data):,} bytes, {n:,} messages of {args.value_size} bytes, "
          f"codec={args.codec}, magic={args.magic}")
    ours = bench("zkconsumer", zk_decode, data, args.magic, args.seconds)
    theirs = bench("kafka-python", kafka_python_decode, data, args.magic, args.seconds)
    print(f"{'speed-up':>14}: {ours / theirs:.1f}x")


if __name__ == "__main__":
    main()
