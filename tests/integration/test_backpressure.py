"""Back-pressure per partition and retained prefetches on a real broker ("Big groups and slow streams", items 3, 4).

One member, two streams of one topic on one broker (one fetcher thread). Stream
B's consumer stops reading; stream A must go on reading (its whole backlog while
B's chunk waits parked), B's memory must stay within its bound, and once B reads again every message of
both partitions arrives exactly once, in order. Whether A keeps about the rate it
has alone is a timing, which the machine's load moves: this test prints the ratio
it measured and does not assert it; ``scripts/bench-backpressure`` measures it.

``foreach_stream`` (spark_integration/streams.py) needs no test of its own here:
each Spark task is a separate member (its own connector, ``{topic: 1}``: one
stream, its own fetcher threads and connections), so a slow task's full queue
shares no fetcher with any other task.

Item 4: a member joining elsewhere in the group must cost a member that keeps
its partitions nothing: no dip in the kept partition's throughput, nothing
delivered twice (with broker down, its prefetched chunks are still delivered:
``test_faults_rebalancer.py::test_item13c_...``).
"""

from __future__ import annotations

import threading
import time
from typing import Dict, List, Optional, Tuple

import pytest
from support.common import consumer_props, owners, unique, wait_until

from harness.cluster import ProjectCluster
from zkconsumer import ConsumerTimeoutError, KafkaStream, ZookeeperConsumerConnector
from zkconsumer.consumer.membership import RebalanceState
from zkconsumer.wire.connection import BrokerConnection
from zkconsumer.wire.protocol import LATEST_TIME

CHUNKS = 2                # queued.max.message.chunks
FETCH_BYTES = 64 * 1024   # fetch.message.max.bytes: a chunk is ~1,400 of these messages
PER_PARTITION = 150_000   # backlog of A's (and B's) partition


@pytest.fixture(scope="module")
def own_cluster():
    with ProjectCluster(brokers=1, partitions=1) as local:
        yield local


def fill(cluster: ProjectCluster, topic: str, partitions: int, messages: int) -> Dict[int, int]:
    """Create ``topic`` and fill it with Kafka's ProducerPerformance (fast); return each partition's log end."""
    cluster.create_topic(topic, partitions=partitions)
    cluster.run_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records",
                     str(messages), "--record-size", "20", "--throughput", "-1", "--producer-props",
                     f"bootstrap.servers={cluster.bootstrap_servers}", "acks=1", "batch.size=262144",
                     "linger.ms=5", timeout=120, check=True, jvm_options=["-Xmx256m"])
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with BrokerConnection(host, int(port), "fill", 30000, 65536) as conn:
        ends = {p: conn.list_offsets(topic, p, LATEST_TIME) for p in range(partitions)}
    assert sum(ends.values()) == messages
    return ends


def read(stream: KafkaStream, n: int, timeout: float, on_message=None) -> Tuple[List[Tuple[int, int]], float]:
    """Read ``n`` messages; return their (partition, offset) and the rate (messages/s, first to last)."""
    got: List[Tuple[int, int]] = []
    first = last = 0.0
    deadline = time.monotonic() + timeout
    while len(got) < n:
        assert time.monotonic() < deadline, f"stream read only {len(got)} of {n} messages in {timeout}s"
        try:
            for m in stream:
                got.append((m.partition, m.offset))
                if len(got) == 1:
                    first = time.monotonic()
                if on_message is not None and len(got) % 1000 == 0:
                    on_message()
                if len(got) >= n or time.monotonic() >= deadline:
                    break
        except ConsumerTimeoutError:
            pass
    last = time.monotonic()
    return got, (len(got) - 1) / max(last - first, 1e-6)


def props(cluster: ProjectCluster) -> Dict[str, object]:
    # One fetcher thread for both partitions (fetcher.connections=1): with more connections the two
    # partitions would be fetched by different threads, and a thread blocked on one full queue
    # would not be what stops the other.
    return consumer_props(cluster, unique("bp"), queued_max_message_chunks=CHUNKS,
                          fetch_message_max_bytes=FETCH_BYTES, num_consumer_fetchers=1, fetcher_connections=1)


def test_item3_a_stalled_stream_does_not_slow_the_other_stream_of_the_member(own_cluster) -> None:
    cluster = own_cluster
    # A alone: the same member layout (two streams, one fetcher), B's stream has no partition.
    # Read twice (two groups): the first pass warms up the broker and this process.
    alone_topic = unique("alone")
    ends = fill(cluster, alone_topic, 1, PER_PARTITION)
    for _ in range(2):
        with ZookeeperConsumerConnector(props(cluster)) as member:
            a, _ = member.create_message_streams({alone_topic: 2})[alone_topic]
            got, rate_alone = read(a, ends[0], timeout=30)
            assert got == [(0, o) for o in range(ends[0])]

    # A beside B, whose consumer does not read until A has read its whole backlog.
    topic = unique("stalled")
    ends = fill(cluster, topic, 2, 2 * PER_PARTITION)
    with ZookeeperConsumerConnector(props(cluster)) as member:
        a, b = member.create_message_streams({topic: 2})[topic]  # Range: stream 0 gets p0, stream 1 gets p1
        peak = {"queue": 0, "parked": 0}

        def sample() -> None:
            peak["queue"] = max(peak["queue"], len(b.queue))
            parked = sum(1 for p in member._fetchers.metrics()["partitions"].values() if p.get("parked"))
            peak["parked"] = max(peak["parked"], parked)

        got_a, rate_beside = read(a, ends[0], timeout=20, on_message=sample)
        ratio = rate_beside / rate_alone
        print(f"\nA alone: {rate_alone:,.0f} msg/s; A beside stalled B: {rate_beside:,.0f} msg/s; "
              f"ratio {ratio:.2f}; B's peak queue {peak['queue']} chunks (bound {CHUNKS}), "
              f"peak parked chunks {peak['parked']}")
        assert got_a == [(0, o) for o in range(ends[0])]
        # A read its whole backlog while B's chunk waited parked (not a fetcher blocked on B's full
        # queue, which would have stalled A until the timeout). The rate ratio is printed, not
        # asserted: under CI's load it went from about 0.9 to 0.47 in one run (a timing, not a property).
        assert peak["parked"] >= 1, "B's queue never filled while A read: the test did not stall B"
        assert peak["queue"] <= CHUNKS and peak["parked"] <= 2  # one per partition at most
        assert len(b.queue) == CHUNKS  # B's queue filled, and no more
        # B resumes: every message of its partition, once, in order; A gets nothing more.
        got_b, _ = read(b, ends[1], timeout=30)
        assert got_b == [(1, o) for o in range(ends[1])]
        time.sleep(0.5)
        for stream in (a, b):
            try:
                extra = next(iter(stream))
            except ConsumerTimeoutError:
                continue
            raise AssertionError(f"delivered more than the log holds: {extra}")


# --------------------------------------------------------------------------- item 4


class TimedReader:
    """Iterates a stream on a thread, recording (time, partition, offset); ``throttle`` caps its pace."""

    def __init__(self, stream: KafkaStream, per_second: Optional[float] = None) -> None:
        self.stream = stream
        self.per_second = per_second
        self.got: List[Tuple[float, int, int]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        it = iter(self.stream)
        while not self._stop.is_set():
            try:
                for m in it:
                    with self._lock:
                        self.got.append((time.monotonic(), m.partition, m.offset))
                        n = len(self.got)
                    pace = self.per_second
                    if pace is not None and n % 100 == 0:
                        time.sleep(100 / pace)
                    if self._stop.is_set():
                        return
                return
            except ConsumerTimeoutError:
                continue

    def snapshot(self) -> List[Tuple[float, int, int]]:
        with self._lock:
            return list(self.got)

    def offsets(self, partition: int) -> List[int]:
        return [o for _, p, o in self.snapshot() if p == partition]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert not self._thread.is_alive()


def test_item4_a_join_elsewhere_costs_retained_partitions_no_throughput_and_no_redelivery(own_cluster) -> None:
    """Member "b" keeps partition 1 while "a" joins and takes partition 0: p1 keeps flowing, nothing twice."""
    cluster = own_cluster
    topic = unique("join")
    ends = fill(cluster, topic, 2, 2 * 100_000)  # lasts ~10 s at b's pace
    base = {**props(cluster), "auto.commit.enable": "true", "auto.commit.interval.ms": 600_000}
    zk = cluster.kazoo_client()
    with ZookeeperConsumerConnector({**base, "consumer.id": "b"}) as first:
        group = base["group.id"]
        kept = TimedReader(first.create_message_streams({topic: 1})[topic][0], per_second=20_000)
        try:
            wait_until(lambda: len(kept.offsets(1)) > 0, 30, "the first member to deliver partition 1")
            time.sleep(2.0)
            joined = time.monotonic()
            with ZookeeperConsumerConnector({**base, "consumer.id": "a"}) as second:
                moved = TimedReader(second.create_message_streams({topic: 1})[topic][0])
                try:
                    wait_until(lambda: owners(zk, group, topic) == {0: f"{group}_a-0", 1: f"{group}_b-0"}
                               and first.status.state is RebalanceState.STABLE
                               and second.status.state is RebalanceState.STABLE, 30, "the group to settle")
                    settled = time.monotonic()
                    time.sleep(1.0)
                    window_end = time.monotonic()
                    seen = kept.snapshot()
                    kept.per_second = None  # then read the rest at full speed
                    wait_until(lambda: len(kept.offsets(1)) >= ends[1] and
                               len(set(kept.offsets(0)) | set(moved.offsets(0))) >= ends[0], 60, "every message")
                    time.sleep(0.5)
                finally:
                    moved.stop()
                    kept.stop()  # before "a" leaves and hands partition 0 back
        finally:
            kept.stop()

    before = [t for t, p, _ in seen if p == 1 and joined - 2.0 <= t < joined]
    during = [t for t, p, _ in seen if p == 1 and joined <= t < window_end]
    rate_before, rate_during = len(before) / 2.0, len(during) / (window_end - joined)
    times = [t for t, _, _ in seen if joined - 0.5 <= t < window_end]
    gap = max(b - a for a, b in zip(times, times[1:]))
    print(f"\npartition 1 kept by b: {rate_before:,.0f} msg/s before a joined, {rate_during:,.0f} msg/s from the "
          f"join until 1 s after the group settled ({settled - joined:.2f} s); longest gap between two messages "
          f"of b in that window {gap * 1000:.0f} ms")
    assert rate_during >= 0.5 * rate_before, "the retained partition's throughput dipped during the rebalance"
    assert gap < 1.0
    # Nothing re-delivered: b's partition 1 exactly once in order; partition 0 exactly once across b then a.
    assert kept.offsets(1) == list(range(ends[1]))
    b0, a0 = kept.offsets(0), moved.offsets(0)
    assert b0 == list(range(len(b0))) and a0 == list(range(len(b0), ends[0])), "partition 0 lost or re-delivered"
