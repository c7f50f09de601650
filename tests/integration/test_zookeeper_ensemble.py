"""Members against a 3-node ZooKeeper ensemble, on ZooKeeper 3.4.6 (Kafka's) and 3.8 (Debian's).

Real deployments run ensembles, and legacy clusters run both server versions: a member
must ride out the loss of the node it is connected to (kazoo moves to another node and
keeps its session) and of a majority (the application sees no exception). The 3.8 runs
skip, saying why, when Debian's ``zookeeper`` package is not installed.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Dict, Iterator, List

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from support.common import Drainer, by_value, consumer_props, members, offset_checker, owners, produced_values, unique, wait_until

from harness.cluster import ProjectCluster
from zkconsumer import ConsumerTimeoutError, MessageAndMetadata, ZookeeperConsumerConnector
from zkconsumer.testing import LocalClusterError, MissingDependencyError
from zkconsumer.testing.core import zookeeper_mode

VERSIONS = {"kafka": "3.4.6", "debian": "3.8"}


@pytest.fixture(scope="module", params=list(VERSIONS), ids=[f"zk{v}" for v in VERSIONS.values()])
def ensemble(request: pytest.FixtureRequest) -> Iterator[ProjectCluster]:
    """One broker on a 3-node ensemble of the parametrized ZooKeeper server."""
    cluster = ProjectCluster(brokers=1, partitions=4, zookeeper_nodes=3, zookeeper=request.param)
    try:
        cluster.start()
    except MissingDependencyError as error:
        pytest.skip(f"ZooKeeper {VERSIONS[request.param]} unavailable: {error}")
    with cluster:
        assert cluster.zookeeper_version.startswith(VERSIONS[request.param])
        yield cluster


@pytest.fixture
def zk_cluster(ensemble: ProjectCluster) -> Iterator[ProjectCluster]:
    """The module's ensemble, with every node running again after the test, and its broker registered."""
    yield ensemble
    for node in ensemble.zookeeper_nodes:
        if ensemble.zookeeper_running(node):
            ensemble.resume_zookeeper(node)
    if not ensemble.zookeeper_running():
        ensemble.start_zookeeper()
    restore_brokers(ensemble)


def restore_brokers(cluster: ProjectCluster, wait_s: float = 30.0) -> None:
    """Start again any broker whose JVM is gone, or that is not registered ``wait_s`` after a test: a
    fault of a ZooKeeper node can expire the broker's own session too, and Kafka 0.9's broker has been
    seen (in CI) never to register again, which failed every later test of the module at its first topic."""
    deadline = time.monotonic() + wait_s
    missing = {b for b in cluster.broker_ids if cluster.is_running(b)}
    while missing and time.monotonic() < deadline:
        try:
            missing -= set(cluster.registered_brokers())
        except KazooException:
            pass
        if missing:
            time.sleep(0.5)
    missing |= {b for b in cluster.broker_ids if not cluster.is_running(b)}
    for broker_id in sorted(missing):
        print(f"\nbroker {broker_id} not registered {wait_s:.0f} s after the test "
              f"(JVM running: {cluster.is_running(broker_id)}): starting it again")
        if cluster.is_running(broker_id):
            cluster.kill_broker(broker_id)
        cluster.start_broker(broker_id)


def rejoin(cluster: ProjectCluster, node: int) -> None:
    """SIGCONT a paused ``node`` and return once the ensemble serves again and the cluster's own
    client answers. A node resumed after its peers gave up on it finds its quorum connections
    closed, leaves the quorum (dropping its clients, possibly the cluster's own) within a tick or
    two, and rejoins: without this wait the next test's first request may meet that drop."""
    cluster.resume_zookeeper(node)
    time.sleep(2.0)

    def serving() -> bool:
        try:
            cluster.registered_brokers()  # a request of the cluster's own client
        except KazooException:
            return False
        return all(zookeeper_mode(cluster.zookeeper_port(each)) for each in cluster.zookeeper_nodes)

    wait_until(serving, 60, f"node {node} to rejoin the ensemble and the cluster's client to answer")


def wait_to_move_off(cluster: ProjectCluster, client: KazooClient, node: int, fault: str) -> None:
    """Wait (30 s at most) until ``client`` is connected to a node other than ``node``."""
    def moved() -> bool:
        try:
            return client.connected and cluster.zookeeper_node_of(client) != node
        except LocalClusterError:
            return False

    wait_until(moved, 30, f"the member's client to move off node {node} ({fault})")


def assert_held_by(zk: KazooClient, session: int, group: str, consumer_id: str, topic: str, owned: Dict[int, str]) -> None:
    """The member's registration and its owner nodes of ``owned`` are ephemerals of ``session``."""
    paths = [f"/consumers/{group}/ids/{consumer_id}"] + [f"/consumers/{group}/owners/{topic}/{p}" for p in owned]
    assert {zk.retry(zk.exists, path).ephemeralOwner for path in paths} == {session}


def committed(zk: KazooClient, group: str, topic: str) -> Dict[int, int]:
    """The group's committed offsets of ``topic``, as the leader has them: this client may be on
    another server than the member that committed, and a follower applies a write a moment after
    the writer's own server answered it (ZooKeeper orders each client's view, not two clients'):
    ``sync`` first."""
    base = f"/consumers/{group}/offsets/{topic}"
    zk.sync(base)
    return {int(p): int(zk.get(f"{base}/{p}")[0]) for p in zk.get_children(base)} if zk.exists(base) else {}


def log_ends(placed: List[tuple]) -> Dict[int, int]:
    """Log end per partition that received messages. Tests comparing these with committed offsets
    produce keyed messages (``keys=values``), which kafka-python places by hash over every
    partition: without keys it picks among the partitions whose leader its metadata knows at that
    moment, which once left a partition empty (CI), and the member's commit of position 0 there is
    not in this map."""
    ends: Dict[int, int] = {}
    for partition, offset in placed:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    return ends


@pytest.mark.parametrize("ensemble", ["kafka"], indirect=True, ids=["zk3.4.6"])
def test_ensemble_controls_find_leader_node_of_a_client_and_controller(zk_cluster: ProjectCluster) -> None:
    cluster = zk_cluster
    leader = cluster.zookeeper_leader()
    assert leader in cluster.zookeeper_nodes
    client = cluster.kazoo_client()
    assert cluster.zookeeper_node_of(client) in cluster.zookeeper_nodes
    cluster.kill_zookeeper(leader)
    assert not cluster.zookeeper_running(leader) and not cluster.zookeeper_running()
    wait_until(lambda: cluster.zookeeper_leader() not in (-1, leader), 30, "the other two nodes to elect a leader")
    cluster.start_zookeeper(leader)
    assert cluster.zookeeper_running() and cluster.controller() == 0
    assert cluster.kill_controller() == 0 and not cluster.is_running(0)
    cluster.start_broker(0)
    wait_until(lambda: cluster.controller() == 0, 30, "broker 0 to be the controller again")


def test_consume_commit_and_offset_checker_agree_on_the_ensemble(zk_cluster: ProjectCluster) -> None:
    cluster, topic, group = zk_cluster, unique("basic"), unique("g")
    cluster.create_topic(topic, partitions=4)
    values = produced_values(40)
    cluster.produce(topic, values)
    with ZookeeperConsumerConnector(consumer_props(cluster, group)) as connector:
        drainer = Drainer(connector.create_message_streams({topic: 2})[topic])
        got = drainer.wait_for(40)
        drainer.stop()
        connector.commit_offsets()
    assert sorted(by_value(got)) == sorted(values)
    rows = offset_checker(cluster, group, topic)
    assert len(rows) == 4 and all(lag == 0 for _, _, lag in rows.values()), rows


def test_session_expiry_rejoins_and_loses_nothing_on_the_ensemble(zk_cluster: ProjectCluster) -> None:
    cluster, topic, group = zk_cluster, unique("expiry"), unique("g")
    cluster.create_topic(topic, partitions=4)
    first, second = produced_values(40, "a"), produced_values(40, "b")
    cluster.produce(topic, first)
    zk = cluster.kazoo_client()
    with ZookeeperConsumerConnector(consumer_props(cluster, group)) as connector:
        drainer = Drainer(connector.create_message_streams({topic: 1})[topic])
        drainer.wait_for(40)
        connector.commit_offsets()
        old_session = connector.zk_client.client_id[0]
        cluster.expire_session(connector.zk_client)

        def rejoined() -> bool:
            stat = zk.exists(f"/consumers/{group}/ids/{connector.consumer_id}")
            return bool(stat) and stat.ephemeralOwner != old_session and len(owners(zk, group, topic)) == 4

        wait_until(rejoined, 60, "the member to re-register under a new session and own all partitions")
        cluster.produce(topic, second)
        got = drainer.wait_for(80)
        drainer.stop()
    assert sorted(by_value(got)) == sorted(first + second)  # the commit before expiry was honoured


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_killing_the_members_zookeeper_node_keeps_session_ownership_and_offsets(zk_cluster: ProjectCluster,
                                                                                fault: str,
                                                                                request: pytest.FixtureRequest) -> None:
    """``kill``: the node's connections are reset, the member moves at once. ``pause`` (SIGSTOP): the
    node hangs with its connections open; the member must notice that nothing came for 2T/3 while a
    write of its own is outstanding, and move before its session expires (T, to T + tickTime, after
    the node last heard from it). The move came near T, and the session survived it or not by the
    leader's expiry bucket, while the native heartbeat thread gave the last write half the window again."""
    cluster, topic, group = zk_cluster, unique("failover"), unique("g")
    cluster.create_topic(topic, partitions=4)
    first, second = produced_values(40, "a"), produced_values(40, "b")
    placed = cluster.produce(topic, first, keys=first)
    zk = cluster.kazoo_client()
    with ZookeeperConsumerConnector(consumer_props(cluster, group)) as connector:
        drainer = Drainer(connector.create_message_streams({topic: 2})[topic])
        drainer.wait_for(40)
        connector.commit_offsets()
        client = connector.zk_client
        session, owned = client.client_id[0], owners(zk, group, topic)
        rebalances = connector.status.rebalances
        assert len(owned) == 4
        node = cluster.zookeeper_node_of(client)
        role = "leader" if cluster.zookeeper_leader() == node else "follower"
        logging.getLogger(__name__).info("fault: node %d (%s) %sd, the member's session 0x%x", node, role, fault, session)
        faulted = time.monotonic()
        if fault == "kill":
            cluster.kill_zookeeper(node)
        else:
            cluster.pause_zookeeper(node)
            request.addfinalizer(lambda: rejoin(cluster, node))
        wait_to_move_off(cluster, client, node, fault)
        assert client.client_id[0] == session, (
            f"the session must survive the move (it took < its timeout): node {node} ({role}) {fault}d, "
            f"the member on node {cluster.zookeeper_node_of(client)} {time.monotonic() - faulted:.2f}s later")
        drops = connector.metrics_snapshot()["zookeeper_unanswered_drops"]
        assert drops >= 1 if fault == "pause" else drops == 0, drops  # a reset connection is not unanswered
        placed += cluster.produce(topic, second, keys=second)
        got = drainer.wait_for(80)
        time.sleep(0.5)  # room for a duplicate to show up
        connector.commit_offsets()
        assert connector.status.rebalances == rebalances, "moving to another node must not rebalance"
        # this test's own client may have been on that node too: its reads retry while it moves
        assert zk.retry(owners, zk, group, topic) == owned
        assert_held_by(zk, session, group, connector.consumer_id, topic, owned)
        assert zk.retry(committed, zk, group, topic) == log_ends(placed)
        got = drainer.stop()
    assert len(got) == 80 and sorted(by_value(got)) == sorted(first + second)


@pytest.mark.parametrize("ensemble", ["kafka"], indirect=True, ids=["zk3.4.6"])
def test_a_member_that_leaves_a_hung_node_tries_every_other_node_before_it(zk_cluster: ProjectCluster,
                                                                          request: pytest.FixtureRequest) -> None:
    """kazoo tries servers in rounds, each a fresh shuffle of the connect string. A member that
    leaves the last server of its round can draw that server first in the next one (one time in
    three here); if it hangs, the handshake there times out after a third of the session timeout,
    on top of the 0.9 of it the hang took to notice, and the session is lost. The worst draw, made
    certain: the member connects through a connect string naming one follower alone (the last, and
    only, server of its round), is then given the whole ensemble with that follower first and no
    shuffle (kazoo's ``set_hosts``), and the follower is SIGSTOPped. The member must go to another
    node first and keep its session, registration and owner nodes."""
    cluster, topic, group = zk_cluster, unique("hungfirst"), unique("g")
    cluster.create_topic(topic, partitions=4)
    first, second = produced_values(40, "a"), produced_values(40, "b")
    cluster.produce(topic, first)
    zk = cluster.kazoo_client()
    leader = cluster.zookeeper_leader()
    node = next(n for n in cluster.zookeeper_nodes if n != leader)
    address = {n: f"127.0.0.1:{cluster.zookeeper_port(n)}" for n in cluster.zookeeper_nodes}
    with ZookeeperConsumerConnector(consumer_props(cluster, group, zookeeper_connect=address[node])) as connector:
        drainer = Drainer(connector.create_message_streams({topic: 2})[topic])
        drainer.wait_for(40)
        client = connector.zk_client
        session, owned, rebalances = client.client_id[0], owners(zk, group, topic), connector.status.rebalances
        assert cluster.zookeeper_node_of(client) == node and len(owned) == 4
        client.set_hosts(",".join([address[node]] + [address[n] for n in cluster.zookeeper_nodes if n != node]),
                         randomize_hosts=False)
        cluster.pause_zookeeper(node)
        request.addfinalizer(lambda: rejoin(cluster, node))
        wait_to_move_off(cluster, client, node, "hung, tried last")
        assert client.client_id[0] == session, "the session must survive: the hung node must not be tried first"
        assert connector.metrics_snapshot()["zookeeper_unanswered_drops"] >= 1
        cluster.produce(topic, second)
        drainer.wait_for(80)
        assert connector.status.rebalances == rebalances, "moving to another node must not rebalance"
        assert_held_by(zk, session, group, connector.consumer_id, topic, owned)
        got = drainer.stop()
    assert sorted(by_value(got)) == sorted(first + second)


@pytest.mark.parametrize("ensemble", ["kafka"], indirect=True, ids=["zk3.4.6"])
def test_majority_lost_for_15s_application_sees_no_exception_and_loses_nothing(zk_cluster: ProjectCluster) -> None:
    cluster, topic, group = zk_cluster, unique("majority"), unique("g")
    cluster.create_topic(topic, partitions=4)
    before, during, after = produced_values(32, "a"), produced_values(30, "b"), produced_values(30, "c")
    placed = cluster.produce(topic, before, keys=before)
    received: List[MessageAndMetadata] = []
    errors: List[BaseException] = []
    commit_now, stop = threading.Event(), threading.Event()
    commit_times: List[float] = []
    with ZookeeperConsumerConnector(consumer_props(cluster, group)) as connector:
        stream = connector.create_message_streams({topic: 1})[topic][0]

        def commit() -> None:
            commit_times.append(time.monotonic())
            connector.commit_offsets()

        def application() -> None:
            """Commits every 5 messages and when asked (a timer, a signal); any exception is fatal to it."""
            try:
                while not stop.is_set():
                    try:
                        for message in stream:
                            received.append(message)
                            if len(received) % 5 == 0:
                                commit()
                            if stop.is_set():
                                return
                        return
                    except ConsumerTimeoutError:  # consumer.timeout.ms elapsed: idle, not a failure
                        if commit_now.is_set():
                            commit_now.clear()
                            commit()
            except Exception as error:  # the application gives up
                errors.append(error)

        app = threading.Thread(target=application, name="application", daemon=True)
        app.start()
        wait_until(lambda: errors or len(received) >= 32, 60, "the first 32 messages (the last 2 not committed)")
        node = cluster.zookeeper_node_of(connector.zk_client)
        lost = [node, next(n for n in cluster.zookeeper_nodes if n != node)]
        outage_start = time.monotonic()
        for each in lost:
            cluster.kill_zookeeper(each)
        commit_now.set()  # a commit of the 2 uncommitted offsets while ZooKeeper has no quorum
        placed += cluster.produce(topic, during, keys=during)  # the broker serves without ZooKeeper
        time.sleep(max(0.0, 15.0 - (time.monotonic() - outage_start)))
        restored = time.monotonic()
        cluster.start_zookeeper()
        placed += cluster.produce(topic, after, keys=after)
        zk = cluster.kazoo_client()  # the test's own view, opened after the outage
        wait_until(lambda: errors or len(received) >= 92, 90, "all 92 messages after the outage")

        def settled() -> bool:
            return (members(zk, group) == [connector.consumer_id] and len(owners(zk, group, topic)) == 4
                    and committed(zk, group, topic) == log_ends(placed))

        commit_now.set()
        wait_until(lambda: errors or settled(), 60, "the group to settle with every offset committed")
        stop.set()
        app.join(10)
        assert not app.is_alive()
    assert errors == []
    assert any(outage_start < t < restored for t in commit_times), "a commit was tried without a quorum"
    assert set(by_value(received)) == set(before + during + after)
