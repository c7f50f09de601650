"""SessionLease: valid for one session timeout after the last proof, lapsed after a freeze."""

from __future__ import annotations

from kazoo.exceptions import ConnectionLoss, SessionExpiredError

from zkconsumer.lease import SessionLease


class FakeClient:
    def __init__(self) -> None:
        self.fail = False
        self.reads = 0

    def exists(self, path: str) -> None:
        self.reads += 1
        if self.fail:
            raise SessionExpiredError()


def test_valid_until_one_session_timeout_after_the_last_proof() -> None:
    now = [100.0]
    lease = SessionLease(FakeClient(), "/consumers/g/ids/me", 6.0, clock=lambda: now[0])  # type: ignore[arg-type]
    assert lease.valid()
    now[0] = 105.9
    assert lease.valid()
    now[0] = 106.0
    assert not lease.valid()  # e.g. the process was frozen for longer than the session timeout


def test_a_failed_proof_does_not_extend_and_a_successful_one_renews() -> None:
    now = [0.0]
    client = FakeClient()
    lease = SessionLease(client, "/p", 6.0, clock=lambda: now[0])  # type: ignore[arg-type]
    now[0] = 10.0
    client.fail = True
    assert lease.prove() is False and not lease.valid()
    client.fail = False
    assert lease.prove() is True and lease.valid()


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
        def exists(self, path: str) -> None:
            raise ConnectionLoss()

    now = [0.0]
    lease = SessionLease(Lossy(), "/p", 6.0, clock=lambda: now[0])  # type: ignore[arg-type]
    now[0] = 7.0
    assert lease.prove() is False and not lease.valid()


def test_a_proof_on_a_new_session_counts_only_once_the_member_rejoined() -> None:
    class Sessions(FakeClient):
        client_id = (1, b"")

    now = [0.0]
    client = Sessions()
    lease = SessionLease(client, "/p", 6.0, clock=lambda: now[0])  # type: ignore[arg-type]
    assert lease.prove()
    now[0] = 10.0  # the session expired; kazoo opened session 2 at once
    client.client_id = (2, b"")
    assert lease.prove() is False and not lease.valid()  # owner nodes of session 1 are gone
    lease.accept_session()  # the rebalancer rejoined on session 2
    assert lease.prove() and lease.valid()
