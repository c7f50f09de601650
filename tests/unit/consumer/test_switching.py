"""SwitchingMembership's hand-over, with fake memberships and a fake ZooKeeper (the real switch:
tests/integration/test_live_switch.py)."""

from __future__ import annotations

import contextlib
import threading
import time
from types import SimpleNamespace
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
from kazoo.exceptions import NoNodeError

from zkconsumer.consumer import switching
from zkconsumer.consumer.switching import SwitchingMembership, registration_refused
from zkconsumer.errors import ConfigurationError, ZkConsumerError
from zkconsumer.zookeeper import migration, zkformat

GROUP = "g"
OURS, THEIRS = 11, 22


class FakeZooKeeper:
    """Nodes as ``path -> (data, ephemeral owner)``."""

    def __init__(self) -> None:
        self.nodes: Dict[str, Tuple[bytes, int]] = {}

    def get(self, path: str) -> Tuple[bytes, Any]:
        if path not in self.nodes:
            raise NoNodeError(path)
        return self.nodes[path][0], SimpleNamespace(ephemeralOwner=self.nodes[path][1])

    def exists(self, path: str) -> Optional[Any]:
        return SimpleNamespace(ephemeralOwner=self.nodes[path][1]) if path in self.nodes else None

    def get_children(self, path: str) -> List[str]:
        prefix = path + "/"
        children = {p[len(prefix):].split("/")[0] for p in self.nodes if p.startswith(prefix)}
        if not children and path not in self.nodes:
            raise NoNodeError(path)
        return sorted(children)


class FakeGroup:
    def __init__(self, events: List[str], zk: FakeZooKeeper) -> None:
        self.client = zk
        self.paths = zkformat.GroupPaths(GROUP)
        self.session_id = OURS
        self.member_list: Any = object()
        self.topic_data: Any = object()
        self._events = events

    def release_many(self, partitions: List[Tuple[str, int]]) -> None:
        self._events.append(f"release {sorted(partitions)}")
        for topic, partition in partitions:
            self.client.nodes.pop(self.paths.owner(topic, partition), None)

    def deregister(self) -> None:
        self._events.append("deregister")
        self.client.nodes.pop(self.paths.member("g_c1"), None)


class FakeMembership:
    def __init__(self, kind: str, events: List[str]) -> None:
        self.kind = kind
        self._events = events
        self.joined_ = False

    #: ``kind -> error`` a join of that kind raises (once), as a refused registration would.
    failing: Dict[str, Exception] = {}

    def join(self, *_args: Any) -> None:
        self._events.append(f"{self.kind}.join")
        error = FakeMembership.failing.pop(self.kind, None)
        if error is not None:
            raise error
        self.joined_ = True

    def stop(self) -> None:
        self._events.append(f"{self.kind}.stop")

    def commit(self, offsets: Any = None) -> List[Any]:
        self._events.append(f"{self.kind}.commit")
        return []

    def positions(self) -> Dict[Tuple[str, int], int]:
        return {("t", 0): 5} if self.joined_ else {}

    def leave(self) -> None:
        self._events.append(f"{self.kind}.leave")

    def joined(self) -> bool:
        return self.joined_

    def status(self) -> None:
        return None

    def uncommitted(self) -> List[Any]:
        return []

    def on_zk_state(self, state: str) -> None:
        pass

    def deliverable(self) -> bool:
        return True

    def describe(self) -> str:
        return ""


def make(events: List[str], *, membership: str = "zookeeper", storage: str = "kafka", dual: bool = False,
         at_coordinator: Optional[List[List[str]]] = None) -> Tuple[SwitchingMembership, FakeZooKeeper, Any]:
    zk = FakeZooKeeper()
    group = FakeGroup(events, zk)
    closing = threading.Event()

    @contextlib.contextmanager
    def guard() -> Iterator[None]:
        yield

    config = SimpleNamespace(group_id=GROUP, group_membership=membership, offsets_storage=storage,
                             dual_commit_enabled=dual, auto_commit_enable=True, offsets_commit_max_retries=1,
                             offsets_channel_backoff_ms=10, rebalance_backoff_ms=10)
    member = SimpleNamespace(
        config=config, consumer_id="g_c1", zk=zk, group=group, streams=[], closing=closing, guard=guard,
        fetchers=SimpleNamespace(stop_connections=lambda: events.append("fetchers.stop")),
        listener=SimpleNamespace(before_releasing_partitions=lambda ps: events.append(f"listener.release {ps}")),
        on_failure=lambda exc: events.append(f"failure {exc!r}"), session_timeout_s=lambda: 1.0,
    )
    answers = list(at_coordinator or [[]])

    def coordinator_members() -> List[str]:
        events.append("describe")
        return answers.pop(0) if len(answers) > 1 else answers[0]

    switcher = SwitchingMembership(member, lambda kind: FakeMembership(kind, events),  # type: ignore[arg-type]
                                   coordinator_members)
    return switcher, zk, member


@contextlib.contextmanager
def started(events: List[str], **options: Any) -> Iterator[Tuple[SwitchingMembership, FakeZooKeeper]]:
    """:func:`make`'s switcher (``options`` as there) and its ZooKeeper; the switcher is stopped on the way out."""
    switcher, zk, _ = make(events, **options)
    try:
        yield switcher, zk
    finally:
        switcher.stop()


@pytest.fixture(autouse=True)
def no_kazoo_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(migration, "watch_intent", lambda *_a: None)


def say(zk: FakeZooKeeper, to: str) -> None:
    zk.nodes[migration.migration_path(GROUP)] = (migration.encode_intent(to, 1), 0)


def wait(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_zookeeper_member_stops_commits_releases_its_nodes_and_deregisters_before_joining_the_coordinator() -> None:
    events: List[str] = []
    with started(events) as (switcher, zk):
        owner = zkformat.GroupPaths(GROUP).owner
        zk.nodes[owner("t", 0)] = (b"g_c1-0", OURS)
        zk.nodes[owner("t", 1)] = (b"g_c2-0", THEIRS)
        switcher.join(None, None, None)  # type: ignore[arg-type]
        assert switcher.kind == "zookeeper"
        events.clear()
        say(zk, "kafka")
        switcher._wake.set()
        wait(lambda: switcher.switches == 1, "the switch")
        assert events == ["zookeeper.stop", "fetchers.stop", "zookeeper.commit", "listener.release {'t': {0}}",
                          "release [('t', 0)]", "deregister", "kafka.join"]
        assert switcher.kind == "kafka"
        assert owner("t", 1) in zk.nodes, "another member's owner node was touched"


def test_a_member_joins_the_membership_the_node_names_whatever_its_configuration() -> None:
    events: List[str] = []
    with started(events, membership="zookeeper") as (switcher, zk):
        say(zk, "kafka")
        switcher.join(None, None, None)  # type: ignore[arg-type]
        assert events == ["kafka.join"] and switcher.kind == "kafka"


def test_a_member_whose_offsets_cannot_follow_is_refused_at_join_and_stays_when_running() -> None:
    events: List[str] = []
    switcher, zk, _ = make(events, storage="zookeeper")
    say(zk, "kafka")
    with pytest.raises(ConfigurationError, match="offsets.storage=kafka and dual.commit.enabled=false"):
        switcher.join(None, None, None)  # type: ignore[arg-type]
    events2: List[str] = []
    with started(events2, dual=True) as (running, zk2):
        running.join(None, None, None)  # type: ignore[arg-type]
        say(zk2, "kafka")
        running._wake.set()
        time.sleep(0.3)
        assert running.switches == 0 and running.kind == "zookeeper"
        assert "zookeeper.stop" not in events2


def test_back_to_zookeeper_waits_until_the_coordinator_lists_no_member() -> None:
    events: List[str] = []
    with started(events, membership="kafka", at_coordinator=[["m1"], ["m1"], []]) as (switcher, zk):
        switcher.join(None, None, None)  # type: ignore[arg-type]
        events.clear()
        say(zk, "zookeeper")
        switcher._wake.set()
        wait(lambda: switcher.switches == 1, "the switch back")
        assert events == ["kafka.stop", "fetchers.stop", "kafka.commit", "listener.release {'t': {0}}", "kafka.leave",
                          "describe", "describe", "describe", "zookeeper.join"]


def test_a_zookeeper_member_does_not_register_again_while_the_node_says_kafka() -> None:
    _, zk, member = make([])
    assert registration_refused(member) is None
    say(zk, "zookeeper")
    assert registration_refused(member) is None
    say(zk, "kafka")
    assert "migrating to coordinator membership" in (registration_refused(member) or "")


def test_the_switch_thread_polls_without_a_watch_event(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(switching, "POLL_S", 0.05)
    events: List[str] = []
    with started(events) as (switcher, zk):
        switcher.join(None, None, None)  # type: ignore[arg-type]
        say(zk, "kafka")
        wait(lambda: switcher.switches == 1, "the switch, from the poll alone")


def test_a_member_whose_first_registration_is_refused_by_a_node_written_meanwhile_follows_the_node() -> None:
    # The registration may have timed out and been applied all the same (simulator, switch schedule seed
    # 104): left under /ids, it held every coordinator member at the barrier for good. It is deleted first.
    events: List[str] = []
    switcher, zk, _ = make(events)
    registration = zkformat.GroupPaths(GROUP).member("g_c1")

    def node_written_during_join() -> None:
        say(zk, "kafka")
        zk.nodes[registration] = (b"{}", OURS)  # the create that timed out, applied

    FakeMembership.failing["zookeeper"] = ZkConsumerError("not registering: the group is migrating")
    original = FakeMembership.join

    def join(self: FakeMembership, *args: Any) -> None:
        if self.kind == "zookeeper":
            node_written_during_join()
        original(self, *args)

    FakeMembership.join = join  # type: ignore[method-assign]
    try:
        switcher.join(None, None, None)  # type: ignore[arg-type]
        assert events == ["zookeeper.join", "zookeeper.stop", "deregister", "kafka.join"] and switcher.kind == "kafka"
        assert registration not in zk.nodes
    finally:
        FakeMembership.join = original  # type: ignore[method-assign]
        FakeMembership.failing.clear()
        switcher.stop()


def test_a_rollback_reversed_while_waiting_for_the_coordinator_to_empty_joins_the_coordinator_again() -> None:
    # Simulator, switch schedule seed 34: migrate kafka, then zookeeper, then kafka again, with a member
    # that never left the coordinator: the others waited for it to leave, forever.
    events: List[str] = []
    with started(events, membership="kafka", at_coordinator=[["m1"]]) as (switcher, zk):
        switcher.join(None, None, None)  # type: ignore[arg-type]
        say(zk, "zookeeper")
        switcher._wake.set()
        wait(lambda: "describe" in events, "waiting at the rollback barrier")
        say(zk, "kafka")
        wait(lambda: switcher.switches == 1, "the reversed rollback followed")
        assert switcher.kind == "kafka"
        assert events[-1] == "kafka.join" and "zookeeper.join" not in events


def test_a_rollback_whose_registration_is_refused_follows_the_node_back_to_the_coordinator() -> None:
    # Simulator, switch schedule seed 6: the node said kafka again once the coordinator had emptied; the
    # registration was refused, and tried again as a ZooKeeper member forever.
    events: List[str] = []
    switcher, zk, _ = make(events, membership="kafka", at_coordinator=[[]])
    original = FakeMembership.join

    def join(self: FakeMembership, *args: Any) -> None:
        if self.kind == "zookeeper":
            say(zk, "kafka")  # written between the barrier and the registration
            FakeMembership.failing["zookeeper"] = ZkConsumerError("not registering: the group is migrating")
        original(self, *args)

    try:
        switcher.join(None, None, None)  # type: ignore[arg-type]
        FakeMembership.join = join  # type: ignore[method-assign]
        say(zk, "zookeeper")
        switcher._wake.set()
        wait(lambda: switcher.switches == 1, "the reversed rollback followed")
        assert switcher.kind == "kafka"
        assert events[-4:] == ["zookeeper.join", "zookeeper.stop", "deregister", "kafka.join"]
    finally:
        FakeMembership.join = original  # type: ignore[method-assign]
        FakeMembership.failing.clear()
        switcher.stop()


def test_a_zookeeper_member_does_not_register_again_during_a_rollback_while_the_coordinator_lists_members() -> None:
    # Simulator, switch schedule seed 8101: a member cut off through the switch came back once the rollback had
    # begun and registered while a coordinator member still delivered its partitions.
    _, zk, member = make([])
    say(zk, "zookeeper")
    assert "the coordinator still lists 1 member(s): m1" in (registration_refused(member, lambda: ["m1"]) or "")
    assert registration_refused(member, lambda: []) is None

    def cannot_tell() -> List[str]:
        raise ZkConsumerError("DescribeGroups: no answer")

    with pytest.raises(ZkConsumerError):
        registration_refused(member, cannot_tell)  # the attempt fails and is retried
    zk.nodes.pop(migration.migration_path(GROUP))
    assert registration_refused(member, cannot_tell) is None  # no migration: the coordinator is not asked


def test_the_coordinator_barrier_reads_ids_after_a_sync() -> None:
    # Simulator, switch schedule seed 4844: a member connected to a follower behind its leader read /ids empty
    # after a member had registered, and joined the coordinator beside it.
    from zkconsumer.coordinator.kafka_membership import CoordinatorMembership

    calls: List[str] = []
    group = SimpleNamespace(
        paths=zkformat.GroupPaths(GROUP),
        client=SimpleNamespace(sync=lambda path: calls.append(f"sync {path}")),
        members=lambda fresh=False: calls.append(f"members fresh={fresh}") or {"g_c2": object()},
    )
    why = CoordinatorMembership._zookeeper_members_gone(SimpleNamespace(_member=SimpleNamespace(group=group)))  # type: ignore[arg-type]
    assert calls == ["sync /consumers/g/ids", "members fresh=True"]
    assert why is not None and "g_c2" in why
