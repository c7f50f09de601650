"""Ownership on its own, built with explicit arguments (no Rebalancer): its contracts with the lender of its lock."""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from zkconsumer.fetch.handoff import ChunkQueue, PartitionTopicInfo
from zkconsumer.rebalance.ownership import Ownership
from zkconsumer.structs import INVALID_OFFSET, TopicPartition
from zkconsumer.threads import THREADS

ME = "g_me"
Watch = Optional[Callable[[object], None]]


class OwnerNodes:
    """The owner-node calls Ownership makes, over a dict; ``peers`` hold nodes a claim cannot take."""

    def __init__(self, peers: Optional[Dict[TopicPartition, str]] = None) -> None:
        self.consumer_id = ME
        self.session_id: Optional[int] = 1
        self.nodes: Dict[TopicPartition, str] = dict(peers or {})

    def claim_many(self, claims: Sequence[Tuple[str, int, str, Watch]], look_first: bool = False,
                   cancelled: Optional[Callable[[], bool]] = None) -> List[Optional[str]]:
        holders: List[Optional[str]] = []
        for topic, partition, thread_id, _watch in claims:
            holder = self.nodes.setdefault((topic, partition), thread_id)
            holders.append(None if holder == thread_id else holder)
        return holders

    def confirm_held_many(self, partitions: Sequence[TopicPartition]) -> List[bool]:
        return [self.nodes.get(tp, "").startswith(ME + "-") for tp in partitions]

    def relabel_many(self, relabels: Sequence[Tuple[str, int, str]]) -> List[bool]:
        return [False for _ in relabels]

    def release_many(self, partitions: Sequence[TopicPartition]) -> None:
        for tp in partitions:
            self.release(*tp)

    def release(self, topic: str, partition: int, thread_id: Optional[str] = None) -> None:
        if self.nodes.get((topic, partition), "").startswith(ME + "-"):
            del self.nodes[(topic, partition)]

    def release_stale(self, topic: str, partition: int, thread_id: str) -> None:
        pass

    def watch_deletion(self, topic: str, partition: int, deleted: threading.Event) -> bool:
        return True


class Fetchers:
    def __init__(self) -> None:
        self.running: List[PartitionTopicInfo] = []

    def start_connections(self, infos: Iterable[PartitionTopicInfo]) -> None:
        self.running.extend(infos)

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        gone = set(tps)
        self.running = [i for i in self.running if (i.topic, i.partition) not in gone]

    def stop_connections(self) -> None:
        self.running = []


class Checkpoints:
    def checkpoint(self, topic: str, partition: int, offset: int) -> None:
        pass

    def forget(self, topic: str, partition: int) -> None:
        pass


def build(group: OwnerNodes, *, new_event: Callable[[], bool] = lambda: False,
          session_lost: Callable[[], bool] = lambda: False) -> Tuple[Ownership, Fetchers, threading.Condition]:
    fetchers = Fetchers()
    lock = threading.Condition()
    queue = ChunkQueue(2)
    ownership = Ownership(
        group=group,  # type: ignore[arg-type]
        fetchers=fetchers, streams=[], queue_for=lambda topic, thread_id: queue, fetch_size=1024,
        committer=Checkpoints(),  # type: ignore[arg-type]
        auto_commit=False, read_offsets=lambda tps: {tp: None for tp in tps}, listener=None,
        claim_backoff_s=5.0, claim_retries=2, clock=time.monotonic, runtime=THREADS,
        lock=lock, new_event=new_event, session_lost=session_lost,
    )
    return ownership, fetchers, lock


def test_take_ownership_claims_installs_and_owned_partitions_obeys_the_lent_session_signal() -> None:
    lost = [False]
    ownership, fetchers, _lock = build(OwnerNodes(), session_lost=lambda: lost[0])
    mine = {("t", 0): ME + "-0", ("t", 1): ME + "-0"}

    assert ownership.take_ownership(mine, mine) is True

    assert dict(ownership.owned) == mine and ownership.fetching
    assert sorted((i.topic, i.partition, i.fetched_offset) for i in fetchers.running) == [
        ("t", 0, INVALID_OFFSET), ("t", 1, INVALID_OFFSET)]
    assert sorted((info.partition, thread) for info, thread in ownership.owned_partitions()) == [(0, ME + "-0"), (1, ME + "-0")]
    lost[0] = True
    assert ownership.owned_partitions() == []  # a signalled, unhandled session loss: nothing to commit
    assert ownership.owned_snapshot() == mine


def test_a_claim_wait_ends_at_once_when_the_lender_signals_a_new_event() -> None:
    pending = threading.Event()
    group = OwnerNodes(peers={("t", 1): "g_peer-0"})
    ownership, _fetchers, lock = build(group, new_event=pending.is_set)
    mine = {("t", 0): ME + "-0", ("t", 1): ME + "-0"}
    outcome: List[Optional[bool]] = []
    waiter = threading.Thread(target=lambda: outcome.append(ownership.take_ownership(mine, mine)))
    started = time.monotonic()
    waiter.start()
    time.sleep(0.2)  # waiting for g_peer to release t-1 (bounded at 10 s)
    with lock:
        pending.set()
        ownership.interrupt()
    waiter.join(5)

    assert outcome == [None]  # superseded, not failed
    assert time.monotonic() - started < 2
    assert dict(ownership.owned) == {("t", 0): ME + "-0"}  # what it claimed is installed


def test_a_lost_session_drops_delivery_but_keeps_the_owner_nodes_for_the_next_attempt_to_settle() -> None:
    group = OwnerNodes()
    ownership, fetchers, _lock = build(group)
    both = {("t", 0): ME + "-0", ("t", 1): ME + "-0"}
    assert ownership.take_ownership(both, both) is True

    ownership.drop_everything("ZooKeeper session lost")

    assert dict(ownership.owned) == {} and not ownership.fetching and fetchers.running == []
    assert group.nodes == both  # not touched: ZooKeeper is away
    one = {("t", 0): ME + "-0"}
    assert ownership.take_ownership(one, one) is True
    assert group.nodes == one  # the node no longer assigned to it was still in the books: released
    assert dict(ownership.owned) == one
