"""The rebalance state machine against an in-memory group (pure logic; ZooKeeper itself is tested in integration)."""

from __future__ import annotations

import contextlib
import threading
import time
from types import SimpleNamespace
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import pytest

from zkconsumer import assignors
from zkconsumer.consumer.membership import RebalanceState
from zkconsumer.consumer.stream import KafkaStream
from zkconsumer.consumer.topic_count import StaticTopicCount
from zkconsumer.errors import ConsumerRebalanceFailedError, UnsupportedPatternError, ZooKeeperUnavailableError
from zkconsumer.fetch.handoff import ChunkQueue, PartitionTopicInfo
from zkconsumer.offsets.committer import OffsetCommitter
from zkconsumer.rebalance.rebalancer import Rebalancer
from zkconsumer.structs import INVALID_OFFSET
from zkconsumer.zookeeper.offset_storage import ZooKeeperOffsetStorage
from zkconsumer.zookeeper.zkformat import Registration

TP = Tuple[str, int]


class _Callback:
    def __init__(self, watch) -> None:
        self._watch = watch

    def set(self) -> None:
        self._watch(None)


class FakeGroup:
    """The GroupClient surface the rebalancer uses, over plain dicts."""

    client = SimpleNamespace(remaining=lambda: None)  # no ZooKeeper deadline (BoundedZooKeeper.remaining)

    def __init__(self, consumer_id: str, partitions: Dict[str, int]) -> None:
        self.consumer_id = consumer_id
        self.group = "g"
        self.members_: Dict[str, Registration] = {}
        self.partitions = partitions
        self.owner_nodes: Dict[TP, str] = {}
        self.offsets: Dict[TP, int] = {}
        self.claims: List[TP] = []
        self.releases: List[TP] = []
        self.relabels: List[TP] = []
        self.reads: List[TP] = []
        self.watchers: Dict[TP, threading.Event] = {}
        self.session_id: Optional[int] = 1

    def join(self, consumer_id: str, subscription: Dict[str, int]) -> None:
        self.members_[consumer_id] = Registration(subscription, "static", "0", 1)

    def register(self) -> None:
        self.members_.setdefault(self.consumer_id, Registration({"t": 1}, "static", "0", 1))

    def members(self, fresh: bool = False) -> Dict[str, Registration]:
        return dict(self.members_)

    def all_topics(self) -> List[str]:
        return sorted(self.partitions)

    def partitions_for_topics(self, topics: Iterable[str]) -> Dict[str, List[int]]:
        return {t: list(range(self.partitions[t])) for t in topics if t in self.partitions}

    def claim(self, topic: str, partition: int, thread_id: str, watch=None) -> Optional[str]:
        holder = self.owner_nodes.get((topic, partition))
        if holder is not None and not holder.startswith(self.consumer_id + "-"):
            if watch is not None:  # the read of the holder sets a watch, as GroupClient's does
                self.watchers[(topic, partition)] = _Callback(watch)  # type: ignore[assignment]
            return holder
        self.owner_nodes[(topic, partition)] = thread_id
        self.claims.append((topic, partition))
        return None

    def claim_many(self, claims: List[Tuple[str, int, str, Any]], look_first: bool = False,
                   cancelled: Any = None) -> List[Optional[str]]:
        return [self.claim(topic, partition, thread_id, watch) for topic, partition, thread_id, watch in claims]

    def release_many(self, partitions: List[TP]) -> None:
        for topic, partition in partitions:
            self.release(topic, partition)

    def relabel(self, topic: str, partition: int, thread_id: str) -> bool:
        if not self.owner_nodes.get((topic, partition), "").startswith(self.consumer_id + "-"):
            return False
        self.owner_nodes[(topic, partition)] = thread_id
        self.relabels.append((topic, partition))
        return True

    def release(self, topic: str, partition: int, thread_id: Optional[str] = None) -> None:
        if self.owner_nodes.get((topic, partition), "").startswith(self.consumer_id + "-"):
            del self.owner_nodes[(topic, partition)]
            self.releases.append((topic, partition))

    def release_stale(self, topic: str, partition: int, thread_id: str) -> None:
        pass

    def watch_deletion(self, topic: str, partition: int, event: threading.Event) -> bool:
        if (topic, partition) not in self.owner_nodes:
            event.set()
            return False
        self.watchers[(topic, partition)] = event
        return True

    def other_releases(self, tp: TP) -> None:
        del self.owner_nodes[tp]
        event = self.watchers.pop(tp, None)
        if event:
            event.set()

    def read_offsets(self, tps: Iterable[TP]) -> Dict[TP, Optional[int]]:
        return {tp: self.offsets.get(tp) for tp in tps}

    def commit_offset(self, topic: str, partition: int, offset: int) -> None:
        self.offsets[(topic, partition)] = offset

    def confirm_held(self, topic: str, partition: int) -> bool:
        return self.holds(topic, partition)

    def confirm_held_many(self, partitions: List[TP]) -> List[bool]:
        return [self.confirm_held(topic, partition) for topic, partition in partitions]

    def relabel_many(self, relabels: List[Tuple[str, int, str]]) -> List[bool]:
        return [self.relabel(topic, partition, thread_id) for topic, partition, thread_id in relabels]

    def holds(self, topic: str, partition: int) -> bool:
        self.reads.append((topic, partition))
        return self.owner_nodes.get((topic, partition), "").startswith(self.consumer_id + "-")

    def commit_offsets_if_owner(self, entries: List[Tuple[str, int, int]], session: object = None) -> bool:
        """All or nothing, as GroupClient's one multi-operation (no reads counted: the fallback counts them)."""
        if not all(self.owner_nodes.get((t, p), "").startswith(self.consumer_id + "-") for t, p, _ in entries):
            return False
        for topic, partition, offset in entries:
            self.offsets[(topic, partition)] = offset
        return True

    def commit_offset_if_owner(self, topic: str, partition: int, offset: int, owner: str,
                               session: object = None) -> bool:
        if not self.holds(topic, partition):  # member-level fence, as GroupClient's
            return False
        self.offsets[(topic, partition)] = offset
        return True


class FakeFetchers:
    def __init__(self) -> None:
        self.running: List[PartitionTopicInfo] = []
        self.starts = 0
        self.stops = 0
        self.removes: List[List[TP]] = []

    def start_connections(self, infos: Iterable[PartitionTopicInfo]) -> None:
        infos = list(infos)
        added = {(i.topic, i.partition) for i in infos}
        self.running = [i for i in self.running if (i.topic, i.partition) not in added] + infos
        self.starts += 1

    def remove_partitions(self, tps: Iterable[TP]) -> None:
        gone = set(tps)
        self.running = [i for i in self.running if (i.topic, i.partition) not in gone]
        self.removes.append(sorted(gone))

    def stop_connections(self) -> None:
        self.running = []
        self.stops += 1


ME = "g_me"


def build(group: FakeGroup, *, backoff_ms: int = 200, max_retries: int = 2, auto_commit: bool = True,
          watch_topics: Callable[[Iterable[str]], None] = lambda topics: None,
          committer: Optional[OffsetCommitter] = None, on_attempt_failed: Optional[Callable[[], None]] = None,
          on_seek: Optional[Callable[[], bool]] = None):
    queue = ChunkQueue(2)
    stream = KafkaStream(queue, 10)
    fetchers = FakeFetchers()
    failures: List[BaseException] = []
    rebalancer = Rebalancer(
        group=group,  # type: ignore[arg-type]
        topic_count=StaticTopicCount(ME, {"t": 1}),
        assignor=assignors.assign_range,
        queue_for=lambda topic, thread: queue,
        streams=[stream],
        fetchers=fetchers,
        committer=committer or OffsetCommitter(group, ZooKeeperOffsetStorage(group)),  # type: ignore[arg-type]
        auto_commit=auto_commit,
        fetch_size=1024,
        max_retries=max_retries,
        backoff_ms=backoff_ms,
        exclude_internal_topics=True,
        register=group.register,
        watch_topics=watch_topics,
        on_failure=failures.append,
        on_attempt_failed=on_attempt_failed,
        on_seek=on_seek,
    )
    return rebalancer, fetchers, failures


@contextlib.contextmanager
def rebalancing(rebalancer: Rebalancer) -> Iterator[Rebalancer]:
    """The rebalancer started for the block, stopped after it whatever the block raised."""
    rebalancer.start()
    try:
        yield rebalancer
    finally:
        rebalancer.stop()


def wait_for(condition: Callable[[], bool], what: Callable[[], str] = lambda: "", timeout: float = 5) -> None:
    """Polls ``condition`` every 10 ms; fails the test with ``what()`` if it is still false after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what()
        time.sleep(0.01)


def settle(rebalancer: Rebalancer, state: RebalanceState = RebalanceState.STABLE, timeout: float = 5) -> None:
    wait_for(lambda: rebalancer.state is state, lambda: f"state stayed {rebalancer.state}, wanted {state}", timeout)


def consume_then_another_joins(rebalancer: Rebalancer, fetchers: FakeFetchers, group: FakeGroup, offset: int) -> None:
    """Once the member owns all 4 partitions and has handed each out up to ``offset``, g_other joins
    with one thread ("g_me-0" < "g_other-0": we keep 0 and 1, 2 and 3 move) and a rebalance is asked for."""
    settle(rebalancer)
    for info in fetchers.running:
        info.consumed_offset = offset
    group.join("g_other", {"t": 1})
    rebalancer.request("member joined")


def moved_away(fetchers: FakeFetchers, group: FakeGroup) -> None:
    """Wait until partitions 2 and 3 are no longer fetched AND released: the rebalancer stops their
    fetchers first and releases their ownership after (as Kafka's), so the fetchers alone say too early."""
    wait_for(lambda: len(fetchers.running) == 2 and len(group.releases) == 2,
             lambda: f"running {len(fetchers.running)}, released {group.releases}")


def until_failed_attempts(rebalancer: Rebalancer, n: int, timeout: float = 5) -> None:
    wait_for(lambda: rebalancer.status.failed_attempts >= n,
             lambda: f"{rebalancer.status.failed_attempts} failed attempts, wanted {n}", timeout)


@pytest.fixture
def group() -> FakeGroup:
    g = FakeGroup(ME, {"t": 4})
    g.join(ME, {"t": 1})
    return g


def test_initial_rebalance_claims_everything_and_starts_fetching(group: FakeGroup) -> None:
    group.offsets[("t", 2)] = 17
    rebalancer, fetchers, failures = build(group)
    with rebalancing(rebalancer):
        assert rebalancer.wait_first_assignment(5)
        settle(rebalancer)
        assert group.owner_nodes == {("t", p): f"{ME}-0" for p in range(4)}
        offsets = {(i.topic, i.partition): i.fetched_offset for i in fetchers.running}
        assert offsets == {("t", 0): INVALID_OFFSET, ("t", 1): INVALID_OFFSET, ("t", 2): 17, ("t", 3): INVALID_OFFSET}
    assert not failures


def test_a_live_seek_runs_on_the_rebalancer_thread_after_rebalances_and_again_while_it_asks(group: FakeGroup) -> None:
    calls: List[Tuple[str, int]] = []
    answers = [False, True, True, False]  # the initial rebalance; then a request that fails twice, then succeeds

    def on_seek() -> bool:
        calls.append((threading.current_thread().name, len(rebalancer.owned_partitions())))
        return answers[len(calls) - 1] if len(calls) <= len(answers) else False

    rebalancer, _, failures = build(group, on_seek=on_seek)
    with rebalancing(rebalancer):
        assert rebalancer.wait_first_assignment(5)
        wait_for(lambda: len(calls) == 1, lambda: f"{calls}")
        rebalancer.seek_requested()
        wait_for(lambda: len(calls) == 4, lambda: f"{calls}")  # retried (SEEK_RETRY_S) until it said done
        time.sleep(0.05)
        assert len(calls) == 4
    assert {name for name, _ in calls} == {f"zkconsumer-rebalancer-{ME}"}
    assert all(owned == 4 for _, owned in calls)  # between rebalances: the share is installed
    assert not failures


def test_an_event_that_does_not_change_our_share_touches_nothing(group: FakeGroup) -> None:
    rebalancer, fetchers, _ = build(group)
    with rebalancing(rebalancer):
        settle(rebalancer)
        before = (fetchers.starts, fetchers.stops, list(group.claims), list(group.releases))
        rebalancer.request("a watch fired")
        time.sleep(0.2)
        settle(rebalancer)
        assert (fetchers.starts, fetchers.stops, group.claims, group.releases) == before


def test_only_partitions_that_move_are_released_and_retained_ones_keep_their_position(group: FakeGroup) -> None:
    rebalancer, fetchers, _ = build(group, auto_commit=False)
    with rebalancing(rebalancer):
        settle(rebalancer)
        kept = {i.partition: i for i in fetchers.running if i.partition in (0, 1)}
        consume_then_another_joins(rebalancer, fetchers, group, 5)  # handed out, not committed; we keep 0 and 1
        moved_away(fetchers, group)
        assert group.releases == [("t", 2), ("t", 3)]
        assert fetchers.stops == 0 and fetchers.removes == [[("t", 2), ("t", 3)]]  # only what moved stopped
        assert {i.partition: i for i in fetchers.running} == kept  # still fetched, same position and chunks
        assert {(i.partition, i.consumed_offset) for i in fetchers.running} == {(0, 5), (1, 5)}
        assert ("t", 0) not in group.offsets  # auto-commit off: nothing written behind the user's back


def test_auto_commit_commits_before_releasing(group: FakeGroup) -> None:
    rebalancer, fetchers, _ = build(group, auto_commit=True)
    with rebalancing(rebalancer):
        consume_then_another_joins(rebalancer, fetchers, group, 9)
        moved_away(fetchers, group)
        assert group.offsets == {("t", p): 9 for p in range(4)}


def test_a_conflicting_claim_is_retried_as_soon_as_the_owner_lets_go(group: FakeGroup) -> None:
    group.owner_nodes[("t", 3)] = "g_old-0"  # a departing member has not released yet
    rebalancer, fetchers, _ = build(group, backoff_ms=5000)
    started = time.monotonic()
    with rebalancing(rebalancer):
        time.sleep(0.2)
        assert rebalancer.state is RebalanceState.REBALANCING
        group.other_releases(("t", 3))
        settle(rebalancer)
        assert time.monotonic() - started < 2  # did not sleep the 5 s backoff
        assert group.owner_nodes[("t", 3)] == f"{ME}-0"


def test_a_failed_attempt_releases_what_it_claimed_and_keeps_retrying_past_max_retries(group: FakeGroup) -> None:
    group.owner_nodes[("t", 3)] = "g_stuck-0"
    rebalancer, fetchers, _ = build(group, backoff_ms=20, max_retries=2)
    with rebalancing(rebalancer):
        assert rebalancer.wait_first_assignment(5)  # released after max retries, not hung
        until_failed_attempts(rebalancer, 4)  # still retrying past rebalance.max.retries
        status = rebalancer.status
        assert status.state in (RebalanceState.RETRYING, RebalanceState.REBALANCING)
        assert status.last_error
        assert set(group.owner_nodes) == {("t", 3)}  # nothing half-claimed left behind
        assert fetchers.running == []
        group.other_releases(("t", 3))
        settle(rebalancer)
        assert len(group.owner_nodes) == 4


def test_observability_item1_every_failed_attempt_is_reported_to_on_attempt_failed(group: FakeGroup) -> None:
    """The status gauge resets on success; the hook lets the connector count failed attempts for good."""
    from zkconsumer.metrics.consumer import ConsumerMetrics
    metrics = ConsumerMetrics()
    group.owner_nodes[("t", 3)] = "g_stuck-0"
    rebalancer, _, _ = build(group, backoff_ms=20, max_retries=2,
                             on_attempt_failed=metrics.record_failed_rebalance_attempt)
    with rebalancing(rebalancer):
        until_failed_attempts(rebalancer, 3)
        group.other_releases(("t", 3))
        settle(rebalancer)
        assert rebalancer.status.failed_attempts == 0
        assert metrics.failed_rebalance_attempts >= 3


def test_session_loss_stops_delivery_and_restoration_rejoins(group: FakeGroup) -> None:
    rebalancer, fetchers, _ = build(group)
    with rebalancing(rebalancer):
        settle(rebalancer)
        rebalancer.session_lost()
        settle(rebalancer, RebalanceState.DISCONNECTED)
        assert fetchers.running == [] and rebalancer.status.owned == {}
        group.owner_nodes.clear()  # the server dropped our ephemerals
        rebalancer.session_restored()
        settle(rebalancer)
        assert len(fetchers.running) == 4 and len(group.owner_nodes) == 4


def test_stop_joins_the_thread_even_while_waiting_on_a_conflict(group: FakeGroup) -> None:
    group.owner_nodes[("t", 0)] = "g_stuck-0"
    rebalancer, _, _ = build(group, backoff_ms=60_000)
    rebalancer.start()
    time.sleep(0.1)
    started = time.monotonic()
    rebalancer.stop()
    assert time.monotonic() - started < 2
    assert rebalancer.state is RebalanceState.STOPPED


class StoppedWhileClaiming(FakeGroup):
    """Claims as FakeGroup does, but the member is shut down while the claims are in flight:
    ``claim_many`` returns only once its caller says it is stopping. Records every call
    the attempt makes to ZooKeeper after that."""

    def __init__(self, consumer_id: str, partitions: Dict[str, int]) -> None:
        super().__init__(consumer_id, partitions)
        self.stopper: Optional[threading.Thread] = None
        self.rebalancer: Optional[Rebalancer] = None
        self.after_stop: List[str] = []
        self.stopped = False

    def claim_many(self, claims: List[Tuple[str, int, str, Any]], look_first: bool = False,
                   cancelled: Any = None) -> List[Optional[str]]:
        holders = super().claim_many(claims, look_first)
        assert self.rebalancer is not None and cancelled is not None
        stopper = threading.Thread(target=self.rebalancer.stop)
        stopper.start()
        self.stopper = stopper
        wait_for(cancelled, lambda: "the claims were not told the rebalancer is stopping")
        self.stopped = True
        return holders

    def read_offsets(self, tps: Iterable[TP]) -> Dict[TP, Optional[int]]:
        if self.stopped:
            self.after_stop.append("read_offsets")
        return super().read_offsets(tps)

    def release(self, topic: str, partition: int, thread_id: Optional[str] = None) -> None:
        if self.stopped:
            self.after_stop.append(f"release {topic}-{partition}")
        super().release(topic, partition, thread_id)


def test_a_stop_ends_the_attempt_between_its_steps_and_leaves_its_new_nodes_to_the_session_close() -> None:
    """A shutdown during an attempt's claims: the attempt does nothing more in ZooKeeper (no offset
    read, no release one by one: each could take a session timeout with ZooKeeper slow, past the
    shutdown's bound); the nodes it created are deleted by the session close that follows."""
    group = StoppedWhileClaiming(ME, {"t": 4})
    group.join(ME, {"t": 1})
    rebalancer, fetchers, failures = build(group)
    group.rebalancer = rebalancer
    rebalancer.start()
    wait_for(lambda: group.stopper is not None)
    assert group.stopper is not None
    group.stopper.join(5)
    assert not group.stopper.is_alive()
    assert rebalancer.state is RebalanceState.STOPPED
    assert group.after_stop == []
    assert fetchers.running == []  # nothing installed: nothing delivered from nodes about to vanish
    assert group.owner_nodes == {("t", p): f"{ME}-0" for p in range(4)}  # left to the session close
    assert not failures


class HungWhileClaiming(FakeGroup):
    """Claims as FakeGroup does, but ``claim_many`` hangs (a step whose answer never comes) until released."""

    def __init__(self, consumer_id: str, partitions: Dict[str, int]) -> None:
        super().__init__(consumer_id, partitions)
        self.entered, self.answer = threading.Event(), threading.Event()

    def claim_many(self, claims: List[Tuple[str, int, str, Any]], look_first: bool = False,
                   cancelled: Any = None) -> List[Optional[str]]:
        self.entered.set()
        self.answer.wait(10)
        return super().claim_many(claims, look_first)


def test_a_stop_with_a_timeout_returns_while_a_step_hangs_and_says_the_thread_has_not_ended() -> None:
    """``stop(timeout)`` is bounded whatever ZooKeeper does; it says whether the thread ended (a
    shutdown then closes the session, which fails the step). ``stop()`` without one waits."""
    group = HungWhileClaiming(ME, {"t": 2})
    group.join(ME, {"t": 1})
    rebalancer, _, failures = build(group)
    rebalancer.start()
    assert group.entered.wait(10)
    assert rebalancer.stop(timeout=0.05) is False
    assert rebalancer.state is RebalanceState.STOPPED
    group.answer.set()
    assert rebalancer.stop() is True
    assert not failures


def test_a_fenced_partition_stops_being_delivered_and_is_reclaimed_once_free(group: FakeGroup) -> None:
    rebalancer, fetchers, _ = build(group, backoff_ms=5000)
    committer = OffsetCommitter(group, ZooKeeperOffsetStorage(group))  # type: ignore[arg-type]
    with rebalancing(rebalancer):
        settle(rebalancer)
        group.owner_nodes[("t", 1)] = "g_intruder-0"  # taken over behind our back
        for info in fetchers.running:
            info.consumed_offset = 7
        fenced = committer.commit(rebalancer.owned_partitions())
        assert fenced == [("t", 1)]
        assert ("t", 1) not in group.offsets and group.offsets[("t", 0)] == 7
        rebalancer.ownership_lost(fenced)
        wait_for(lambda: ("t", 1) not in {(i.topic, i.partition) for i in fetchers.running} and bool(fetchers.removes),
                 lambda: "still fetching a partition we lost")
        assert ("t", 1) not in rebalancer.status.owned
        group.other_releases(("t", 1))
        settle(rebalancer)
        assert group.owner_nodes[("t", 1)] == f"{ME}-0"
        assert len(fetchers.running) == 4


def test_retained_partitions_keep_flowing_while_a_new_one_is_stuck(group: FakeGroup) -> None:
    group.join("g_other", {"t": 1})  # "g_me-0" < "g_other-0": we get 0 and 1, it gets 2 and 3
    group.owner_nodes[("t", 2)] = "g_other-0"
    group.owner_nodes[("t", 3)] = "g_other-0"
    rebalancer, fetchers, _ = build(group, backoff_ms=50, max_retries=2)
    with rebalancing(rebalancer):
        settle(rebalancer)
        assert sorted(i.partition for i in fetchers.running) == [0, 1]
        del group.members_["g_other"]  # it leaves but is slow to release partition 2
        group.other_releases(("t", 3))
        rebalancer.request("member left")
        until_failed_attempts(rebalancer, 2)
        assert sorted(i.partition for i in fetchers.running) == [0, 1]  # still consuming what it kept
        group.other_releases(("t", 2))
        settle(rebalancer)
        assert sorted(i.partition for i in fetchers.running) == [0, 1, 2, 3]


def test_a_retained_partition_taken_behind_our_back_is_not_silently_kept(group: FakeGroup) -> None:
    rebalancer, fetchers, _ = build(group, backoff_ms=50, auto_commit=False)
    with rebalancing(rebalancer):
        settle(rebalancer)
        group.owner_nodes[("t", 0)] = "g_intruder-0"  # no commit will notice: auto-commit is off
        group.join("g_other", {"t": 1})  # we keep 0 and 1 by assignment
        rebalancer.request("member joined")
        until_failed_attempts(rebalancer, 1)
        assert ("t", 0) not in rebalancer.status.owned
        assert 0 not in {i.partition for i in fetchers.running}
        group.other_releases(("t", 0))
        settle(rebalancer)
        assert sorted(i.partition for i in fetchers.running) == [0, 1]


def test_after_our_member_node_vanished_the_owner_nodes_are_claimed_again_without_pausing(group: FakeGroup) -> None:
    """``rmr /consumers/<g>``: member and owner nodes gone; the member re-registers and re-creates its owner nodes."""
    rebalancer, fetchers, _ = build(group)
    with rebalancing(rebalancer):
        settle(rebalancer)
        before = (fetchers.starts, fetchers.stops)
        group.members_.clear()
        group.owner_nodes.clear()
        rebalancer.request("group node deleted")
        wait_for(lambda: len(group.owner_nodes) == 4, lambda: "owner nodes not claimed again")
        settle(rebalancer)
        assert ME in group.members_
        assert group.owner_nodes == {("t", p): f"{ME}-0" for p in range(4)}
        assert (fetchers.starts, fetchers.stops) == before  # delivery went on


# ------------------------------------------------------------ "Correct under faults" items


def test_item1_orphaned_claims_a_claim_that_raises_releases_what_the_attempt_created(group: FakeGroup) -> None:
    """Partitions 0 and 1 claimed, then the claim of 2 raises: 0 and 1 are released, not left orphaned."""
    real_claim = group.claim
    failures_left = [1]

    def claim(topic: str, partition: int, thread_id: str, watch=None) -> Optional[str]:
        if partition == 2 and failures_left[0]:
            failures_left[0] -= 1
            raise ZooKeeperUnavailableError("connection lost")
        return real_claim(topic, partition, thread_id, watch)

    group.claim = claim  # type: ignore[method-assign]
    rebalancer, fetchers, _ = build(group, backoff_ms=2000)
    with rebalancing(rebalancer):
        until_failed_attempts(rebalancer, 1)
        assert group.owner_nodes == {}  # released, although not recorded as owned
        assert rebalancer.status.owned == {} and fetchers.running == []
        rebalancer.request("retry now")
        settle(rebalancer)
        assert len(group.owner_nodes) == 4 and len(fetchers.running) == 4


def test_item1_with_zookeeper_away_claims_that_raise_try_one_release_and_keep_the_rest_for_the_next_attempt(
        group: FakeGroup) -> None:
    """Claims of 0 and 1 made, the claim of 2 raises, and releases fail too (ZooKeeper away): one release
    is tried, not one per partition (each waits the retry timeout), and the next attempt releases or
    re-claims every node the failed one may have left."""
    real_claim, real_release = group.claim, group.release
    away = [True]
    release_tries: List[TP] = []

    def claim(topic: str, partition: int, thread_id: str, watch=None) -> Optional[str]:
        if partition == 2 and away[0]:
            raise ZooKeeperUnavailableError("connection lost")
        return real_claim(topic, partition, thread_id, watch)

    def release(topic: str, partition: int, thread_id: Optional[str] = None) -> None:
        if away[0]:
            release_tries.append((topic, partition))
            raise ZooKeeperUnavailableError("connection lost")
        real_release(topic, partition, thread_id)

    group.claim = claim  # type: ignore[method-assign]
    group.release = release  # type: ignore[method-assign]
    rebalancer, fetchers, _ = build(group, backoff_ms=2000)
    with rebalancing(rebalancer):
        until_failed_attempts(rebalancer, 1)
        assert len(release_tries) == 1  # the rest were kept in the books, untried
        group.join("g_other", {"t": 1})  # the next attempt: 0 and 1 stay ours, 2 and 3 go to the other member
        away[0] = False
        rebalancer.request("member joined")
        settle(rebalancer)
        assert group.owner_nodes == {("t", 0): f"{ME}-0", ("t", 1): f"{ME}-0"}
        assert sorted(i.partition for i in fetchers.running) == [0, 1]


def test_topic_watches_are_armed_before_the_partition_maps_are_read(group: FakeGroup) -> None:
    calls: List[str] = []
    read = group.partitions_for_topics
    group.partitions_for_topics = lambda topics: (calls.append("read"), read(topics))[1]  # type: ignore[method-assign]
    rebalancer, _, _ = build(group, watch_topics=lambda topics: calls.append("watch"))
    with rebalancing(rebalancer):
        settle(rebalancer)
        assert calls[:2] == ["watch", "read"]


def test_owner_nodes_are_confirmed_again_when_the_first_re_claim_fails(group: FakeGroup) -> None:
    from zkconsumer.errors import ZooKeeperUnavailableError

    rebalancer, _, _ = build(group, backoff_ms=20)
    with rebalancing(rebalancer):
        settle(rebalancer)
        claim = group.claim
        failures = [1]

        def flaky_claim(topic: str, partition: int, thread_id: str, watch=None) -> Optional[str]:
            if partition == 2 and failures:
                failures.pop()
                raise ZooKeeperUnavailableError("ZooKeeper did not answer")
            return claim(topic, partition, thread_id, watch)

        group.claim = flaky_claim  # type: ignore[method-assign]
        group.members_.clear()
        group.owner_nodes.clear()
        rebalancer.request("group node deleted")
        wait_for(lambda: len(group.owner_nodes) == 4, lambda: f"owner nodes not all claimed again: {group.owner_nodes}")
        assert not failures


def test_item2_a_failed_commit_in_pause_does_not_stall_the_rebalance(group: FakeGroup) -> None:
    """ZooKeeper fails the pre-release commit: logged, offsets kept for later, the rebalance completes."""
    broken = [True]
    real_commit = group.commit_offset_if_owner

    def commit_offset_if_owner(topic: str, partition: int, offset: int, owner: str, session: object = None) -> bool:
        if broken[0]:
            raise ZooKeeperUnavailableError("ZooKeeper did not answer")
        return real_commit(topic, partition, offset, owner)

    group.commit_offset_if_owner = commit_offset_if_owner  # type: ignore[method-assign]
    real_batch = group.commit_offsets_if_owner  # the one-multi path gives up (writes nothing) on the same error
    group.commit_offsets_if_owner = lambda entries, session=None: not broken[0] and real_batch(entries)  # type: ignore[method-assign]
    rebalancer, fetchers, _ = build(group, backoff_ms=100)
    with rebalancing(rebalancer):
        consume_then_another_joins(rebalancer, fetchers, group, 9)
        wait_for(lambda: sorted(group.owner_nodes) == [("t", 0), ("t", 1)] and rebalancer.state is RebalanceState.STABLE,
                 lambda: f"stalled: {rebalancer.status}")
        assert rebalancer.status.failed_attempts == 0 and group.releases == [("t", 2), ("t", 3)]
        broken[0] = False
        committer = OffsetCommitter(group, ZooKeeperOffsetStorage(group))  # type: ignore[arg-type]
        committer.commit(rebalancer.owned_partitions())
        assert group.offsets == {("t", 0): 9, ("t", 1): 9}


def test_item5_an_unsupported_pattern_fails_the_attempt_before_any_claim_or_release(
        group: FakeGroup, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A member whose Java regex has no Python equivalent: ERROR, status, no claims, fetching goes on."""
    import zkconsumer.rebalance.rebalancer as module

    real = module.topic_count_from_registration

    def from_registration(consumer_id: str, registration: Registration, exclude_internal: bool):
        if registration.pattern == "white_list":
            raise UnsupportedPatternError("\\p{javaLowerCase}+", "no Python equivalent")
        return real(consumer_id, registration, exclude_internal)

    monkeypatch.setattr(module, "topic_count_from_registration", from_registration)
    rebalancer, fetchers, _ = build(group, backoff_ms=100)
    with rebalancing(rebalancer):
        settle(rebalancer)
        claims, releases, running = list(group.claims), list(group.releases), list(fetchers.running)
        group.members_["g_java"] = Registration({"\\p{javaLowerCase}+": 1}, "white_list", "0", 1)
        rebalancer.request("member joined")
        until_failed_attempts(rebalancer, 2)
        status = rebalancer.status
        assert status.state in (RebalanceState.RETRYING, RebalanceState.REBALANCING)
        assert "UnsupportedPatternError" in status.last_error and "g_java" in status.last_error
        assert "javaLowerCase" in status.last_error
        assert group.claims == claims and group.releases == releases  # no guessed assignment acted on
        assert fetchers.running == running and fetchers.removes == []  # still fetching what it holds
        errors = [r for r in caplog.records if r.levelname == "ERROR" and "g_java" in r.getMessage()]
        assert len(errors) == 1 and "javaLowerCase" in errors[0].getMessage()  # loud, but once
        del group.members_["g_java"]
        rebalancer.request("member left")
        settle(rebalancer)
        assert rebalancer.status.last_error is None


def test_item13a_zero_backoff_does_not_spin(group: FakeGroup) -> None:
    """rebalance.backoff.ms=0 and a claim that keeps conflicting: a bounded number of attempts."""
    group.owner_nodes[("t", 3)] = "g_stuck-0"
    rebalancer, _, _ = build(group, backoff_ms=0, max_retries=2)
    with rebalancing(rebalancer):
        time.sleep(1.0)
        attempts = rebalancer.status.failed_attempts
        assert 1 <= attempts <= 20, f"{attempts} attempts in 1 s"


def test_item13d_the_checkpoint_is_cleared_when_no_offset_is_found(group: FakeGroup) -> None:
    """A checkpoint from an earlier ownership does not make the committer skip a needed write."""
    committer = OffsetCommitter(group, ZooKeeperOffsetStorage(group))  # type: ignore[arg-type]
    rebalancer, fetchers, _ = build(group, auto_commit=False, committer=committer)
    committer.checkpoint("t", 0, 5)  # stored during an earlier ownership; the node was deleted since
    with rebalancing(rebalancer):
        settle(rebalancer)
        assert ("t", 0) not in committer.committed()
        info = next(i for i in fetchers.running if i.partition == 0)
        info.consumed_offset = 5
        committer.commit(rebalancer.owned_partitions())
        assert group.offsets[("t", 0)] == 5


def test_item13f_giving_up_is_reported_and_retrying_goes_on(group: FakeGroup) -> None:
    group.owner_nodes[("t", 3)] = "g_stuck-0"
    rebalancer, _, failures = build(group, backoff_ms=20, max_retries=2)
    with rebalancing(rebalancer):
        assert rebalancer.wait_first_assignment(5)
        status = rebalancer.status
        assert status.gave_up and isinstance(status.error, ConsumerRebalanceFailedError)
        assert status.as_metrics()["gave_up"] is True
        group.other_releases(("t", 3))
        settle(rebalancer)
        assert not rebalancer.status.gave_up and rebalancer.status.error is None
    assert not failures  # not a background failure: iterators are not failed by it


def test_item13e_a_partition_moving_between_our_streams_resumes_where_it_was(group: FakeGroup) -> None:
    """Only what moves stops; a partition relabelled to another of our streams keeps its position."""
    group.join(ME, {"t": 2})
    queues = {f"{ME}-0": ChunkQueue(4), f"{ME}-1": ChunkQueue(4)}
    fetchers = FakeFetchers()
    rebalancer = Rebalancer(
        group=group,  # type: ignore[arg-type]
        topic_count=StaticTopicCount(ME, {"t": 2}), assignor=assignors.assign_range,
        queue_for=lambda topic, thread: queues[thread],
        streams=[KafkaStream(q, 10, thread_id=t) for t, q in queues.items()], fetchers=fetchers,
        committer=OffsetCommitter(group, ZooKeeperOffsetStorage(group)), auto_commit=False, fetch_size=1024,  # type: ignore[arg-type]
        max_retries=2, backoff_ms=100, exclude_internal_topics=True, register=group.register,
        watch_topics=lambda topics: None, on_failure=lambda exc: None,
    )
    with rebalancing(rebalancer):
        settle(rebalancer)
        assert rebalancer.status.owned == {("t", 0): f"{ME}-0", ("t", 1): f"{ME}-0",
                                           ("t", 2): f"{ME}-1", ("t", 3): f"{ME}-1"}
        for info in fetchers.running:
            info.consumed_offset = 7  # handed out, not committed
        kept = next(i for i in fetchers.running if i.partition == 3)
        group.join("g_a", {"t": 1})  # g_a-0 < g_me-0 < g_me-1: 0,1 | 2 | 3
        rebalancer.request("member joined")
        deadline = time.monotonic() + 5
        while rebalancer.status.owned != {("t", 2): f"{ME}-0", ("t", 3): f"{ME}-1"} \
                or rebalancer.state is not RebalanceState.STABLE:
            assert time.monotonic() < deadline, rebalancer.status
            time.sleep(0.01)
        assert fetchers.stops == 0 and fetchers.removes == [[("t", 0), ("t", 1), ("t", 2)]]
        running = {i.partition: i for i in fetchers.running}
        assert running[3] is kept
        assert running[2].queue is queues[f"{ME}-0"] and running[2].fetched_offset == 7  # not re-read
        assert group.owner_nodes == {("t", 2): f"{ME}-0", ("t", 3): f"{ME}-1"}
        assert group.releases == [("t", 0), ("t", 1)]


def test_scale_item2_a_new_event_while_waiting_for_a_peer_is_not_a_failed_attempt(group: FakeGroup) -> None:
    group.owner_nodes[("t", 3)] = "g_old-0"  # a peer still releasing
    rebalancer, fetchers, _ = build(group, backoff_ms=5000, max_retries=4)
    with rebalancing(rebalancer):
        time.sleep(0.2)
        assert rebalancer.state is RebalanceState.REBALANCING
        rebalancer.request("another member joined")  # ends the wait: not a failure
        time.sleep(0.2)
        assert rebalancer.status.failed_attempts == 0
        assert sorted(i.partition for i in fetchers.running) == [0, 1, 2]  # what it had claimed flows
        group.other_releases(("t", 3))
        settle(rebalancer)
        assert rebalancer.status.failed_attempts == 0 and not rebalancer.status.gave_up
        assert sorted(i.partition for i in fetchers.running) == [0, 1, 2, 3]


def test_scale_item2_retained_partitions_cost_one_read_and_are_not_claimed_again(group: FakeGroup) -> None:
    rebalancer, fetchers, _ = build(group, auto_commit=False)
    with rebalancing(rebalancer):
        settle(rebalancer)
        claims = len(group.claims)
        group.join("g_other", {"t": 1})  # we keep 0 and 1
        rebalancer.request("member joined")
        wait_for(lambda: sorted(i.partition for i in fetchers.running) == [0, 1])
        settle(rebalancer)
        assert len(group.claims) == claims  # retained: not claimed again
        assert sorted(group.reads) == [("t", 0), ("t", 1)]  # one read each
        assert sorted(group.releases) == [("t", 2), ("t", 3)]


def test_scale_item2_a_burst_of_joins_is_one_rebalance(group: FakeGroup) -> None:
    rebalancer, fetchers, _ = build(group, auto_commit=False)
    with rebalancing(rebalancer):
        settle(rebalancer)
        before = rebalancer.status.rebalances
        claims = len(group.claims)
        for i in range(4):  # four members register 30 ms apart
            group.join(f"g_new{i}", {"t": 1})
            rebalancer.request(f"member {i} joined")
            time.sleep(0.03)
        time.sleep(0.5)
        settle(rebalancer)
        assert rebalancer.status.rebalances == before + 1
        assert len(group.claims) == claims  # only released (4 partitions, 5 members): no intermediate claims


def _three_peers_still_releasing(group: FakeGroup) -> List[TP]:
    """Partitions 1 to 3 held by peers; returns the list of partitions ``group`` is asked to claim from now on."""
    for p in (1, 2, 3):
        group.owner_nodes[("t", p)] = "g_old-0"
    calls: List[TP] = []
    real_claim = group.claim

    def claim(topic: str, partition: int, thread_id: str, watch=None) -> Optional[str]:
        calls.append((topic, partition))
        return real_claim(topic, partition, thread_id, watch)

    group.claim = claim  # type: ignore[method-assign]
    return calls


def test_scale_item2_a_wakeup_retries_only_the_nodes_that_changed(group: FakeGroup) -> None:
    calls = _three_peers_still_releasing(group)
    rebalancer, fetchers, _ = build(group, backoff_ms=5000)
    with rebalancing(rebalancer):
        time.sleep(0.3)
        calls.clear()
        group.other_releases(("t", 2))
        time.sleep(0.2)
        assert calls == [("t", 2)]  # not 1 and 3 again
        for p in (1, 3):
            group.other_releases(("t", p))
        settle(rebalancer)
        assert sorted(calls) == [("t", 1), ("t", 2), ("t", 3)]
        assert rebalancer.status.failed_attempts == 0


def test_scale_a_new_event_does_not_claim_again_nodes_whose_holder_has_not_changed(group: FakeGroup) -> None:
    calls = _three_peers_still_releasing(group)
    rebalancer, fetchers, _ = build(group, backoff_ms=5000)
    with rebalancing(rebalancer):
        time.sleep(0.3)
        assert sorted(calls) == [("t", 0), ("t", 1), ("t", 2), ("t", 3)]
        calls.clear()
        for i in range(3):  # events that supersede the wait; the owner nodes stay as they were
            rebalancer.request(f"event {i}")
            time.sleep(0.2)
        assert calls == []  # their watches did not fire: no create, no read
        group.other_releases(("t", 2))
        time.sleep(0.2)
        assert calls == [("t", 2)]
        calls.clear()
        group.session_id = 2  # a new session: the old watches are gone, so every node is claimed again
        rebalancer.request("session changed")
        time.sleep(0.3)
        assert sorted(calls) == [("t", 1), ("t", 3)]
        for p in (1, 3):
            group.other_releases(("t", p))
        settle(rebalancer)
        assert sorted(i.partition for i in fetchers.running) == [0, 1, 2, 3]
        assert rebalancer.status.failed_attempts == 0


def test_scale_the_first_event_after_a_calm_is_acted_on_at_once_a_burst_waits_for_quiet(
        group: FakeGroup, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lone join in a settled group costs no quiet window; the first assignment (members starting
    together) still waits for one. The windows are stretched here so the difference is plain."""
    import zkconsumer.rebalance.rebalancer as module

    monkeypatch.setattr(module, "QUIET_S", 2.0)
    monkeypatch.setattr(module, "FIRST_QUIET_S", 2.0)
    monkeypatch.setattr(module, "QUIET_MAX_S", 2.0)
    monkeypatch.setattr(module, "CALM_S", 0.3)
    rebalancer, _, _ = build(group)
    started = time.monotonic()
    with rebalancing(rebalancer):
        settle(rebalancer)
        assert time.monotonic() - started >= 1.9  # waited for the burst of starts to end
        time.sleep(0.5)  # calm
        group.join("g_other", {"t": 1})
        joined = time.monotonic()
        rebalancer.request("member joined")
        while not group.releases:
            assert time.monotonic() - joined < 1.5, "the lone join waited for a quiet window"
            time.sleep(0.01)


@pytest.mark.parametrize("backoff_ms", [0, 50, 100, 150, 2000])
def test_no_wait_between_attempts_is_shorter_than_the_100_ms_floor_whatever_the_jitter(backoff_ms: int) -> None:
    """The floor applies after the ±50 % jitter: ``rebalance.backoff.ms=100`` never waits 50 ms."""
    from zkconsumer.rebalance.decisions import jittered_backoff
    from zkconsumer.rebalance.rebalancer import MIN_BACKOFF_S

    base = max(MIN_BACKOFF_S, backoff_ms / 1000.0)
    for failures in range(0, 8):
        for draw in (0.0, 0.25, 0.5, 0.999):
            wait = jittered_backoff(base, failures, 4, draw, MIN_BACKOFF_S)
            assert wait >= MIN_BACKOFF_S, (backoff_ms, failures, draw, wait)
            assert wait <= max(MIN_BACKOFF_S, base * 4 * 1.5)
