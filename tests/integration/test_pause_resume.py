"""Pausing and resuming partitions without leaving the group, against a real ZooKeeper and real
brokers, under both memberships.

A paused partition keeps its member's session and ownership and is neither fetched nor handed
out; commits go on; on resume it is delivered from the first message not handed out, each message
once and in order. A paused partition that moves to another member at a rebalance is reported to
the listener, is no longer paused, and the new owner delivers it from the committed offset.
"""

from __future__ import annotations

import threading
import time
from typing import Dict, List, Optional, Set

import pytest
from support.common import Drainer, TwoMembers, consumer_props, owners, produced_values, unique, wait_until

from zkconsumer import ZookeeperConsumerConnector
from zkconsumer.structs import TopicPartition

pytestmark = pytest.mark.integration

N = 300


def membership_props(membership: str) -> Dict[str, object]:
    if membership == "zookeeper":
        return {}
    return dict(group_membership="kafka", offsets_storage="kafka", dual_commit_enabled="false",
                session_timeout_ms=6000, heartbeat_interval_ms=500)


def offsets_of(messages, topic: str, partition: int) -> List[int]:
    return [m.offset for m in messages if m.topic == topic and m.partition == partition]


class Listener:
    """Records what the rebalancer tells the application."""

    def __init__(self) -> None:
        self.moved: List[Dict[str, Set[int]]] = []
        self.lock = threading.Lock()

    def before_releasing_partitions(self, partitions) -> None:
        pass

    def before_starting_fetchers(self, consumer_id, assignment) -> None:
        pass

    def paused_partitions_moved(self, partitions: Dict[str, Set[int]]) -> None:
        with self.lock:
            self.moved.append(partitions)


@pytest.mark.parametrize("membership", ["zookeeper", "kafka"])
def test_a_paused_partition_keeps_session_and_ownership_and_resumes_exactly_where_it_stopped(
        cluster, zk, membership: str) -> None:
    topic, group = unique("pause"), unique("g-pause")
    cluster.create_topic(topic, partitions=2, replication=1)
    for p in (0, 1):
        cluster.produce(topic, produced_values(N // 2, f"p{p}-"), partition=p)
    connector = ZookeeperConsumerConnector(consumer_props(cluster, group, fetch_message_max_bytes=2048,
                                                          **membership_props(membership)))
    drainer: Optional[Drainer] = None
    try:
        drainer = Drainer(connector.create_message_streams({topic: 1})[topic])
        drainer.wait_for(20)
        session = connector.zk_client.client_id
        rebalances = connector.status.rebalances if connector.status is not None else None
        owner_before = owners(zk, group, topic) if membership == "zookeeper" else None

        connector.pause([(topic, 0)])
        stopped_at = connector.positions()[(topic, 0)]
        assert offsets_of(drainer.snapshot(), topic, 0) == list(range(stopped_at))  # nothing after pause()
        assert connector.paused() == {(topic, 0)}
        for p in (0, 1):
            cluster.produce(topic, produced_values(N // 2, f"p{p}-more-"), partition=p)
        wait_until(lambda: len(offsets_of(drainer.snapshot(), topic, 1)) >= N, 60, "partition 1 goes on")  # type: ignore[union-attr]
        time.sleep(1.0)  # several fetch rounds with partition 0 paused
        assert offsets_of(drainer.snapshot(), topic, 0) == list(range(stopped_at))
        state = connector._fetchers.metrics()["partitions"][f"{topic}-0"]
        assert state["paused"] is True and state["fetched_offset"] == stopped_at  # not fetched either
        assert connector.commit_offsets() == []  # commits go on, the paused partition's position included
        assert connector.positions()[(topic, 0)] == stopped_at
        assert connector.zk_client.client_id == session  # the session and ownership are kept
        if membership == "zookeeper":
            assert owners(zk, group, topic) == owner_before
        assert connector.status is not None and connector.status.rebalances == rebalances  # no rebalance

        connector.resume([(topic, 0)])
        wait_until(lambda: len(offsets_of(drainer.snapshot(), topic, 0)) >= N, 60, "partition 0 resumes")
        messages = drainer.snapshot()
        for p in (0, 1):
            assert offsets_of(messages, topic, p) == list(range(N))  # each once, in order: nothing lost or repeated
        assert connector.paused() == set()
    finally:
        if drainer is not None:
            drainer.stop()
        connector.shutdown()


@pytest.mark.parametrize("membership", ["zookeeper", "kafka"])
def test_a_paused_partition_that_moves_is_reported_unpaused_and_delivered_by_its_new_owner(
        cluster, zk, membership: str) -> None:
    topic, group = unique("pause-move"), unique("g-pause-move")
    cluster.create_topic(topic, partitions=2, replication=1)
    for p in (0, 1):
        cluster.produce(topic, produced_values(N, f"p{p}-"), partition=p)
    props = consumer_props(cluster, group, auto_commit_enable="true", auto_commit_interval_ms=200,
                           fetch_message_max_bytes=2048, **membership_props(membership))
    listener = Listener()
    with TwoMembers(props, topic, listener=listener) as members:
        first, drainers = members.first, members.drainers
        drainers[0].wait_for(40)
        both = [(topic, 0), (topic, 1)]
        first.pause(both)
        at_pause = first.positions()
        first.commit_offsets()

        kept, moved = members.join_second()
        wait_until(lambda: listener.moved, 30, "the listener told of the moved paused partition")
        assert listener.moved == [{topic: {moved[1]}}]
        assert first.paused() == {kept}  # the kept one stays paused
        wait_until(lambda: len(offsets_of(drainers[1].snapshot(), *moved)) >= N - at_pause[moved], 60,
                   "the new owner delivers the moved partition")
        time.sleep(0.5)
        assert offsets_of(drainers[0].snapshot(), *kept) == list(range(at_pause[kept]))  # still paused
        by_first, by_second = offsets_of(drainers[0].snapshot(), *moved), offsets_of(drainers[1].snapshot(), *moved)
        assert by_first == list(range(at_pause[moved]))
        assert by_second == list(range(at_pause[moved], N))  # from the committed offset: nothing lost or repeated
        first.resume([kept])
        wait_until(lambda: len(offsets_of(drainers[0].snapshot(), *kept)) >= N, 60, "the kept partition resumes")
        assert offsets_of(drainers[0].snapshot(), *kept) == list(range(N))


def test_bad_partitions_are_refused_with_a_clear_error(cluster) -> None:
    connector = ZookeeperConsumerConnector(consumer_props(cluster, unique("g-pause-bad")))
    try:
        with pytest.raises(TypeError, match="not one pair"):
            connector.pause(("t", 0))  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"not a \(topic, partition\) pair: \('t', -1\)"):
            connector.pause([("t", -1)])
        assert connector.paused() == set()
        tp: TopicPartition = ("t", 0)
        connector.resume([tp])  # resuming what is not paused: a no-op
    finally:
        connector.shutdown()
