"""The fetch path (FetcherManager, LeaderFinder, FetcherThreads) against the real 3-broker cluster.

Each test creates its own topics. Messages are produced with kafka-python (acks=all
where failover is involved) and fetched into ChunkQueues the way the iterator
takes them; per partition the received offsets must be exactly 0, 1, 2, ... (no
gap, no duplicate) and carry what the log holds.
"""

from __future__ import annotations

import threading
import time
import types
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import pytest
from kafka import KafkaProducer

from zkconsumer.errors import BrokerUnavailableError, MessageSizeTooLargeError
from zkconsumer.fetch.handoff import ChunkQueue, FetchedDataChunk, PartitionTopicInfo
from zkconsumer.fetch.manager import FetcherManager, fetcher_id
from zkconsumer.structs import Broker
from zkconsumer.wire.connection import BrokerConnection
from zkconsumer.wire.protocol import FetchPartition
from zkconsumer.zookeeper.zkformat import decode_broker

TP = Tuple[str, int]


def wait_until(predicate: Callable[[], object], timeout: float, what: str,
               details: Optional[Callable[[], object]] = None) -> None:
    """Poll ``predicate``; fail naming ``what`` (and ``details()``, e.g. fetcher metrics) on timeout."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            extra = f"; {details()}" if details is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{extra}")
        time.sleep(0.05)


def fetch_config(**overrides: object) -> types.SimpleNamespace:
    """The ConsumerConfig attributes FetcherManager reads, with test-friendly values."""
    values = dict(fetch_message_max_bytes=1 << 20, fetch_min_bytes=1, fetch_wait_max_ms=100,
                  socket_timeout_ms=10_000, socket_receive_buffer_bytes=65536, num_consumer_fetchers=2,
                  refresh_leader_backoff_ms=100, auto_offset_reset="smallest", client_id="fetcher-it",
                  security_protocol="PLAINTEXT", ssl_cafile=None, ssl_certfile=None, ssl_keyfile=None,
                  ssl_check_hostname=True)
    values.update(overrides)
    return types.SimpleNamespace(**values)


@pytest.fixture
def live_brokers(zk):
    """``brokers()`` as the connector gives it: the registrations under /brokers/ids."""
    def brokers() -> List[Broker]:
        out = []
        for child in zk.get_children("/brokers/ids"):
            data = zk.get(f"/brokers/ids/{child}")[0]
            out.append(decode_broker(f"/brokers/ids/{child}", data))
        return out
    return brokers


@pytest.fixture
def producer(cluster):
    p = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, api_version=(0, 9), acks="all",
                      retries=20, retry_backoff_ms=200, max_in_flight_requests_per_connection=1,
                      request_timeout_ms=15_000)
    yield p
    p.close(5)


class Collector:
    """Takes chunks from queues like ConsumerIterator: skips below consumed_offset, then advances it."""

    def __init__(self, queues: Sequence[ChunkQueue]) -> None:
        self.queues = list(queues)
        self.messages: Dict[TP, List[Tuple[int, Optional[bytes]]]] = {}
        self.errors: List[FetchedDataChunk] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(q,), daemon=True) for q in self.queues]
        for t in self._threads:
            t.start()

    def _run(self, queue: ChunkQueue) -> None:
        while not self._stop.is_set():
            chunk = queue.get(0.1)
            if not isinstance(chunk, FetchedDataChunk):
                continue
            info = chunk.topic_info
            with self._lock:
                if chunk.error is not None:
                    self.errors.append(chunk)
                    continue
                for offset, _key, value in chunk.messages:
                    if offset >= info.consumed_offset:
                        self.messages.setdefault((info.topic, info.partition), []).append((offset, value))
                        info.consumed_offset = offset + 1

    def count(self, tp: TP) -> int:
        with self._lock:
            return len(self.messages.get(tp, []))

    def values(self, tp: TP) -> List[Optional[bytes]]:
        with self._lock:
            return [v for _, v in self.messages.get(tp, [])]

    def offsets(self, tp: TP) -> List[int]:
        with self._lock:
            return [o for o, _ in self.messages.get(tp, [])]

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)


def our_threads() -> List[str]:
    """Live threads started by a FetcherManager."""
    return [t.name for t in threading.enumerate()
            if t.name.startswith(("zkconsumer-fetcher-", "zkconsumer-leader-finder-")) and t.is_alive()]


def infos_for(topic: str, partitions: int, queues: Sequence[ChunkQueue], offset: int = 0) -> List[PartitionTopicInfo]:
    return [PartitionTopicInfo(topic, p, queues[p % len(queues)], offset, 1 << 20) for p in range(partitions)]


def produce(producer: KafkaProducer, topic: str, partition: int, values: Sequence[bytes]) -> None:
    futures = [producer.send(topic, value=v, partition=partition) for v in values]
    for f in futures:
        f.get(timeout=30)


def test_every_message_exactly_once_in_order_from_three_brokers_with_two_fetcher_ids(
        cluster, make_topic, live_brokers, producer) -> None:
    topic = make_topic(partitions=6, replication=2)
    expected = {p: [b"%d:%d" % (p, i) for i in range(500)] for p in range(6)}
    for p, values in expected.items():
        produce(producer, topic, p, values)

    queues = [ChunkQueue(2), ChunkQueue(2)]
    errors: List[BaseException] = []
    manager = FetcherManager(fetch_config(), live_brokers, errors.append)
    collector = Collector(queues)
    try:
        manager.start_connections(infos_for(topic, 6, queues))
        wait_until(lambda: all(collector.count((topic, p)) >= 500 for p in range(6)), 60, "all 3000 messages")
        for p in range(6):
            assert collector.offsets((topic, p)) == list(range(500))
            assert collector.values((topic, p)) == expected[p]
        metrics = manager.metrics()
        fetchers = metrics["fetchers"]
        assert {f["broker"] for f in fetchers.values()} == set(cluster.broker_ids)
        assert {f["fetcher_id"] for f in fetchers.values()} == {0, 1}
        for p in range(6):
            m = metrics["partitions"][f"{topic}-{p}"]
            assert m["leader"] == cluster.leader(topic, p)
            assert m["fetcher"] == f"zkconsumer-fetcher-fetcher-it-{fetcher_id(topic, p, 2)}-broker-{m['leader']}"
            assert (m["high_watermark"], m["fetched_offset"], m["fetch_lag"]) == (500, 500, 0)
    finally:
        manager.stop()
        collector.stop()
    assert errors == [] and our_threads() == []


def test_leader_killed_while_producing_loses_and_duplicates_nothing(
        cluster, make_topic, live_brokers, producer) -> None:
    topic = make_topic(partitions=6, replication=3)
    victim = cluster.leader(topic, 0)
    queues = [ChunkQueue(4)]
    errors: List[BaseException] = []
    manager = FetcherManager(fetch_config(), live_brokers, errors.append)
    collector = Collector(queues)
    acked: Dict[int, List[bytes]] = {p: [] for p in range(6)}
    try:
        manager.start_connections(infos_for(topic, 6, queues))
        for i in range(3000):
            p = i % 6
            value = b"%d:%d" % (p, i)
            producer.send(topic, value=value, partition=p).get(timeout=60)
            acked[p].append(value)
            if i == 1000:
                cluster.kill_broker(victim)
        wait_until(lambda: all(collector.count((topic, p)) >= len(acked[p]) for p in range(6)), 90,
                   "every acknowledged message after the failover")
        time.sleep(0.5)  # anything extra (a duplicate) would show up now
        for p in range(6):
            offsets, values = collector.offsets((topic, p)), collector.values((topic, p))
            assert offsets == list(range(len(offsets))), f"partition {p}: gap or duplicate offset"
            # acks=all: every acknowledged value is there, in order (a producer retry
            # may have written a value twice, at two offsets: that is the log, not us)
            wanted = set(acked[p])
            first_seen = list(dict.fromkeys(v for v in values if v in wanted))
            assert first_seen == acked[p], f"partition {p}: acknowledged messages missing or reordered"
        leaders = {m["leader"] for m in manager.metrics()["partitions"].values()}
        assert victim not in leaders
    finally:
        manager.stop()
        collector.stop()
        cluster.start_broker(victim)
    assert errors == [] and our_threads() == []


class RecordingConnection(BrokerConnection):
    """A fetcher's connection that notes which thread sent each fetch (``threads``: shared by all)."""

    threads: List[int] = []

    def fetch_walked(self, requested, max_wait_ms, min_bytes, max_bytes, timeout_ms=None):  # type: ignore[no-untyped-def]
        RecordingConnection.threads.append(threading.get_ident())
        return super().fetch_walked(requested, max_wait_ms, min_bytes, max_bytes, timeout_ms)


def test_a_consumer_fetching_on_its_own_thread_follows_a_killed_leader_losing_and_duplicating_nothing(
        cluster, make_topic, live_brokers, producer) -> None:
    """fetch.on.consumer.thread against the real brokers: the consumer waiting on its queue sends the fetches
    of the partition's one fetcher; a leader killed mid-stream hands the partition to the new leader's fetcher,
    which the consumer drives again, every acknowledged message once, in order."""
    topic = make_topic(partitions=1, replication=3)
    victim = cluster.leader(topic, 0)
    queue = ChunkQueue(2)
    config = fetch_config(fetch_on_consumer_thread=True)
    RecordingConnection.threads = []
    errors: List[BaseException] = []
    manager = FetcherManager(config, live_brokers, errors.append, connection_factory=lambda host, port: RecordingConnection(
        host, port, config.client_id, config.socket_timeout_ms, config.socket_receive_buffer_bytes, reuse_buffer=True))
    collector = Collector([queue])
    acked: List[bytes] = []
    try:
        manager.start_connections(infos_for(topic, 1, [queue]))
        for i in range(1500):
            acked.append(b"%d" % i)
            producer.send(topic, value=acked[-1], partition=0).get(timeout=60)
            if i == 500:
                before = len(RecordingConnection.threads)
                cluster.kill_broker(victim)
        wait_until(lambda: collector.count((topic, 0)) >= len(acked), 90, "every acknowledged message after the failover")
        time.sleep(0.5)  # anything extra (a duplicate) would show up now
        offsets, values = collector.offsets((topic, 0)), collector.values((topic, 0))
        assert offsets == list(range(len(offsets))), "gap or duplicate offset"
        assert list(dict.fromkeys(v for v in values if v in set(acked))) == acked
        consumer = collector._threads[0].ident
        assert RecordingConnection.threads[:before].count(consumer) > before // 2, "the consumer drove before the kill"
        after = RecordingConnection.threads[before:]
        assert after.count(consumer) > len(after) // 2, "the consumer drove the new leader's fetcher"
        assert manager.metrics()["partitions"][f"{topic}-0"]["leader"] != victim
    finally:
        manager.stop()
        collector.stop()
        cluster.start_broker(victim)
    assert errors == [] and our_threads() == []


def take_offsets(queue: ChunkQueue, info: PartitionTopicInfo, timeout: float) -> List[int]:
    """One ``get`` as the iterator does (on this thread): the offsets handed out, advancing consumed_offset."""
    chunk = queue.get(timeout)
    if not isinstance(chunk, FetchedDataChunk) or chunk.error is not None:
        return []
    offsets = [m[0] for m in chunk.messages if m[0] >= info.consumed_offset]
    if offsets:
        info.consumed_offset = offsets[-1] + 1
    return offsets


def produce_and_take(producer, topic: str, queue: ChunkQueue, info: PartitionTopicInfo, got: List[int], first: int,
                     end: int, within: float) -> None:
    """Produce messages ``first``..``end``-1 to partition 0 of ``topic`` and take from ``queue`` (0.3 s waits)
    into ``got`` until it holds ``end`` offsets or ``within`` s passed."""
    produce(producer, topic, 0, [b"%d" % i for i in range(first, end)])
    deadline = time.monotonic() + within
    while len(got) < end and time.monotonic() < deadline:
        got.extend(take_offsets(queue, info, 0.3))


def test_a_consumer_fetching_on_its_own_thread_times_out_on_time_while_its_leader_is_frozen(
        cluster, make_topic, live_brokers, producer) -> None:
    """fetch.on.consumer.thread with the partition's leader SIGSTOPped (the connection open, no answer):
    every wait of the consumer ends at its own timeout (0.3 s, and 50 ms for an answer), not at socket.timeout.ms (2 s) as its
    round's socket wait would without a deadline; after 2 s without an answer the fetcher fails the
    broker and hands the partition back, as its own thread would; once the broker runs again, every
    message arrives once, in order."""
    topic = make_topic(partitions=1, replication=1)
    leader = cluster.leader(topic, 0)
    queue = ChunkQueue(2)
    info = infos_for(topic, 1, [queue])[0]
    config = fetch_config(fetch_on_consumer_thread=True, socket_timeout_ms=2000)
    errors: List[BaseException] = []
    manager = FetcherManager(config, live_brokers, errors.append)
    got: List[int] = []
    try:
        manager.start_connections([info])
        produce_and_take(producer, topic, queue, info, got, 0, 10, 30)
        assert got == list(range(10))
        cluster.pause_broker(leader)
        try:
            frozen, longest = time.monotonic(), 0.0
            while time.monotonic() - frozen < 3.5:
                call = time.monotonic()
                got.extend(take_offsets(queue, info, 0.3))
                longest = max(longest, time.monotonic() - call)
            failures = manager.metrics()["brokers"][leader]["errors"].get("BrokerUnavailableError", 0)
        finally:
            cluster.pause_broker(leader, paused=False)
        assert longest < 0.3 + 0.4, f"a 0.3 s wait took {longest:.2f} s while the leader was frozen"
        assert failures >= 1, "the frozen broker was never failed (socket.timeout.ms passed without an answer)"
        produce_and_take(producer, topic, queue, info, got, 10, 20, 60)
        assert got == list(range(20)), "gap or duplicate offset"
    finally:
        manager.stop()
    assert errors == [] and our_threads() == []


def test_a_round_cut_at_a_consumers_deadline_by_a_frozen_leader_is_counted_as_a_cut_not_an_error(
        cluster, make_topic, live_brokers, producer) -> None:
    """The consumer runs the rounds (it has waited on its idle queue for a second, so the fetcher thread
    stepped back) when the partition's leader is SIGSTOPped: the consumer's round, unanswered, is cut at the
    consumer's deadline and counted in ``deadline_cuts`` and ``requests``, and is no broker error (none is
    counted before ``socket.timeout.ms``, 2 s here, passes without an answer to the fetcher thread's round)."""
    topic = make_topic(partitions=1, replication=1)
    leader = cluster.leader(topic, 0)
    queue = ChunkQueue(2)
    info = infos_for(topic, 1, [queue])[0]
    errors: List[BaseException] = []
    manager = FetcherManager(fetch_config(fetch_on_consumer_thread=True, socket_timeout_ms=2000), live_brokers,
                             errors.append)
    got: List[int] = []
    try:
        manager.start_connections([info])
        produce_and_take(producer, topic, queue, info, got, 0, 5, 30)
        idle = time.monotonic()
        while time.monotonic() - idle < 1.0:  # the consumer's long polls: the fetcher thread steps back
            got.extend(take_offsets(queue, info, 0.3))
        assert got == list(range(5))
        before = manager.metrics()["brokers"][leader]
        cluster.pause_broker(leader)
        try:
            frozen = time.monotonic()
            while time.monotonic() - frozen < 1.0:
                got.extend(take_offsets(queue, info, 0.3))
            after = manager.metrics()["brokers"][leader]
        finally:
            cluster.pause_broker(leader, paused=False)
        assert after["deadline_cuts"] - before["deadline_cuts"] >= 1, (before, after)
        assert after["requests"] - before["requests"] >= after["deadline_cuts"] - before["deadline_cuts"], (before, after)
        assert after["errors"] == before["errors"] == {}, (before, after)
        produce_and_take(producer, topic, queue, info, got, 5, 10, 60)
        assert got == list(range(10)), "gap or duplicate offset"
    finally:
        manager.stop()
    assert errors == [] and our_threads() == []


def test_an_interrupted_long_poll_fails_at_once_and_the_next_request_reconnects(cluster, make_topic, live_brokers) -> None:
    """BrokerConnection.interrupt against a real broker: the fetch waiting out fetch.wait.max.ms fails at once,
    without the retry on a new connection that a dropped connection gets; the next fetch works."""
    topic = make_topic(partitions=1, replication=1)
    leader = next(b for b in live_brokers() if b.id == cluster.leader(topic, 0))
    conn = BrokerConnection(leader.host, leader.port, "interrupt-it", 30_000, 65536, reuse_buffer=True)
    wanted = [FetchPartition(topic, 0, 0, 1 << 20)]
    try:
        assert conn.fetch(wanted, 10, 1).partitions[0].error_code == 0  # connected
        timer = threading.Timer(0.3, conn.interrupt)
        timer.start()
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError, match="interrupted"):
            conn.fetch(wanted, 20_000, 1)
        assert time.monotonic() - started < 5.0
        assert conn.fetch(wanted, 10, 1).partitions[0].error_code == 0
    finally:
        conn.close()


@pytest.mark.parametrize("reset", ["smallest", "largest"])
def test_offset_out_of_range_resets_per_auto_offset_reset(
        cluster, make_topic, live_brokers, producer, reset: str) -> None:
    topic = make_topic(partitions=1, replication=1)
    produce(producer, topic, 0, [b"old-%d" % i for i in range(10)])
    queues = [ChunkQueue(2)]
    manager = FetcherManager(fetch_config(auto_offset_reset=reset), live_brokers, pytest.fail)
    collector = Collector(queues)
    try:
        info = infos_for(topic, 1, queues, offset=10_000)[0]
        manager.start_connections([info])
        wait_until(lambda: info.fetched_offset != 10_000, 30, "the out-of-range offset to be reset")
        assert info.consumed_offset == info.fetched_offset or collector.count((topic, 0)) > 0
        produce(producer, topic, 0, [b"new-%d" % i for i in range(5)])
        first = 0 if reset == "smallest" else 10
        wait_until(lambda: collector.count((topic, 0)) >= 15 - first, 30, "messages after the reset")
        assert collector.offsets((topic, 0)) == list(range(first, 15))
        assert collector.values((topic, 0))[-5:] == [b"new-%d" % i for i in range(5)]
    finally:
        manager.stop()
        collector.stop()


def test_negative_offset_is_placed_per_auto_offset_reset(cluster, make_topic, live_brokers, producer) -> None:
    topic = make_topic(partitions=2, replication=1)
    for p in range(2):
        produce(producer, topic, p, [b"v%d" % i for i in range(7)])
    queues = [ChunkQueue(2)]
    manager = FetcherManager(fetch_config(), live_brokers, pytest.fail)
    collector = Collector(queues)
    try:
        manager.start_connections(infos_for(topic, 2, queues, offset=-1))
        wait_until(lambda: all(collector.count((topic, p)) >= 7 for p in range(2)), 30, "14 messages")
        assert all(collector.offsets((topic, p)) == list(range(7)) for p in range(2))
    finally:
        manager.stop()
        collector.stop()


def test_message_larger_than_fetch_size_becomes_one_error_chunk(
        cluster, make_topic, live_brokers, producer) -> None:
    topic = make_topic(partitions=1, replication=1)
    produce(producer, topic, 0, [b"small-0", b"x" * 5000, b"small-2"])
    queues = [ChunkQueue(2)]
    manager = FetcherManager(fetch_config(fetch_message_max_bytes=1024), live_brokers, pytest.fail)
    collector = Collector(queues)
    try:
        manager.start_connections(infos_for(topic, 1, queues))
        wait_until(lambda: collector.errors, 30, "the error chunk")
        time.sleep(0.5)  # no second error chunk, no message after the big one
        (chunk,) = collector.errors
        assert isinstance(chunk.error, MessageSizeTooLargeError)
        assert (chunk.error.topic, chunk.error.partition, chunk.error.offset) == (topic, 0, 1)
        assert "1024" in str(chunk.error)
        assert collector.values((topic, 0)) == [b"small-0"]
        assert manager.metrics()["partitions"][f"{topic}-0"]["stalled"] is True
    finally:
        manager.stop()
        collector.stop()


@pytest.mark.parametrize("codec", ["gzip", "snappy"])
def test_compressed_batches_from_kafka_python(cluster, make_topic, live_brokers, codec: str) -> None:
    topic = make_topic(partitions=1, replication=1)
    p = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, api_version=(0, 9), compression_type=codec,
                      linger_ms=50, batch_size=16384)
    values = [b"%s-%d" % (codec.encode(), i) for i in range(2000)]
    for v in values:
        p.send(topic, value=v, partition=0)
    p.flush()
    p.close()
    queues = [ChunkQueue(2)]
    manager = FetcherManager(fetch_config(fetch_message_max_bytes=8192), live_brokers, pytest.fail)
    collector = Collector(queues)
    try:
        manager.start_connections(infos_for(topic, 1, queues, offset=777))  # starts inside a wrapper
        wait_until(lambda: collector.count((topic, 0)) >= 2000 - 777, 30, "the compressed messages")
        assert collector.offsets((topic, 0)) == list(range(777, 2000))
        assert collector.values((topic, 0)) == values[777:]
    finally:
        manager.stop()
        collector.stop()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
def test_compressed_sets_from_kafkas_own_java_producer(cluster, make_topic, live_brokers, codec: str) -> None:
    """Kafka 0.9's Java producer: xerial snappy, and LZ4 with its broken frame checksum (KAFKA-3160)."""
    topic = make_topic(partitions=1, replication=1)
    lines = [f"{codec}-line-{i}" for i in range(200)]
    cluster.run_tool("kafka.tools.ConsoleProducer", "--broker-list", cluster.bootstrap_servers, "--topic", topic,
                     "--compression-codec", codec, "--sync", "--request-required-acks", "-1",
                     "--message-send-max-retries", "10", input="\n".join(lines) + "\n", check=True)
    queues = [ChunkQueue(2)]
    manager = FetcherManager(fetch_config(), live_brokers, pytest.fail)
    collector = Collector(queues)
    try:
        manager.start_connections(infos_for(topic, 1, queues))
        wait_until(lambda: collector.count((topic, 0)) >= 200, 30, "the 200 lines",
                   lambda: (collector.count((topic, 0)), manager.metrics()))
        assert collector.values((topic, 0)) == [line.encode() for line in lines]
        assert collector.offsets((topic, 0)) == list(range(200))
    finally:
        manager.stop()
        collector.stop()


def test_stop_connections_is_prompt_while_fetchers_are_blocked_on_full_queues(
        cluster, make_topic, live_brokers, producer) -> None:
    topic = make_topic(partitions=3, replication=1)
    for p in range(3):
        produce(producer, topic, p, [b"x" * 100] * 300)
    queue = ChunkQueue(1)
    manager = FetcherManager(fetch_config(fetch_message_max_bytes=2048), live_brokers, pytest.fail)
    infos = infos_for(topic, 3, [queue])
    manager.start_connections(infos)
    wait_until(lambda: len(queue) == 1, 30, "the queue to fill")
    time.sleep(0.3)
    started = time.monotonic()
    manager.stop_connections()
    assert time.monotonic() - started < 2
    assert our_threads() == [] and len(queue) == 1
    fetched = sum(i.fetched_offset for i in infos)
    chunk = queue.get(0)
    assert fetched == len(chunk.messages)  # only the queued chunk advanced a position
    manager.start_connections(infos)  # and it resumes exactly there
    got = len(chunk.messages)
    try:
        while got < 900:
            c = queue.get(10)
            assert isinstance(c, FetchedDataChunk)
            got += len(c.messages)
        assert got == 900
    finally:
        manager.stop()
