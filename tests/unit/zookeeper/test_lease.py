"""SessionLease: valid for one session timeout after the last proof, lapsed after a freeze."""

from __future__ import annotations

from types import SimpleNamespace
from typing import List, Optional, Tuple

import pytest
from kazoo.exceptions import ConnectionLoss, SessionExpiredError

from zkconsumer.zookeeper.heartbeat import QUIET_AVAILABLE, SessionHeartbeat
from zkconsumer.zookeeper.lease import SessionLease


class FakeClient:
    def __init__(self) -> None:
        self.fail = False
        self.reads = 0

    def sync(self, path: str) -> None:
        self.reads += 1
        if self.fail:
            raise SessionExpiredError()


class Sessions(FakeClient):
    """A client on session 1 (a test sets ``client_id`` on the instance to move it to another)."""

    client_id = (1, b"")


def test_valid_until_one_session_timeout_after_the_last_proof() -> None:
    now = [100.0]
    lease = SessionLease(FakeClient(), "/consumers/g/ids/me", 6.0, clock=lambda: now[0])  # type: ignore[arg-type]
    assert lease.valid()
    assert_lapses_at(lease, now, 105.9, 106.0)  # e.g. the process was frozen for longer than the session timeout


def test_a_failed_proof_does_not_extend_and_a_successful_one_renews_once_a_later_one_confirms_it() -> None:
    """A proof counts from its send time once a later proof, sent 0.3 x the timeout after its answer,
    is answered (proofs.py: the leader hears of a follower's clients only at its pings)."""
    now = [0.0]
    client = FakeClient()
    lease = SessionLease(client, "/p", 6.0, clock=lambda: now[0])  # type: ignore[arg-type]
    now[0] = 10.0
    client.fail = True
    assert lease.prove() is False and not lease.valid()
    client.fail = False
    assert lease.prove() is True and not lease.valid()  # proven at 10.0, not confirmed yet
    now[0] = 11.79
    assert lease.prove() is True and not lease.valid()  # sent less than 1.8 s after the answer at 10.0
    now[0] = 11.8
    assert lease.prove() is True and lease.valid()  # counts from 10.0
    assert_lapses_at(lease, now, 15.99, 16.0)


def test_the_thread_proves_periodically_and_stops_when_asked() -> None:
    client = FakeClient()
    lease = SessionLease(client, "/p", 0.3)  # type: ignore[arg-type]
    lease.start()
    try:
        import time

        time.sleep(0.5)
        assert client.reads >= 2 and lease.valid()
    finally:
        lease.stop()


def test_connection_loss_counts_as_no_proof() -> None:
    class Lossy(FakeClient):
        def sync(self, path: str) -> None:
            raise ConnectionLoss()

    now = [0.0]
    lease = SessionLease(Lossy(), "/p", 6.0, clock=lambda: now[0])  # type: ignore[arg-type]
    now[0] = 7.0
    assert lease.prove() is False and not lease.valid()


def test_a_proof_on_a_new_session_counts_only_once_the_member_rejoined() -> None:
    now = [0.0]
    client = Sessions()
    lease = SessionLease(client, "/p", 6.0, clock=lambda: now[0])  # type: ignore[arg-type]
    assert lease.prove()
    now[0] = 10.0  # the session expired; kazoo opened session 2 at once
    client.client_id = (2, b"")
    assert lease.prove() is False and not lease.valid()  # owner nodes of session 1 are gone
    lease.accept_session()  # the rebalancer rejoined on session 2
    assert lease.prove() and not lease.valid()
    now[0] = 11.8
    assert lease.prove() and lease.valid()  # confirmed by a proof 1.8 s later


def test_a_session_reported_lost_lapses_the_lease_until_the_member_rejoins() -> None:
    """A session closed before its timeout (proven a moment ago) lapses once kazoo says LOST."""
    now = [0.0]
    client = Sessions()
    lease = SessionLease(client, "/p", 6.0, clock=lambda: now[0])  # type: ignore[arg-type]
    assert lease.prove() and lease.valid()
    now[0] = 1.0
    lease.session_lost()  # closed from outside: its last proof is 1 s old
    assert not lease.valid()
    client.client_id = (2, b"")
    assert lease.prove() is False and not lease.valid()
    lease.accept_session()  # the rebalancer rejoined on session 2
    assert lease.prove() and lease.valid()  # the lease's proofs before still count (session 2 is newer)


class FakeConnection:
    """The kazoo connection handler methods a SessionHeartbeat instruments; replies have ``reply_xid``."""

    reply_xid = -2
    reply_err = 0

    def _connect(self, host: str, hostip: str, port: int) -> tuple:
        return 4000.0, 6000.0  # a negotiated 6 s session: kazoo's read timeout is 2/3 of it

    def _connect_attempt(self, host: str, hostip: str, port: int, retry: object) -> None:
        pass

    def _submit(self, request: object, timeout: float, xid: object = None) -> None:
        pass

    def _read_header(self, timeout: float) -> tuple:
        return SimpleNamespace(xid=self.reply_xid, err=self.reply_err), b"", 0

    def _read_socket(self, read_timeout: float) -> None:
        pass

    def _write(self, msg: bytes, timeout: float) -> None:
        pass

    def _send_request(self, read_timeout: float, connect_timeout: float) -> None:
        pass


class ObservedClient(Sessions):
    def __init__(self) -> None:
        super().__init__()
        self._connection = FakeConnection()


SET_DATA, GET_DATA, PING = SimpleNamespace(type=5), SimpleNamespace(type=4), SimpleNamespace(type=11)


def connected(now: List[float], connection: Optional[FakeConnection] = None) -> Tuple[ObservedClient, SessionHeartbeat]:
    """An :class:`ObservedClient` (on ``connection``, a :class:`FakeConnection` by default) whose heartbeat
    (``kafka``, clock ``now[0]``) observed a handshake sent at ``now[0]``."""
    client = ObservedClient()
    if connection is not None:
        client._connection = connection
    heartbeat = SessionHeartbeat.install(client, "kafka", clock=lambda: now[0])
    client._connection._connect("h", "127.0.0.1", 2181)
    return client, heartbeat


def assert_lapses_at(lease: SessionLease, now: List[float], valid_at: float, lapsed_at: float) -> None:
    """``lease``, whose clock is ``now[0]``, is still valid at ``valid_at`` and lapsed at ``lapsed_at`` (``now[0]``
    is left at ``lapsed_at``)."""
    now[0] = valid_at
    assert lease.valid(), f"lapsed by {valid_at}"
    now[0] = lapsed_at
    assert not lease.valid(), f"still valid at {lapsed_at}"


def test_scale_item2_replies_to_kazoos_own_writes_prove_the_session_without_reads() -> None:
    """A kazoo connection handler's methods are observed by the heartbeat; the answer to a write (whose
    session the leader checked) proves the session, the lease then syncs nothing itself."""
    now = [0.0]
    client, heartbeat = connected(now)  # the handshake at 0: 6 s granted
    lease = SessionLease(client, "/p", 6.0, clock=lambda: now[0], heartbeat=heartbeat)
    now[0] = 5.0
    client._connection._submit(SET_DATA, 1.0, 7)  # a commit, sent at 5.0
    now[0] = 7.0
    assert not lease.valid()  # no reply yet: the last proof is the start
    client._connection.reply_xid = -1
    client._connection._read_header(1.0)  # a watch notification proves nothing
    assert not lease.valid()
    client._connection.reply_xid = 7
    client._connection._read_header(1.0)  # the write's reply: proven as of 5.0, not counted yet
    assert not lease.valid()
    now[0] = 8.8
    client._connection._submit(SET_DATA, 1.0, 8)  # another commit, 1.8 s after that answer
    client._connection.reply_xid = 8
    client._connection._read_header(1.0)  # its reply: the one at 5.0 counts
    assert lease.valid()
    assert_lapses_at(lease, now, 10.9, 11.0)
    assert client.reads == 0


@pytest.mark.parametrize("request_, xid", [(PING, -2), (GET_DATA, 8)], ids=["ping", "read"])
def test_a_ping_or_a_read_answered_proves_nothing(request_: object, xid: int) -> None:
    """A follower cut off from its leader answers pings and reads from its own state for syncLimit x
    tickTime, also for a session the leader expired meanwhile: only what the leader checked counts."""
    now = [0.0]
    client = ObservedClient()
    heartbeat = SessionHeartbeat.install(client, "kafka", clock=lambda: now[0])
    lease = SessionLease(client, "/p", 6.0, clock=lambda: now[0], heartbeat=heartbeat)
    now[0] = 5.0
    client._connection._submit(request_, 1.0, xid)
    client._connection.reply_xid = xid
    client._connection._read_header(1.0)
    now[0] = 7.0
    assert not lease.valid()
    assert heartbeat.last_proof(1) is None


def test_a_write_refused_for_its_session_proves_nothing() -> None:
    now = [0.0]
    client = ObservedClient()
    heartbeat = SessionHeartbeat.install(client, "kafka", clock=lambda: now[0])
    client._connection._submit(SET_DATA, 1.0, 9)
    client._connection.reply_xid, client._connection.reply_err = 9, -112  # SESSIONEXPIRED
    client._connection._read_header(1.0)
    assert heartbeat.last_proof(1) is None


def test_observed_replies_count_only_on_the_accepted_session_against_the_negotiated_timeout() -> None:
    """Observed replies prove the session the member joined with, for the negotiated timeout only;
    replies on a new session count only once the member rejoined on it."""
    now = [0.0]
    client, heartbeat = connected(now)  # the handshake: 6 s granted
    lease = SessionLease(client, "/p", 30.0, clock=lambda: now[0], heartbeat=heartbeat)
    now[0] = 5.0
    client._connection._submit(SET_DATA, 1.0, 3)
    client._connection.reply_xid = 3
    client._connection._read_header(1.0)  # session 1 answered the write sent at 5.0
    now[0] = 6.8
    client._connection._submit(SET_DATA, 1.0, 5)
    client._connection.reply_xid = 5
    client._connection._read_header(1.0)  # and the one sent at 6.8: the one at 5.0 counts
    assert_lapses_at(lease, now, 10.9, 11.0)  # the negotiated 6 s, not the configured 30 s
    client.client_id = (2, b"")  # session 1 expired; kazoo opened session 2
    client._connection._connect("h", "127.0.0.1", 2181)  # its handshake, sent at 11.0: counts at once
    client._connection._submit(SET_DATA, 1.0, 4)
    client._connection.reply_xid = 4
    client._connection._read_header(1.0)  # answered on session 2 (sent at 11.0)
    assert not lease.valid()  # session 2 owns nothing yet
    lease.accept_session()  # the rebalancer rejoined on session 2
    assert lease.valid()
    assert client.reads == 0


@pytest.mark.parametrize("mode", ["kafka", "quiet"])
def test_the_lease_syncs_just_before_the_heartbeat_would_ping_an_idle_connection(mode: str) -> None:
    """Kafka's cadence (the native thread pings after 0.3 T of silence): a sync after 0.27 T without a
    proof; the quiet one (0.7 T) too, where 0.63 T would let the lease lapse between proofs (a proof
    counts from two proofs back at worst: proofs.MAX_CADENCE). The sync is traffic, so the ping it
    precedes is spared."""
    if not QUIET_AVAILABLE:
        pytest.skip("the _heartbeat C extension is not built")
    heartbeat = SessionHeartbeat.install(ObservedClient(), mode)
    try:
        assert heartbeat.mode == mode
        lease = SessionLease(ObservedClient(), "/p", 6.0, heartbeat=heartbeat)
        shortest = {"kafka": 6.0 * 0.3, "quiet": 6.0 * 0.7}[mode]
        assert heartbeat.shortest_silence(6.0) == pytest.approx(shortest)
        assert lease.overdue_after == pytest.approx(min(0.9 * shortest, 0.27 * 6.0))
        assert lease.overdue_after < heartbeat.shortest_silence(6.0) <= heartbeat.longest_silence(6.0)
    finally:
        heartbeat.stop()


def test_without_a_heartbeat_the_lease_syncs_every_0_27_session_timeout() -> None:
    """Not every half timeout any more: a proof counts from two proofs back at worst (proofs.MAX_CADENCE)."""
    assert SessionLease(FakeClient(), "/p", 6.0).overdue_after == pytest.approx(1.62)  # type: ignore[arg-type]


def test_the_thread_survives_an_unexpected_exception_logs_it_and_keeps_proving(caplog) -> None:
    """A client that raises something nobody foresaw must not kill the lease thread for good."""

    class Surprising(FakeClient):
        def sync(self, path: str) -> None:
            self.reads += 1
            if self.reads == 1:
                raise TypeError("a bug somewhere below")

    client = Surprising()
    lease = SessionLease(client, "/p", 0.3)  # type: ignore[arg-type]
    lease.start()
    try:
        import time

        deadline = time.monotonic() + 5.0
        while client.reads < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert client.reads >= 3, "the thread stopped proving after the exception"
        assert lease.valid()
        assert any("unexpected failure" in r.getMessage() and r.exc_info for r in caplog.records)
    finally:
        assert lease.stop(2.0)


def test_a_lease_made_long_after_the_handshake_counts_from_the_handshake_not_from_its_making() -> None:
    """A connector idle between connecting and ``create_message_streams``: the last touch of its session
    the leader surely heard of is the handshake's (a follower cut off right after the registration never
    reports it), so the lease is not valid until a proof made since is confirmed by a later one."""
    now = [0.0]
    client, heartbeat = connected(now)  # the handshake at 0: 6 s granted
    now[0] = 60.0
    client._connection._submit(SET_DATA, 1.0, 7)  # the registration, sent at 60.0
    client._connection.reply_xid = 7
    client._connection._read_header(1.0)
    lease = SessionLease(client, "/p", 6.0, clock=lambda: now[0], heartbeat=heartbeat)
    assert not lease.valid()  # made at 60.0, but nothing since the handshake counts yet
    now[0] = 61.8
    client._connection._submit(SET_DATA, 1.0, 8)  # a proof sent 1.8 s after the registration's answer
    client._connection.reply_xid = 8
    client._connection._read_header(1.0)
    assert lease.valid()  # the registration counts: from 60.0
    assert_lapses_at(lease, now, 65.99, 66.0)


def test_a_lease_made_just_after_the_handshake_is_valid_at_once() -> None:
    """The usual start (connect, then streams at once): the handshake counts, so deliveries need not wait."""
    now = [0.0]
    client, heartbeat = connected(now)
    now[0] = 0.4
    lease = SessionLease(client, "/p", 6.0, clock=lambda: now[0], heartbeat=heartbeat)
    assert lease.valid()
    assert_lapses_at(lease, now, 5.99, 6.0)
