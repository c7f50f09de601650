"""The server faults of :mod:`sim.servers` behave as ZooKeeper 3.4/3.5 and kazoo 2.x do.

Each test names the ZooKeeper or kazoo source it pins (see :mod:`sim.servers`' docstring).
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any, List, Tuple

import pytest
from kazoo.exceptions import ConnectionLoss, NoNodeError
from kazoo.protocol.states import KazooState

from .client import SimKazoo
from .kernel import Kernel
from .network import Network
from .servers import SERVER_FAULTS_FROM, ServerFaults, server_faults
from .world import generate
from .zkmodel import Ensemble

T = 6.0


def _world(server: int) -> Tuple[Kernel, Ensemble, SimKazoo, List[str], ServerFaults]:
    """A client connected to ``server`` of a three-server ensemble, the session tracker ticking."""
    kernel = Kernel()
    ensemble = Ensemble(2, kernel.clock)
    client = SimKazoo(kernel, ensemble, Network(random.Random(1)), "c", T, lambda line: None)
    states: List[str] = []
    client.add_listener(states.append)
    ensemble.isolated = {0, 1, 2} - {server}  # (only to steer the first connection to ``server``)
    client.start()
    kernel.run_until(lambda: client.connected, 5.0)
    ensemble.isolated = set()
    assert client.server == server

    def sync() -> None:
        for s in ensemble.servers[1:]:
            if s.index not in ensemble.isolated:
                ensemble.sync(s)
    world: Any = SimpleNamespace(kernel=kernel, ensemble=ensemble, trace=lambda line: None, _sync=sync)

    def tick() -> None:  # the leader's session tracker, closing the expired sessions' connections
        if not ensemble.down:
            for sid in ensemble.expire_idle():
                if client.sid == sid and client.server not in ensemble.isolated:
                    client.drop_connection("session expired")
        kernel.at(kernel.now + 0.5, tick)
    tick()

    def ping() -> None:  # the leader's pings, which carry the followers' touches (zkmodel.py)
        ensemble.leader_ping()
        kernel.at(kernel.now + 0.25, ping)
    ping()
    return kernel, ensemble, client, states, ServerFaults(world)


def _admin_create(ensemble: Ensemble, path: str) -> None:
    ensemble.execute(ensemble.leader, 0, "create", {"path": path, "value": b"", "makepath": True})


def test_an_isolated_follower_answers_stale_reads_and_pings_while_the_leader_expires_the_session() -> None:
    """The follower answers reads from its own tree and pings itself (its LearnerSessionTracker
    only collects touches for the leader's next ping, which does not come): the client stays
    CONNECTED past its session timeout while the leader expires the session. Once syncLimit
    passes, the follower shuts down (Learner.shutdown closes every client connection): the
    client reconnects elsewhere and finds the session expired."""
    kernel, ensemble, client, states, faults = _world(1)
    sid = client.sid
    faults.apply("isolate", (1, 30.0, 15.0))  # cut off for 30 s, syncLimit 15 s
    _admin_create(ensemble, "/late")
    kernel.run_until(None, kernel.now + 0.5)
    read = client.exists_async("/late")
    kernel.run_until(read.ready, kernel.now + 1.0)
    assert read.get() is None  # stale: the follower never got the create
    kernel.run_until(None, kernel.now + 2 * T)
    assert not ensemble.alive(sid)  # type: ignore[arg-type]
    assert client.connected and states == [KazooState.CONNECTED]
    late = client.exists_async("/")  # a read of the expired session, answered: it proves nothing
    kernel.run_until(late.ready, kernel.now + 1.0)
    assert late.get() is not None
    kernel.run_until(lambda: client.connected and client.sid != sid, kernel.now + 10.0)
    assert states[-3:] == [KazooState.SUSPENDED, KazooState.LOST, KazooState.CONNECTED]
    assert client.server != 1


def test_a_write_to_an_isolated_follower_gets_no_answer_the_client_moves_and_it_is_never_applied() -> None:
    """A write is forwarded to the leader, which the follower cannot reach: no answer; the
    session's later requests (its pings) wait behind it, so kazoo's read timeout drops the
    server and the client reconnects to another one with its session (the leader heard from it
    within the timeout). The link comes back before syncLimit: the forwarded write reaches
    the leader after the session moved, and checkSession rejects it (SessionMovedException)."""
    kernel, ensemble, client, states, faults = _world(2)
    faults.apply("isolate", (2, 10.0, 12.0))  # back after 10 s, before syncLimit (12 s)
    write = client.create_async("/w", b"")
    kernel.run_until(lambda: write.ready(), kernel.now + T + 1.0)
    with pytest.raises(ConnectionLoss):  # kazoo's read timeout: 2/3 T without an answer
        write.get()
    assert ensemble.held and states[:2] == [KazooState.CONNECTED, KazooState.SUSPENDED]
    kernel.run_until(lambda: client.connected, kernel.now + 2.0)
    assert client.server != 2
    kernel.run_until(None, kernel.now + 8.0)  # the link is back: the held write is forwarded, and rejected
    assert "/w" not in ensemble.leader.tree and ensemble.held == {}


def test_quorum_loss_closes_every_connection_and_the_new_leader_restarts_every_session_timeout() -> None:
    """With no quorum every server shuts down and closes its clients' connections (ConnectionLoss,
    SUSPENDED; kazoo retries); the new leader's SessionTrackerImpl adds each known session with
    a full timeout from its start, so an outage longer than the session timeout expires nobody."""
    kernel, ensemble, client, states, faults = _world(0)
    sid = client.sid
    pending = client.get_async("/")
    faults.apply("quorum", (0, 3 * T))
    with pytest.raises(ConnectionLoss):
        pending.get()
    assert states == [KazooState.CONNECTED, KazooState.SUSPENDED]
    kernel.run_until(None, kernel.now + 3 * T - 0.1)
    assert not client.connected and ensemble.alive(sid)  # type: ignore[arg-type]
    kernel.run_until(lambda: client.connected, kernel.now + 5.0)
    kernel.run_until(None, kernel.now + T)
    assert client.connected and client.sid == sid and ensemble.alive(sid)
    assert states == [KazooState.CONNECTED, KazooState.SUSPENDED, KazooState.CONNECTED]


@pytest.mark.parametrize("moved", [True, False])
def test_a_request_of_a_connection_left_is_applied_until_the_session_moves_and_rejected_after(moved: bool) -> None:
    """The client gave up a stalled connection with a write on its way (ConnectionLoss at once:
    kazoo fails every request sent). Reaching the leader before the session's revalidation on
    another server, the write is applied, after the caller saw the loss; after it, checkSession
    fails with SessionMovedException, the old server closes that connection instead of answering
    -118 (FinalRequestProcessor, ZOOKEEPER-710), and the write is never applied."""
    kernel, ensemble, client, _, _ = _world(1)
    write = client.create_async("/m", b"")
    if not moved:  # no other server can take the session before the write arrives
        ensemble.isolated = {0, 2}
    client.drop_connection("stalled", linger=1.0)
    with pytest.raises(ConnectionLoss):
        write.get()
    kernel.run_until(lambda: client.connected, kernel.now + 0.9)
    assert client.connected == moved
    kernel.run_until(None, kernel.now + 2.0)
    ensemble.isolated = set()
    kernel.run_until(lambda: client.connected, kernel.now + 2.0)
    assert ("/m" in ensemble.leader.tree) == (not moved)
    assert (client.server != 1) == moved


def test_reads_of_a_session_served_by_an_isolated_follower_never_touch_the_leader() -> None:
    """The follower answers reads itself; what it learns of the session (LearnerSessionTracker's
    touches) goes to the leader only in its answer to the leader's ping, which does not come."""
    kernel, ensemble, client, _, faults = _world(1)
    faults.apply("isolate", (1, 30.0, 20.0))
    heard = ensemble.sessions[client.sid].last_heard  # type: ignore[index]
    for _ in range(5):
        kernel.run_until(None, kernel.now + 0.5)
        read = client.get_async("/nothing")
        kernel.run_until(read.ready, kernel.now + 1.0)
        with pytest.raises(NoNodeError):
            read.get()
    assert ensemble.sessions[client.sid].last_heard == heard  # type: ignore[index]


def test_server_faults_are_drawn_only_from_their_seeds_and_leave_older_schedules_as_they_were() -> None:
    events: List[Any] = []
    server_faults(SERVER_FAULTS_FROM - 1, 3, 2, events, 26.0)
    assert events == []
    drawn = [s for s in range(SERVER_FAULTS_FROM, SERVER_FAULTS_FROM + 200)
             if any(e[1] in ("isolate", "quorum", "moved") for e in generate(s).events)]
    assert 50 < len(drawn) < 150
    assert not any(e[1] in ("isolate", "quorum", "moved") for s in range(100_000, 100_200) for e in generate(s).events)


def test_while_no_server_serves_kazoo_backs_off_between_connection_attempts_up_to_the_connectors_max_delay() -> None:
    """kazoo's connection loop tries every host, then sleeps (``KazooRetry``: the delay times a
    jitter of +-40%, doubled each time, reset once connected); zkconsumer's connector caps the
    delay at 2 s. So after a quorum loss the client comes back up to 2.8 s after the quorum."""
    kernel, ensemble, client, _, faults = _world(0)
    sleeps: List[float] = []
    retry_sleep = client._retry_sleep

    def recorded() -> float:
        sleeps.append(retry_sleep())
        return sleeps[-1]
    client._retry_sleep = recorded  # type: ignore[method-assign]
    faults.apply("quorum", (0, 10.0))
    kernel.run_until(lambda: client.connected, kernel.now + 15.0)
    assert 0.06 <= sleeps[0] <= 0.14 and sleeps[1] > sleeps[0] and max(sleeps) <= 2.0 * 1.4
    assert faults.quorum_end <= kernel.now <= faults.quorum_end + 2.0 * 1.4 + 0.1
    assert client._retry_delay == 0.1


def test_a_follower_touches_its_sessions_at_the_leader_only_in_its_answers_to_the_leaders_pings() -> None:
    """A request of a session connected to a follower, even a ``sync`` the leader checks, touches
    nothing at the leader (ZooKeeperServer.touch skips a request without a connection, which a
    forwarded one is); the follower notes the session (LearnerSessionTracker) and reports it in
    its answer to the leader's next ping (every tickTime/2). A follower cut off right after a
    sync was answered never reports it: the leader expires the session one timeout after the
    last touch it *did* receive, before the sync's send time + timeout."""
    kernel, ensemble, client, _, faults = _world(1)
    sid = client.sid
    assert sid is not None
    session = ensemble.sessions[sid]
    kernel.run_until(None, kernel.now + 1.0)
    before = session.last_heard
    done = client.sync_async("/")
    kernel.run_until(done.ready, kernel.now + 1.0)
    assert done.get() == "/"
    assert session.last_heard == before  # answered, checked by the leader, not touched there
    kernel.run_until(None, kernel.now + 0.3)
    assert session.last_heard > before  # the next ping's answer carried the touch

    kernel.at(session.last_heard + 0.2, lambda: None)
    kernel.run_until(None, session.last_heard + 0.2)  # 0.2 s after that ping, 0.05 s before the next
    sent = kernel.now
    done = client.sync_async("/")
    kernel.run_until(done.ready, kernel.now + 0.04)
    assert done.get() == "/"
    faults.apply("isolate", (1, 30.0, 15.0))  # before the leader's next ping
    last = session.last_heard
    assert last < sent
    kernel.run_until(lambda: not ensemble.alive(sid), sent + T + 1.0)
    assert not ensemble.alive(sid) and kernel.now <= last + T + 0.5  # the tracker's tick after last + T


def test_a_follower_whose_link_comes_back_reports_its_touches_right_behind_what_it_forwarded() -> None:
    """The leader's pings sent during a cut shorter than syncLimit reach the follower when the link
    is back; its answers carry every session it heard from meanwhile, right behind the requests
    it forwarded (one TCP stream, read in order)."""
    kernel, ensemble, client, _, faults = _world(1)
    sid = client.sid
    assert sid is not None
    faults.apply("isolate", (1, 3.0, 15.0))
    kernel.run_until(None, kernel.now + 1.0)
    read = client.exists_async("/x")
    kernel.run_until(read.ready, kernel.now + 1.0)
    heard = ensemble.sessions[sid].last_heard
    kernel.run_until(lambda: ensemble.sessions[sid].last_heard > heard, kernel.now + 3.0)
    assert ensemble.sessions[sid].last_heard > heard and 1 not in ensemble.isolated
