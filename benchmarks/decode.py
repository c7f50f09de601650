"""Micro-benchmark: the hand-written fetch path against kafka-python's, messages/s decoded.

Builds one fetch-sized message set (default: 1 MiB of 100-byte values, magic 0,
uncompressed, as a Kafka 0.9 broker returns it) and decodes it repeatedly with

* ``zkconsumer``: :func:`zkconsumer.wire.messageset.decode_message_set` (CRC checked);
* ``kafka-python``: :class:`kafka.record.legacy_records.LegacyRecordBatch` per
  entry (the shallow walk done here, then its iterator; CRC checked with
  ``validate_crc`` like its fetcher's ``check_crcs=True``).

With ``--fetch-response`` the same bytes are spread over ``--partitions``
partitions of one Fetch v0 *response body*, and each side decodes the whole
response as its consumer does:

* ``zkconsumer``: ``FetchRequest.decode_response`` (zero-copy views into the
  receive buffer) then ``decode_message_set`` per partition;
* ``kafka-python``: ``kafka.protocol.consumer.FetchResponse.decode(body,
  version=0)`` then ``kafka.record.MemoryRecords`` per partition, iterating
  every batch and record with ``validate_crc``.

It also times encoding one Fetch v0 request frame (header included) for
``--partitions`` partitions both ways.

Usage: ``scripts/bench-decode [--value-size 100] [--codec none|gzip|snappy|lz4] [--magic 0|1]
[--fetch-response [--partitions 8]]``
"""

from __future__ import annotations

import argparse
import os
import struct
import time
from typing import Callable, List, Tuple

from kafka.protocol.consumer import FetchRequest as KFetchRequest  # noqa: E402
from kafka.protocol.consumer import FetchResponse as KFetchResponse  # noqa: E402
from kafka.record import MemoryRecords  # noqa: E402
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder  # noqa: E402

from zkconsumer.wire.codecs import xxh32  # noqa: E402
from zkconsumer.wire.messageset import decode_message_set  # noqa: E402
from zkconsumer.wire.protocol import FetchPartition, FetchRequest, encode_request  # noqa: E402

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


def fetch_response_body(message_set: bytes, partitions: int) -> bytes:
    """A Fetch v0 response body (after the correlation id): ``message_set`` cut into ``partitions`` whole entries."""
    chunks: List[List[bytes]] = [[] for _ in range(partitions)]
    pos = 0
    while pos + 12 <= len(message_set):
        end = pos + 12 + struct.unpack_from(">i", message_set, pos + 8)[0]
        chunks[min(pos * partitions // len(message_set), partitions - 1)].append(message_set[pos:end])
        pos = end
    part = KFetchResponse.FetchableTopicResponse.PartitionData
    topic = KFetchResponse.FetchableTopicResponse
    response = KFetchResponse(version=0, responses=[topic(topic="bench", partitions=[
        part(partition_index=p, error_code=0, high_watermark=1 << 40, records=b"".join(c))
        for p, c in enumerate(chunks)])])
    return bytes(response.encode())


def zk_fetch_response(body: bytes, magic: int) -> int:
    """Our consumer's path: split the response into views, decode each message set."""
    n = 0
    for p in FetchRequest(0, 0, ()).decode_response(memoryview(body)).partitions:
        n += len(decode_message_set(p.message_set, p.topic, p.partition, 0).messages)
    return n


def kafka_python_fetch_response(body: bytes, magic: int) -> int:
    """kafka-python's path: FetchResponse.decode, then MemoryRecords per partition (CRC checked)."""
    n = 0
    for topic in KFetchResponse.decode(body, version=0).responses:
        for p in topic.partitions:
            records = MemoryRecords(p.records)
            while records.has_next():
                for record in records.next_batch():
                    if not record.validate_crc():
                        raise ValueError("crc")
                    _ = (record.offset, record.key, record.value)
                    n += 1
    return n


def bench_fetch_request(partitions: int, seconds: float) -> None:
    """µs to encode one Fetch v0 request frame, header included, both ways."""
    ours = FetchRequest(100, 1, tuple(FetchPartition("bench", p, 1 << 30, 1 << 20) for p in range(partitions)))
    fetch_topic = KFetchRequest.FetchTopic
    fetch_partition = fetch_topic.FetchPartition

    def theirs() -> bytes:
        request = KFetchRequest(version=0, replica_id=-1, max_wait_ms=100, min_bytes=1, topics=[fetch_topic(
            topic="bench", partitions=[fetch_partition(partition=p, fetch_offset=1 << 30, partition_max_bytes=1 << 20)
                                       for p in range(partitions)])])
        request.with_header(correlation_id=1, client_id="bench")
        return bytes(request.encode(header=True, framed=True))

    assert encode_request(ours, 1, "bench") == theirs(), "fetch request encoders disagree"
    def mine() -> bytes:
        return encode_request(ours, 1, "bench")

    runs: List[Tuple[str, Callable[[], bytes]]] = [("zkconsumer", mine), ("kafka-python", theirs)]
    for name, fn in runs:
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / 4:
            fn()
            count += 1
        print(f"{name:>14}: {(time.perf_counter() - start) / count * 1e6:12.1f} µs per Fetch request frame "
              f"({partitions} partitions)")


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
    parser.add_argument("--fetch-response", action="store_true",
                        help="decode a whole Fetch v0 response (protocol + message sets), not one message set")
    parser.add_argument("--partitions", type=int, default=8, help="partitions in the --fetch-response body")
    args = parser.parse_args()
    _enable_old_kafka_lz4()
    data = build(args.fetch_bytes, args.value_size, CODECS[args.codec], args.magic, args.batch)
    ours_fn: Callable[[bytes, int], int] = zk_decode
    theirs_fn: Callable[[bytes, int], int] = kafka_python_decode
    what = "message set"
    if args.fetch_response:
        data = fetch_response_body(data, args.partitions)
        ours_fn, theirs_fn = zk_fetch_response, kafka_python_fetch_response
        what = f"Fetch v0 response ({args.partitions} partitions)"
    n = ours_fn(data, args.magic)
    assert n == theirs_fn(data, args.magic), "decoders disagree"
    print(f"{what}: {len(data):,} bytes, {n:,} messages of {args.value_size} bytes, "
          f"codec={args.codec}, magic={args.magic}")
    ours = bench("zkconsumer", ours_fn, data, args.magic, args.seconds)
    theirs = bench("kafka-python", theirs_fn, data, args.magic, args.seconds)
    print(f"{'speed-up':>14}: {ours / theirs:.1f}x")
    if args.fetch_response:
        bench_fetch_request(args.partitions, args.seconds)


if __name__ == "__main__":
    main()
