"""commit.processed.only: the per-partition ack tracker and a stream's acks (zkconsumer.consumer.acks)."""

from __future__ import annotations

import random
import threading
from typing import List

import pytest

from zkconsumer.consumer.acks import PartitionAcks, ProcessedOffsets, chunk_runs
from zkconsumer.consumer.stream import KafkaStream, MessageAndMetadata
from zkconsumer.errors import ConfigurationError, UnknownAckError
from zkconsumer.fetch.handoff import ChunkQueue, PartitionTopicInfo


def never() -> bool:
    return False


def msgs(*offsets: int):
    return [(o, None, b"v%d" % o) for o in offsets]


def make(offset: int = 10):
    processed = ProcessedOffsets()
    queue = ChunkQueue(8)
    info = PartitionTopicInfo("t", 0, queue, offset=offset, fetch_size=1024)
    stream = KafkaStream(queue, 50, processed=processed)
    return processed, info, stream


def take(stream: KafkaStream, n: int) -> List[MessageAndMetadata]:
    it = iter(stream)
    return [next(it) for _ in range(n)]


# ------------------------------------------------------------------ PartitionAcks alone

def test_out_of_order_acks_advance_only_over_a_contiguous_processed_run() -> None:
    acks = PartitionAcks(10)
    acks.note_run(10, 20)
    consumed = 20  # all ten handed out
    assert acks.position(consumed) == 10
    for offset in (13, 11, 12):
        assert acks.ack(offset)
    assert acks.position(consumed) == 10  # 10 is still in flight
    assert acks.ack(10)
    assert acks.position(consumed) == 14
    for offset in reversed(range(14, 20)):
        acks.ack(offset)
    assert acks.position(consumed) == 20
    assert acks.in_flight(consumed) == 0


def test_the_position_never_passes_what_was_handed_out() -> None:
    acks = PartitionAcks(0)
    acks.note_run(0, 100)  # a chunk installed, only 5 handed out
    for offset in range(5):
        acks.ack(offset)
    assert acks.position(5) == 5
    assert acks.in_flight(5) == 0
    assert acks.position(3) == 3  # a stale, lower consumed offset: never beyond it


def test_gaps_in_the_log_are_not_waited_for() -> None:
    acks = PartitionAcks(0)
    for first, end in chunk_runs(msgs(0, 1, 5, 6, 9), 0, 0):  # a compacted log
        acks.note_run(first, end)
    assert not acks.ack(3), "an offset the log does not hold was never handed out"
    for offset in (9, 6, 5, 1):
        assert acks.ack(offset)
    assert acks.position(10) == 0
    assert acks.ack(0)
    assert acks.position(10) == 10


def test_memory_is_bounded_by_the_span_in_flight() -> None:
    acks = PartitionAcks(0)
    rng = random.Random(7)
    window: List[int] = []
    for offset in range(20000):
        if offset % 100 == 0:
            acks.note_run(offset, offset + 100)
        window.append(offset)
        if len(window) > 50:  # at most 50 in flight: ack a random one of them
            acks.ack(window.pop(rng.randrange(len(window))))
        # Bounded by the span from the oldest message in flight to the newest handed out, not by the total.
        span = offset + 1 - acks.position(offset + 1)
        assert len(acks._acked) < span and len(acks._runs) <= span // 100 + 2
        assert acks.in_flight(offset + 1) == len(window)
    for offset in window:
        acks.ack(offset)
    assert acks.position(20000) == 20000
    assert not acks._acked and not acks._runs


def test_chunk_runs_skips_what_was_handed_out_already() -> None:
    assert chunk_runs(msgs(10, 11, 12, 13), 0, 12) == [(12, 14)]
    assert chunk_runs(msgs(10, 11, 12, 13), 2, 0) == [(12, 14)]
    assert chunk_runs(msgs(10, 12, 13, 20), 0, 11) == [(12, 14), (20, 21)]
    assert chunk_runs(msgs(10, 11), 0, 12) == []
    assert chunk_runs([], 0, 0) == []


# ------------------------------------------------------------------ through a stream

def test_a_commit_position_is_the_first_unacked_message() -> None:
    processed, info, stream = make()
    info.enqueue(10, msgs(10, 11, 12, 13), never)
    got = take(stream, 3)
    assert info.consumed_offset == 13 and info.commit_position == 10
    assert stream.ack(got[2]) and stream.ack(got[1])
    assert info.commit_position == 10
    assert stream.ack(got[0])
    assert info.commit_position == 13
    assert processed.in_flight() == {("t", 0): 0}


def test_an_ack_of_an_offset_never_handed_out_is_refused_clearly() -> None:
    _, info, stream = make()
    info.enqueue(10, msgs(10, 11, 12), never)
    take(stream, 1)
    with pytest.raises(UnknownAckError, match="offsets 10..10"):
        stream.ack(MessageAndMetadata("t", 0, 11, None, b"queued, not handed out"))
    with pytest.raises(UnknownAckError, match="offsets 10..10"):
        stream.ack(MessageAndMetadata("t", 0, 9, None, b"before this member's first"))
    with pytest.raises(UnknownAckError, match="has not handed out"):
        stream.ack(MessageAndMetadata("other", 3, 0, None, b""))
    assert info.commit_position == 10, "a refused ack records nothing"


def test_acks_of_a_previous_incarnation_are_ignored_after_a_rebalance() -> None:
    processed, old, stream = make()
    old.enqueue(10, msgs(10, 11, 12, 13), never)
    first = take(stream, 4)
    stream.ack(first[0])
    old.revoked = True  # the rebalance moved it away: its commit writes 11
    assert old.commit_position == 11
    # The partition comes back, from the committed 11.
    queue = stream.queue
    queue.clear()
    stream.clear()
    new = PartitionTopicInfo("t", 0, queue, offset=11, fetch_size=1024)
    new.enqueue(11, msgs(11, 12, 13, 14), never)
    second = take(stream, 1)
    assert second[0].offset == 11
    assert not stream.ack(first[3]), "13: handed out only by the old incarnation so far"
    assert new.commit_position == 11
    assert stream.ack(first[1]), "11: handed out again; either hand-out's ack says it was processed"
    assert new.commit_position == 12
    with pytest.raises(UnknownAckError):
        stream.ack(MessageAndMetadata("t", 0, 14, None, b"never handed out by either"))


def test_an_ack_after_the_partition_moved_away_is_ignored() -> None:
    _, info, stream = make()
    info.enqueue(10, msgs(10, 11), never)
    got = take(stream, 2)
    info.revoked = True
    assert not stream.ack(got[1])
    assert not stream.ack(got[0])


def test_ack_without_the_mode_says_which_property() -> None:
    queue = ChunkQueue(2)
    info = PartitionTopicInfo("t", 0, queue, offset=0, fetch_size=1024)
    stream = KafkaStream(queue, 50)
    info.enqueue(0, msgs(0), never)
    (m,) = take(stream, 1)
    with pytest.raises(ConfigurationError, match="commit.processed.only"):
        stream.ack(m)
    assert info.commit_position == 1


def test_acks_from_many_threads_out_of_order() -> None:
    _, info, stream = make(offset=0)
    total = 5000
    for start in range(0, total, 1000):
        assert info.enqueue(start, msgs(*range(start, start + 1000)), never)
    handed = take(stream, total)
    rng = random.Random(3)
    rng.shuffle(handed)
    parts = [handed[i::8] for i in range(8)]
    threads = [threading.Thread(target=lambda p=p: [stream.ack(m) for m in p]) for p in parts]
    positions: List[int] = []
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        positions.append(info.commit_position)
    for thread in threads:
        thread.join()
    assert positions == sorted(positions), "the commit position never moves back"
    assert info.commit_position == total
