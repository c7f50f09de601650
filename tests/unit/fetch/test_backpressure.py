"""Back-pressure per partition ("Big groups and slow streams", item 3), over the in-memory fake cluster.

One broker, one fetcher thread (``num.consumer.fetchers=1``) serving partitions of
two streams (two queues): stream A has partition 0, stream B partitions 1-3. A
stream nobody reads must not stop the other stream's partitions; its queue stays
within ``queued.max.message.chunks`` plus one parked chunk per partition; when it
is read again nothing is lost, duplicated or out of order.
Real-broker behaviour: ``tests/integration/test_backpressure.py``.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional, Tuple

import pytest

from zkconsumer.errors import CorruptMessageError
from zkconsumer.fetch.handoff import ChunkQueue, FetchedDataChunk, PartitionTopicInfo
from zkconsumer.fetch.manager import FetcherManager

from .test_fetcher import FakeCluster, make_config, our_threads

TP = Tuple[str, int]
CAPACITY = 2
B = (1, 2, 3)  # stream B's partitions


class TwoStreams:
    """A FetcherManager over a one-broker FakeCluster; ``t-0`` feeds queue A, ``t-1..3`` queue B."""

    def __init__(self, cluster: FakeCluster, per_partition: int, **config: object) -> None:
        self.cluster = cluster
        cluster.create("t", 4, per_partition=per_partition)
        settings = dict(num_consumer_fetchers=1, fetch_message_max_bytes=150)  # ~4 messages a chunk
        settings.update(config)
        self.config = make_config(**settings)
        self.errors: List[BaseException] = []
        self.manager = FetcherManager(self.config, cluster.live, self.errors.append,
                                      connection_factory=cluster.connect)
        self.a, self.b = ChunkQueue(CAPACITY), ChunkQueue(CAPACITY)
        self.info_a = PartitionTopicInfo("t", 0, self.a, 0, 150)
        self.infos_b = [PartitionTopicInfo("t", p, self.b, 0, 150) for p in B]
        self.received: Dict[TP, List[Tuple[int, Optional[bytes]]]] = {}
        self.error_chunks: List[FetchedDataChunk] = []
        self.peak_b = 0

    def start(self) -> None:
        self.manager.start_connections([self.info_a, *self.infos_b])

    def take(self, queue: ChunkQueue) -> bool:
        """Take one chunk as an iterator would; ``False`` if none was there."""
        chunk = queue.get(0)
        if chunk is None:
            return False
        assert isinstance(chunk, FetchedDataChunk)
        if chunk.topic_info.revoked:
            return True
        if chunk.error is not None:
            self.error_chunks.append(chunk)
            return True
        info = chunk.topic_info
        for offset, _key, value in chunk.messages:
            if offset >= info.consumed_offset:
                self.received.setdefault((info.topic, info.partition), []).append((offset, value))
                info.consumed_offset = offset + 1
        return True

    def read(self, queue: ChunkQueue, until: Callable[[], bool], timeout: float = 10.0) -> None:
        """Read ``queue`` only (the other stream's consumer is stalled) until ``until()``."""
        deadline = time.monotonic() + timeout
        while not until():
            self.peak_b = max(self.peak_b, len(self.b))
            assert time.monotonic() < deadline, f"timed out; received {self.counts()}; errors {self.errors}"
            if not self.take(queue):
                time.sleep(0.001)

    def counts(self) -> Dict[TP, int]:
        return {tp: len(v) for tp, v in self.received.items()}

    def got(self, partition: int) -> int:
        return len(self.received.get(("t", partition), []))

    def check_exact(self, partition: int, n: int) -> None:
        got = self.received.get(("t", partition), [])
        assert [o for o, _ in got] == list(range(n)), f"t-{partition}: lost, duplicated or out of order"
        assert [v for _, v in got] == [self.cluster.value("t", partition, o) for o in range(n)]

    def partition_metrics(self, partition: int) -> Dict[str, object]:
        return self.manager.metrics()["partitions"][f"t-{partition}"]

    def parked_b(self) -> int:
        return sum(bool(self.partition_metrics(p)["parked"]) for p in B)

    def got_b(self) -> bool:
        return all(self.got(p) >= 400 for p in B)

    def hindrances(self) -> Tuple[int, int]:
        """The fetcher's counts of partitions parked and of those stalled or delayed (``Hindrances``): its
        rounds skip their scans while both are 0, so they must follow every park, unpark, stall and removal."""
        fetchers = list(self.manager._fetchers.values())
        assert len(fetchers) == 1
        counts = fetchers[0]._hindrances
        return counts.parked, counts.odd


def wait(predicate: Callable[[], object], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster(brokers=1)


@pytest.fixture
def streams(cluster: FakeCluster):
    s = TwoStreams(cluster, per_partition=400)
    yield s
    s.manager.stop()
    assert our_threads() == []
    assert s.errors == []


def test_item3_a_stalled_stream_does_not_stop_the_other_streams_partitions(streams: TwoStreams) -> None:
    streams.start()
    # B's consumer stalls; A's must still get every message of its partition.
    streams.read(streams.a, lambda: streams.got(0) >= 400)
    streams.check_exact(0, 400)
    assert all(streams.got(p) == 0 for p in B)
    # B: its queue full, never more; beyond it at most one parked chunk per partition
    # (each partition is fetched again as soon as its own chunk is queued); nothing more fetched.
    assert len(streams.b) == CAPACITY and streams.peak_b <= CAPACITY
    assert streams.parked_b() == len(B) and streams.hindrances() == (len(B), 0)
    fetched_b = [info.fetched_offset for info in streams.infos_b]
    fetches_b = [streams.cluster.fetches[("t", p)] for p in B]
    time.sleep(0.3)
    assert [streams.cluster.fetches[("t", p)] for p in B] == fetches_b
    assert [info.fetched_offset for info in streams.infos_b] == fetched_b
    # B resumes: everything, once, in order per partition.
    streams.read(streams.b, streams.got_b)
    for p in (0, *B):
        streams.check_exact(p, 400)
    assert streams.parked_b() == 0 and streams.hindrances() == (0, 0)


def test_item3_with_every_stream_full_the_fetcher_waits(streams: TwoStreams, cluster: FakeCluster) -> None:
    streams.start()
    wait(lambda: len(streams.a) == CAPACITY and len(streams.b) == CAPACITY, "both queues full")

    def quiet() -> bool:  # the last response is processed: no fetch for 0.1 s
        seen = dict(cluster.fetches)
        time.sleep(0.1)
        return cluster.fetches == seen

    wait(quiet, "the fetcher to stop fetching")
    before = dict(cluster.fetches)
    time.sleep(0.5)
    assert cluster.fetches == before, "fetched while every partition waited for room"
    # One chunk taken from A: A's partition is fetched again at once; B, still full, is not.
    assert streams.take(streams.a)
    wait(lambda: cluster.fetches[("t", 0)] > before[("t", 0)] and len(streams.a) == CAPACITY,
         "a fetch once A had room")
    assert all(cluster.fetches[("t", p)] == before[("t", p)] for p in B)
    streams.read(streams.a, lambda: streams.got(0) >= 400)
    streams.read(streams.b, streams.got_b)
    for p in (0, *B):
        streams.check_exact(p, 400)


def test_item3_removing_a_partition_drops_its_parked_chunk_and_a_new_owner_loses_nothing(
        streams: TwoStreams) -> None:
    streams.start()
    streams.read(streams.a, lambda: streams.got(0) >= 400)
    assert streams.parked_b() == len(B)
    parked = B[0]  # one of the partitions holding a parked chunk
    others = [p for p in B if p != parked]
    # The partition with the parked chunk moves away (the rebalancer's _revoke): B takes the others only.
    streams.manager.remove_partitions([("t", parked)])
    info = streams.infos_b[B.index(parked)]
    streams.read(streams.b, lambda: all(streams.got(p) >= 400 for p in others))
    time.sleep(0.2)
    streams.take(streams.b)
    assert streams.got(parked) == info.consumed_offset < 400, "a chunk of a removed partition was queued"
    # It comes back (to another stream, or after a rebalance) from the consumed position: nothing lost.
    streams.manager.start_connections([PartitionTopicInfo("t", parked, streams.b, info.consumed_offset, 150)])
    streams.read(streams.b, streams.got_b)
    for p in (0, *B):
        streams.check_exact(p, 400)
    wait(lambda: streams.hindrances() == (0, 0), "no partition counted as parked (the removed one's chunk was dropped)")


def test_item3_an_error_chunk_waits_its_turn_behind_a_full_queue(cluster: FakeCluster) -> None:
    s = TwoStreams(cluster, per_partition=0)
    try:
        cluster.append("t", 0, [b"t-0-%d" % i for i in range(100)])
        for p in B:
            cluster.append("t", p, [b"t-%d-%d" % (p, i) for i in range(100)], corrupt_at=60 if p == 1 else None)
        s.start()
        s.read(s.a, lambda: s.got(0) >= 100)
        s.read(s.b, lambda: bool(s.error_chunks) and all(s.got(p) >= 100 for p in B[1:]))
        s.check_exact(1, 60)  # every good message first, then the error, at its offset
        assert [(type(c.error), c.fetch_offset) for c in s.error_chunks] == [(CorruptMessageError, 60)]
        assert s.partition_metrics(1)["stalled"] is True
        for p in (0, *B[1:]):
            s.check_exact(p, 100)
        wait(lambda: s.hindrances() == (0, 1), "the stalled partition counted, nothing parked")
    finally:
        s.manager.stop()


# --------------------------------------------------------------------------- the queue's side


def test_room_listeners_hear_of_room_in_a_full_queue_only() -> None:
    queue = ChunkQueue(2)
    info = PartitionTopicInfo("t", 0, queue, 0, 100)
    calls: List[int] = []
    listener = lambda: calls.append(len(queue))  # noqa: E731
    queue.add_room_listener(listener)
    queue.add_room_listener(listener)  # idempotent
    assert queue.offer(FetchedDataChunk(info, 0, [(0, None, b"a")]))
    assert queue.get(0) is not None
    assert calls == []  # it was not full
    for i in range(2):
        assert queue.offer(FetchedDataChunk(info, i, [(i, None, b"a")]))
    assert not queue.has_room()
    assert not queue.offer(FetchedDataChunk(info, 2, [(2, None, b"a")]))
    assert len(queue) == 2
    assert queue.get(0) is not None
    assert calls == [1]
    assert queue.offer(FetchedDataChunk(info, 3, [(3, None, b"a")]))
    queue.discard([info])
    assert calls == [1, 0]
    queue.offer(FetchedDataChunk(info, 4, [(4, None, b"a")]))
    queue.clear()
    assert calls == [1, 0, 0]
    queue.remove_room_listener(listener)
    for i in range(2):
        queue.offer(FetchedDataChunk(info, i, [(i, None, b"a")]))
    queue.get(0)
    assert calls == [1, 0, 0]


def test_offer_advances_the_position_only_when_queued() -> None:
    queue = ChunkQueue(1)
    info = PartitionTopicInfo("t", 0, queue, 10, 100)
    assert info.offer(FetchedDataChunk(info, 10, [(10, None, b"a"), (11, None, b"b")]))
    assert info.fetched_offset == 12
    parked = FetchedDataChunk(info, 12, [(12, None, b"c")])
    assert not info.offer(parked)  # full: nothing changes
    assert info.fetched_offset == 12 and len(queue) == 1
    queue.get(0)
    assert info.offer(parked)
    assert info.fetched_offset == 13
    queue.get(0)
    assert info.offer(FetchedDataChunk(info, 5, [(5, None, b"x")]))  # stale: dropped
    assert len(queue) == 0 and info.fetched_offset == 13
