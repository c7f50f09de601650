"""Watches under faults, on a real cluster: armed before the reads they guard, alive after their node is deleted.

Items of the "Correct under faults" issue:

* 8: a partition or topic added between a read and the arming of the watch that
  guards it must not be missed. The tests make the change exactly in that window
  by wrapping the read (``GroupClient.partitions_for_topics`` / ``all_topics``):
  right after the real read returns, another ZooKeeper client changes the cluster.
* 9: deleting ``/consumers/<g>/ids`` (or the whole group, as ``rmr`` would) must
  not kill the members watch: members re-register, re-claim, keep consuming, and a
  later joiner still makes them rebalance.

Plus the contract of :class:`zkconsumer.zookeeper.watchers.GroupWatcher` itself (under a
chroot, so Kafka's controller never sees the nodes the tests write).
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Callable, Dict, Iterator, List

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from support.common import Drainer, consumer_props, owners, produced_values, unique, wait_until

from harness.assignment import expected_range
from zkconsumer import Whitelist, ZookeeperConsumerConnector
from zkconsumer.testing import LocalCluster
from zkconsumer.zookeeper import zkformat
from zkconsumer.zookeeper.group import GroupClient
from zkconsumer.zookeeper.watchers import GroupWatcher


@pytest.fixture(scope="module")
def watch_cluster() -> Iterator[LocalCluster]:
    """One broker of our own: these tests rewrite topic nodes and delete groups by hand."""
    with LocalCluster(brokers=1, partitions=2) as local:
        yield local


@pytest.fixture
def zk(watch_cluster: LocalCluster) -> KazooClient:
    return watch_cluster.kazoo_client()


def add_partition(zk: KazooClient, topic: str) -> int:
    """Add one partition the way Kafka's AddPartitionsCommand does: rewrite the topic's replica map.

    The controller sees the new map and creates the partition (its state node, a leader).
    Returns the new partition's id.
    """
    path = zkformat.topic_path(topic)
    data, stat = zk.get(path)
    body = json.loads(data)
    new = len(body["partitions"])
    first_replicas = body["partitions"]["0"]
    body["partitions"][str(new)] = first_replicas
    zk.set(path, json.dumps(body, separators=(",", ":")).encode(), version=stat.version)
    return new


def add_partition_once_controlled(zk: KazooClient, topic: str) -> int:
    """:func:`add_partition` to a topic just created, once Kafka's controller has taken it in hand.

    (Its partition-change watch is set before it writes the first partition's state;
    a change made earlier could be missed by the controller itself.)
    """
    wait_until(lambda: zk.exists(f"{zkformat.topic_path(topic)}/partitions/0/state"), 30,
               f"the controller to create {topic}")
    return add_partition(zk, topic)


def create_topic_node(zk: KazooClient, topic: str, partitions: int = 2) -> None:
    """Create a topic as Kafka's AdminUtils does, without waiting for leaders (the controller follows)."""
    body = {"version": 1, "partitions": {str(p): [0] for p in range(partitions)}}
    zk.create(zkformat.topic_path(topic), json.dumps(body).encode(), makepath=True)


def wrap_read_once(monkeypatch: pytest.MonkeyPatch, name: str, consumer_id: str,
                   applies: Callable[[object], bool], change: Callable[[], None]) -> threading.Event:
    """Wrap ``GroupClient.<name>``: the first time ``consumer_id``'s read returns a result ``applies``
    accepts, run ``change`` right after it (before the caller sees the result). Returns an
    event set once the change is made."""
    real = getattr(GroupClient, name)
    done = threading.Event()

    def wrapped(self: GroupClient, *args: object, **kwargs: object) -> object:
        result = real(self, *args, **kwargs)
        if self.consumer_id == consumer_id and not done.is_set() and applies(result):
            change()
            done.set()
        return result

    monkeypatch.setattr(GroupClient, name, wrapped)
    return done


def owned_partitions(zk: KazooClient, group: str, topic: str) -> List[int]:
    return sorted(owners(zk, group, topic))


# ------------------------------------------------------------------------ item 8


def test_item8_partition_added_between_the_read_and_the_watch_of_a_new_topic_is_consumed(
    watch_cluster: LocalCluster, zk: KazooClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wildcard member meets a new topic; a partition is added to it right after its partitions are read.

    No other event follows: the member must get the partition from the watch alone.
    """
    prefix = unique("w8")
    first, second = f"{prefix}-a", f"{prefix}-b"
    watch_cluster.create_topic(first, partitions=1)
    group = unique("g8")
    props = consumer_props(watch_cluster, group, consumer_id="solo")
    consumer_id = f"{group}_solo"
    added: Dict[str, int] = {}
    changed = wrap_read_once(
        monkeypatch, "partitions_for_topics", consumer_id,
        applies=lambda result: second in result,  # type: ignore[operator]
        change=lambda: added.setdefault(second, add_partition_once_controlled(zk, second)),
    )
    with ZookeeperConsumerConnector(props) as connector:
        drainer = Drainer(connector.create_message_streams_by_filter(Whitelist(f"{prefix}-.*")))
        wait_until(lambda: owned_partitions(zk, group, first) == [0], 15, "the first topic owned")
        watch_cluster.create_topic(second, partitions=1)
        assert changed.wait(15), "the member never read the new topic's partitions"
        assert added[second] == 1
        wait_until(lambda: owned_partitions(zk, group, second) == [0, 1], 15,
                   f"partition 1 of {second}, added right after the read, to be owned")
        watch_cluster.wait_for_leaders(second)
        watch_cluster.produce(second, [b"in-the-window"], partition=1)
        wait_until(lambda: any(m.message == b"in-the-window" for m in drainer.snapshot()), 30,
                   "the message of the added partition")
        drainer.stop()


def test_item8_partition_added_right_after_the_first_read_is_consumed(
    watch_cluster: LocalCluster, zk: KazooClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A static member's first rebalance reads a 2-partition topic; a third partition appears right after."""
    topic = watch_cluster.create_topic(unique("s8"), partitions=2)
    group = unique("g8")
    props = consumer_props(watch_cluster, group, consumer_id="solo")
    changed = wrap_read_once(
        monkeypatch, "partitions_for_topics", f"{group}_solo",
        applies=lambda result: topic in result,  # type: ignore[operator]
        change=lambda: add_partition(zk, topic),
    )
    with ZookeeperConsumerConnector(props) as connector:
        connector.create_message_streams({topic: 1})
        assert changed.is_set()
        wait_until(lambda: owned_partitions(zk, group, topic) == [0, 1, 2], 15,
                   "the partition added right after the first read to be owned")


def test_item8_topic_created_right_after_the_first_topic_list_read_is_consumed(
    watch_cluster: LocalCluster, zk: KazooClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wildcard member's first rebalance lists the topics; a matching topic is created right after."""
    prefix = unique("l8")
    first, second = f"{prefix}-a", f"{prefix}-b"
    watch_cluster.create_topic(first, partitions=1)
    group = unique("g8")
    props = consumer_props(watch_cluster, group, consumer_id="solo")
    changed = wrap_read_once(
        monkeypatch, "all_topics", f"{group}_solo",
        applies=lambda result: first in result,  # type: ignore[operator]
        change=lambda: create_topic_node(zk, second, partitions=1),
    )
    with ZookeeperConsumerConnector(props) as connector:
        connector.create_message_streams_by_filter(Whitelist(f"{prefix}-.*"))
        assert changed.is_set()
        wait_until(lambda: owned_partitions(zk, group, second) == [0], 15,
                   "the topic created right after the first topic-list read to be owned")


# ------------------------------------------------------------------------ item 9


def delete_tree_atomically(zk: KazooClient, root: str) -> None:
    """``rmr root`` in one ZooKeeper multi-operation, so no member can re-create a node half-way."""
    for _ in range(20):
        nodes: List[str] = []

        def collect(path: str, nodes: List[str]) -> None:
            for child in zk.get_children(path):
                collect(f"{path}/{child}", nodes)
            nodes.append(path)

        try:
            collect(root, nodes)
        except NoNodeError:
            continue
        transaction = zk.transaction()
        for path in nodes:  # children before their parents
            transaction.delete(path)
        results = transaction.commit()
        if not any(isinstance(r, Exception) for r in results):
            return
    raise AssertionError(f"could not delete {root}: it kept changing")


@pytest.mark.parametrize("deleted", ["ids", "group"])
def test_item9_members_watch_survives_the_deletion_of_the_ids_node(
    watch_cluster: LocalCluster, zk: KazooClient, deleted: str
) -> None:
    topic = watch_cluster.create_topic(unique("t9"), partitions=6)
    group = unique("g9")
    paths = zkformat.GroupPaths(group)
    connectors: List[ZookeeperConsumerConnector] = []
    drainers: List[Drainer] = []

    def join(name: str) -> None:
        connector = ZookeeperConsumerConnector(consumer_props(watch_cluster, group, consumer_id=name))
        connectors.append(connector)
        drainers.append(Drainer(connector.create_message_streams({topic: 1})[topic]))

    def expected(*names: str) -> Dict[int, str]:
        return expected_range([f"{group}_{n}-0" for n in names], 6)

    def consumed() -> List[bytes]:
        return [m.message for d in drainers for m in d.snapshot()]

    try:
        join("a")
        join("b")
        wait_until(lambda: owners(zk, group, topic) == expected("a", "b"), 20, "a and b to share the topic")

        delete_tree_atomically(zk, paths.ids if deleted == "ids" else paths.root)

        wait_until(lambda: sorted(zk.get_children(paths.ids)) == [f"{group}_a", f"{group}_b"]
                   if zk.exists(paths.ids) else False, 15, "a and b to register again")
        wait_until(lambda: owners(zk, group, topic) == expected("a", "b"), 15, "a and b to own their partitions again")
        values = produced_values(30, f"after-{deleted}")
        watch_cluster.produce(topic, values)
        wait_until(lambda: set(values) <= set(consumed()), 30, "the group to keep consuming")

        join("c")  # only a live members watch in a and b makes room for c
        wait_until(lambda: owners(zk, group, topic) == expected("a", "b", "c"), 20,
                   "a and b to rebalance when c joins")
        more = produced_values(30, f"with-c-{deleted}")
        watch_cluster.produce(topic, more)
        wait_until(lambda: set(more) <= set(consumed()), 30, "the three members to consume")
    finally:
        for drainer in drainers:
            drainer.stop()
        for connector in connectors:
            connector.shutdown()


# ------------------------------------------------------- GroupWatcher's contract


class Signals:
    """Collects ``signal(reason)`` calls (from kazoo's threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reasons: List[str] = []

    def __call__(self, reason: str) -> None:
        with self._lock:
            self.reasons.append(reason)

    def take(self) -> List[str]:
        with self._lock:
            taken, self.reasons = self.reasons, []
            return taken

    def wait_for(self, fragment: str, timeout: float = 10) -> List[str]:
        seen: List[str] = []

        def found() -> bool:
            seen.extend(self.take())
            return any(fragment in r for r in seen)

        wait_until(found, timeout, f"a signal mentioning {fragment!r} (got {seen})")
        return seen


@pytest.fixture
def chrooted(watch_cluster: LocalCluster, zk: KazooClient) -> Iterator[Callable[[], KazooClient]]:
    """Clients under a fresh chroot: /brokers/topics there is invisible to Kafka."""
    root = f"/watchtest-{uuid.uuid4().hex[:8]}"
    zk.ensure_path(root + zkformat.BROKER_TOPICS_PATH)
    yield lambda: watch_cluster.kazoo_client(root)


def read_after_arming(client: KazooClient) -> None:
    """A read on the watching client: once it returns, every watch armed before it is set.

    (The contract: arming, then reading on the same client. ZooKeeper orders one
    session's requests, not requests of different sessions.)
    """
    client.get_children("/")


def topic_body(partitions: int) -> bytes:
    return json.dumps({"version": 1, "partitions": {str(p): [0] for p in range(partitions)}}).encode()


def test_topic_watch_survives_the_topic_deleted_and_created_again(chrooted: Callable[[], KazooClient]) -> None:
    client, other = chrooted(), chrooted()
    signals = Signals()
    watcher = GroupWatcher(client, zkformat.GroupPaths("g"), signals)
    path = zkformat.topic_path("x")
    other.create(path, topic_body(1))
    watcher.watch_topics(["x", "not-yet"])
    read_after_arming(client)
    try:
        other.set(path, topic_body(2))
        signals.wait_for("partitions of topic x changed")
        other.delete(path)
        signals.wait_for("topic x deleted")
        other.create(path, topic_body(3))
        signals.wait_for("topic x created")
        other.set(path, topic_body(4))
        signals.wait_for("partitions of topic x changed")
        other.create(zkformat.topic_path("not-yet"), topic_body(1))
        signals.wait_for("topic not-yet created")
    finally:
        watcher.stop()


def test_members_watch_survives_its_node_deleted_and_created_again(chrooted: Callable[[], KazooClient]) -> None:
    client, other = chrooted(), chrooted()
    paths = zkformat.GroupPaths("g")
    other.create(paths.member("g_a"), b"{}", makepath=True)
    signals = Signals()
    watcher = GroupWatcher(client, paths, signals)
    watcher.start()
    read_after_arming(client)
    try:
        other.delete(paths.ids, recursive=True)
        signals.wait_for(f"group node {paths.ids} deleted")
        other.create(paths.member("g_b"), b"{}", makepath=True)
        signals.wait_for("created again")
        other.create(paths.member("g_c"), b"{}")
        signals.wait_for("group members changed (2 registered)")
    finally:
        watcher.stop()


def test_members_watch_signals_a_member_that_registered_again_under_the_same_id(
        chrooted: Callable[[], KazooClient]) -> None:
    """The names are the same after the event, but the membership changed: a peer that read the
    member in between saw no node (simulator seed 416496: it assigned every partition to itself
    and, signalled nothing more, kept them from a member it had never seen). A transaction makes
    the delete and the re-create one event, so the read after it finds the same names."""
    client, other = chrooted(), chrooted()
    paths = zkformat.GroupPaths("g")
    other.create(paths.member("g_a"), b"{}", makepath=True)
    signals = Signals()
    watcher = GroupWatcher(client, paths, signals)
    watcher.start()
    read_after_arming(client)
    try:
        again = other.transaction()
        again.delete(paths.member("g_a"))
        again.create(paths.member("g_a"), b"{}")
        assert all(r is True or isinstance(r, str) for r in again.commit())
        signals.wait_for("group members changed (1 registered)")
    finally:
        watcher.stop()


def test_topic_list_watch_signals_only_matching_topics(chrooted: Callable[[], KazooClient]) -> None:
    client, other = chrooted(), chrooted()
    signals = Signals()
    watcher = GroupWatcher(client, zkformat.GroupPaths("g"), signals, topic_allowed=lambda t: t.startswith("m"))
    watcher.start()
    read_after_arming(client)
    try:
        other.create(zkformat.topic_path("other"), topic_body(1))
        other.create(zkformat.topic_path("match"), topic_body(1))
        seen = signals.wait_for("matching topics changed (new: match)")
        assert not any("other" in r for r in seen)
    finally:
        watcher.stop()


def test_watches_signal_after_a_session_expiry_and_keep_watching(
    watch_cluster: LocalCluster, chrooted: Callable[[], KazooClient]
) -> None:
    """kazoo drops watches with the session: each is armed again, signals once, and still watches."""
    client, other = chrooted(), chrooted()
    paths = zkformat.GroupPaths("g")
    other.create(paths.member("g_a"), b"{}", makepath=True)
    other.create(zkformat.topic_path("x"), topic_body(1))
    signals = Signals()
    watcher = GroupWatcher(client, paths, signals)
    watcher.start()
    watcher.watch_topics(["x"])
    read_after_arming(client)
    try:
        watch_cluster.expire_session(client)
        wait_until(lambda: client.connected, 30, "a new session")
        seen = signals.wait_for("re-armed")
        wait_until(lambda: sum("re-armed" in r for r in seen + signals.reasons) >= 2, 10,
                   "both watches re-armed")
        signals.take()
        other.set(zkformat.topic_path("x"), topic_body(2))
        signals.wait_for("partitions of topic x changed")
        other.create(paths.member("g_b"), b"{}")
        signals.wait_for("group members changed")
    finally:
        watcher.stop()


def test_the_member_list_comes_from_the_members_watch_while_that_watch_stands(
        chrooted: Callable[[], KazooClient]) -> None:
    """Scale: a rebalance takes the member list from the watch that guards it (no read of its own);
    what the watch read is never older than what it would signal."""
    client, other = chrooted(), chrooted()
    paths = zkformat.GroupPaths("g")
    registration = zkformat.encode_registration({"t": 1}, "static", 0)
    other.create(paths.member("g_a"), registration, makepath=True)
    signals = Signals()
    watcher = GroupWatcher(client, paths, signals)
    group = GroupClient(client, "g", "g_me", retry_timeout_s=5.0)
    group.member_list = watcher.member_list
    listings: List[str] = []
    real_get_children = group.client.get_children

    def get_children(path: str, *args: object, **kwargs: object) -> object:
        listings.append(path)
        return real_get_children(path, *args, **kwargs)  # type: ignore[arg-type]

    group.client.get_children = get_children  # type: ignore[method-assign]
    watcher.start()
    read_after_arming(client)
    try:
        wait_until(lambda: watcher.member_list() is not None, 10, "the members' watch to answer")
        assert sorted(group.members()) == ["g_a"] and listings == []
        other.create(paths.member("g_b"), registration)
        signals.wait_for("group members changed (2 registered)")
        assert sorted(group.members()) == ["g_a", "g_b"] and listings == []  # the re-armed watch's read
        assert sorted(group.members(fresh=True)) == ["g_a", "g_b"] and listings == [paths.ids]
        watcher.stop()  # a watch that no longer stands vouches for nothing
        assert watcher.member_list() is None
        assert sorted(group.members()) == ["g_a", "g_b"] and listings == [paths.ids, paths.ids]
    finally:
        watcher.stop()
