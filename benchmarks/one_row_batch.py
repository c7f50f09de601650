"""``python -m benchmarks.one_row_batch [--calls 200000]``: a one-row Arrow batch, warm (issue 44).

A live stream's batches have one row each. This times, in a tight loop (caches warm, nothing else
running), building such a batch from a decoded one-message block as ``KafkaStream.batches()`` does
(``zkconsumer.consumer.arrow.block_rows``) and through the general ``record_batch``, reading it as the
latency benchmark's worker does (``benchmarks.latency.zk_worker.read_batch``), and both with the batch
dropped each time. The same steps on a live member (``benchmarks.cpu_split``) cost several times as
much, right after every wake-up.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from typing import List, Optional

from zkconsumer.consumer import arrow
from zkconsumer.wire.messageset import decode_message_set

from .latency.reuse import v0_message
from .latency.stamps import STAMP
from .latency.zk_worker import keep_nothing, read_batch


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args(argv)
    chunk = v0_message(5, STAMP.pack(123) + bytes(92))  # a 100-byte value, as the benchmarks send
    block = decode_message_set(memoryview(chunk), "topic", 0, 0).messages
    batch = arrow.record_batch("topic", 3, block, 0, 1)
    steps = {
        "build (block_rows, as batches() does)": lambda: arrow.block_rows("topic", 3, block, 0, 1),
        "build (record_batch)": lambda: arrow.record_batch("topic", 3, block, 0, 1),
        "read": lambda: read_batch(batch, keep_nothing, keep_nothing, 0),
        "build, read and drop": lambda: read_batch(arrow.block_rows("topic", 3, block, 0, 1), keep_nothing,
                                                   keep_nothing, 0),
    }
    for name, step in steps.items():
        best = min(timeit.repeat(step, number=args.calls, repeat=3))
        print(f"{name}: {best / args.calls * 1e6:.2f} us per batch (best of 3 x {args.calls} calls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
