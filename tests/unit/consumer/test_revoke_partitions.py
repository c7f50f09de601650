"""Revoking some partitions of a stream (a rebalance moving them away) while the others flow on."""

from __future__ import annotations

import pytest

from zkconsumer.consumer.stream import KafkaStream, revoke_partitions
from zkconsumer.errors import ConsumerTimeoutError
from zkconsumer.fetch.handoff import ChunkQueue, PartitionTopicInfo


def msgs(start: int, n: int):
    return [(o, None, f"v{o}".encode()) for o in range(start, start + n)]


def drain(stream: KafkaStream):
    got = []
    try:
        for m in stream:
            got.append((m.partition, m.offset))
    except ConsumerTimeoutError:
        pass
    return got


def test_queued_chunks_of_revoked_partitions_go_and_the_others_stay() -> None:
    queue = ChunkQueue(8)
    stream = KafkaStream(queue, 50)
    moving, kept = PartitionTopicInfo("t", 0, queue, 0, 1024), PartitionTopicInfo("t", 1, queue, 0, 1024)
    for info in (moving, kept, moving, kept):
        assert info.enqueue(info.fetched_offset, msgs(info.fetched_offset, 2), lambda: False)
    revoke_partitions([stream], [moving])
    assert moving.revoked and len(queue) == 2
    assert drain(stream) == [(1, 0), (1, 1), (1, 2), (1, 3)]
    assert moving.consumed_offset == 0


def test_a_chunk_being_iterated_is_dropped_only_if_its_partition_is_revoked() -> None:
    queue = ChunkQueue(8)
    stream = KafkaStream(queue, 50)
    moving, kept = PartitionTopicInfo("t", 0, queue, 0, 1024), PartitionTopicInfo("t", 1, queue, 0, 1024)
    kept.enqueue(0, msgs(0, 3), lambda: False)
    moving.enqueue(0, msgs(0, 3), lambda: False)
    it = iter(stream)
    assert (next(it).partition, kept.consumed_offset) == (1, 1)  # iterating kept's chunk
    revoke_partitions([stream], [moving])
    assert drain(stream) == [(1, 1), (1, 2)]  # the rest of kept's chunk; moving's chunk is gone

    moving2 = PartitionTopicInfo("t", 2, queue, 0, 1024)
    moving2.enqueue(0, msgs(0, 3), lambda: False)
    assert next(it).partition == 2
    revoke_partitions([stream], [moving2])
    assert drain(stream) == [] and moving2.consumed_offset == 1  # final: nothing more handed out


def test_a_chunk_taken_before_the_revoke_is_refused_when_installed() -> None:
    queue = ChunkQueue(8)
    stream = KafkaStream(queue, 50)
    moving = PartitionTopicInfo("t", 0, queue, 0, 1024)
    moving.enqueue(0, msgs(0, 3), lambda: False)
    real_get = queue.get
    taken = []

    def get(timeout):  # the iterator takes the chunk; the rebalancer revokes before it is installed
        item = real_get(timeout)
        if item is not None and not taken:
            taken.append(item)
            revoke_partitions([stream], [moving])
        return item

    queue.get = get  # type: ignore[method-assign]
    with pytest.raises(ConsumerTimeoutError):
        next(iter(stream))
    assert taken and moving.consumed_offset == 0
