"""SessionLease.valid() caches its last full look (issue 44): the cache never outlives a change
that can lapse the lease (time, a LOST session, a rejoin, a shorter negotiated timeout, a proof
dropped by the heartbeat), including a change made while a look is under way."""

from __future__ import annotations

from typing import List

from zkconsumer.zookeeper.lease import SessionLease

from .test_lease import FakeConnection, Sessions, assert_lapses_at, connected


def make(now: List[float]) -> SessionLease:
    lease = SessionLease(Sessions(), "/p", 6.0, clock=lambda: now[0])  # type: ignore[arg-type]
    assert lease.prove()
    return lease


def test_a_cached_look_still_lapses_one_session_timeout_after_the_proof() -> None:
    now = [0.0]
    lease = make(now)
    now[0] = 1.0
    assert lease.valid() and lease._cache[0] == lease._epoch  # cached
    assert_lapses_at(lease, now, 5.999, 6.0)


def test_a_session_reported_lost_after_a_cached_look_lapses_at_once() -> None:
    now = [0.0]
    lease = make(now)
    assert lease.valid()
    lease.session_lost()
    assert not lease.valid()
    lease.accept_session()
    assert lease.prove() and lease.valid()


def test_a_loss_reported_while_a_look_is_under_way_is_not_cached_over() -> None:
    """kazoo's thread reports LOST between the look's reads and its caching: the cache it writes is
    of the epoch before, and the next valid() looks again."""
    now = [0.0]
    lease = make(now)
    proven_at = lease._proven_at

    def racing() -> float:
        value = proven_at()  # read before the loss
        lease.session_lost()
        return value

    lease._proven_at = racing  # type: ignore[method-assign]
    assert lease.valid()  # the look itself answers for the moment before the loss
    lease._proven_at = proven_at  # type: ignore[method-assign]
    assert not lease.valid()


def test_a_rejoin_on_a_new_session_does_not_reuse_the_old_sessions_cache() -> None:
    now = [0.0]
    client = Sessions()
    lease = SessionLease(client, "/p", 6.0, clock=lambda: now[0])  # type: ignore[arg-type]
    assert lease.prove() and lease.valid()
    client.client_id = (2, b"")  # session 1 expired; kazoo opened session 2
    lease.accept_session()  # rejoined on it, with no proof yet on session 2
    now[0] = 1.0
    assert lease.valid()  # the lease's own proof at 0 still counts (as before the cache)
    now[0] = 6.0
    assert not lease.valid()


class ShorterOnReconnect(FakeConnection):
    granted = 4000.0

    def _connect(self, host: str, hostip: str, port: int) -> tuple:
        return self.granted, 6000.0


def test_a_shorter_negotiated_timeout_after_a_cached_look_is_used_at_once() -> None:
    now = [0.0]
    connection = ShorterOnReconnect()
    client, heartbeat = connected(now, connection)  # 6 s granted
    lease = SessionLease(client, "/p", 30.0, clock=lambda: now[0], heartbeat=heartbeat)  # type: ignore[arg-type]
    now[0] = 4.0
    assert lease.valid()  # cached with the 6 s timeout
    connection.granted = 2000.0  # a reconnect granted 3 s
    now[0] = 0.0  # (its handshake sent at 0, answered at 4.0: it counts from 0)
    connection._connect("h", "127.0.0.1", 2181)
    now[0] = 4.0
    assert not lease.valid()


def test_a_proof_dropped_by_the_heartbeat_after_a_cached_look_is_not_used() -> None:
    now = [0.0]
    client, heartbeat = connected(now)  # the handshake at 0: 6 s granted
    lease = SessionLease(client, "/p", 6.0, clock=lambda: now[0], heartbeat=heartbeat)  # type: ignore[arg-type]
    now[0] = 5.0
    heartbeat._note(1, 5.0)
    now[0] = 7.0
    heartbeat._note(1, 7.0)  # sent 2 s after the answer at 5.0: the proof at 5.0 counts
    now[0] = 8.0
    assert lease.valid()  # proven at 5.0 on the accepted session 1, cached
    for session in (2, 3, 4, 5):  # four newer sessions: session 1's proof is dropped
        heartbeat._note(session, 7.0 + session / 10)
    assert heartbeat.last_proof(1) is None
    assert not lease.valid()  # the lease's own proof (at 0) is all that is left
