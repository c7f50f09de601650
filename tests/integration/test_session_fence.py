"""The session fence against a real ZooKeeper: it holds while the connection is SUSPENDED, and the
session is part of every fenced write, not a check made before it.

Each test makes the fault for real: a :class:`ZooKeeperProxy` between the member's kazoo client
and ZooKeeper cuts only that member's connection (SUSPENDED), and a second client joining the
session and closing it expires it on the server. Finding 2's window (a thread descheduled between
its decision and its send, across kazoo's reconnect) is opened on purpose by holding the thread
right before it builds its multi-operation; everything it sends goes to the real server.

* ``test_the_session_is_known_while_suspended_and_a_commit_retried_across_a_blip_is_written``:
  kazoo's ``client_id`` is ``None`` while SUSPENDED; a commit begun on session S and retried
  while the connection was down used to be reported fenced (``None != S``) and its partition
  treated as lost.
* ``test_a_commit_begun_while_suspended_is_fenced_once_the_session_expired``: a commit begun
  while SUSPENDED used to record no session and skip every session guard; after the expiry its
  one-by-one retry wrote the old incarnation's offset over the new one's.
* ``test_a_commit_decided_before_an_expiry_and_sent_after_it_writes_nothing`` and
  ``test_a_release_decided_before_an_expiry_never_deletes_a_peers_node``: a write decided on S
  and sent on S2 used to pass its version check against a peer's node re-created at version 0.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterator, List

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState
from support.common import unique, wait_until

from harness.cluster.proxy import ZooKeeperProxy, expire_zookeeper_session
from zkconsumer.commits import CommitEntry
from zkconsumer.testing import LocalCluster
from zkconsumer.zookeeper import zkformat
from zkconsumer.zookeeper.group import GroupClient
from zkconsumer.zookeeper.offset_storage import ZooKeeperOffsetStorage

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_S = 6.0
TOPIC = "fenced"


@pytest.fixture(scope="module")
def zk_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(brokers=1, partitions=1) as cluster:
        yield cluster


@pytest.fixture
def proxy(zk_cluster: LocalCluster) -> Iterator[ZooKeeperProxy]:
    p = ZooKeeperProxy("127.0.0.1", zk_cluster.zk_port, name="zk-fence-proxy").start()
    yield p
    assert p.close(timeout=5)


@pytest.fixture
def clients() -> Iterator[List[KazooClient]]:
    made: List[KazooClient] = []
    yield made
    for client in made:
        client.stop()
        client.close()


def start(hosts: str, clients: List[KazooClient]) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=SESSION_TIMEOUT_S)
    client.start(timeout=20)
    clients.append(client)
    return client


class States:
    """A kazoo state listener (it only records and signals)."""

    def __init__(self, client: KazooClient) -> None:
        self.seen: List[str] = []
        self.changed = threading.Condition()
        client.add_listener(self)

    def __call__(self, state: str) -> None:
        with self.changed:
            self.seen.append(state)
            self.changed.notify_all()

    def wait_for(self, state: str, timeout: float = 30.0) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: state in self.seen, timeout), f"never {state}: {self.seen}"


def entry(offset: int, owner: str) -> CommitEntry:
    return CommitEntry(TOPIC, 0, offset, owner, changed=True)


def offset_in_zookeeper(zk: KazooClient, group: str) -> int:
    data, _ = zk.get(zkformat.GroupPaths(group).offset(TOPIC, 0))
    return int(data)


def member(client: KazooClient, group: str, consumer_id: str, **kwargs: Any) -> GroupClient:
    g = GroupClient(client, group, consumer_id, **kwargs)
    g.register(b'{"version":1,"subscription":{"fenced":1},"pattern":"static","timestamp":"1"}')
    return g


def session_of(client: KazooClient) -> tuple:  # type: ignore[type-arg]
    """(id, password) of the session, also while SUSPENDED (kazoo keeps both to reconnect)."""
    return client._session_id, client._session_passwd


def test_the_session_is_known_while_suspended_and_a_commit_retried_across_a_blip_is_written(
        zk_cluster: LocalCluster, proxy: ZooKeeperProxy, clients: List[KazooClient]) -> None:
    group = unique("fence-blip")
    client = start(proxy.address, clients)
    states = States(client)
    g = member(client, group, f"{group}_a", retry_timeout_s=SESSION_TIMEOUT_S * 2)
    session = g.session_id
    assert session is not None and g.claim(TOPIC, 0, f"{group}_a-0") is None
    assert g.commit_offset_if_owner(TOPIC, 0, 5, f"{group}_a-0", session) is True

    proxy.cut("reset")  # a blip: the connection drops, the session lives on the server
    states.wait_for(KazooState.SUSPENDED)
    assert client.client_id is None  # kazoo's public id: None while not connected
    assert g.session_id == session  # the session the member holds, all the same

    outcome: List[bool] = []
    writer = threading.Thread(target=lambda: outcome.append(
        g.commit_offset_if_owner(TOPIC, 0, 7, f"{group}_a-0", session)))
    writer.start()
    try:
        writer.join(1.0)
        assert outcome == []  # waits for the connection to come back, reports nothing fenced meanwhile
    finally:
        proxy.heal()
    writer.join(SESSION_TIMEOUT_S * 3)
    assert not writer.is_alive()
    assert outcome == [True]  # written on the same session once the connection came back: not fenced
    assert offset_in_zookeeper(zk_cluster.kazoo_client(), group) == 7
    assert g.session_id == session and KazooState.LOST not in states.seen


def test_a_commit_begun_while_suspended_is_fenced_once_the_session_expired(
        zk_cluster: LocalCluster, proxy: ZooKeeperProxy, clients: List[KazooClient]) -> None:
    group = unique("fence-suspended")
    observer = zk_cluster.kazoo_client()
    client = start(proxy.address, clients)
    states = States(client)
    g = member(client, group, f"{group}_a", retry_timeout_s=3.0)
    storage = ZooKeeperOffsetStorage(g)
    assert g.claim(TOPIC, 0, f"{group}_a-0") is None
    assert storage.write([entry(5, f"{group}_a-0")]).committed == [(TOPIC, 0)]

    proxy.cut("reset")
    states.wait_for(KazooState.SUSPENDED)
    old = session_of(client)
    outcomes: List[Any] = []
    writer = threading.Thread(target=lambda: outcomes.append(storage.write([entry(7, f"{group}_a-0")])))
    writer.start()  # the old incarnation's commit, begun while the connection is down

    expire_zookeeper_session(zk_cluster.zk_connect, old)  # the server ends the session meanwhile
    proxy.heal()
    states.wait_for(KazooState.LOST)
    assert wait_until(lambda: g.session_id not in (None, old[0]), 20, "a new session")
    # The new incarnation registers, claims the partition again (its owner node is at version 0
    # again) and commits what it read.
    g.register(b'{"version":1,"subscription":{"fenced":1},"pattern":"static","timestamp":"2"}')
    assert g.claim(TOPIC, 0, f"{group}_a-0") is None
    assert g.commit_offset_if_owner(TOPIC, 0, 100, f"{group}_a-0") is True

    writer.join(30)
    assert not writer.is_alive()
    (outcome,) = outcomes
    assert offset_in_zookeeper(observer, group) == 100, "the old incarnation's offset was written"
    assert outcome.committed == [] and outcome.fenced == [(TOPIC, 0)]


def hold_before_multi(g: GroupClient) -> "Held":
    """Hold the next thread that builds a multi-operation on ``g`` until released (it has
    decided what to write, from reads made on its session)."""
    held = Held(g.client.transaction)
    g.client.transaction = held  # type: ignore[method-assign]
    return held


class Held:
    def __init__(self, transaction: Callable[[], Any]) -> None:
        self._transaction = transaction
        self.arrived = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> Any:
        if not self.arrived.is_set():
            self.arrived.set()
            assert self.release.wait(60)
        return self._transaction()


def test_a_commit_decided_before_an_expiry_and_sent_after_it_writes_nothing(
        zk_cluster: LocalCluster, clients: List[KazooClient]) -> None:
    group = unique("fence-split")
    observer = zk_cluster.kazoo_client()
    client = start(zk_cluster.zk_connect, clients)
    states = States(client)
    g = member(client, group, f"{group}_a")
    assert g.claim(TOPIC, 0, f"{group}_a-0") is None
    assert g.commit_offset_if_owner(TOPIC, 0, 5, f"{group}_a-0") is True  # the owner node at version 0
    old = g.session_id

    held = hold_before_multi(g)
    outcome: List[bool] = []
    writer = threading.Thread(target=lambda: outcome.append(
        g.commit_offset_if_owner(TOPIC, 0, 7, f"{group}_a-0", old)))
    writer.start()
    assert held.arrived.wait(20)  # decided: the owner node is ours at version 0, on the old session

    expire_zookeeper_session(zk_cluster.zk_connect, session_of(client))
    states.wait_for(KazooState.LOST)
    assert wait_until(lambda: g.session_id not in (None, old), 20, "a new session")
    peer = member(start(zk_cluster.zk_connect, clients), group, f"{group}_b")
    assert peer.claim(TOPIC, 0, f"{group}_b-0") is None  # the peer's node: version 0 again
    assert peer.commit_offset_if_owner(TOPIC, 0, 100, f"{group}_b-0") is True

    held.release.set()  # the write goes out now, on the new session
    writer.join(30)
    assert not writer.is_alive()
    assert offset_in_zookeeper(observer, group) == 100, "a non-owner's offset was written over the owner's"
    assert outcome == [False]  # fenced


def test_a_release_decided_before_an_expiry_never_deletes_a_peers_node(
        zk_cluster: LocalCluster, clients: List[KazooClient]) -> None:
    group = unique("fence-release")
    observer = zk_cluster.kazoo_client()
    client = start(zk_cluster.zk_connect, clients)
    states = States(client)
    g = member(client, group, f"{group}_a")
    assert g.claim(TOPIC, 0, f"{group}_a-0") is None
    assert g.confirm_held(TOPIC, 0)  # the version is known without a read: release_many goes straight to its multi
    old = g.session_id

    held = hold_before_multi(g)
    releaser = threading.Thread(target=lambda: g.release_many([(TOPIC, 0)]))
    releaser.start()
    assert held.arrived.wait(20)

    expire_zookeeper_session(zk_cluster.zk_connect, session_of(client))
    states.wait_for(KazooState.LOST)
    assert wait_until(lambda: g.session_id not in (None, old), 20, "a new session")
    peer = member(start(zk_cluster.zk_connect, clients), group, f"{group}_b")
    assert peer.claim(TOPIC, 0, f"{group}_b-0") is None

    held.release.set()
    releaser.join(30)
    assert not releaser.is_alive()
    owner = zkformat.GroupPaths(group).owner(TOPIC, 0)
    data, stat = observer.get(owner)
    assert data == f"{group}_b-0".encode() and stat.ephemeralOwner == peer.session_id, \
        "a member deleted the owner node of a peer"


def test_fence_nodes_are_per_session_and_go_with_it(zk_cluster: LocalCluster, clients: List[KazooClient]) -> None:
    """One fence node per session, under ``/consumers/<g>/fences`` (which Kafka's tools do not
    read), owned by that session on the server and deleted with it."""
    group = unique("fence-nodes")
    observer = zk_cluster.kazoo_client()
    client = start(zk_cluster.zk_connect, clients)
    states = States(client)
    g = member(client, group, f"{group}_a")
    old = g.session_id
    fences = zkformat.GroupPaths(group).fences
    (name,) = observer.get_children(fences)
    assert name.startswith(f"{group}_a-")
    assert g.fences.path(old) == f"{fences}/{name}"
    assert observer.exists(f"{fences}/{name}").ephemeralOwner == old

    expire_zookeeper_session(zk_cluster.zk_connect, session_of(client))
    states.wait_for(KazooState.LOST)
    assert wait_until(lambda: g.session_id not in (None, old), 20, "a new session")
    assert observer.exists(f"{fences}/{name}") is None
    g.register(b'{"version":1,"subscription":{"fenced":1},"pattern":"static","timestamp":"2"}')
    (again,) = observer.get_children(fences)
    assert again != name and observer.exists(f"{fences}/{again}").ephemeralOwner == g.session_id
