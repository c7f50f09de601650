"""PathWatch against a fake kazoo client that runs its callbacks in an order kazoo's threads allow.

kazoo tells the state listeners SUSPENDED on its connection thread, then hands every dropped
watch an ``EventType.NONE`` event through its callback thread, which may run it late: after the
connection came back and the listener re-armed the watch, and before or after the re-arming
read's answer (run on the completion thread). The simulator found this order (seed 1000408).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, List, Optional, Tuple

import pytest
from kazoo.protocol.states import EventType, KazooState, KeeperState, WatchedEvent

from zkconsumer.zookeeper.watchers import PathWatch

OLD = b'{"version":1,"partitions":{"0":[0]}}'
NEW = b'{"version":1,"partitions":{"0":[0],"1":[0]}}'


class _Pending:
    """An async result whose answer the test hands over (kazoo's completion thread, later)."""

    def __init__(self) -> None:
        self._links: List[Callable[["_Pending"], None]] = []
        self._value: Any = None
        self._error: Optional[Exception] = None

    def rawlink(self, callback: Callable[["_Pending"], None]) -> None:
        self._links.append(callback)

    def get(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value

    def answer(self, value: Any) -> None:
        self._value = value
        for link in self._links:
            link(self)

    def fail(self, error: Exception) -> None:
        self._error = error
        for link in self._links:
            link(self)


class FakeKazoo:
    """Records each data read (and exists call) and its watcher; the test plays kazoo's threads.
    It has asynchronous requests only: a synchronous call (which could block kazoo) fails."""

    def __init__(self) -> None:
        self.connected = True
        self.listeners: List[Callable[[str], Any]] = []
        self.reads: List[Tuple[_Pending, Callable[[WatchedEvent], None]]] = []
        self.exists: List[Tuple[_Pending, Callable[[WatchedEvent], None]]] = []

    def add_listener(self, listener: Callable[[str], Any]) -> None:
        self.listeners.append(listener)

    def remove_listener(self, listener: Callable[[str], Any]) -> None:
        self.listeners.remove(listener)

    def get_async(self, path: str, watch: Callable[[WatchedEvent], None]) -> _Pending:
        pending = _Pending()
        self.reads.append((pending, watch))
        return pending

    def exists_async(self, path: str, watch: Callable[[WatchedEvent], None]) -> _Pending:
        pending = _Pending()
        self.exists.append((pending, watch))
        return pending

    def state(self, state: str) -> None:
        self.connected = state == KazooState.CONNECTED
        for listener in list(self.listeners):
            listener(state)


def _answer(read: Tuple[_Pending, Any], data: bytes, version: int) -> None:
    read[0].answer((data, SimpleNamespace(version=version, cversion=0)))


@pytest.mark.parametrize("none_event", ["before the re-armed read's answer", "after the re-armed read's answer"])
def test_a_late_none_event_does_not_undo_the_re_armed_watch(none_event: str) -> None:
    client = FakeKazoo()
    signals: List[str] = []
    watch = PathWatch(client, "/brokers/topics/t", children=False, signal=signals.append, name="topic t",  # type: ignore[arg-type]
                      describe=lambda previous, current: "partitions of topic t changed")
    watch.start()
    _answer(client.reads[0], OLD, 0)
    assert watch.snapshot() is not None and signals == []

    # The connection drops (the change to NEW was made meanwhile) and comes back on the same
    # session; the listener re-arms at once, on the connection thread.
    client.state(KazooState.SUSPENDED)
    assert watch.snapshot() is None
    client.state(KazooState.CONNECTED)
    assert len(client.reads) == 2
    dropped: Optional[Callable[[WatchedEvent], None]] = client.reads[0][1]
    late = WatchedEvent(EventType.NONE, KeeperState.CONNECTING, None)  # kazoo's _reset_watchers
    if none_event.startswith("before"):
        dropped(late)
        _answer(client.reads[1], NEW, 1)
    else:
        _answer(client.reads[1], NEW, 1)
        dropped(late)

    # The change is signalled once, and the rebalance it starts finds the new map in the
    # snapshot (GroupWatcher.topic_data), not in a cache whose own watch was dropped.
    assert signals == ["partitions of topic t changed"]
    snapshot = watch.snapshot()
    assert snapshot is not None and snapshot[0] == NEW
    assert len(client.reads) == 2  # nothing else to read: the re-armed watch stands

    # That watch is live: the next change fires it, and is read and signalled.
    client.reads[1][1](WatchedEvent(EventType.CHANGED, KeeperState.CONNECTED, "/brokers/topics/t"))
    assert watch.snapshot() is None
    _answer(client.reads[2], OLD, 2)
    assert signals == ["partitions of topic t changed"] * 2
    snapshot = watch.snapshot()
    assert snapshot is not None and snapshot[0] == OLD


def test_a_read_answered_before_a_drop_and_run_after_it_does_not_end_the_gap() -> None:
    """The re-arming read is answered (its watch set), then the connection drops again (kazoo drops
    every watch) before the completion thread runs the read's callback: the reconnection must
    re-arm the watch, or the next change is never seen (the simulator, seed 1027021)."""
    client = FakeKazoo()
    signals: List[str] = []
    watch = PathWatch(client, "/brokers/topics/t", children=False, signal=signals.append, name="topic t",  # type: ignore[arg-type]
                      describe=lambda previous, current: "partitions of topic t changed")
    watch.start()
    _answer(client.reads[0], OLD, 0)

    # The first connection drops and comes back: the listener re-arms.
    client.state(KazooState.SUSPENDED)
    client.state(KazooState.CONNECTED)
    assert len(client.reads) == 2
    # The read is answered on the connection thread (kazoo registered its watcher then), but the
    # connection drops again before the completion thread runs its callback: that watch is gone.
    client.state(KazooState.SUSPENDED)
    _answer(client.reads[1], OLD, 0)
    assert watch.snapshot() is None
    # Back again: the watch is armed once more.
    client.state(KazooState.CONNECTED)
    assert len(client.reads) == 3
    _answer(client.reads[2], OLD, 0)
    assert signals == []  # nothing changed
    snapshot = watch.snapshot()
    assert snapshot is not None and snapshot[0] == OLD

    # That watch is live: the next change is read and signalled.
    client.reads[2][1](WatchedEvent(EventType.CHANGED, KeeperState.CONNECTED, "/brokers/topics/t"))
    _answer(client.reads[3], NEW, 1)
    assert signals == ["partitions of topic t changed"]


@pytest.mark.parametrize("lost", [KazooState.SUSPENDED, KazooState.LOST])
def test_a_read_answered_before_the_loss_but_run_after_it_does_not_stop_the_re_arming(lost: str) -> None:
    """The completion thread runs the first read's callback only after the connection thread told
    the listeners of the loss (the answer came just before it; the process was stalled). That read's
    watch is gone: the watch must still be armed again once the connection is back (seed 2000153)."""
    client = FakeKazoo()
    signals: List[str] = []
    watch = PathWatch(client, "/brokers/topics/t", children=False, signal=signals.append, name="topic t",  # type: ignore[arg-type]
                      describe=lambda previous, current: "partitions of topic t changed")
    watch.start()
    client.state(lost)
    _answer(client.reads[0], OLD, 0)  # late: on the completion thread, after the listener
    assert watch.snapshot() is None  # its watch was dropped: it stands for nothing now

    client.state(KazooState.CONNECTED)
    assert len(client.reads) == 2  # armed again
    _answer(client.reads[1], OLD, 0)
    snapshot = watch.snapshot()
    assert snapshot is not None and snapshot[0] == OLD

    # The re-armed watch is live: a change is read and signalled.
    client.reads[1][1](WatchedEvent(EventType.CHANGED, KeeperState.CONNECTED, "/brokers/topics/t"))
    _answer(client.reads[2], NEW, 1)
    assert signals[-1] == "partitions of topic t changed"
    snapshot = watch.snapshot()
    assert snapshot is not None and snapshot[0] == NEW
