"""docs/MIGRATION.md end to end: ZooKeeper offsets -> dual commit -> Kafka offsets -> coordinator membership, and back.

Every step is a rolling restart of a two-member group (or, for membership, the
documented stop-the-old/start-the-new switch); every handoff is a clean
shutdown with auto-commit, so the whole procedure must deliver every message
exactly once.
"""

from __future__ import annotations

import threading
from typing import Dict, List

import pytest
from support.common import Drainer, consumer_props, produced_values, unique, wait_until
from support.offsets import kafka_committed, produce_evenly, values, zookeeper_committed

from zkconsumer import ZookeeperConsumerConnector
from zkconsumer.errors import OffsetStorageError

PARTITIONS = range(4)


class Group:
    """The members of one group as the procedure restarts them, and everything they consumed."""

    def __init__(self, cluster, topic: str) -> None:
        self.cluster, self.topic, self.name = cluster, topic, unique("g-migrate")
        self.produced: List[bytes] = []
        self.consumed: List[bytes] = []
        self.members: Dict[str, "tuple"] = {}
        self.batches = 0

    def props(self, **extra: object) -> Dict[str, object]:
        base = dict(auto_commit_enable="true", auto_commit_interval_ms=1000, session_timeout_ms=6000,
                    heartbeat_interval_ms=500)
        base.update(extra)
        return consumer_props(self.cluster, self.name, **base)

    def start(self, name: str, props: Dict[str, object]) -> ZookeeperConsumerConnector:
        connector = ZookeeperConsumerConnector(props)
        self.members[name] = (connector, Drainer(connector.create_message_streams({self.topic: 1})[self.topic]))
        return connector

    def stop(self, name: str) -> None:
        connector, drainer = self.members.pop(name)
        connector.shutdown()  # final commit (auto.commit.enable), then the group rebalances
        self.consumed += values(drainer.stop())

    def batch(self) -> None:
        """Produce 40 messages (10 per partition) and wait until the group consumed them."""
        new = produced_values(40, f"batch{self.batches}")
        self.batches += 1
        produce_evenly(self.cluster, self.topic, new)
        self.produced += new
        wait_until(lambda: set(self.produced) <= set(self.consumed) | {
            v for _, d in self.members.values() for v in values(d.snapshot())}, 60, f"batch {self.batches}")

    def commit_all(self) -> None:
        for connector, _ in self.members.values():
            connector.commit_offsets()

    def log_end(self) -> Dict[int, int]:
        return {p: 10 * self.batches for p in PARTITIONS}

    def stop_all(self) -> None:
        for name in list(self.members):
            self.stop(name)


def test_the_documented_migration_and_its_rollback(cluster, zk, make_topic) -> None:
    group = Group(cluster, make_topic(partitions=4))
    zookeeper_only = group.props()
    dual = group.props(offsets_storage="kafka", dual_commit_enabled="true")
    kafka_only = group.props(offsets_storage="kafka", dual_commit_enabled="false")
    coordinator = group.props(group_membership="kafka", offsets_storage="kafka", dual_commit_enabled="false",
                              rebalance_max_retries=100)
    try:
        # Step 0: where legacy groups are: ZooKeeper membership, ZooKeeper offsets.
        group.start("a", zookeeper_only)
        group.start("b", zookeeper_only)
        group.batch()

        # Step 1: dual commit, one member at a time.
        for name in ("a", "b"):
            group.stop(name)
            group.start(name, dual)
        group.batch()
        group.commit_all()
        assert kafka_committed(cluster, group.name, group.topic, PARTITIONS) == group.log_end()
        assert zookeeper_committed(zk, group.name, group.topic, PARTITIONS) == group.log_end()

        # Step 2: Kafka offsets only, one member at a time; ZooKeeper's offsets stay where step 1 left them.
        frozen = group.log_end()
        for name in ("a", "b"):
            group.stop(name)
            group.start(name, kafka_only)
        group.batch()
        group.commit_all()
        assert kafka_committed(cluster, group.name, group.topic, PARTITIONS) == group.log_end()
        assert zookeeper_committed(zk, group.name, group.topic, PARTITIONS) == frozen

        # Step 3: coordinator membership. New members wait while ZooKeeper members are registered...
        joined = threading.Event()
        first = ZookeeperConsumerConnector(coordinator)
        streams: List = []

        def join() -> None:
            streams.extend(first.create_message_streams({group.topic: 1})[group.topic])
            joined.set()

        joiner = threading.Thread(target=join, daemon=True)
        joiner.start()
        wait_until(lambda: first.status is not None and "ZooKeeper-membership" in (first.status.last_error or ""), 30,
                   "the coordinator member to wait for the ZooKeeper members")
        assert not joined.is_set()
        # ...and join once the last one has shut down (committing its final offsets to Kafka).
        group.stop("a")
        group.stop("b")
        assert joined.wait(60), "the coordinator member did not join"
        joiner.join(10)
        group.members["c1"] = (first, Drainer(streams))
        group.start("c2", coordinator)
        group.batch()
        assert zookeeper_committed(zk, group.name, group.topic, PARTITIONS) == frozen

        # Rollback: stop every coordinator member (LeaveGroup), then ZooKeeper membership with dual commit:
        # Kafka's offsets win over ZooKeeper's stale ones, and dual commit brings ZooKeeper up to date.
        group.stop("c1")
        group.stop("c2")
        group.start("z", dual)
        group.batch()
        group.commit_all()
        assert zookeeper_committed(zk, group.name, group.topic, PARTITIONS) == group.log_end()
        assert kafka_committed(cluster, group.name, group.topic, PARTITIONS) == group.log_end()

        # ... and from there back to ZooKeeper offsets only.
        group.stop("z")
        group.start("z", zookeeper_only)
        group.batch()
    finally:
        group.stop_all()
    assert sorted(group.consumed) == sorted(group.produced), "a message was lost or delivered twice"


def test_zookeeper_members_cannot_commit_to_kafka_while_coordinator_members_hold_the_group(cluster, zk, make_topic) -> None:
    group = Group(cluster, make_topic(partitions=4))
    group.start("c", group.props(group_membership="kafka", offsets_storage="kafka"))
    legacy = ZookeeperConsumerConnector(group.props(offsets_storage="kafka", dual_commit_enabled="true"))
    try:
        drainer = Drainer(legacy.create_message_streams({group.topic: 1})[group.topic])
        produce_evenly(cluster, group.topic, produced_values(8))
        wait_until(lambda: len(drainer.snapshot()) == 8, 60, "the misconfigured member to consume")
        with pytest.raises(OffsetStorageError) as raised:
            legacy.commit_offsets()
        assert not raised.value.retriable and "group.membership=kafka" in str(raised.value)
        assert zookeeper_committed(zk, group.name, group.topic, PARTITIONS) == {p: None for p in PARTITIONS}
        drainer.stop()
    finally:
        legacy.shutdown()
        group.stop_all()
