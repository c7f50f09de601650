"""zkconsumer.fetch.manager: fetcher ids (against Java) and partition bookkeeping over an in-memory fake cluster.

The fake stands in for brokers at the connection level (``connection_factory``):
it serves Metadata, Fetch (cutting message sets at ``max_bytes`` mid-message, as
a broker does) and ListOffsets from per-partition logs, and can move leaders,
take brokers down and count fetches. Real-broker behaviour is covered by
``tests/integration/test_fetcher.py``.
"""

from __future__ import annotations

import threading
import time
import types
from collections import Counter
from typing import Dict, List, Optional, Sequence, Set, Tuple

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from zkconsumer.errors import BrokerUnavailableError, ConsumerShutdownError, CorruptMessageError, MessageSizeTooLargeError
from zkconsumer.fetch.handoff import ChunkQueue, FetchedDataChunk, PartitionTopicInfo
from zkconsumer.fetch.manager import FetcherManager, connections_per_broker, fetcher_id, spread_over_connections
from zkconsumer.fetch.rounds import held_back_wait_ms
from zkconsumer.structs import Broker
from zkconsumer.wire.protocol import (
    BrokerMetadata,
    FetchPartition,
    FetchPartitionResponse,
    FetchResponse,
    MetadataResponse,
    PartitionMetadata,
    TopicMetadata,
)

from .walking import walked_via_fetch

TP = Tuple[str, int]

# --------------------------------------------------------------------------- fetcher ids

#: (topic, partition) -> fetcher id for 2, 3 and 5 fetchers, computed by Java 17 with
#: Kafka 0.9's ``Utils.abs(31 * topic.hashCode() + partition) % n``.
JAVA_FETCHER_IDS = {
    ("events", 0): (1, 0, 1), ("events", 1): (0, 2, 0), ("events", 7): (0, 2, 4),
    ("events", 1000): (1, 2, 1), ("t1", 0): (1, 0, 0), ("t1", 2): (1, 2, 2),
    ("my-topic", 0): (0, 0, 3), ("my-topic", 1): (1, 1, 4), ("my-topic", 1000): (0, 1, 3),
    ("zzzzzzzzzzzz", 0): (0, 2, 1), ("zzzzzzzzzzzz", 2): (0, 0, 4),
    ("événements", 1): (1, 0, 2), ("événements", 7): (1, 0, 3),
    ("a", 0): (1, 1, 2), ("a", 2): (1, 0, 4),
    ("topic-with-a-long-name-1234567890", 1): (0, 2, 4), ("topic-with-a-long-name-1234567890", 1000): (1, 2, 3),
}


@pytest.mark.parametrize("tp", sorted(JAVA_FETCHER_IDS))
def test_fetcher_id_matches_kafka(tp: TP) -> None:
    assert tuple(fetcher_id(tp[0], tp[1], n) for n in (2, 3, 5)) == JAVA_FETCHER_IDS[tp]
    assert fetcher_id(tp[0], tp[1], 1) == 0


def test_connections_are_shared_among_brokers_and_every_one_is_used() -> None:
    assert [connections_per_broker(3, b) for b in (0, 1, 2, 3, 7)] == [3, 3, 2, 1, 1]
    assert connections_per_broker(6, 3) == 2 and connections_per_broker(1, 1) == 1
    # leaders placed round-robin over 3 brokers: broker b leads p = b, b + 3, b + 6, b + 9
    new = [((p % 3, 0), ("t", p)) for p in range(12)]
    slots = spread_over_connections(new, {}, 2)
    for b in range(3):
        assert [slots[("t", p)] for p in range(b, 12, 3)] == [0, 1, 0, 1]
    # a later partition takes the least loaded connection; the others keep theirs
    load = {((0, 0), 0): 3, ((0, 0), 1): 1, ((0, 0), 2): 2}
    assert spread_over_connections([((0, 0), ("t", 12)), ((0, 0), ("t", 15))], load, 3) == {("t", 12): 1, ("t", 15): 1}
    assert load == {((0, 0), 0): 3, ((0, 0), 1): 3, ((0, 0), 2): 2}


def test_fetcher_id_of_int_min_is_zero() -> None:
    # 31 * h + p == -2**31 exactly: Kafka's Utils.abs maps it to 0, not to a negative number.
    from zkconsumer.assignors import java_string_hash

    topic = "events"
    h = java_string_hash(topic)
    partition = ((-(1 << 31)) - 31 * h) % (1 << 32)
    partition = partition - (1 << 32) if partition >= 1 << 31 else partition
    assert fetcher_id(topic, partition, 7) == 0


# --------------------------------------------------------------------------- the fake cluster

def encode(offset: int, value: bytes, corrupt: bool = False) -> bytes:
    b = LegacyRecordBatchBuilder(magic=0, compression_type=0, batch_size=1 << 30)
    b.append(offset, None, None, value)
    data = bytearray(b.build())
    if corrupt:
        data[-1] ^= 0xFF
    return bytes(data)


class FakeCluster:
    """Brokers 1..n with per-partition logs; thread-safe."""

    def __init__(self, brokers: int = 3) -> None:
        self.lock = threading.Lock()
        self.brokers = {i: Broker(i, f"b{i}", 9000 + i) for i in range(1, brokers + 1)}
        self.down: Set[int] = set()
        self.logs: Dict[TP, List[bytes]] = {}
        self.start: Dict[TP, int] = {}
        self.leaders: Dict[TP, int] = {}
        self.fetches: Counter = Counter()
        self.connections = 0
        self.fail_fetch: Optional[BaseException] = None

    def create(self, topic: str, partitions: int, per_partition: int = 0) -> None:
        with self.lock:
            for p in range(partitions):
                self.logs[(topic, p)] = []
                self.start[(topic, p)] = 0
                self.leaders[(topic, p)] = 1 + (p % len(self.brokers))
        for p in range(partitions):
            self.append(topic, p, [b"%s-%d-%d" % (topic.encode(), p, i) for i in range(per_partition)])

    def append(self, topic: str, partition: int, values: Sequence[bytes], corrupt_at: Optional[int] = None) -> None:
        with self.lock:
            log = self.logs[(topic, partition)]
            for v in values:
                offset = self.start[(topic, partition)] + len(log)
                log.append(encode(offset, v, corrupt=offset == corrupt_at))

    def value(self, topic: str, partition: int, offset: int) -> bytes:
        return b"%s-%d-%d" % (topic.encode(), partition, offset)

    def live(self) -> List[Broker]:
        with self.lock:
            return [b for i, b in self.brokers.items() if i not in self.down]

    def connect(self, host: str, port: int) -> "FakeConnection":
        with self.lock:
            self.connections += 1
        return FakeConnection(self, port - 9000)


class FakeConnection:
    def __init__(self, cluster: FakeCluster, broker_id: int) -> None:
        self.cluster = cluster
        self.broker_id = broker_id
        self.address = f"b{broker_id}:{9000 + broker_id}"
        self.aborted = False

    def _check(self) -> None:
        if self.aborted or self.broker_id in self.cluster.down:
            raise BrokerUnavailableError(f"broker {self.address} unreachable")

    def metadata(self, topics: Sequence[str]) -> MetadataResponse:
        self._check()
        c = self.cluster
        with c.lock:
            brokers = tuple(BrokerMetadata(i, b.host, b.port) for i, b in c.brokers.items() if i not in c.down)
            out = []
            for topic in topics:
                parts = tuple(PartitionMetadata(p, 0, c.leaders[(t, p)], (), ())
                              for (t, p) in sorted(c.logs) if t == topic)
                out.append(TopicMetadata(topic, 0 if parts else 3, parts))
        return MetadataResponse(brokers, tuple(out))

    fetch_walked = walked_via_fetch

    def fetch(self, partitions: Sequence[FetchPartition], max_wait_ms: int, min_bytes: int,
              timeout_ms: Optional[int] = None) -> FetchResponse:
        self._check()
        c = self.cluster
        if c.fail_fetch is not None:
            raise c.fail_fetch
        out = []
        with c.lock:
            for fp in partitions:
                tp = (fp.topic, fp.partition)
                c.fetches[tp] += 1
                out.append(self._one(tp, fp))
        if not any(len(p.message_set) for p in out):
            time.sleep(0.005)  # a broker would wait max_wait_ms for data
        return FetchResponse(tuple(out))

    def _one(self, tp: TP, fp: FetchPartition) -> FetchPartitionResponse:
        c = self.cluster
        if c.leaders.get(tp) != self.broker_id:
            return FetchPartitionResponse(tp[0], tp[1], 6, -1, memoryview(b""))
        start, log = c.start[tp], c.logs[tp]
        end = start + len(log)
        if not start <= fp.offset <= end:
            return FetchPartitionResponse(tp[0], tp[1], 1, -1, memoryview(b""))
        data = b"".join(log[fp.offset - start:])[:fp.max_bytes]  # cut mid-message, like a broker
        return FetchPartitionResponse(tp[0], tp[1], 0, end, memoryview(data))

    def list_offsets(self, topic: str, partition: int, time_: int, timeout_ms: Optional[int] = None) -> int:
        self._check()
        with self.cluster.lock:
            start = self.cluster.start[(topic, partition)]
            return start if time_ == -2 else start + len(self.cluster.logs[(topic, partition)])

    def close(self) -> None:
        pass

    def abort(self) -> None:
        self.aborted = True


def make_config(**overrides: object) -> types.SimpleNamespace:
    values = dict(fetch_message_max_bytes=1 << 20, fetch_min_bytes=1, fetch_wait_max_ms=10,
                  socket_timeout_ms=5000, socket_receive_buffer_bytes=65536, num_consumer_fetchers=2,
                  refresh_leader_backoff_ms=20, auto_offset_reset="smallest", client_id="unit",
                  security_protocol="PLAINTEXT", ssl_cafile=None, ssl_certfile=None, ssl_keyfile=None,
                  ssl_check_hostname=True)
    values.update(overrides)
    return types.SimpleNamespace(**values)


class Harness:
    """A FetcherManager over a FakeCluster, with one queue per topic and a collector."""

    def __init__(self, cluster: FakeCluster, capacity: int = 100, **config: object) -> None:
        self.cluster = cluster
        self.config = make_config(**config)
        self.errors: List[BaseException] = []
        self.manager = FetcherManager(self.config, cluster.live, self.errors.append,
                                      connection_factory=cluster.connect)
        self.queues: Dict[str, ChunkQueue] = {}
        self.capacity = capacity
        self.received: Dict[TP, List[Tuple[int, Optional[bytes]]]] = {}
        self.error_chunks: List[FetchedDataChunk] = []

    def infos(self, topic: str, partitions: Sequence[int], offset: int = 0) -> List[PartitionTopicInfo]:
        queue = self.queues.setdefault(topic, ChunkQueue(self.capacity))
        return [PartitionTopicInfo(topic, p, queue, offset, self.config.fetch_message_max_bytes) for p in partitions]

    def drain(self, until: "callable", timeout: float = 10.0) -> None:
        """Take chunks like an iterator would (advancing consumed offsets) until ``until()``."""
        deadline = time.monotonic() + timeout
        while not until():
            assert time.monotonic() < deadline, f"timed out; received {self.counts()}; errors {self.errors}"
            took = False
            for queue in self.queues.values():
                chunk = queue.get(0)
                if chunk is None:
                    continue
                took = True
                assert isinstance(chunk, FetchedDataChunk)
                info = chunk.topic_info
                if chunk.error is not None:
                    self.error_chunks.append(chunk)
                    continue
                for offset, _key, value in chunk.messages:
                    if offset >= info.consumed_offset:
                        self.received.setdefault((info.topic, info.partition), []).append((offset, value))
                        info.consumed_offset = offset + 1
            if not took:
                time.sleep(0.002)

    def counts(self) -> Dict[TP, int]:
        return {tp: len(v) for tp, v in self.received.items()}

    def has_all(self, expected: Dict[TP, int]) -> bool:
        return all(len(self.received.get(tp, [])) >= n for tp, n in expected.items())

    def check_exact(self, expected: Dict[TP, int], first: int = 0) -> None:
        for tp, n in expected.items():
            got = self.received.get(tp, [])
            assert [o for o, _ in got] == list(range(first, first + n)), tp
            assert [v for _, v in got] == [self.cluster.value(tp[0], tp[1], o) for o in range(first, first + n)]


def our_threads() -> List[str]:
    """Live threads started by a FetcherManager."""
    return [t.name for t in threading.enumerate()
            if t.name.startswith(("zkconsumer-fetcher-", "zkconsumer-leader-finder-")) and t.is_alive()]


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster()


@pytest.fixture(params=[1, 6], ids=["1-connection", "2-per-broker"])
def harness(cluster: FakeCluster, request: pytest.FixtureRequest):
    """A Harness whose fetchers use ``fetcher.connections`` 1 (Kafka's one per fetcher and broker) or 6
    (2 per broker on the fake's 3 brokers)."""
    h = Harness(cluster, fetcher_connections=request.param)
    yield h
    h.manager.stop()
    assert our_threads() == []


def set_quiet(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """The quiet period after which a wide fetcher gathers its partitions back onto one connection."""
    import zkconsumer.fetch.fetcher_thread as fetcher_thread
    import zkconsumer.fetch.manager as manager

    monkeypatch.setattr(fetcher_thread, "QUIET_S", seconds)
    monkeypatch.setattr(manager, "QUIET_S", seconds)


# --------------------------------------------------------------------------- bookkeeping

@pytest.mark.parametrize("backlog", [False, True], ids=["small-responses", "large-responses"])
def test_every_message_once_in_order_across_brokers_and_fetcher_ids(
        cluster: FakeCluster, harness: Harness, backlog: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small responses keep every partition on connection 0; large ones (a backlog cut at the fetch
    size) spread them over the connections (the quiet period is made long enough not to end here)."""
    set_quiet(monkeypatch, 3600.0)
    if backlog:
        harness.config.fetch_message_max_bytes = 64
    cluster.create("a", 4, per_partition=50)
    cluster.create("b", 3, per_partition=20)
    harness.manager.start_connections(harness.infos("a", range(4)) + harness.infos("b", range(3)))
    expected = {("a", p): 50 for p in range(4)}
    expected.update({("b", p): 20 for p in range(3)})
    harness.drain(lambda: harness.has_all(expected))
    harness.check_exact(expected)
    metrics = harness.manager.metrics()
    names = {name for name, f in metrics["fetchers"].items() if f["partitions"]}
    connections = 1
    if backlog:
        connections = connections_per_broker(harness.config.fetcher_connections, len(set(cluster.leaders.values())))
    slots = spread_over_connections((((cluster.leaders[tp], fetcher_id(*tp, 2)), tp) for tp in expected), {},
                                    connections)
    wanted = set()
    for t, p in expected:
        fid, connection = fetcher_id(t, p, 2), slots[(t, p)]
        name = f"zkconsumer-fetcher-unit-{fid}-broker-{cluster.leaders[(t, p)]}"
        wanted.add(f"{name}-{connection}" if connection else name)
        assert metrics["partitions"][f"{t}-{p}"]["fetcher"] == (f"{name}-{connection}" if connection else name)
    assert names == wanted
    assert {f["connection"] for f in metrics["fetchers"].values() if f["partitions"]} == set(range(connections))
    assert sum(f["partitions"] for f in metrics["fetchers"].values()) == 7
    a0 = metrics["partitions"]["a-0"]
    assert (a0["fetched_offset"], a0["high_watermark"], a0["fetch_lag"], a0["leader"]) == (50, 50, 0, 1)
    assert metrics["partitions_without_leader"] == 0


def test_small_fetch_size_cuts_messages_and_loses_none(cluster: FakeCluster) -> None:
    cluster.create("a", 2, per_partition=200)
    h = Harness(cluster, fetch_message_max_bytes=150)  # about four messages per fetch, last one cut
    try:
        h.manager.start_connections(h.infos("a", range(2)))
        h.drain(lambda: h.has_all({("a", 0): 200, ("a", 1): 200}))
        h.check_exact({("a", 0): 200, ("a", 1): 200})
    finally:
        h.manager.stop()


def test_leader_moves_rehome_partitions_without_loss_or_duplicates(cluster: FakeCluster, harness: Harness) -> None:
    cluster.create("a", 6, per_partition=30)
    harness.manager.start_connections(harness.infos("a", range(6)))
    harness.drain(lambda: harness.has_all({("a", p): 30 for p in range(6)}))
    for round_ in range(3):
        with cluster.lock:
            for tp in cluster.leaders:
                cluster.leaders[tp] = 1 + (cluster.leaders[tp] % 3)
        for p in range(6):
            cluster.append("a", p, [cluster.value("a", p, 30 * (round_ + 2) - 30 + i) for i in range(30)])
    harness.drain(lambda: harness.has_all({("a", p): 120 for p in range(6)}))
    harness.check_exact({("a", p): 120 for p in range(6)})
    assert {m["leader"] for m in harness.manager.metrics()["partitions"].values()} == {1, 2, 3}


def test_broker_down_hands_every_partition_back(cluster: FakeCluster, harness: Harness) -> None:
    cluster.create("a", 3, per_partition=10)
    harness.manager.start_connections(harness.infos("a", range(3)))
    harness.drain(lambda: harness.has_all({("a", p): 10 for p in range(3)}))
    with cluster.lock:
        cluster.down.add(1)
        for tp, leader in cluster.leaders.items():
            if leader == 1:
                cluster.leaders[tp] = 2
    for p in range(3):
        cluster.append("a", p, [cluster.value("a", p, 10 + i) for i in range(10)])
    harness.drain(lambda: harness.has_all({("a", p): 20 for p in range(3)}))
    harness.check_exact({("a", p): 20 for p in range(3)})
    fetchers = harness.manager.metrics()["fetchers"]
    deadline = time.monotonic() + 5
    while any(f["broker"] == 1 for f in fetchers.values()):  # the idle fetcher is shut down
        assert time.monotonic() < deadline, fetchers
        time.sleep(0.02)
        fetchers = harness.manager.metrics()["fetchers"]


@pytest.mark.parametrize("reset, first", [("smallest", 5), ("largest", 15)])
def test_offset_out_of_range_resets_per_auto_offset_reset(cluster: FakeCluster, reset: str, first: int) -> None:
    cluster.create("a", 1, per_partition=0)
    with cluster.lock:
        cluster.start[("a", 0)] = 5  # offsets 0..4 were deleted by retention
    cluster.append("a", 0, [cluster.value("a", 0, 5 + i) for i in range(10)])
    h = Harness(cluster, auto_offset_reset=reset)
    try:
        info = h.infos("a", [0], offset=1000)[0]
        h.manager.start_connections([info])
        time.sleep(0.1)
        cluster.append("a", 0, [cluster.value("a", 0, 15 + i) for i in range(5)])
        h.drain(lambda: h.has_all({("a", 0): 20 - first}))
        h.check_exact({("a", 0): 20 - first}, first=first)
    finally:
        h.manager.stop()


def test_negative_offset_starts_per_auto_offset_reset(cluster: FakeCluster, harness: Harness) -> None:
    cluster.create("a", 1, per_partition=7)
    info = harness.infos("a", [0], offset=-1)[0]
    harness.manager.start_connections([info])
    harness.drain(lambda: harness.has_all({("a", 0): 7}))
    harness.check_exact({("a", 0): 7})


def test_message_over_fetch_size_gives_one_error_chunk_and_no_refetching(cluster: FakeCluster) -> None:
    cluster.create("a", 2, per_partition=3)
    cluster.append("a", 0, [b"x" * 500])  # offset 3
    cluster.append("a", 0, [b"after"])    # offset 4, never reached
    h = Harness(cluster, fetch_message_max_bytes=200)
    try:
        h.manager.start_connections(h.infos("a", range(2)))
        h.drain(lambda: h.error_chunks and h.has_all({("a", 0): 3, ("a", 1): 3}))
        (chunk,) = h.error_chunks
        assert isinstance(chunk.error, MessageSizeTooLargeError)
        assert (chunk.error.topic, chunk.error.partition, chunk.error.offset, chunk.fetch_offset) == ("a", 0, 3, 3)
        assert "200" in str(chunk.error)
        fetches = cluster.fetches[("a", 0)]
        cluster.append("a", 1, [cluster.value("a", 1, 3 + i) for i in range(5)])
        h.drain(lambda: h.has_all({("a", 1): 8}))  # the other partition keeps going
        time.sleep(0.1)
        assert cluster.fetches[("a", 0)] == fetches
        assert h.manager.metrics()["partitions"]["a-0"]["stalled"] is True
        assert len(h.error_chunks) == 1
    finally:
        h.manager.stop()


def test_corrupt_message_delivers_the_good_prefix_then_one_error_chunk(cluster: FakeCluster, harness: Harness) -> None:
    cluster.create("a", 1)
    cluster.append("a", 0, [cluster.value("a", 0, i) for i in range(6)], corrupt_at=4)
    harness.manager.start_connections(harness.infos("a", [0]))
    harness.drain(lambda: harness.error_chunks)
    harness.check_exact({("a", 0): 4})
    (chunk,) = harness.error_chunks
    assert isinstance(chunk.error, CorruptMessageError) and chunk.error.offset == 4


def test_stop_connections_wakes_a_fetcher_blocked_on_a_full_queue(cluster: FakeCluster) -> None:
    cluster.create("a", 2, per_partition=100)
    h = Harness(cluster, capacity=1, fetch_message_max_bytes=100)
    try:
        h.manager.start_connections(h.infos("a", range(2)))
        queue = h.queues["a"]
        deadline = time.monotonic() + 5
        while len(queue) < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.1)  # the fetchers are now blocked in ChunkQueue.put
        started = time.monotonic()
        h.manager.stop_connections()
        assert time.monotonic() - started < 2
        assert our_threads() == []
        assert len(queue) == 1
        assert h.manager.metrics()["partitions"] == {}
        # fetched_offset was advanced only for the one chunk that was queued
        chunk = queue.get(0)
        assert chunk.topic_info.fetched_offset == chunk.messages[-1][0] + 1
    finally:
        h.manager.stop()


def test_restart_after_stop_continues_from_fetched_offset(cluster: FakeCluster, harness: Harness) -> None:
    cluster.create("a", 2, per_partition=40)
    infos = harness.infos("a", range(2))
    harness.manager.start_connections(infos)
    harness.drain(lambda: harness.has_all({("a", 0): 40, ("a", 1): 40}))
    harness.manager.stop_connections()
    for p in range(2):
        cluster.append("a", p, [cluster.value("a", p, 40 + i) for i in range(10)])
    harness.manager.start_connections(infos)
    harness.drain(lambda: harness.has_all({("a", 0): 50, ("a", 1): 50}))
    harness.check_exact({("a", 0): 50, ("a", 1): 50})


def test_remove_partitions_stops_only_those(cluster: FakeCluster, harness: Harness) -> None:
    cluster.create("a", 2, per_partition=5)
    harness.manager.start_connections(harness.infos("a", range(2)))
    harness.drain(lambda: harness.has_all({("a", 0): 5, ("a", 1): 5}))
    harness.manager.remove_partitions([("a", 0)])
    before = cluster.fetches[("a", 0)]
    for p in range(2):
        cluster.append("a", p, [cluster.value("a", p, 5 + i) for i in range(5)])
    harness.drain(lambda: harness.has_all({("a", 1): 10}))
    assert cluster.fetches[("a", 0)] == before
    assert len(harness.received[("a", 0)]) == 5
    assert list(harness.manager.metrics()["partitions"]) == ["a-1"]


def test_replacing_a_partition_info_fetches_with_the_new_one(cluster: FakeCluster, harness: Harness) -> None:
    cluster.create("a", 1, per_partition=10)
    old = harness.infos("a", [0])[0]
    harness.manager.start_connections([old])
    harness.drain(lambda: harness.has_all({("a", 0): 10}))
    new = harness.infos("a", [0], offset=old.fetched_offset)[0]
    harness.manager.start_connections([new])
    cluster.append("a", 0, [cluster.value("a", 0, 10 + i) for i in range(5)])
    harness.drain(lambda: harness.has_all({("a", 0): 15}))
    harness.check_exact({("a", 0): 15})
    assert old.fetched_offset == 10 and new.fetched_offset == 15


def test_leader_finder_retries_after_backoff_when_brokers_cannot_be_listed(cluster: FakeCluster) -> None:
    cluster.create("a", 1, per_partition=3)
    calls = {"n": 0}
    sleeps: List[float] = []

    def flaky_brokers() -> List[Broker]:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise ConnectionError("zookeeper down")
        return cluster.live()

    manager = FetcherManager(make_config(refresh_leader_backoff_ms=250), flaky_brokers, pytest.fail,
                             sleep=sleeps.append, connection_factory=cluster.connect)
    queue = ChunkQueue(10)
    try:
        manager.start_connections([PartitionTopicInfo("a", 0, queue, 0, 1 << 20)])
        chunk = queue.get(5)
        assert chunk is not None and [m[0] for m in chunk.messages] == [0, 1, 2]
        assert calls["n"] >= 3 and sleeps[:2] == [0.25, 0.25]
    finally:
        manager.stop()


def test_no_live_broker_answering_keeps_retrying(cluster: FakeCluster, harness: Harness) -> None:
    cluster.create("a", 1, per_partition=2)
    cluster.down.update({1, 2, 3})
    harness.manager.start_connections(harness.infos("a", [0]))
    time.sleep(0.15)
    assert harness.manager.metrics()["partitions_without_leader"] == 1
    cluster.down.clear()
    harness.drain(lambda: harness.has_all({("a", 0): 2}))


def test_unexpected_exception_in_a_fetcher_goes_to_on_error(cluster: FakeCluster, harness: Harness) -> None:
    cluster.create("a", 1, per_partition=2)
    cluster.fail_fetch = TypeError("bug")
    harness.manager.start_connections(harness.infos("a", [0]))
    deadline = time.monotonic() + 5
    while not harness.errors:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert isinstance(harness.errors[0], TypeError)


def test_shutdown_is_idempotent_joins_everything_and_refuses_restart(cluster: FakeCluster) -> None:
    cluster.create("a", 3, per_partition=1)
    h = Harness(cluster)
    h.manager.start_connections(h.infos("a", range(3)))
    h.drain(lambda: h.has_all({("a", p): 1 for p in range(3)}))
    assert our_threads()
    h.manager.stop()
    h.manager.stop()
    assert our_threads() == []
    with pytest.raises(ConsumerShutdownError):
        h.manager.start_connections(h.infos("a", [0]))


def test_stop_connections_without_start_is_harmless() -> None:
    manager = FetcherManager(make_config(), list, pytest.fail)
    manager.stop_connections()
    manager.stop()
    assert manager.metrics() == {"partitions": {}, "fetchers": {}, "partitions_without_leader": 0, "brokers": {}}


# --------------------------------------------------------------------------- fetch counters (Observability item 1)

def test_fetch_counters_count_requests_bytes_and_messages_per_broker(cluster: FakeCluster, harness: Harness) -> None:
    cluster.create("a", 4, per_partition=25)
    harness.manager.start_connections(harness.infos("a", range(4)))
    expected = {("a", p): 25 for p in range(4)}
    harness.drain(lambda: harness.has_all(expected))
    brokers = harness.manager.metrics()["brokers"]
    assert set(brokers) == {cluster.leaders[("a", p)] for p in range(4)}
    assert sum(b["messages"] for b in brokers.values()) == 100  # every message fetched once, none twice
    for broker_id, row in brokers.items():
        mine = sum(25 for p in range(4) if cluster.leaders[("a", p)] == broker_id)
        assert row["messages"] == mine
        assert row["requests"] > 0 and row["bytes"] >= sum(len(encode(0, b"")) for _ in range(mine))
        assert row["errors"] == {}


def test_fetch_counters_count_a_failed_request_by_error_kind(cluster: FakeCluster, harness: Harness) -> None:
    cluster.create("a", 3, per_partition=5)
    harness.manager.start_connections(harness.infos("a", range(3)))
    harness.drain(lambda: harness.has_all({("a", p): 5 for p in range(3)}))
    with cluster.lock:
        cluster.down.add(1)
    deadline = time.monotonic() + 10
    while harness.manager.metrics()["brokers"].get(1, {}).get("errors", {}).get("BrokerUnavailableError", 0) == 0:
        assert time.monotonic() < deadline, harness.manager.metrics()["brokers"]
        time.sleep(0.02)
    with cluster.lock:
        cluster.down.discard(1)


def test_a_request_left_without_a_parked_partition_waits_1_ms_then_doubles_up_to_fetch_wait_max_ms() -> None:
    waits = [0]
    for _ in range(10):
        waits.append(held_back_wait_ms(waits[-1], 100))
    assert waits[1:] == [1, 2, 4, 8, 16, 32, 64, 100, 100, 100]
    assert held_back_wait_ms(0, 0) == 0  # fetch.wait.max.ms 0: never asks for a wait at all
