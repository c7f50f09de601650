"""Fetchers across brokers: leader failover, broker restart, preferred-leader moves, retention.

These tests kill and restart brokers, so they run on a cluster of their own (3 brokers,
replication 3) instead of the shared session cluster. ``replica.lag.time.max.ms`` is
short so that, after a kill, the ISR shrinks quickly and ``acks=all`` producers resume.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Iterator, List, Set

import pytest
from kafka import KafkaProducer
from support.common import Drainer, by_value, consumer_props, produced_values, unique, wait_until

from harness.cluster import ProjectCluster
from zkconsumer import ZookeeperConsumerConnector


@pytest.fixture(scope="module")
def failover_cluster() -> Iterator[ProjectCluster]:
    with ProjectCluster(
        brokers=3,
        partitions=6,
        broker_config={"replica.lag.time.max.ms": 2000, "log.retention.check.interval.ms": 500},
    ) as cluster:
        yield cluster


class AckedProducer:
    """Produces ``p-<n>`` values with acks=all until stopped; records what was acknowledged."""

    def __init__(self, cluster: ProjectCluster, topic: str, interval_s: float = 0.005) -> None:
        self.acked: Set[bytes] = set()
        self.sent = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._producer = KafkaProducer(
            bootstrap_servers=cluster.bootstrap_servers, api_version=(0, 9), acks="all", retries=1000,
            retry_backoff_ms=100, max_in_flight_requests_per_connection=1, request_timeout_ms=5000,
            delivery_timeout_ms=120_000, linger_ms=0, enable_idempotence=False,
        )
        self._topic = topic
        self._interval = interval_s
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            value = f"p-{self.sent:07d}".encode()
            self.sent += 1
            self._producer.send(self._topic, value).add_callback(lambda _md, v=value: self._ack(v))
            time.sleep(self._interval)

    def _ack(self, value: bytes) -> None:
        with self._lock:
            self.acked.add(value)

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def stop(self) -> Set[bytes]:
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(timeout=60)
        self._producer.close(timeout=10)
        with self._lock:
            return set(self.acked)


def leaders(cluster: ProjectCluster, topic: str, partitions: int) -> List[int]:
    return [cluster.leader(topic, p) for p in range(partitions)]


def test_consumption_survives_leader_kill_restart_and_preferred_leader_move(failover_cluster: ProjectCluster) -> None:
    cluster = failover_cluster
    topic, group = unique("failover"), unique("g")
    cluster.create_topic(topic, partitions=6, replication=3)
    props = consumer_props(cluster, group, num_consumer_fetchers=2, socket_timeout_ms=3000)

    producer = AckedProducer(cluster, topic)
    with ZookeeperConsumerConnector(props) as connector:
        drainer = Drainer(connector.create_message_streams({topic: 3})[topic])
        try:
            drainer.wait_for(200)

            victim = Counter(leaders(cluster, topic, 6)).most_common(1)[0][0]
            cluster.kill_broker(victim)
            killed_at = producer.acked_count()
            wait_until(lambda: victim not in leaders(cluster, topic, 6), 60, f"leadership to leave broker {victim}")
            wait_until(lambda: drainer.count() > killed_at + 200, 90, "consumption to go on from the new leaders")

            cluster.start_broker(victim)
            restarted_at = producer.acked_count()
            wait_until(lambda: drainer.count() > restarted_at + 100, 90, "consumption to go on after the restart")

            wait_until(lambda: all(len(cluster.partition_state(topic, p)["isr"]) == 3 for p in range(6)),
                       90, "the restarted broker to rejoin every ISR")
            before_move = leaders(cluster, topic, 6)
            cluster.run_tool("kafka.admin.PreferredReplicaLeaderElectionCommand", "--zookeeper", cluster.zk_connect,
                             timeout=60, check=True)
            preferred = [cluster.topic_partitions(topic)[p][0] for p in range(6)]
            wait_until(lambda: leaders(cluster, topic, 6) == preferred, 60, "leaders to move to the preferred replicas")
            assert before_move != preferred, "the kill should have moved some leadership away from its preferred replica"
            moved_at = producer.acked_count()
            wait_until(lambda: drainer.count() > moved_at + 100, 90, "consumption to go on after the leader move")
        finally:
            acked = producer.stop()
        wait_until(lambda: acked <= set(by_value(drainer.snapshot())), 120, "every acknowledged message to be consumed")
        consumed = drainer.stop()

    # A value may legitimately sit in the log twice: the producer retries a send whose
    # acknowledgement died with the leader. The fetch path must still deliver each
    # (partition, offset) exactly once.
    positions = [(m.partition, m.offset) for m in consumed]
    duplicates = len(positions) - len(set(positions))
    assert duplicates == 0, f"the fetch path delivered {duplicates} log entries twice"
    per_partition: dict = {}
    for m in consumed:
        per_partition.setdefault(m.partition, []).append(m.offset)
    for partition, offsets in per_partition.items():
        assert offsets == sorted(offsets), f"partition {partition} delivered out of order"


@pytest.mark.parametrize("reset", ["smallest", "largest"])
def test_offsets_older_than_the_log_start_reset_per_auto_offset_reset(failover_cluster: ProjectCluster, reset: str) -> None:
    cluster = failover_cluster
    topic, group = unique("retention"), unique("g")
    cluster.create_topic(topic, partitions=1, replication=1, config={"segment.bytes": 1024, "retention.ms": 60_000})
    old = produced_values(200, "old")
    for i in range(0, len(old), 10):  # small requests: a batch must fit in one 1 KiB segment
        cluster.produce(topic, old[i:i + 10], partition=0)
    kazoo = cluster.kazoo_client()
    kazoo.create(f"/consumers/{group}/offsets/{topic}/0", b"3", makepath=True)  # committed long ago

    cluster.run_tool("kafka.admin.TopicCommand", "--zookeeper", cluster.zk_connect, "--alter", "--topic", topic,
                     "--config", "retention.ms=1", timeout=60, check=True)
    log_start = lambda: cluster_log_start(cluster, topic)  # noqa: E731
    wait_until(lambda: log_start() > 3, 60, "retention to delete the segment holding offset 3")
    cluster.run_tool("kafka.admin.TopicCommand", "--zookeeper", cluster.zk_connect, "--alter", "--topic", topic,
                     "--config", "retention.ms=600000", timeout=60, check=True)
    start = log_start()
    new = produced_values(20, "new")

    with ZookeeperConsumerConnector(consumer_props(cluster, group, auto_offset_reset=reset)) as connector:
        drainer = Drainer(connector.create_message_streams({topic: 1})[topic])
        if reset == "largest":
            time.sleep(2)  # let the fetcher place itself at the log end before producing
        cluster.produce(topic, new, partition=0)
        if reset == "smallest":
            expected = [v for i, v in enumerate(old) if i >= start] + new
        else:
            expected = new
        got = drainer.wait_for(len(expected))
        time.sleep(0.5)
        got = drainer.stop()
    assert [m.message for m in got] == expected


def cluster_log_start(cluster: ProjectCluster, topic: str) -> int:
    from zkconsumer.admin import BrokerOffsets

    with BrokerOffsets(cluster.kazoo_client()) as offsets:
        found, errors = offsets.fetch([(topic, 0)], -2)
    assert not errors, errors
    return found[(topic, 0)]
