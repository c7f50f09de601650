"""``groups migrate --execute``'s wait: who it waits for and what it says when it gives up, with a fake
ZooKeeper and coordinator (the real switch with a member killed in it:
tests/integration/test_live_switch_faults.py)."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

from zkconsumer.cli import migrate as cli_migrate
from zkconsumer.cli.common import EXIT_OK, CliError
from zkconsumer.zookeeper import migration

from ..consumer.test_switching import FakeZooKeeper as SwitchingFakeZooKeeper

GROUP = "g"
IDS = f"/consumers/{GROUP}/ids"
FENCES = f"/consumers/{GROUP}/fences"


class FakeZooKeeper(SwitchingFakeZooKeeper):
    """Nodes as ``path -> (data, ephemeral owner)`` (owner 0: persistent)."""

    def __init__(self, nodes: Dict[str, int]) -> None:
        super().__init__()
        self.nodes = {path: (b"", owner) for path, owner in nodes.items()}

    def retry(self, call: Any, *args: Any) -> Any:
        return call(*args)

    def expire(self, session: int) -> None:
        """Session ``session`` ends: ZooKeeper deletes its ephemeral nodes."""
        self.nodes = {p: node for p, node in self.nodes.items() if node[1] != session}

    def deregister(self, *sessions: int) -> None:
        """The members of ``sessions`` delete their registrations (their sessions, and fence nodes, live on)."""
        self.nodes = {p: node for p, node in self.nodes.items()
                      if not (p.startswith(IDS + "/") and node[1] in sessions)}


class FakeCoordinator:
    def __init__(self, members: List[str]) -> None:
        self.members = members

    def live_members(self) -> List[str]:
        return list(self.members)


def member_nodes(consumer_id: str, session: int, registered: bool = True) -> Dict[str, int]:
    nodes = {f"{FENCES}/{consumer_id}-{session:010d}": session}
    if registered:
        nodes[f"{IDS}/{consumer_id}"] = session
    return nodes


def three_members() -> FakeZooKeeper:
    return FakeZooKeeper({IDS: 0, FENCES: 0, **member_nodes("a", 1), **member_nodes("b", 2), **member_nodes("c", 3)})


def test_member_fences_pairs_each_registration_with_its_sessions_fence_nodes() -> None:
    zk = three_members()
    zk.nodes[f"{IDS}/scala"] = (b"", 9)  # Kafka's own consumer: no fence node
    fences = migration.member_fences(zk, GROUP)
    assert fences == {"a": [f"{FENCES}/a-0000000001"], "b": [f"{FENCES}/b-0000000002"],
                      "c": [f"{FENCES}/c-0000000003"], "scala": []}
    assert migration.foreign_members(zk, GROUP) == ["scala"]


def test_a_member_whose_session_ended_is_not_waited_for(capsys: pytest.CaptureFixture[str]) -> None:
    """Three members registered when the node was written; one is killed and its session expires
    (registration and fence node gone): two at the coordinator and none in ZooKeeper is settled."""
    zk = three_members()
    start = cli_migrate._Start(migration.member_fences(zk, GROUP), [])
    zk.expire(3)
    zk.deregister(1, 2)  # switched
    coordinator = FakeCoordinator(["a-1 (g@/h)", "b-1 (g@/h)"])
    assert cli_migrate._wait_settled(zk, coordinator, GROUP, "kafka", 5.0, start) == EXIT_OK  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    assert "c: its ZooKeeper session ended" in err and "not waiting for it" in err
    assert f"group {GROUP} is on kafka membership: 2 member(s)" in out


def test_a_live_member_not_yet_at_the_coordinator_is_waited_for() -> None:
    """Deregistered but its session (fence node) lives: it is still joining the coordinator."""
    zk = three_members()
    start = cli_migrate._Start(migration.member_fences(zk, GROUP), [])
    zk.deregister(1, 2, 3)
    with pytest.raises(CliError) as exc:
        cli_migrate._wait_settled(zk, FakeCoordinator(["a-1 (g@/h)", "b-1 (g@/h)"]), GROUP, "kafka",  # type: ignore[arg-type]
                                  0.01, start)
    assert "2 of the 3 live member(s) at the coordinator" in str(exc.value)


def test_giving_up_names_the_registration_left_and_why() -> None:
    """A killed member's registration stays until its session expires: the message names it, says when it
    goes and that the node stays."""
    zk = three_members()
    start = cli_migrate._Start(migration.member_fences(zk, GROUP), [])
    zk.deregister(1, 2)
    with pytest.raises(CliError) as exc:
        cli_migrate._wait_settled(zk, FakeCoordinator([]), GROUP, "kafka", 0.01, start)  # type: ignore[arg-type]
    message = str(exc.value)
    assert "still registered in ZooKeeper: c (" in message
    assert "zookeeper.session.timeout.ms" in message
    assert "run the command again to keep waiting" in message


def test_a_rollback_that_gives_up_says_the_switch_is_complete_for_those_registered() -> None:
    """Back to ZooKeeper: a coordinator member killed never registers; the coordinator cannot say which
    member it was, so the message counts and says what that means."""
    zk = FakeZooKeeper({IDS: 0, FENCES: 0, **member_nodes("a", 1), **member_nodes("b", 2)})
    start = cli_migrate._Start({}, ["m1 (g@/h)", "m2 (g@/h)", "m3 (g@/h)"])
    with pytest.raises(CliError) as exc:
        cli_migrate._wait_settled(zk, FakeCoordinator([]), GROUP, "zookeeper", 0.01, start)  # type: ignore[arg-type]
    message = str(exc.value)
    assert "2 of the 3 member(s) expected are registered in ZooKeeper" in message
    assert "the switch is complete for the 2 registered" in message


def test_a_group_whose_every_member_is_gone_is_settled_with_none() -> None:
    """The only member was killed and its session expired: nothing is left to wait for."""
    zk = FakeZooKeeper({IDS: 0, FENCES: 0, **member_nodes("a", 1)})
    start = cli_migrate._Start(migration.member_fences(zk, GROUP), [])
    zk.expire(1)
    assert cli_migrate._wait_settled(zk, FakeCoordinator([]), GROUP, "kafka", 5.0, start) == EXIT_OK  # type: ignore[arg-type]
