"""The rebalance listener tells partitions handed over (``before_releasing_partitions``: their
positions committed first) from partitions lost (``partitions_lost``: taken without a hand-over,
nothing committed since the last commit), against a real ZooKeeper and real brokers.
"""

from __future__ import annotations

import threading
from typing import Dict, List, Set, Tuple

import pytest
from support.common import TwoMembers, consumer_props, produced_values, unique, wait_until

pytestmark = pytest.mark.integration


class Recorder:
    """Every listener call, in order: ``(kind, {topic: {partition}})``."""

    def __init__(self) -> None:
        self.calls: List[Tuple[str, Dict[str, Set[int]]]] = []
        self.lock = threading.Lock()

    def _add(self, kind: str, partitions) -> None:
        with self.lock:
            self.calls.append((kind, {t: set(p) for t, p in partitions.items()}))

    def before_releasing_partitions(self, partitions) -> None:
        self._add("released", partitions)

    def partitions_lost(self, partitions) -> None:
        self._add("lost", partitions)

    def before_starting_fetchers(self, consumer_id, assignment) -> None:
        pass

    def of(self, kind: str) -> List[Dict[str, Set[int]]]:
        with self.lock:
            return [p for k, p in self.calls if k == kind]


def test_a_hand_over_is_released_and_a_session_expiry_is_lost(cluster, zk) -> None:
    topic, group = unique("lost"), unique("g-lost")
    cluster.create_topic(topic, partitions=2, replication=1)
    for p in (0, 1):
        cluster.produce(topic, produced_values(50, f"p{p}-"), partition=p)
    props = consumer_props(cluster, group, auto_commit_enable="true", auto_commit_interval_ms=60_000)
    recorder = Recorder()
    with TwoMembers(props, topic, listener=recorder) as members:
        first, drainers = members.first, members.drainers
        drainers[0].wait_for(100)
        assert recorder.of("released") == [] and recorder.of("lost") == []

        kept, moved = members.join_second()  # a rebalance hands one partition over, in order
        assert recorder.of("released") == [{topic: {moved[1]}}] and recorder.of("lost") == []
        committed = int(zk.get(f"/consumers/{group}/offsets/{topic}/{moved[1]}")[0])
        assert committed == 50  # handed over after its position was committed

        cluster.produce(topic, produced_values(10, "more-"), partition=kept[1])
        drainers[0].wait_for(110)
        cluster.expire_session(first.zk_client)  # the session ends: its partition is lost, not handed over
        wait_until(lambda: recorder.of("lost"), 30, "partitions_lost after the session expired")
        assert recorder.of("lost") == [{topic: {kept[1]}}]
        assert recorder.of("released") == [{topic: {moved[1]}}]  # never told as released
        assert int(zk.get(f"/consumers/{group}/offsets/{topic}/{kept[1]}")[0]) == 50  # the last 10 not committed
