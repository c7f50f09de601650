"""Pausing and resuming partitions and streams (``consumer/pausing.py``) over the in-memory fake cluster.

The fetcher manager, its threads, the queues and the streams' iterators are the real ones;
only the brokers are the fake of ``test_fetcher.py``. Real brokers and a real group:
``tests/integration/test_pause_resume.py``.
"""

from __future__ import annotations

import threading
import time
from typing import Dict, List, Set, Tuple

import pytest

from zkconsumer.consumer.pausing import Pauses
from zkconsumer.consumer.stream import KafkaStream
from zkconsumer.errors import ConsumerTimeoutError
from zkconsumer.fetch.handoff import ChunkQueue, PartitionTopicInfo
from zkconsumer.fetch.manager import FetcherManager

from .test_fetcher import FakeCluster, make_config, our_threads

TP = Tuple[str, int]


class Moved:
    """A rebalance listener that records ``paused_partitions_moved``."""

    def __init__(self) -> None:
        self.moved: List[Dict[str, Set[int]]] = []

    def before_releasing_partitions(self, partitions: object) -> None:
        pass

    def before_starting_fetchers(self, consumer_id: str, assignment: object) -> None:
        pass

    def paused_partitions_moved(self, partitions: Dict[str, Set[int]]) -> None:
        self.moved.append(partitions)


class Member:
    """Two streams (queues) over one fake broker: ``t-0``, ``t-1`` on stream 0, ``t-2`` on stream 1."""

    def __init__(self, cluster: FakeCluster, per_partition: int, capacity: int = 2) -> None:
        self.cluster = cluster
        cluster.create("t", 3, per_partition=per_partition)
        self.config = make_config(fetch_message_max_bytes=150)  # a few messages a chunk: many chunks
        self.manager = FetcherManager(self.config, cluster.live, pytest.fail, connection_factory=cluster.connect)
        self.queues = [ChunkQueue(capacity), ChunkQueue(capacity)]
        self.streams = [KafkaStream(q, 30, thread_id=f"c-{i}") for i, q in enumerate(self.queues)]
        self.infos = {("t", p): PartitionTopicInfo("t", p, self.queues[0 if p < 2 else 1], 0, 150) for p in range(3)}
        self.listener = Moved()
        self.pauses = Pauses(self.manager, self.streams, self.listener)
        self.got: Dict[TP, List[int]] = {}

    def start(self) -> None:
        self.manager.start_connections(self.infos.values())

    def read(self, stream: int, n: int = 10_000) -> int:
        """Hand out up to ``n`` messages of one stream (until it waits 30 ms); how many."""
        count = 0
        try:
            for m in self.streams[stream]:
                self.got.setdefault((m.topic, m.partition), []).append(m.offset)
                count += 1
                if count >= n:
                    break
        except ConsumerTimeoutError:
            pass
        return count

    def read_until(self, want: Dict[TP, int], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while any(len(self.got.get(tp, [])) < n for tp, n in want.items()):
            assert time.monotonic() < deadline, f"got {({tp: len(v) for tp, v in self.got.items()})}"
            self.read(0)
            self.read(1)

    def check_once_in_order(self, tp: TP, n: int) -> None:
        assert self.got.get(tp, []) == list(range(n)), tp


@pytest.fixture
def member():
    m = Member(FakeCluster(), per_partition=60)
    yield m
    m.manager.stop()
    assert our_threads() == []


def test_a_paused_partition_is_neither_fetched_nor_handed_out_and_resumes_where_it_stopped(member: Member) -> None:
    member.start()
    member.read(0, n=5)  # some of t-0 and t-1 handed out, more of them queued
    member.pauses.pause([("t", 0)])
    stopped_at = member.infos[("t", 0)].consumed_offset
    fetches = member.cluster.fetches[("t", 0)]
    assert member.infos[("t", 0)].fetched_offset == stopped_at  # what was queued is fetched again later
    member.read_until({("t", 1): 60, ("t", 2): 60})
    time.sleep(0.1)
    member.read(0)
    assert len(member.got.get(("t", 0), [])) == stopped_at  # nothing handed out while paused
    assert member.cluster.fetches[("t", 0)] == fetches  # and nothing fetched
    assert member.pauses.paused() == {("t", 0)}
    assert member.manager.metrics()["partitions"]["t-0"]["paused"] is True
    member.pauses.resume([("t", 0)])
    member.read_until({("t", 0): 60})
    for p in range(3):
        member.check_once_in_order(("t", p), 60)
    assert member.pauses.paused() == set()


def test_a_paused_stream_stops_all_its_partitions_and_only_them(member: Member) -> None:
    member.start()
    member.pauses.pause(streams=[member.streams[0]])
    member.read_until({("t", 2): 60})
    member.read(0)
    assert member.got.get(("t", 0), []) == [] and member.got.get(("t", 1), []) == []
    assert member.pauses.paused() == set()  # stream pauses are not partition pauses
    member.pauses.resume(streams=[member.streams[0]])
    member.read_until({("t", 0): 60, ("t", 1): 60})
    for p in range(3):
        member.check_once_in_order(("t", p), 60)


def test_a_partition_paused_twice_ways_stays_paused_until_both_are_resumed(member: Member) -> None:
    member.start()
    member.pauses.pause([("t", 0)])
    member.pauses.pause(streams=[member.streams[0]])
    member.pauses.resume(streams=[member.streams[0]])
    member.read_until({("t", 1): 60})
    assert member.got.get(("t", 0), []) == []
    member.pauses.resume([("t", 0)])
    member.read_until({("t", 0): 60})
    member.check_once_in_order(("t", 0), 60)


def test_a_pause_outlives_stop_connections_and_a_new_info_for_the_same_partition(member: Member) -> None:
    member.start()
    member.read(0, n=3)
    member.pauses.pause([("t", 0)])
    member.manager.stop_connections()  # a session loss; the member gets the partition back
    at = member.infos[("t", 0)].consumed_offset
    member.infos[("t", 0)] = PartitionTopicInfo("t", 0, member.queues[0], at, 150)
    member.start()
    member.read_until({("t", 1): 60, ("t", 2): 60})
    assert len(member.got.get(("t", 0), [])) == at
    member.pauses.assigned("c", {"t": {0: "c-0", 1: "c-0", 2: "c-1"}})  # still ours: still paused
    assert member.pauses.paused() == {("t", 0)} and member.listener.moved == []
    member.pauses.resume([("t", 0)])
    member.read_until({("t", 0): 60})
    member.check_once_in_order(("t", 0), 60)


def test_a_paused_partition_that_moves_away_is_reported_once_and_no_longer_paused(member: Member) -> None:
    member.start()
    member.pauses.pause([("t", 0), ("t", 2)])
    member.manager.remove_partitions([("t", 0)])  # the rebalance moves it to another member
    member.pauses.assigned("c", {"t": {0: "other-0", 1: "c-0", 2: "c-1"}})
    assert member.listener.moved == [{"t": {0}}]
    assert member.pauses.paused() == {("t", 2)}
    member.pauses.assigned("c", {"t": {0: "other-0", 1: "c-0", 2: "c-1"}})
    assert member.listener.moved == [{"t": {0}}]


def test_pausing_a_partition_not_owned_yet_holds_it_when_it_is_assigned(member: Member) -> None:
    member.pauses.pause([("t", 0)])
    member.start()
    member.read_until({("t", 1): 60})
    assert member.got.get(("t", 0), []) == []
    member.pauses.resume([("t", 0)])
    member.read_until({("t", 0): 60})


def test_pause_and_resume_racing_the_iterator_lose_and_repeat_nothing() -> None:
    """An application thread pauses and resumes t-0 over and over while another iterates."""
    m = Member(FakeCluster(), per_partition=3000, capacity=3)
    try:
        m.start()
        done = threading.Event()

        def toggle() -> None:
            while not done.is_set():
                m.pauses.pause([("t", 0)])
                time.sleep(0.001)
                m.pauses.resume([("t", 0)])
                time.sleep(0.002)

        toggler = threading.Thread(target=toggle)
        toggler.start()
        try:
            m.read_until({("t", 0): 3000, ("t", 1): 3000}, timeout=60)
        finally:
            done.set()
            toggler.join(5)
        m.check_once_in_order(("t", 0), 3000)
        m.check_once_in_order(("t", 1), 3000)
    finally:
        m.manager.stop()


@pytest.mark.parametrize("bad", [("t", 0), [("t", -1)], [("", 0)], [("t", "0")], ["t-0"], [("t", True)]])
def test_bad_partitions_get_a_clear_error_and_pause_nothing(member: Member, bad: object) -> None:
    with pytest.raises((TypeError, ValueError), match="topic, partition"):
        member.pauses.pause(bad)  # type: ignore[arg-type]
    assert member.pauses.paused() == set()
