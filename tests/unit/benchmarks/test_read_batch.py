"""The latency benchmark's reading of a batch: every message's partition and stamp, small batches and large.
Needs pyarrow and numpy (``NEEDS_SPARK_EXTRA`` in conftest.py)."""

from __future__ import annotations

from typing import Any, List, Tuple

import pytest

from benchmarks.latency.reuse import v0_message
from benchmarks.latency.stamps import STAMP
from benchmarks.latency.zk_worker import SMALL_BATCH, read_batch
from zkconsumer.consumer import arrow
from zkconsumer.wire.messageset import decode_message_set


@pytest.mark.parametrize("rows", [1, SMALL_BATCH, SMALL_BATCH + 1, 50])
@pytest.mark.parametrize("start", [0, 3])
def test_every_stamp_is_read_with_its_partition(rows: int, start: int) -> None:
    stamps = [1_000_000 + 7 * i for i in range(start + rows)]
    chunk = b"".join(v0_message(i, STAMP.pack(s) + bytes(20)) for i, s in enumerate(stamps))
    block = decode_message_set(memoryview(chunk), "t", 0, 0).messages
    batch = arrow.record_batch("t", 4, block, start, start + rows)  # a slice: its value column has an offset
    one: List[Tuple[int, int, int]] = []
    many: List[Tuple[int, Any, int]] = []
    read_batch(batch, lambda p, s, now: one.append((p, s, now)), lambda p, s, now: many.append((p, s, now)), 99)
    if rows <= SMALL_BATCH:
        assert one == [(4, s, 99) for s in stamps[start:]] and not many
    else:
        assert not one and len(many) == 1
        partition, read, now = many[0]
        assert (partition, list(read), now) == (4, stamps[start:], 99)
