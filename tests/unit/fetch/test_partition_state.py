"""``Hindrances``: the counts that let a fetcher's round skip its scans while every partition is ready."""

from __future__ import annotations

from zkconsumer.fetch.handoff import ChunkQueue, FetchedDataChunk, PartitionTopicInfo
from zkconsumer.fetch.partition_state import Hindrances, PartitionState


def states(n: int) -> list:
    queue = ChunkQueue(2)
    return [PartitionState(PartitionTopicInfo("t", p, queue, 0, 100)) for p in range(n)]


def chunk(st: PartitionState) -> FetchedDataChunk:
    return FetchedDataChunk(st.info, 0, [(0, None, b"v")])


def test_each_state_counts_once_whatever_happens_to_it_and_nothing_once_forgotten() -> None:
    h = Hindrances()
    a, b, c = states(3)
    assert h.clear()
    h.park(a, chunk(a))
    h.park(a, chunk(a))  # parked again (an error chunk after a data chunk): still one
    assert (h.parked, h.odd) == (1, 0) and not h.clear()
    h.stall(b)
    h.delay(b, 5.0)  # stalled and delayed: one odd state
    h.delay(c, 1.0)
    h.delay(c, 2.0)
    assert (h.parked, h.odd) == (1, 2)
    h.unpark(a)
    h.unpark(a)  # nothing parked: a no-op
    assert (h.parked, h.odd) == (0, 2) and a.parked is None
    h.park(b, chunk(b))  # the stalled partition's error chunk waits for room
    h.forget(b)  # removed: its parked chunk is dropped, it counts no more
    assert (h.parked, h.odd) == (0, 1) and b.parked is None
    h.forget(c)
    h.forget(a)
    assert h.clear()
