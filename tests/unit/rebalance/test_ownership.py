"""Ownership on its own, built with explicit arguments (no Rebalancer): its contracts with the lender of its lock."""

from __future__ import annotations

import contextlib
import threading
import time
from types import SimpleNamespace
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from zkconsumer.commits import NO_GENERATION, CommitEntry, CommitOutcome, Generation
from zkconsumer.fetch.handoff import ChunkQueue, PartitionTopicInfo
from zkconsumer.offsets.committer import OffsetCommitter
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
    @contextlib.contextmanager
    def no_commit_in_flight(self) -> Iterator[None]:
        yield

    def checkpoint(self, topic: str, partition: int, offset: int) -> None:
        pass

    def forget(self, topic: str, partition: int) -> None:
        pass


def build(group: OwnerNodes, *, new_event: Callable[[], bool] = lambda: False,
          session_lost: Callable[[], bool] = lambda: False,
          committer: Any = None) -> Tuple[Ownership, Fetchers, threading.Condition]:
    fetchers = Fetchers()
    lock = threading.Condition()
    queue = ChunkQueue(2)
    ownership = Ownership(
        group=group,  # type: ignore[arg-type]
        fetchers=fetchers, streams=[], queue_for=lambda topic, thread_id: queue, fetch_size=1024,
        committer=committer if committer is not None else Checkpoints(),
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


class BlockingStorage:
    """Offset storage whose write waits until the test lets it end (a commit in flight)."""

    name = "blocking"
    rewrites_unchanged = False

    def __init__(self, log: List[str]) -> None:
        self.log = log
        self.writing = threading.Event()
        self.finish = threading.Event()

    def read(self, partitions: Iterable[TopicPartition]) -> Dict[TopicPartition, Optional[int]]:
        return {tp: None for tp in partitions}

    def write(self, entries: Sequence[CommitEntry], generation: Generation = NO_GENERATION) -> CommitOutcome:
        self.writing.set()
        assert self.finish.wait(10)
        self.log.append("commit written: " + ",".join(f"{e.topic}-{e.partition}" for e in entries))
        return CommitOutcome(committed=[e.tp for e in entries])

    def out_of_sync(self) -> set:  # type: ignore[type-arg]
        return set()

    def close(self) -> None:
        pass


class LoggedOwnerNodes(OwnerNodes):
    def __init__(self, log: List[str]) -> None:
        super().__init__()
        self.log = log

    def release_many(self, partitions: Sequence[TopicPartition]) -> None:
        self.log.append("released: " + ",".join(f"{t}-{p}" for t, p in partitions))
        super().release_many(partitions)


def test_owner_nodes_are_released_only_once_a_commit_in_flight_was_answered() -> None:
    """A fenced commit checks the version of each owner node it read under this session; a node we
    delete and a peer re-creates has that version again. So a release waits for a commit in flight
    (the simulator, seed 1044265: an application commit decided before the rebalancer released
    the partition, sent after a peer re-claimed it, moved the peer's offset back)."""
    log: List[str] = []
    group = LoggedOwnerNodes(log)
    storage = BlockingStorage(log)
    committer = OffsetCommitter(SimpleNamespace(group="g", client=SimpleNamespace(remaining=lambda: None)),
                                storage=storage)  # type: ignore[arg-type]
    ownership, _fetchers, _lock = build(group, committer=committer)
    both = {("t", 0): ME + "-0", ("t", 1): ME + "-0"}
    assert ownership.take_ownership(both, both) is True
    for info, _thread in ownership.owned_partitions():
        info.consumed_offset = 5

    committing = threading.Thread(target=lambda: committer.commit(ownership.owned_partitions()))
    committing.start()
    assert storage.writing.wait(5)  # the commit of t-0 and t-1 is in flight
    one = {("t", 0): ME + "-0"}
    rebalancing = threading.Thread(target=lambda: ownership.take_ownership(one, one))
    rebalancing.start()
    rebalancing.join(0.3)
    assert log == []  # t-1 is not released under the commit's feet
    storage.finish.set()
    committing.join(5)
    rebalancing.join(5)
    assert not committing.is_alive() and not rebalancing.is_alive()
    assert log == ["commit written: t-0,t-1", "released: t-1"]
    assert group.nodes == {("t", 0): ME + "-0"}
