"""zkconsumer.coordinator.delivery: what a commit sees while a rebalance is in progress (fakes, no cluster)."""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Tuple

from zkconsumer.commits import Generation
from zkconsumer.coordinator.delivery import Delivery
from zkconsumer.fetch.handoff import ChunkQueue, PartitionTopicInfo

TP = Tuple[str, int]


class FakeFetchers:
    def __init__(self) -> None:
        self.running: List[TP] = []

    def start_connections(self, infos: Iterable[PartitionTopicInfo]) -> None:
        self.running = [(i.topic, i.partition) for i in infos]

    def stop_connections(self) -> None:
        self.running = []


class FakeCommitter:
    def __init__(self, stored: Dict[TP, int]) -> None:
        self.stored = dict(stored)
        self.commits: List[Tuple[Generation, Dict[TP, int]]] = []

    def read_offsets(self, partitions: Iterable[TP]) -> Dict[TP, Optional[int]]:
        return {tp: self.stored.get(tp) for tp in partitions}

    def checkpoint(self, topic: str, partition: int, offset: int) -> None:
        pass

    def commit(self, owned: Iterable[Tuple[PartitionTopicInfo, str]], generation: Generation) -> List[TP]:
        self.commits.append((generation, {(i.topic, i.partition): i.consumed_offset for i, _ in owned}))
        return []


def delivery(committer: FakeCommitter) -> Delivery:
    queues: Dict[Tuple[str, str], ChunkQueue] = {}
    return Delivery(consumer_id="c1", queue_for=lambda t, th: queues.setdefault((t, th), ChunkQueue(10)),
                    streams=[], fetchers=FakeFetchers(), committer=committer, auto_commit=False, fetch_size=1024)


def test_item11_to_commit_covers_what_the_revoked_generation_handed_out_until_the_next_assignment() -> None:
    committer = FakeCommitter({("t", 0): 5, ("t", 1): 7})
    d = delivery(committer)
    assert d.to_commit() == (None, [], True)  # joining: nothing handed out yet
    g1 = Generation(1, "m1")
    d.assign(g1, {("t", 0): "m1-0", ("t", 1): "m1-0"})
    generation, owned, rebalancing = d.to_commit()
    assert generation == g1 and not rebalancing
    assert sorted((i.topic, i.partition, i.consumed_offset) for i, _ in owned) == [("t", 0, 5), ("t", 1, 7)]

    d.revoke(commit=True)  # auto.commit.enable=false: the revoke commits nothing
    assert committer.commits == []
    assert d.owned() == (None, [])
    generation, delivered, rebalancing = d.to_commit()
    assert generation == g1 and rebalancing
    assert sorted((i.topic, i.partition, i.consumed_offset, thread) for i, thread in delivered) == [
        ("t", 0, 5, "m1-0"), ("t", 1, 7, "m1-0")]

    g2 = Generation(2, "m1")
    d.assign(g2, {("t", 1): "m1-0"})  # kept t/1: it continues from the position handed out
    generation, owned, rebalancing = d.to_commit()
    assert generation == g2 and not rebalancing
    assert [(i.topic, i.partition, i.consumed_offset) for i, _ in owned] == [("t", 1, 7)]


class Recorder:
    def __init__(self) -> None:
        self.calls: List[Tuple[str, object]] = []

    def before_releasing_partitions(self, partitions: object) -> None:
        self.calls.append(("released", partitions))

    def partitions_lost(self, partitions: object) -> None:
        self.calls.append(("lost", partitions))

    def before_starting_fetchers(self, consumer_id: str, assignment: object) -> None:
        self.calls.append(("starting", assignment))


def test_a_generation_ended_by_the_coordinator_is_lost_and_a_rejoin_releases() -> None:
    """``revoke(commit=False)`` (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, a session presumed expired):
    nothing handed over, so ``partitions_lost``; ``revoke(commit=True)``: ``before_releasing_partitions``.
    ``before_starting_fetchers`` names the streams' thread ids (``<consumer id>-<n>``)."""
    queues: Dict[Tuple[str, str], ChunkQueue] = {}
    recorder = Recorder()
    d = Delivery(consumer_id="c1", queue_for=lambda t, th: queues.setdefault((t, th), ChunkQueue(10)), streams=[],
                 fetchers=FakeFetchers(), committer=FakeCommitter({}), auto_commit=True, fetch_size=1024,
                 listener=recorder)
    d.assign(Generation(1, "m1"), {("t", 0): "m1-0", ("t", 1): "m1-1"})
    d.revoke(commit=True)
    d.assign(Generation(2, "m1"), {("t", 1): "m1-1"})
    d.revoke(commit=False)
    assert recorder.calls == [("starting", {"t": {0: "c1-0", 1: "c1-1"}}), ("released", {"t": {0, 1}}),
                              ("starting", {"t": {1: "c1-1"}}), ("lost", {"t": {1}})]
