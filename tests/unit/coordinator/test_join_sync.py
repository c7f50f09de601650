"""The coordinator membership state machine and Delivery, against an in-memory coordinator (no broker)."""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from types import SimpleNamespace
from typing import Any, Callable, Deque, Dict, Iterable, List, Mapping, Optional, Tuple

import pytest

from zkconsumer.commits import CommitOutcome, Generation
from zkconsumer.consumer.membership import RebalanceState
from zkconsumer.consumer.stream import KafkaStream
from zkconsumer.coordinator.consumer_protocol import decode_assignment, encode_assignment
from zkconsumer.coordinator.delivery import Delivery
from zkconsumer.coordinator.join_sync import JoinSyncLoop
from zkconsumer.errors import BrokerUnavailableError, ConfigurationError, ZooKeeperUnavailableError
from zkconsumer.fetch.handoff import ChunkQueue, PartitionTopicInfo
from zkconsumer.offsets.committer import OffsetCommitter
from zkconsumer.structs import INVALID_OFFSET
from zkconsumer.wire import group_protocol as g

TP = Tuple[str, int]


def eventually(predicate: Callable[[], object], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


class FakeCoordinator:
    """One group with one member (always the leader); scripts inject error codes or exceptions."""

    def __init__(self) -> None:
        self.generation = 0
        self.ids = itertools.count(1)
        self.join_script: Deque[Any] = deque()
        self.sync_script: Deque[Any] = deque()
        self.heartbeat_script: Deque[Any] = deque()
        self.requests: List[Any] = []
        self.join_gate: Optional[threading.Event] = None
        self.invalidations = 0

    def joins(self) -> List[g.JoinGroupRequest]:
        return [r for r in list(self.requests) if isinstance(r, g.JoinGroupRequest)]

    def heartbeats(self) -> List[g.HeartbeatRequest]:
        return [r for r in list(self.requests) if isinstance(r, g.HeartbeatRequest)]

    @staticmethod
    def _scripted(script: Deque[Any]) -> int:
        action = script.popleft() if script else 0
        if isinstance(action, BaseException):
            raise action
        return action


class FakeChannel:
    def __init__(self, coordinator: FakeCoordinator) -> None:
        self.c = coordinator
        self.interrupted = threading.Event()

    def send(self, request: Any) -> Any:
        c = self.c
        c.requests.append(request)
        if isinstance(request, g.JoinGroupRequest):
            while c.join_gate is not None and not c.join_gate.wait(0.005):
                if self.interrupted.is_set():
                    self.interrupted.clear()
                    raise BrokerUnavailableError("interrupted")
            code = c._scripted(c.join_script)
            if code:
                return g.JoinGroupResponse(code, 0, "", "", request.member_id, ())
            member = request.member_id or f"member-{next(c.ids)}"
            c.generation += 1
            name, metadata = request.protocols[0]
            return g.JoinGroupResponse(0, c.generation, name, member, member, (g.GroupMember(member, metadata),))
        if isinstance(request, g.SyncGroupRequest):
            code = c._scripted(c.sync_script)
            return g.SyncGroupResponse(code, b"" if code else dict(request.assignments).get(request.member_id, b""))
        if isinstance(request, g.HeartbeatRequest):
            code = c._scripted(c.heartbeat_script)
            if not code and request.generation_id != c.generation:
                code = g.ILLEGAL_GENERATION
            return g.HeartbeatResponse(code)
        assert isinstance(request, g.LeaveGroupRequest)
        return g.LeaveGroupResponse(0)

    def invalidate(self, reason: str = "") -> None:
        self.c.invalidations += 1

    def interrupt(self) -> None:
        self.interrupted.set()

    def close(self) -> None:
        pass


class FakeDelivery:
    def __init__(self) -> None:
        self.events: List[Tuple[Any, ...]] = []
        self.fail_assign = 0

    def assign(self, generation: Generation, share: Mapping[TP, str]) -> None:
        if self.fail_assign:
            self.fail_assign -= 1
            raise ZooKeeperUnavailableError("offsets unreadable for now")
        self.events.append(("assign", generation, dict(share)))

    def revoke(self, commit: bool) -> None:
        self.events.append(("revoke", commit))

    def assigned(self) -> List[Generation]:
        return [e[1] for e in self.events if e[0] == "assign"]

    def revokes(self) -> List[bool]:
        return [e[1] for e in self.events if e[0] == "revoke"]


class Harness:
    def __init__(self, **kwargs: Any) -> None:
        self.coordinator = FakeCoordinator()
        self.delivery = FakeDelivery()
        self.failures: List[BaseException] = []
        self.valid = True
        self.waiting: Optional[str] = None
        options: Dict[str, Any] = dict(session_timeout_ms=6000, heartbeat_interval_ms=20, max_retries=2, backoff_ms=20)
        options.update(kwargs)
        self.membership = JoinSyncLoop(
            group_id="grp", name="me", protocol="range", metadata=b"{}",
            join_channel=FakeChannel(self.coordinator), heartbeat_channel=FakeChannel(self.coordinator),
            plan=self.plan, share_of=self.share_of, listener=self.delivery, precondition=lambda: self.waiting,
            on_failure=self.failures.append, **options,
        )

    def plan(self, protocol: str, members: Iterable[g.GroupMember]):  # type: ignore[no-untyped-def]
        assignments = [(m.member_id, encode_assignment([("t", p) for p in range(4)])) for m in members]
        return assignments, lambda: self.valid

    @staticmethod
    def share_of(data: bytes, member_id: str) -> Dict[TP, str]:
        """Every partition to the member's one stream."""
        return {tp: f"{member_id}-0" for tp in decode_assignment(data, member_id)}

    def __enter__(self) -> "Harness":
        self.membership.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.membership.stop()


def test_joins_as_leader_installs_its_plan_and_heartbeats_its_generation() -> None:
    with Harness() as h:
        assert h.membership.wait_first_assignment(5)
        [(kind, generation, share)] = h.delivery.events
        assert generation == Generation(1, "member-1") and share == {("t", p): "member-1-0" for p in range(4)}
        assert h.membership.status({}).state is RebalanceState.STABLE and h.membership.is_leader
        eventually(lambda: len(h.coordinator.heartbeats()) >= 3, "heartbeats")
        assert {(r.generation_id, r.member_id) for r in h.coordinator.heartbeats()} == {(1, "member-1")}
        join = h.coordinator.joins()[0]
        assert (join.member_id, join.protocol_type, join.protocols, join.session_timeout_ms) == \
            ("", "consumer", (("range", b"{}"),), 6000)
    assert h.membership.status({}).state is RebalanceState.STOPPED and not h.failures


def test_a_rebalance_in_progress_commits_then_rejoins_with_the_same_member_id() -> None:
    with Harness() as h:
        h.membership.wait_first_assignment(5)
        h.coordinator.heartbeat_script.append(g.REBALANCE_IN_PROGRESS)
        eventually(lambda: len(h.delivery.assigned()) == 2, "the second generation")
        assert h.delivery.revokes() == [True]
        assert [j.member_id for j in h.coordinator.joins()] == ["", "member-1"]
        assert h.delivery.assigned()[1] == Generation(2, "member-1")
        assert h.membership.status({}).rebalances == 2


def test_unknown_member_id_revokes_without_commit_and_joins_as_a_new_member() -> None:
    with Harness() as h:
        h.membership.wait_first_assignment(5)
        h.coordinator.heartbeat_script.append(g.UNKNOWN_MEMBER)
        eventually(lambda: len(h.delivery.assigned()) == 2, "the second generation")
        assert h.delivery.revokes() == [False]
        assert [j.member_id for j in h.coordinator.joins()] == ["", ""]
        assert h.delivery.assigned()[1].member_id == "member-2"


def test_illegal_generation_revokes_without_commit() -> None:
    with Harness() as h:
        h.membership.wait_first_assignment(5)
        h.coordinator.heartbeat_script.append(g.ILLEGAL_GENERATION)
        eventually(lambda: len(h.delivery.assigned()) == 2, "the second generation")
        assert h.delivery.revokes() == [False]
        assert h.coordinator.joins()[1].member_id == "member-1"


def test_a_silent_coordinator_past_the_session_timeout_means_the_generation_is_over() -> None:
    with Harness(session_timeout_ms=200, heartbeat_interval_ms=20) as h:
        h.membership.wait_first_assignment(5)
        h.coordinator.heartbeat_script.extend([BrokerUnavailableError("no route")] * 1000)
        eventually(lambda: h.delivery.revokes(), "a revoke")
        assert h.delivery.revokes()[0] is False
        assert h.coordinator.invalidations > 0


def test_a_coordinator_error_on_join_is_retried_after_looking_it_up_again() -> None:
    h = Harness()
    h.coordinator.join_script.extend([g.NOT_COORDINATOR_FOR_GROUP, g.GROUP_LOAD_IN_PROGRESS])
    with h:
        assert h.membership.wait_first_assignment(5)
        eventually(lambda: h.delivery.assigned(), "an assignment")
        assert h.coordinator.invalidations >= 1 and len(h.coordinator.joins()) == 3


def test_sync_rebalance_in_progress_rejoins_at_once() -> None:
    h = Harness(backoff_ms=60_000)  # a backoff would hang the test: there must be none
    h.coordinator.sync_script.append(g.REBALANCE_IN_PROGRESS)
    with h:
        eventually(lambda: h.delivery.assigned(), "an assignment")
        assert len(h.coordinator.joins()) == 2 and h.delivery.assigned()[0].generation_id == 2


@pytest.mark.parametrize("code,prop", [(g.INCONSISTENT_GROUP_PROTOCOL, "partition.assignment.strategy"),
                                       (g.INVALID_SESSION_TIMEOUT, "session.timeout.ms")])
def test_configuration_errors_from_the_coordinator_are_reported_and_end_the_member(code: int, prop: str) -> None:
    h = Harness()
    h.coordinator.join_script.append(code)
    with h:
        assert h.membership.wait_first_assignment(5)
        eventually(lambda: h.failures, "a reported failure")
        [failure] = h.failures
        assert isinstance(failure, ConfigurationError) and failure.property == prop
        assert h.delivery.events == []


def test_the_precondition_holds_the_join_and_is_reported() -> None:
    h = Harness()
    h.waiting = "2 ZooKeeper-membership members still registered"
    with h:
        assert h.membership.wait_first_assignment(5)  # released after rebalance.max.retries
        status = h.membership.status({})
        assert status.state in (RebalanceState.RETRYING, RebalanceState.REBALANCING)
        assert "ZooKeeper-membership" in (status.last_error or "")
        assert h.coordinator.joins() == []
        h.waiting = None
        eventually(lambda: h.delivery.assigned(), "the join once the precondition holds")


def test_stop_interrupts_a_join_the_coordinator_is_holding() -> None:
    h = Harness()
    h.coordinator.join_gate = threading.Event()
    h.membership.start()
    eventually(lambda: h.coordinator.joins(), "a JoinGroup in flight")
    h.membership.stop()  # returns: the held request was interrupted
    assert h.membership.status({}).state is RebalanceState.STOPPED and h.delivery.events == []


def test_a_failed_install_is_retried_while_heartbeats_keep_the_session() -> None:
    h = Harness()
    h.delivery.fail_assign = 3
    with h:
        eventually(lambda: h.delivery.assigned(), "the install to succeed")
        assert len(h.coordinator.joins()) == 1  # no rejoin needed
        assert h.membership.status({}).failed_attempts == 0


def test_the_leader_rejoins_when_its_plan_inputs_change() -> None:
    with Harness() as h:
        h.membership.wait_first_assignment(5)
        h.valid = False
        eventually(lambda: h.delivery.revokes(), "a revoke")
        h.valid = True
        eventually(lambda: len(h.delivery.assigned()) == 2, "the replanned generation")
        assert h.delivery.revokes()[0] is True


def test_stale_rejoin_requests_are_ignored_and_leave_names_the_member() -> None:
    with Harness() as h:
        h.membership.wait_first_assignment(5)
        h.membership.request_rejoin("a commit of an old generation was fenced", Generation(99, "member-1"), commit=False)
        time.sleep(0.1)
        assert h.delivery.revokes() == []
        current = h.membership.generation
        h.membership.request_rejoin("a commit was fenced", current, commit=False)
        eventually(lambda: h.delivery.revokes() == [False], "the revoke")
    h.membership.leave()
    [leave] = [r for r in h.coordinator.requests if isinstance(r, g.LeaveGroupRequest)]
    assert leave.member_id == h.membership.member_id


# --------------------------------------------------------------------------- Delivery


class FakeFetchers:
    def __init__(self) -> None:
        self.running: List[PartitionTopicInfo] = []

    def start_connections(self, infos: Iterable[PartitionTopicInfo]) -> None:
        self.running = list(infos)

    def stop_connections(self) -> None:
        self.running = []


class MemoryStorage:
    name = "memory"
    rewrites_unchanged = True

    def __init__(self) -> None:
        self.offsets: Dict[TP, int] = {}
        self.writes: List[Tuple[Generation, Dict[TP, int]]] = []

    def read(self, partitions: Iterable[TP]) -> Dict[TP, Optional[int]]:
        return {tp: self.offsets.get(tp) for tp in partitions}

    def write(self, entries, generation):  # type: ignore[no-untyped-def]
        self.writes.append((generation, {e.tp: e.offset for e in entries}))
        self.offsets.update({e.tp: e.offset for e in entries})
        return CommitOutcome(committed=[e.tp for e in entries])

    def out_of_sync(self) -> set:
        return set()

    def close(self) -> None:
        pass


class FakeGroup:
    group = "grp"
    client = SimpleNamespace(remaining=lambda: None)  # no ZooKeeper deadline (BoundedZooKeeper.remaining)


def delivery(auto_commit: bool = True) -> Tuple[Delivery, FakeFetchers, MemoryStorage, Dict[str, ChunkQueue]]:
    queues = {f"c-{i}": ChunkQueue(2) for i in range(2)}
    streams = [KafkaStream(q, 10, thread_id=t) for t, q in queues.items()]
    fetchers, storage = FakeFetchers(), MemoryStorage()
    d = Delivery(consumer_id="c", queue_for=lambda topic, thread: queues[thread], streams=streams, fetchers=fetchers,
                 committer=OffsetCommitter(FakeGroup(), storage),  # type: ignore[arg-type]
                 auto_commit=auto_commit, fetch_size=1024)
    return d, fetchers, storage, queues


def test_delivery_routes_member_threads_to_local_streams_from_committed_offsets() -> None:
    d, fetchers, storage, queues = delivery()
    storage.offsets[("t", 1)] = 40
    d.assign(Generation(3, "m"), {("t", 0): "m-0", ("t", 1): "m-1"})
    by_tp = {(i.topic, i.partition): i for i in fetchers.running}
    assert by_tp[("t", 0)].fetched_offset == INVALID_OFFSET and by_tp[("t", 1)].fetched_offset == 40
    assert by_tp[("t", 0)].queue is queues["c-0"] and by_tp[("t", 1)].queue is queues["c-1"]
    assert d.assignment() == {("t", 0): "m-0", ("t", 1): "m-1"}
    assert d.owned_map() == {("t", 0): "c-0", ("t", 1): "c-1"}


def test_revoke_stops_clears_and_commits_under_the_generation() -> None:
    d, fetchers, storage, queues = delivery()
    d.assign(Generation(3, "m"), {("t", 0): "m-0"})
    info = fetchers.running[0]
    info.enqueue(0, [(0, None, b"x"), (1, None, b"y")], lambda: False)
    info.consumed_offset = 1
    d.revoke(commit=True)
    assert fetchers.running == [] and len(queues["c-0"]) == 0
    assert storage.writes == [(Generation(3, "m"), {("t", 0): 1})]
    assert d.owned() == (None, [])


def test_revoke_of_an_expired_generation_does_not_commit() -> None:
    d, fetchers, storage, _ = delivery()
    d.assign(Generation(3, "m"), {("t", 0): "m-0"})
    fetchers.running[0].consumed_offset = 5
    d.revoke(commit=False)
    assert storage.writes == []


def test_positions_carry_over_only_into_the_next_generation_of_the_same_member() -> None:
    d, fetchers, storage, _ = delivery(auto_commit=False)
    storage.offsets[("t", 0)] = 2
    d.assign(Generation(3, "m"), {("t", 0): "m-0"})
    fetchers.running[0].consumed_offset = 9  # handed out, not committed (auto-commit off)
    d.revoke(commit=True)
    d.assign(Generation(4, "m"), {("t", 0): "m-1"})
    assert fetchers.running[0].fetched_offset == 9  # nobody else can have had it in between
    fetchers.running[0].consumed_offset = 12
    d.revoke(commit=True)
    d.assign(Generation(6, "m"), {("t", 0): "m-0"})  # a generation was missed: someone else may have consumed
    assert fetchers.running[0].fetched_offset == 2


def test_the_precondition_is_asked_again_after_syncgroup_and_nothing_is_installed_while_it_fails() -> None:
    # Simulator, switch schedule seed 16850: a member checked /ids (empty), a ZooKeeper member rolling back
    # registered, then the JoinGroup went out: both delivered. Asked again once the coordinator lists us, one
    # of the two sees the other (the ZooKeeper member asks the coordinator again after registering).
    h = Harness()
    answers = iter([None, "1 ZooKeeper-membership member registered"])
    h.membership._precondition = lambda: next(answers, None)  # type: ignore[method-assign]
    with h:
        eventually(lambda: len(h.coordinator.joins()) >= 2, "a second join after the check once listed failed")
        eventually(lambda: h.delivery.assigned(), "the join once the precondition holds")
        assert len(h.delivery.assigned()) == 1
