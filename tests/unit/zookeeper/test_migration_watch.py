"""The migration node's watch (:func:`zkconsumer.zookeeper.migration.watch_intent`) against a fake kazoo
client with asynchronous requests only: what calls ``changed()``, and that it never waits for ZooKeeper.

It replaced kazoo's ``DataWatch`` recipe, whose re-read after a connection loss runs a synchronous
``get`` on kazoo's callback thread and waits there until ZooKeeper answers; kazoo's ``atexit``
handler joins that thread, so a process that never shut its member down hung at exit while
ZooKeeper was away (tests/integration/test_zookeeper_faults.py, the exit test, runs that for real).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import List

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import EventType, KazooState, KeeperState, WatchedEvent

from zkconsumer.zookeeper import migration

from .test_path_watch import FakeKazoo

GROUP = "g"
PATH = migration.migration_path(GROUP)
TO_KAFKA = migration.encode_intent("kafka", 1)
TO_ZOOKEEPER = migration.encode_intent("zookeeper", 2)


def stat(version: int) -> SimpleNamespace:
    return SimpleNamespace(version=version, cversion=0)


def fire(client: FakeKazoo, kind: str = EventType.CHANGED) -> None:
    """ZooKeeper fires the watch the last read set (kazoo's callback thread)."""
    client.reads[-1][1](WatchedEvent(kind, KeeperState.CONNECTED, PATH))


def test_changed_once_at_once_then_at_each_change_and_deletion_and_creation() -> None:
    client = FakeKazoo()
    calls: List[str] = []
    watch = migration.watch_intent(client, GROUP, lambda: calls.append("changed"))  # type: ignore[arg-type]
    # Armed before it returned (the read is sent; its answer comes later), and called once already:
    # the caller's own read of the node, made after this, is that call's reason.
    assert len(client.reads) == 1 and calls == ["changed"]
    client.reads[0][0].fail(NoNodeError())  # no node yet: it waits for one (exists-watch)
    client.exists[0][0].answer(None)
    assert calls == ["changed"]  # the baseline is not a change

    client.exists[0][1](WatchedEvent(EventType.CREATED, KeeperState.CONNECTED, PATH))
    client.reads[1][0].answer((TO_KAFKA, stat(0)))
    assert calls == ["changed"] * 2  # created

    fire(client)
    client.reads[2][0].answer((TO_ZOOKEEPER, stat(1)))
    assert calls == ["changed"] * 3  # changed

    fire(client, EventType.DELETED)
    client.reads[3][0].fail(NoNodeError())
    client.exists[1][0].answer(None)
    assert calls == ["changed"] * 4  # deleted

    watch.stop()
    assert client.listeners == []
    client.exists[1][1](WatchedEvent(EventType.CREATED, KeeperState.CONNECTED, PATH))
    assert len(client.reads) == 4 and calls == ["changed"] * 4  # stopped: nothing read, nothing called


def test_after_a_reconnection_only_a_change_made_meanwhile_calls_and_a_new_session_always_does() -> None:
    client = FakeKazoo()
    calls: List[str] = []
    migration.watch_intent(client, GROUP, lambda: calls.append("changed"))  # type: ignore[arg-type]
    client.reads[0][0].answer((TO_KAFKA, stat(0)))
    assert calls == ["changed"]

    # ZooKeeper is away: nothing is sent, nothing waits; the dropped watch's NONE event is ignored.
    client.state(KazooState.SUSPENDED)
    fire(client, EventType.NONE)
    assert len(client.reads) == 1
    client.state(KazooState.CONNECTED)  # the same session: armed again, unchanged: no call
    client.reads[1][0].answer((TO_KAFKA, stat(0)))
    assert calls == ["changed"]

    client.state(KazooState.SUSPENDED)
    client.state(KazooState.CONNECTED)
    client.reads[2][0].answer((TO_ZOOKEEPER, stat(1)))  # written while we were away
    assert calls == ["changed"] * 2

    client.state(KazooState.LOST)  # the session expired: whatever the node holds, a call
    client.state(KazooState.CONNECTED)
    client.reads[3][0].answer((TO_ZOOKEEPER, stat(1)))
    assert calls == ["changed"] * 3
