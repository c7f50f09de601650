"""Heartbeats against the real ZooKeeper: how often an idle member talks, and what survives a stall.

``zookeeper.heartbeat=quiet`` (the default) pings after 0.7 of the negotiated session timeout
from a native thread; ``kafka`` is kazoo's own ping every third of it, as Kafka's client
does. Packets are counted by the server itself (``cons``: packets received per session).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState
from support import consumer_props, owners, unique, wait_until

from benchmarks.rebalance.observe import read_counters
from zkconsumer import ZookeeperConsumerConnector
from zkconsumer.testing import LocalCluster
from zkconsumer.zookeeper.heartbeat import QUIET_AVAILABLE, SessionHeartbeat

pytestmark = pytest.mark.skipif(not QUIET_AVAILABLE, reason="the _heartbeat C extension is not built")

SESSION_MS = 4000


def received_by_session(cluster: LocalCluster) -> Dict[int, int]:
    """Packets the server received per session so far (``cons``; a connection's count)."""
    return read_counters(cluster.zk_port).sessions


def props(cluster, mode: str, session_ms: int = SESSION_MS) -> Dict[str, object]:
    return consumer_props(cluster, unique(f"hb-{mode}"), **{"zookeeper.session.timeout.ms": session_ms,
                                                            "zookeeper.heartbeat": mode})


def test_an_idle_quiet_member_sends_at_most_half_the_packets_of_kafkas_cadence(cluster, make_topic) -> None:
    """Two idle members side by side, counted by the server: the quiet one only pings, at 0.7-0.73 T.

    T = 6 s, 24 s: quiet pings 4.2-4.4 s apart, at most 6 in the window; kafka's cadence
    (kazoo: T/3 less 0.01-0.4 s, 1.6-2.0 s apart) at least 12.
    """
    topic = make_topic(partitions=2)
    window, session_ms = 24.0, 6000
    with ZookeeperConsumerConnector(props(cluster, "quiet", session_ms)) as quiet, \
            ZookeeperConsumerConnector(props(cluster, "kafka", session_ms)) as kafka:
        quiet.create_message_streams({topic: 1})
        kafka.create_message_streams({topic: 1})
        sessions = {"quiet": quiet.zk_client.client_id[0], "kafka": kafka.zk_client.client_id[0]}
        time.sleep(1.0)  # the joins' requests are answered
        before = received_by_session(cluster)
        time.sleep(window)
        after = received_by_session(cluster)
        assert {quiet.zk_client.client_id[0], kafka.zk_client.client_id[0]} == set(sessions.values())
    sent = {mode: after[sid] - before[sid] for mode, sid in sessions.items()}
    t = session_ms / 1000.0
    assert window / (t * (0.7 + 1 / 30)) - 1 <= sent["quiet"] <= window / (t * 0.7) + 1, sent
    assert sent["kafka"] >= window / (t / 3) - 1, sent
    assert sent["quiet"] <= sent["kafka"] / 2, sent


def stall_process(cluster, topic: str, configs: List[Dict[str, object]]) -> subprocess.Popen:
    script = Path(__file__).with_name("gil_stall_process.py")
    return subprocess.Popen([sys.executable, str(script), json.dumps(configs), topic], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


@pytest.fixture
def stalled_members(cluster, make_topic) -> Iterator[tuple]:
    topic = make_topic(partitions=2)
    configs = [props(cluster, "quiet"), props(cluster, "kafka")]
    process = stall_process(cluster, topic, configs)
    try:
        ready = process.stdout.readline().split()
        assert ready[:1] == ["READY"], ready
        members = [(configs[i]["group.id"], ready[1 + 2 * i], int(ready[2 + 2 * i])) for i in range(2)]
        yield process, topic, members
    finally:
        if process.poll() is None:
            process.stdin.write("QUIT\n")
            process.stdin.flush()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_a_gil_stall_twice_the_session_timeout_keeps_a_quiet_members_session_not_kazoos(stalled_members,
                                                                                       cluster) -> None:
    """A process whose Python threads are all held up (one long C call holds the GIL) for 2 T.

    kazoo must win the GIL to ping, so under ``kafka`` the server expires the session and the
    member rejoins on a new one; the quiet heartbeat's native thread pings on time, so that
    member keeps its session, its registration and its owner nodes.
    """
    process, topic, members = stalled_members
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(30)
    try:
        def ephemeral_owners(group: str, consumer_id: str) -> set:
            paths = [f"/consumers/{group}/ids/{consumer_id}"]
            paths += [f"/consumers/{group}/owners/{topic}/{p}" for p in owners(zk, group, topic)]
            stats = [zk.exists(path) for path in paths]
            return {s.ephemeralOwner if s is not None else None for s in stats}

        for group, consumer_id, session in members:
            wait_until(lambda g=group: len(owners(zk, g, topic)) == 2, 30, f"{group} to own its partitions")
            assert ephemeral_owners(group, consumer_id) == {session}
        process.stdin.write(f"STALL {2 * SESSION_MS / 1000.0}\n")
        process.stdin.flush()
        stalled = process.stdout.readline().split()
        assert stalled[:1] == ["STALLED"] and float(stalled[1]) >= 1.5 * SESSION_MS / 1000.0, stalled
        (quiet_group, quiet_id, quiet_session), (kafka_group, kafka_id, kafka_session) = members

        def kafka_rejoined() -> bool:
            found = ephemeral_owners(kafka_group, kafka_id)
            return len(found) == 1 and None not in found and found != {kafka_session}

        wait_until(kafka_rejoined, 30, "the kazoo-pinged member to rejoin on a new session (its own expired)")
        assert ephemeral_owners(quiet_group, quiet_id) == {quiet_session}, "the quiet member lost its session"
        assert len(owners(zk, quiet_group, topic)) == 2
    finally:
        zk.stop()
        zk.close()


# ----------------------------------------------------------------------------- a hung server

@pytest.fixture(scope="module")
def lone_zookeeper() -> Iterator[LocalCluster]:
    """A cluster of its own (one broker): these tests SIGSTOP its ZooKeeper."""
    with LocalCluster(brokers=1, partitions=2) as local:
        yield local


@pytest.fixture
def quiet_client(lone_zookeeper: LocalCluster) -> Iterator[Tuple[KazooClient, List[str]]]:
    """A raw kazoo client with the quiet heartbeat, and the states it went through."""
    client = KazooClient(hosts=lone_zookeeper.zk_connect, timeout=SESSION_MS / 1000.0)
    heartbeat = SessionHeartbeat.install(client, "quiet")
    states: List[str] = []
    client.add_listener(states.append)
    client.start(30)
    try:
        yield client, states
    finally:
        if lone_zookeeper.zookeeper_running():
            lone_zookeeper.resume_zookeeper()
        client.stop()
        client.close()
        heartbeat.stop()


def test_requests_into_a_hung_server_get_the_connection_dropped_however_often_they_come(
        lone_zookeeper: LocalCluster, quiet_client) -> None:
    """A request that gets no byte back within T/6 is suspect, even while more requests keep the
    connection from ever being idle for a ping's interval (a lapsed lease reads every T/3)."""
    client, states = quiet_client
    t = SESSION_MS / 1000.0
    lone_zookeeper.pause_zookeeper()
    paused = time.monotonic()
    while time.monotonic() - paused < 2 * t and KazooState.SUSPENDED not in states:
        client.exists_async("/")  # queued; each is a write to the hung server
        time.sleep(t / 4)
    noticed = time.monotonic() - paused
    assert KazooState.SUSPENDED in states, "the client never noticed the hung server"
    assert noticed < t / 6 + t / 4 + 1.0, f"noticed after {noticed:.1f}s"


def test_closing_against_a_hung_server_ends_within_the_answer_timeout(lone_zookeeper: LocalCluster,
                                                                     quiet_client) -> None:
    """kazoo's stop() waits for the server's answer to Close (it joins its thread without a timeout):
    the unanswered Close must be noticed like any other write."""
    client, _ = quiet_client
    lone_zookeeper.pause_zookeeper()
    thread = threading.Thread(target=client.stop, name="test-stop")
    started = time.monotonic()
    thread.start()
    thread.join(SESSION_MS / 1000.0 + 5)
    took = time.monotonic() - started
    if thread.is_alive():  # let it finish so the module can go on
        lone_zookeeper.resume_zookeeper()
        thread.join(60)
    assert took < SESSION_MS / 1000.0 + 5, f"stop() took {took:.1f}s against a hung server"
