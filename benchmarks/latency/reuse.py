"""``python -m benchmarks.latency.reuse``: does the batch path's buffer reuse matter?

Decodes one ~1 MB chunk of 100 B messages (a fetch response's worth) into an Arrow record
batch the way ``KafkaStream.batches()`` does, over and over, in two ways, alternated:

* ``reused``: each batch is dropped before the next chunk is decoded, so the decoder's
  recycled block buffers (``release_bytes`` in ``_speedups_block.c``) are taken again;
* ``fresh``: the last 16 batches are kept alive, so every chunk gets newly allocated buffers.

Prints the distinct value-buffer addresses seen (1 = reused every time) and the CPU time per
chunk and per million messages of each way; the difference is what reuse saves per chunk,
which is also the most a chunk's delivery can be delayed by it.
"""

from __future__ import annotations

import json
import struct
import sys
import time
import zlib
from collections import deque
from typing import Deque

from zkconsumer.consumer import arrow
from zkconsumer.wire.messageset import decode_message_set

MESSAGES = 9000
CHUNKS = 600


def v0_message(offset: int, value: bytes) -> bytes:
    """One uncompressed magic-0 message entry without a key, as a Kafka 0.8/0.9 broker stores it."""
    body = struct.pack(">bbii", 0, 0, -1, len(value)) + value
    crc = struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)
    return struct.pack(">qi", offset, len(crc) + len(body)) + crc + body


def run(keep: int, chunk: bytes) -> dict:
    held: Deque[object] = deque(maxlen=keep) if keep else deque(maxlen=1)
    addresses = set()
    start = time.process_time()
    for _ in range(CHUNKS):
        decoded = decode_message_set(memoryview(chunk), "t", 0, 0)
        batch = arrow.record_batch("t", 0, decoded.messages, 0, len(decoded.messages))
        addresses.add(batch.column(4).buffers()[2].address)
        del decoded
        if keep:
            held.append(batch)
        del batch
    cpu = time.process_time() - start
    return {"distinct_buffers": len(addresses), "ms_per_chunk": round(cpu / CHUNKS * 1000, 3),
            "cpu_s_per_m": round(cpu / (CHUNKS * MESSAGES) * 1e6, 3)}


def main() -> int:
    chunk = b"".join(v0_message(i, bytes(100)) for i in range(MESSAGES))
    results = {"reused": [], "fresh": []}
    for _ in range(3):
        results["reused"].append(run(0, chunk))
        results["fresh"].append(run(16, chunk))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
