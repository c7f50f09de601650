"""The simulated kazoo client behaves as kazoo 2.11's source does (client.py, protocol/connection.py)."""

from __future__ import annotations

import random
from typing import Any, List, Tuple

import pytest
from kazoo.exceptions import ConnectionLoss, NoNodeError, SessionExpiredError
from kazoo.protocol.states import EventType, KazooState

from .client import SimKazoo
from .kernel import Kernel, SimTask
from .network import ClientFaults, Network
from .zkmodel import Ensemble


def _world(followers: int = 0) -> Tuple[Kernel, Ensemble, SimKazoo, List[str]]:
    kernel = Kernel()
    ensemble = Ensemble(followers, kernel.clock)
    client = SimKazoo(kernel, ensemble, Network(random.Random(1)), "c", 6.0, lambda line: None)
    states: List[str] = []
    client.add_listener(states.append)
    client.start()
    kernel.run_until(lambda: client.connected, 5.0)
    return kernel, ensemble, client, states


def test_client_id_is_none_unless_connected_and_session_id_is_kept_across_suspended() -> None:
    kernel, ensemble, client, _ = _world()
    sid = client.client_id[0] if client.client_id else None
    assert sid is not None and client._session_id == sid
    ensemble.paused = True  # the reconnection waits while ZooKeeper is away
    client.drop_connection("test")
    assert client.state == KazooState.SUSPENDED
    assert client.client_id is None  # kazoo: only while _live is set
    assert client._session_id == sid  # kazoo keeps it: it reconnects with it
    ensemble.paused = False
    kernel.run_until(lambda: client.connected, kernel.now + 5.0)
    assert client.client_id == (sid, b"password")


def test_expiry_fails_queued_requests_then_new_calls_fail_at_once_until_the_next_attempt() -> None:
    kernel, ensemble, client, states = _world()
    old = client._session_id
    ensemble.paused = True
    client.drop_connection("test")
    queued = client.get_async("/")  # made while SUSPENDED: queued
    assert client._queue
    ensemble.expire(old)  # type: ignore[arg-type]
    ensemble.paused = False
    seen: List[Any] = []

    def look() -> None:  # every event: what a call made now meets
        if client.state == KazooState.LOST and client._expired and not seen:
            seen.append((client._session_id, client.client_id))
            result = client.get_async("/")
            assert result.ready()
            with pytest.raises(SessionExpiredError):
                result.get()
    kernel.run_until(lambda: client.connected, kernel.now + 10.0, look)
    assert states[-3:] == [KazooState.SUSPENDED, KazooState.LOST, KazooState.CONNECTED]
    assert queued.ready()
    with pytest.raises(SessionExpiredError):  # kazoo's _notify_pending(EXPIRED_SESSION) drains _queue
        queued.get()
    assert seen == [(None, None)]
    assert client._session_id not in (None, old)


def test_pending_requests_fail_with_connection_loss_and_watches_get_a_none_event_on_the_callback_thread() -> None:
    kernel, ensemble, client, _ = _world()
    events: List[Any] = []
    client.exists_async("/x", watch=events.append)
    kernel.run_until(lambda: "/x" in client._data_watchers, kernel.now + 1.0)
    pending = client.get_async("/")  # sent, not yet answered
    client.drop_connection("test")
    assert events == []  # not inline: the callback thread runs it after this event
    kernel.run_until(lambda: bool(events), kernel.now + 1.0)
    assert events[0].type == EventType.NONE
    with pytest.raises(ConnectionLoss):
        pending.get()


def test_a_caller_can_see_a_later_reply_before_an_earlier_watch_fires() -> None:
    kernel, ensemble, client, _ = _world()
    client.faults = ClientFaults(random.Random(3), callback_lag=1.0)
    order: List[str] = []
    ensemble.execute(ensemble.leader, 0, "create", {"path": "/n", "value": b"", "makepath": True})

    def caller() -> None:
        client.get_async("/n", watch=lambda event: order.append("watch")).get()
        client.set_async("/n", b"1").get()  # fires the watch, then answers
        order.append("reply")
    SimTask(kernel, caller, "t")
    kernel.run_until(lambda: len(order) == 2, kernel.now + 5.0)
    assert order == ["reply", "watch"]


def test_a_multi_check_of_a_missing_node_fails_with_no_node_and_changes_nothing() -> None:
    kernel, ensemble, client, _ = _world()
    ensemble.execute(ensemble.leader, 0, "create", {"path": "/a", "value": b"0", "makepath": True})
    for version in (-1, 0):
        results = ensemble.execute(ensemble.leader, client._session_id or 0, "multi", {"ops": [
            ("set", {"path": "/a", "value": b"1", "version": -1}),
            ("check", {"path": "/fence", "version": version})]})
        assert isinstance(results[1], NoNodeError)
        assert ensemble.leader.tree["/a"].data == b"0"


def test_a_preempted_thread_sends_its_request_on_the_new_session() -> None:
    kernel, ensemble, client, _ = _world()
    client.faults = ClientFaults(random.Random(0), preempt=1.0)
    client.faults.preemption = lambda: 8.0  # type: ignore[method-assign]
    old = client._session_id
    sessions: List[Any] = []

    def writer() -> None:
        client.create_async("/w", b"", ephemeral=True).get()
    SimTask(kernel, writer, "t")
    kernel.run_until(None, kernel.now + 0.1)
    ensemble.expire(old)  # type: ignore[arg-type]
    client.drop_connection("session expired")
    kernel.run_until(lambda: "/w" in ensemble.leader.tree, kernel.now + 12.0)
    sessions.append(ensemble.leader.tree["/w"].owner)
    assert sessions == [client._session_id] and client._session_id != old


def test_a_frozen_process_runs_nothing_and_its_session_expires_past_the_timeout() -> None:
    kernel, ensemble, client, states = _world()
    old = client._session_id
    ran: List[float] = []

    def thread() -> None:
        while True:
            ran.append(kernel.now)
            kernel.sleep(0.5)
    SimTask(kernel, thread, "t", owner="c")
    kernel.run_until(None, kernel.now + 1.0)
    start = kernel.now
    client.frozen_until = kernel.frozen["c"] = start + 8.0  # past the 6 s session timeout

    def tick() -> None:  # the session tracker
        for sid in ensemble.expire_idle():
            if sid == old:
                kernel.at(kernel.now + 0.002, lambda: client.drop_connection("session expired"))
        kernel.at(kernel.now + 0.5, tick)
    tick()
    kernel.run_until(lambda: client.connected and client._session_id != old, start + 20.0)
    assert not [t for t in ran if start < t < start + 8.0]  # no thread of the process ran
    assert not ensemble.alive(old)  # type: ignore[arg-type]
    assert states[-3:] == [KazooState.SUSPENDED, KazooState.LOST, KazooState.CONNECTED]
    assert min(t for t in ran if t > start) >= start + 8.0


def test_a_sequential_create_appends_the_parents_counter_and_returns_the_path() -> None:
    kernel, ensemble, client, _ = _world()
    sid = client._session_id or 0
    first = ensemble.execute(ensemble.leader, sid, "create", {"path": "/f/c-", "makepath": True, "sequence": True,
                                                               "ephemeral": True})
    second = ensemble.execute(ensemble.leader, sid, "create", {"path": "/f/c-", "sequence": True, "ephemeral": True})
    both = ensemble.execute(ensemble.leader, sid, "multi", {"ops": [
        ("create", {"path": "/f/c-", "sequence": True}), ("create", {"path": "/f/c-", "sequence": True})]})
    assert (first, second, both) == ("/f/c-0000000000", "/f/c-0000000001", ["/f/c-0000000002", "/f/c-0000000003"])
    ensemble.expire(sid)
    assert sorted(ensemble.leader.tree["/f"].children) == ["c-0000000002", "c-0000000003"]  # ephemerals gone


def test_a_watch_event_sent_during_a_freeze_never_overtakes_the_answer_of_the_read_that_set_it() -> None:
    """One TCP stream, read in order: kazoo adds the watcher when it reads the answer
    (connection.py ``_read_response``) and looks it up when it reads the event
    (``_read_watch_event``). A freeze holds both back; the event must still find its watcher
    (seed 2025705: the model delivered the held-back answer after the event, which was lost)."""
    kernel, ensemble, client, _ = _world()
    other = ensemble.open_session(6.0)
    ensemble.execute(ensemble.leader, other, "create", {"path": "/g", "value": b""})
    events: List[Any] = []
    read = client.get_children_async("/g", watch=events.append)
    kernel.run_until(lambda: "/g" in ensemble.leader.child_watches, kernel.now + 1.0)
    assert not read.ready()  # answered by the server, the answer still on its way
    client.frozen_until = kernel.now + 2.0  # the process stops before it reads the answer
    ensemble.execute(ensemble.leader, other, "create", {"path": "/g/x", "value": b""})  # fires the watch
    kernel.run_until(lambda: read.ready() and bool(events), kernel.now + 5.0)
    assert read.get() == []
    assert [event.type for event in events] == [EventType.CHILD]


def test_a_dropped_connections_watches_are_removed_from_its_server() -> None:
    """ZooKeeper keeps watches per connection and removes them when it closes (``DataTree.removeCnxn``);
    kazoo 2.11 sends no ``SetWatches`` on reconnection. An event of the old connection's watch is never
    delivered on the new one (the model delivered it, to whatever callback a new read had registered)."""
    kernel, ensemble, client, _ = _world()
    sid = client._session_id
    server = ensemble.servers[client.server]
    seen: List[Any] = []
    client.exists_async("/", watch=seen.append)
    kernel.run_until(lambda: any(sid in s for s in server.data_watches.values()), kernel.now + 5.0)
    assert any(sid in s for s in server.data_watches.values())
    client.drop_connection("test")
    assert not any(sid in s for s in server.data_watches.values())
