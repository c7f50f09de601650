"""ZooKeeperProxy in front of a real ZooKeeper: a partition of one client, and its healing.

A kazoo client connects through the proxy, another directly. Cutting the
proxy (a blackhole) for longer than the session timeout makes the *server*
expire the proxied client's session (a third client sees its ephemeral node
vanish) while the direct client is untouched; healing lets the proxied client
reconnect, to a new session. These tests use their own 1-broker cluster: one of
them kills ZooKeeper.
"""

from __future__ import annotations

import threading
from typing import Iterator, List

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState
from support.common import wait_until

from harness.cluster.proxy import ZooKeeperProxy, expire_zookeeper_session
from zkconsumer.testing import LocalCluster

SESSION_TIMEOUT_S = 4.0  # ZooKeeper's minimum with LocalCluster's tickTime


@pytest.fixture(scope="module")
def zk_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(brokers=1, partitions=1) as cluster:
        yield cluster


@pytest.fixture
def proxy(zk_cluster: LocalCluster) -> Iterator[ZooKeeperProxy]:
    p = ZooKeeperProxy("127.0.0.1", zk_cluster.zk_port, name="zk-proxy-test").start()
    yield p
    assert p.close(timeout=5)


class Recorder:
    """A kazoo state listener recording every state change (it only appends)."""

    def __init__(self, client: KazooClient) -> None:
        self.states: List[str] = []
        self._lock = threading.Lock()
        client.add_listener(self)

    def __call__(self, state: str) -> None:
        with self._lock:
            self.states.append(state)

    def saw(self, state: str) -> bool:
        with self._lock:
            return state in self.states


def proxied_client(proxy: ZooKeeperProxy) -> KazooClient:
    client = KazooClient(hosts=proxy.address, timeout=SESSION_TIMEOUT_S)
    client.start(timeout=20)
    return client


def test_a_partition_longer_than_the_session_timeout_expires_only_that_session(
        zk_cluster: LocalCluster, proxy: ZooKeeperProxy) -> None:
    through = proxied_client(proxy)
    direct = zk_cluster.kazoo_client(timeout=SESSION_TIMEOUT_S)
    observer = zk_cluster.kazoo_client()
    try:
        recorder = Recorder(through)
        old_session = through.client_id[0]
        assert wait_until(lambda: proxy.sessions() == [through.client_id], 5, "the proxy to see the session")
        through.create("/proxy-test/partitioned", b"", ephemeral=True, makepath=True)
        direct.create("/proxy-test/direct", b"", ephemeral=True, makepath=True)
        gone = threading.Event()
        observer.DataWatch("/proxy-test/partitioned", lambda data, stat: gone.set() if stat is None else None)

        proxy.cut("blackhole")
        assert gone.wait(SESSION_TIMEOUT_S + 20), "the server never expired the partitioned session"
        assert recorder.saw(KazooState.SUSPENDED)
        assert not recorder.saw(KazooState.LOST)  # it cannot know yet: it hears nothing
        assert direct.state == KazooState.CONNECTED
        assert direct.exists("/proxy-test/direct") is not None  # the other client's session is untouched

        proxy.heal()
        wait_until(lambda: recorder.saw(KazooState.LOST), 30, "the client to learn its session expired")
        wait_until(lambda: through.state == KazooState.CONNECTED, 30, "a new session through the healed proxy")
        assert through.client_id[0] != old_session
        through.create("/proxy-test/partitioned", b"", ephemeral=True)  # the new session works
        assert wait_until(lambda: proxy.sessions() == [through.client_id], 5, "the proxy to see the new session")
    finally:
        through.stop()
        through.close()


def test_a_short_reset_keeps_the_session(zk_cluster: LocalCluster, proxy: ZooKeeperProxy) -> None:
    through = proxied_client(proxy)
    try:
        recorder = Recorder(through)
        session = through.client_id[0]
        proxy.cut("reset")
        wait_until(lambda: recorder.saw(KazooState.SUSPENDED), 10, "the client to notice the reset")
        proxy.heal()
        wait_until(lambda: through.state == KazooState.CONNECTED, 20, "the client to reconnect")
        assert through.client_id[0] == session
        assert not recorder.saw(KazooState.LOST)
    finally:
        through.stop()
        through.close()


def test_the_sniffed_session_can_be_expired_for_real(zk_cluster: LocalCluster, proxy: ZooKeeperProxy) -> None:
    through = proxied_client(proxy)
    try:
        recorder = Recorder(through)
        through.create("/proxy-test/expired", b"", ephemeral=True, makepath=True)
        [session] = wait_until(lambda: proxy.sessions(), 5, "the proxy to see the session")
        assert session == through.client_id
        expire_zookeeper_session(zk_cluster.zk_connect, session)
        wait_until(lambda: recorder.saw(KazooState.LOST), 20, "the client to see its session expire")
        assert zk_cluster.kazoo_client().exists("/proxy-test/expired") is None
        wait_until(lambda: through.state == KazooState.CONNECTED, 20, "a new session")
        assert through.client_id[0] != session[0]
    finally:
        through.stop()
        through.close()


def test_the_proxy_carries_a_session_across_a_zookeeper_restart(zk_cluster: LocalCluster,
                                                                 proxy: ZooKeeperProxy) -> None:
    through = proxied_client(proxy)
    try:
        recorder = Recorder(through)
        session = through.client_id[0]
        zk_cluster.restart_zookeeper(down_for=1.0)
        wait_until(lambda: recorder.saw(KazooState.SUSPENDED), 10, "the client to notice ZooKeeper's death")
        wait_until(lambda: through.state == KazooState.CONNECTED, 30, "the client to reconnect via the proxy")
        assert through.client_id[0] == session and not recorder.saw(KazooState.LOST)
    finally:
        through.stop()
        through.close()
