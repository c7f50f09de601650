"""The sans-I/O steps of a rebalance attempt (zkconsumer.rebalance.machine): their import boundary,
and their main paths driven with plain data (no ZooKeeper, no threads: a dict of owner nodes)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple

import pytest

from zkconsumer.errors import ZooKeeperUnavailableError
from zkconsumer.rebalance import effects as fx
from zkconsumer.rebalance import machine
from zkconsumer.structs import TopicPartition

#: The standard library's typing, enum and dataclasses, the shared value types and errors, and of
#: this folder the pure decisions and the effect types.
ALLOWED = {"__future__", "typing", "enum", "dataclasses", "..structs", "..errors", ".decisions", ".effects"}

ME = "g_me"
T0, T1, T2, T3 = ("t", 0), ("t", 1), ("t", 2), ("t", 3)


def _imports(path: str) -> Set[str]:
    imported: Set[str] = set()
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            prefix = "." * node.level
            if node.module is None:  # from . import x
                imported.update(prefix + alias.name for alias in node.names)
            else:
                imported.add(prefix + (node.module if node.level else node.module.split(".")[0]))
    return imported


@pytest.mark.parametrize("module", [machine, fx], ids=["machine", "effects"])
def test_the_machine_imports_nothing_but_typing_dataclasses_the_value_types_and_the_decisions(module: Any) -> None:
    imported = _imports(module.__file__)
    assert imported <= ALLOWED, imported - ALLOWED


def test_every_effect_is_a_frozen_dataclass() -> None:
    for effect in fx.effect_types():
        params = effect.__dataclass_params__
        assert params.frozen, effect


class World:
    """Plays ZooKeeper (a dict of owner nodes), the fetchers and the clock for a step, with plain data.

    ``release_at``: virtual time at which a peer's owner node is deleted (when a wait reaches it).
    """

    def __init__(self, owners: Dict[TopicPartition, str], books: fx.Books,
                 release_at: Optional[Dict[TopicPartition, float]] = None) -> None:
        self.owners = dict(owners)
        self.books = books
        self.release_at = release_at or {}
        self.now = 0.0
        self.changed: Set[TopicPartition] = set()
        self.revoked: Set[TopicPartition] = set()
        self.effects: List[Any] = []
        self.fail: Dict[type, BaseException] = {}

    def kinds(self) -> List[str]:
        return [type(e).__name__ for e in self.effects]

    def of(self, kind: type) -> List[Any]:
        return [e for e in self.effects if isinstance(e, kind)]

    def __call__(self, e: Any) -> Any:  # noqa: C901 - one branch per effect
        self.effects.append(e)
        if type(e) in self.fail:
            raise self.fail.pop(type(e))
        b = self.books
        if isinstance(e, fx.ReadBooks):
            return fx.Books(list(b.delivered), dict(b.owned), dict(b.nodes), set(b.carried), b.fetching)
        if isinstance(e, fx.Claim):
            out: List[Optional[fx.Holder]] = []
            for tp, thread_id in e.claims:
                holder = self.owners.setdefault(tp, thread_id)
                out.append(None if holder == thread_id else fx.Holder(holder, holder.startswith(ME + "-")))
            return out
        if isinstance(e, (fx.ReleaseMany, fx.DropNodes)):
            for tp in e.tps:
                self.owners.pop(tp, None)
                b.nodes.pop(tp, None)
            return None
        if isinstance(e, fx.Release):
            self.owners.pop(e.tp, None)
            return None
        if isinstance(e, fx.ConfirmHeld):
            return [self.owners.get(tp) == b.owned.get(tp) for tp in e.tps]
        if isinstance(e, fx.Relabel):
            return [False for _ in e.relabels]
        if isinstance(e, fx.Revoke):
            self.revoked.update(e.tps)
            return None
        if isinstance(e, fx.ReadRevoked):
            return {tp: 5 for tp in b.delivered if tp in self.revoked}
        if isinstance(e, fx.Forget):
            b.forget(e.tps)
            return None
        if isinstance(e, (fx.KnownHolders, fx.ReadOffsets)):
            return {}
        if isinstance(e, fx.Now):
            return self.now
        if isinstance(e, fx.RearmWait):
            return False
        if isinstance(e, fx.Changed):
            return [tp for tp in e.tps if tp in self.changed]
        if isinstance(e, fx.Wait):
            due = [(at, tp) for tp, at in self.release_at.items() if at <= self.now + e.timeout]
            if due:  # the peer releases within the wait: its watch fires
                at, tp = min(due)
                self.now = max(self.now, at)
                del self.owners[tp], self.release_at[tp]
                self.changed.add(tp)
            else:
                self.now += e.timeout
            return None
        if isinstance(e, fx.Install):
            b.owned.update(e.claims)
            b.delivered.extend(tp for tp in e.claims if tp not in b.delivered)
            return None
        if isinstance(e, fx.RecordNodes):
            b.nodes.update(e.nodes)
            return None
        return None  # logs, listener calls, revokes, commits with nothing fenced...


def books(owned: Dict[TopicPartition, str]) -> fx.Books:
    return fx.Books(list(owned), dict(owned), dict(owned), set(), bool(owned))


def take(world: World, mine: Dict[TopicPartition, str]) -> Optional[bool]:
    step = machine.take_ownership(ME, mine, mine, claim_backoff_s=1.0, claim_retries=3)
    return machine.drive(step, world, (ZooKeeperUnavailableError,))


def view(world: World, mine: Dict[TopicPartition, str]):  # type: ignore[no-untyped-def]
    """An executor for a whole attempt: the group's view is fixed, the rest is ``world``."""
    answers = {
        fx.ReadMembers: fx.Members({ME: "registration"}, {ME: "static"}),
        fx.Subscribe: fx.Subscriptions({"t": [ME + "-0"]}, ("t",)),
        fx.ReadPartitions: {"t": [0, 1, 2, 3]},
        fx.Assign: fx.Share(dict(mine), dict(mine)),
        fx.CheckNewEvent: False,
    }

    def execute(e: Any) -> Any:
        if type(e) in answers:
            world.effects.append(e)
            return answers[type(e)]
        return world(e)
    return execute


def test_nothing_moves_when_the_share_is_what_is_owned_fetched_and_held() -> None:
    mine = {T0: ME + "-0", T1: ME + "-0"}
    world = World(dict(mine), books(mine))
    memory = fx.AttemptMemory()
    outcome = machine.drive(machine.attempt(memory, ME, 5, 1.0, 3, True), view(world, mine), ())
    assert outcome is True
    assert world.kinds() == ["ReadMembers", "Subscribe", "WatchTopics", "ReadPartitions", "Assign", "CheckNewEvent",
                             "ReadBooks", "Log"]  # no claim, no release, no pause, no commit
    assert memory == fx.AttemptMemory()


def test_a_member_node_that_vanished_registers_again_and_confirms_its_owner_nodes() -> None:
    mine = {T0: ME + "-0"}
    world = World(dict(mine), books(mine))
    memory = fx.AttemptMemory(needs_register=True)
    outcome = machine.drive(machine.attempt(memory, ME, 5, 1.0, 3, True), view(world, mine), ())
    assert outcome is True
    assert world.kinds()[:3] == ["ReadMembers", "Register", "ReadMembers"]
    assert world.of(fx.ReadMembers)[1].fresh
    assert [e.tp for e in world.of(fx.ClaimOne)] == [T0]  # confirmed by one claim, delivery not paused
    assert memory == fx.AttemptMemory(needs_register=False, confirm_owners=False)


def test_a_partition_that_moves_is_paused_released_and_the_new_one_claimed_and_installed() -> None:
    owned = {T0: ME + "-0", T1: ME + "-0"}
    mine = {T0: ME + "-0", T2: ME + "-0"}  # t-1 goes to a peer, t-2 comes to us
    world = World(dict(owned), books(owned))
    outcome = machine.drive(machine.attempt(fx.AttemptMemory(), ME, 5, 1.0, 3, True), view(world, mine), ())
    assert outcome is True
    assert world.of(fx.Revoke)[0].tps == (T1,)  # only what moves stops
    assert world.of(fx.ReleaseMany) == [fx.ReleaseMany((T1,))]
    assert world.of(fx.ConfirmHeld) == [fx.ConfirmHeld((T0,))]  # retained: one read, no write
    assert [c.claims for c in world.of(fx.Claim)] == [((T2, ME + "-0"),)]
    assert world.of(fx.Forget)[0] == fx.Forget((T1,), update_fetching=True)
    assert world.of(fx.BeforeReleasing) == [fx.BeforeReleasing({"t": {1}})]
    assert world.of(fx.Install) == [fx.Install({T2: ME + "-0"}, {})]
    assert world.owners == {T0: ME + "-0", T2: ME + "-0"}
    kinds = world.kinds()
    assert kinds.index("Commit") < kinds.index("BeforeReleasing") < kinds.index("ReleaseMany") < kinds.index("Claim")


def test_partitions_taken_from_us_are_reported_lost_and_only_the_others_released() -> None:
    """``lose`` disowned t-1 (a fenced commit found a peer holding it); the pause's own commit finds
    t-3 taken too. Neither was handed over: they go to ``partitions_lost``, never to
    ``before_releasing_partitions``, which gets only t-2 (assigned away, committed, then released)."""
    owned = {T0: ME + "-0", T2: ME + "-0", T3: ME + "-0"}
    b = books(owned)
    b.delivered.append(T1)  # delivered, no longer owned: disowned by lose()
    world = World({T0: ME + "-0", T1: "g_peer-0", T2: ME + "-0", T3: "g_peer-0"}, b)
    mine = {T0: ME + "-0", T3: ME + "-0"}

    def execute(e: Any) -> Any:
        if isinstance(e, fx.Commit):
            world.effects.append(e)
            return [T3]  # fenced: a peer holds t-3 now
        if isinstance(e, fx.Holds):
            world.effects.append(e)
            return world.owners.get(e.tp) == ME + "-0"
        return world(e)

    machine.drive(machine.pause(ME, mine, True), execute, ())
    assert world.of(fx.BeforeReleasing) == [fx.BeforeReleasing({"t": {2}})]
    assert world.of(fx.PartitionsLost) == [fx.PartitionsLost({"t": {1, 3}})]
    kinds = world.kinds()
    assert kinds.index("Commit") < kinds.index("BeforeReleasing") < kinds.index("PartitionsLost") < kinds.index("Forget")


def test_a_claim_conflict_is_waited_for_then_won() -> None:
    mine = {T2: ME + "-0", T3: ME + "-0"}
    world = World({T2: "g_peer-0"}, books({}), release_at={T2: 2.0})  # the peer releases t-2 two seconds in
    assert take(world, mine) is True
    claims = [c.claims for c in world.of(fx.Claim)]
    assert claims == [((T2, ME + "-0"), (T3, ME + "-0")), ((T2, ME + "-0"),)]  # the retry claims only t-2
    kinds = world.kinds()
    assert kinds.index("BeginWait") < kinds.index("Wait") < kinds.index("EndWait") < kinds.index("Install")
    assert world.of(fx.Install) == [fx.Install({T3: ME + "-0", T2: ME + "-0"}, {})]
    assert not world.of(fx.Release)


def test_a_conflict_still_there_at_the_bound_fails_the_attempt_and_releases_what_it_claimed() -> None:
    mine = {T2: ME + "-0", T3: ME + "-0"}
    world = World({T2: "g_peer-0"}, books({}))  # the peer never releases
    assert take(world, mine) is False
    assert world.now == pytest.approx(3.0)  # backoff 1 s x 3 retries
    assert not world.of(fx.Install)
    assert world.of(fx.Release) == [fx.Release(T3)]  # what was claimed is released again
    assert world.of(fx.DropNodes) == [fx.DropNodes((T3,))]
    assert world.owners == {T2: "g_peer-0"}
    assert world.kinds().index("EndWait") < world.kinds().index("Release")


def test_a_claim_that_raises_releases_what_it_may_have_created_and_the_error_goes_on() -> None:
    mine = {T2: ME + "-0"}
    world = World({}, books({}))
    world.fail[fx.Claim] = ZooKeeperUnavailableError("gone")
    with pytest.raises(ZooKeeperUnavailableError):
        take(world, mine)
    assert world.of(fx.Release) == [fx.Release(T2)]


def test_a_release_zookeeper_refuses_keeps_the_rest_in_the_books_untried() -> None:
    mine = {T2: ME + "-0", T3: ME + "-0"}
    world = World({}, books({}))
    world.fail[fx.Claim] = ZooKeeperUnavailableError("gone")
    world.fail[fx.Release] = ZooKeeperUnavailableError("still gone")
    with pytest.raises(ZooKeeperUnavailableError, match="^gone"):
        take(world, mine)
    assert world.of(fx.Release) == [fx.Release(T2)]  # the first refusal stops the tries
    assert world.of(fx.RecordNodes)[-1] == fx.RecordNodes(((T2, ME + "-0"), (T3, ME + "-0")), overwrite=False)


def test_a_fenced_commit_checks_ownership_and_stops_delivering_what_is_really_lost() -> None:
    owned = {T0: ME + "-0", T1: ME + "-0"}
    world = World(dict(owned), books(owned))
    answers: Dict[type, Any] = {fx.Commit: [T0, T1], fx.Holds: None}
    held = iter([True, False])  # t-0 still ours (a stale fence), t-1 taken

    def execute(e: Any) -> Any:
        if isinstance(e, fx.Holds):
            world.effects.append(e)
            return next(held)
        return answers[fx.Commit] if isinstance(e, fx.Commit) else world(e)
    machine.drive(machine.pause(ME, owned, auto_commit=True), execute, ())
    assert world.of(fx.Disown) == [fx.Disown((T1,))]
    assert world.of(fx.Revoke)[-1] == fx.Revoke((T1,))


def test_an_expected_error_is_sent_as_data_and_others_are_raised_in_the_step() -> None:
    def step() -> machine.Step[Tuple[Any, ...]]:
        got = yield fx.Now()
        return (got,)
    result = machine.drive(step(), lambda e: (_ for _ in ()).throw(ZooKeeperUnavailableError("x")),
                           (ZooKeeperUnavailableError,))
    assert isinstance(result[0], fx.Raised) and result[0].expected
