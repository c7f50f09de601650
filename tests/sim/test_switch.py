"""Switch schedules: the live switch between ZooKeeper and coordinator membership (see docs/simulation.md).

The group's zkconsumer members keep their offsets in Kafka (the brokers' group coordinator is the
model of :mod:`sim.coordinator`) and follow the migration node (``migrate`` events, written as
``zkconsumer groups migrate --execute`` writes it), mixed with the usual faults; the checks of
:mod:`sim.switch_checks` hold across both memberships after every event.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

from zkconsumer.coordinator.kafka_membership import CoordinatorMembership
from zkconsumer.offsets.storage import KafkaOffsetStorage
from zkconsumer.wire.group_protocol import (
    NO_ERROR,
    UNKNOWN_MEMBER,
    OffsetCommitEntry,
    OffsetCommitRequestV1,
    OffsetCommitRequestV2,
)

from . import member, switch
from .coordinator import GroupCoordinator
from .kernel import Kernel, SimTask
from .world import Schedule, generate, generate_switch, run

#: Switch schedules found failing (each fixed since in zkconsumer/consumer/switching.py), shrunk:
#: switch-registration-that-timed-out-held-the-coordinator-barrier (seed 104): a member's first
#:     registration was answered after its deadline and applied all the same; the member followed the
#:     node to the coordinator and left the registration under /ids, so no coordinator member ever
#:     passed the barrier (settles). Fixed by SwitchingMembership._abandon.
#: switch-rollback-reversed-a-second-later (seed 6), switch-rollback-reversed-while-members-rolled-back
#:     (seed 91): ``migrate --to kafka`` again during a rollback; a member waiting at
#:     the rollback barrier, or refused its registration because the node said kafka again, kept
#:     trying to rejoin ZooKeeper for good (settles). Fixed by SwitchingMembership._still_intended.
#: switch-kafka-offsets-owner-checks-spanned-a-session-expiry (seed 7913; no switch left in it: ZooKeeper
#:     membership with offsets.storage=kafka): KafkaOffsetStorage checked the owner nodes one by one, a
#:     check was held back across the session's expiry, and the batch went out after a peer had claimed a
#:     partition checked on the old session (offsets-monotone). Fixed by the session pin of its checks.
#: switch-coordinator-member-read-ids-on-a-lagging-follower (seed 4844): the barrier before JoinGroup read
#:     /ids on a follower behind its leader, empty after a member had registered for a rollback
#:     (exclusive-across). Fixed by a sync before CoordinatorMembership._zookeeper_members_gone's read.
#: switch-both-barriers-passed-at-the-same-moment (seed 16850): during a rollback a member rolling back found
#:     the coordinator empty and registered while a member still on its way to the coordinator had found /ids
#:     empty and sent its JoinGroup (exclusive-across). Fixed: each side asks again once it announced itself
#:     (JoinSyncLoop after SyncGroup; ZooKeeperMembership's registration).
#: The last three were shrunk again once the session lease counted a proof only after a later one confirmed
#: it (zookeeper/proofs.py), since that timing change made the first shrunk schedules pass the old code too:
#: 91 and 4844 from the same seeds; 16850 from its first shrunk schedule with its ``slow`` event 1.1 s later
#: (of seeds 0-39,999 only 29568 broke the checked-once barriers, and 29568 has no rollback in it).
#: Once the client model dropped a silent server at 2T/3, as production's heartbeat thread does since its
#: watch fix (it dropped near T before, as production did), 91 was shrunk again from the same seed (no
#: pause is left in it), and 16850's schedule replays with the drop as it was (``late_drop``: the same
#: trace as before): no variant of it broke the checked-once barriers under the new rule (its ``slow``
#: event moved by -3 to +3 s in steps of 0.1 s, times its length changed by -3 to +3 s in steps of
#: 0.25 s, times the rollback 1 s earlier, as it is, or 1 s later: 4,575 schedules).
FOUND = sorted((Path(__file__).parent / "schedules").glob("switch-*.json"))


def _as_it_was_switch(mp: pytest.MonkeyPatch) -> None:
    """A failed join only stopped, and the node never read again once a rollback had begun."""
    mp.setattr(switch._Production, "_abandon", lambda self, failed: failed.stop())
    mp.setattr(switch._Production, "_still_intended", lambda self, to: to)


def _as_it_was_unpinned(mp: pytest.MonkeyPatch) -> None:
    """KafkaOffsetStorage without the session pin of its owner checks."""
    class Unpinned(KafkaOffsetStorage):
        def __init__(self, *args: Any, session: Any = None, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
    mp.setattr(member, "KafkaOffsetStorage", Unpinned)


def _as_it_was_stale_ids(mp: pytest.MonkeyPatch) -> None:
    """The barrier before JoinGroup reading /ids without a sync."""
    def gone(self: Any) -> Optional[str]:
        members = sorted(self._member.group.members())
        return None if not members else "registered: " + ", ".join(members)
    mp.setattr(CoordinatorMembership, "_zookeeper_members_gone", gone)


def _as_it_was_checked_once(mp: pytest.MonkeyPatch) -> None:
    """Each barrier checked before announcing only (the simulator's restated steps: ``switch.RECHECK``)."""
    mp.setattr(switch, "RECHECK", False)


#: file stem -> (the production steps as they were before its fix, the invariant it broke then)
AS_IT_WAS: Dict[str, Tuple[Callable[[pytest.MonkeyPatch], None], str]] = {
    "switch-registration-that-timed-out-held-the-coordinator-barrier": (_as_it_was_switch, "settles"),
    "switch-rollback-reversed-a-second-later": (_as_it_was_switch, "settles"),
    "switch-rollback-reversed-while-members-rolled-back": (_as_it_was_switch, "settles"),
    "switch-kafka-offsets-owner-checks-spanned-a-session-expiry": (_as_it_was_unpinned, "offsets-monotone"),
    "switch-coordinator-member-read-ids-on-a-lagging-follower": (_as_it_was_stale_ids, "exclusive-across"),
    "switch-both-barriers-passed-at-the-same-moment": (_as_it_was_checked_once, "exclusive-across"),
}


def test_switch_schedules_hold_every_invariant() -> None:
    """A handful of switch schedules (to the coordinator, some back and forth again, with kills, expiries,
    pauses, freezes): no partition delivered by two members across the memberships, offsets in Kafka
    never back, and the group settled on the membership the node names."""
    rollbacks = switches = 0
    for seed in list(range(12)) + [6, 34, 52, 104, 141, 1483, 4844, 6305, 8101, 16850]:
        schedule = generate_switch(seed)
        outcome = run(schedule)
        assert outcome.ok, f"seed {seed}: {outcome.violation}\n{schedule.describe()}"
        switches += outcome.switches
        rollbacks += any(e[1:] == ("migrate", "zookeeper") for e in schedule.events)
    assert switches > 20 and rollbacks >= 3


@pytest.mark.parametrize("path", FOUND, ids=[p.stem for p in FOUND])
def test_a_switch_schedule_found_fails_with_the_switch_as_it_was(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    schedule = Schedule.from_json(path.read_text())
    assert run(schedule).ok
    as_it_was, broke = AS_IT_WAS[path.stem]
    as_it_was(monkeypatch)
    violation = run(schedule).violation
    assert violation is not None and violation.name == broke, violation


def test_the_cross_membership_check_bites_without_the_barrier(monkeypatch: pytest.MonkeyPatch) -> None:
    """With coordinator members joining while ZooKeeper members are registered, partitions are delivered twice."""
    monkeypatch.setattr(CoordinatorMembership, "_zookeeper_members_gone", lambda self: None)
    violations = [run(generate_switch(seed)).violation for seed in range(3)]
    assert any(v is not None and v.name == "exclusive-across" for v in violations), violations


def test_switch_schedules_leave_the_other_schedules_as_they_were() -> None:
    plain = generate(7)
    assert not plain.switch and '"switch"' not in plain.to_json()
    assert all(e[1] != "migrate" for e in plain.events)
    drawn = generate_switch(7)
    assert drawn.switch and Schedule.from_json(drawn.to_json()) == drawn
    assert [e for e in drawn.events if e[1] == "migrate"][0][2] == "kafka"


def test_the_coordinator_takes_a_commit_without_generation_only_while_it_has_no_member() -> None:
    kernel = Kernel()
    coordinator = GroupCoordinator(kernel, random.Random(1), 6.0, lambda line: None)
    got: List[Any] = []

    def member() -> None:
        offsets = [OffsetCommitEntry("t", 0, 5)]
        got.append(coordinator.call("commit", (OffsetCommitRequestV1("g", offsets),), 1.0, "zk")
                   .errors()[("t", 0)])
        answer = coordinator.call("join", ("", b"meta"), 10.0, "a")
        got.append(coordinator.call("commit", (OffsetCommitRequestV1("g", [OffsetCommitEntry("t", 0, 3)]),), 1.0,
                                    "zk").errors()[("t", 0)])
        v2 = OffsetCommitRequestV2("g", answer.generation, answer.member_id, [OffsetCommitEntry("t", 0, 7)])
        got.append(coordinator.call("commit", (v2,), 1.0, "a").errors()[("t", 0)])
        kernel.sleep(7.0)  # no heartbeat: expelled after the session timeout
        got.append(coordinator.call("commit", (v2,), 1.0, "a").errors()[("t", 0)])

    SimTask(kernel, member, "member")
    kernel.run_until(None, 30.0)
    assert got == [NO_ERROR, UNKNOWN_MEMBER, NO_ERROR, UNKNOWN_MEMBER]
    assert coordinator.offsets == {("t", 0): 7} and not coordinator.members
