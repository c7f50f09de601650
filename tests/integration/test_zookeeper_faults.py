"""A connector under real ZooKeeper faults: shutdown, joins, commits and deliveries.

Every test here pauses (SIGSTOP), kills or restarts ZooKeeper, so the module has
its own one-broker cluster (never the shared one). Its ZooKeeper grants
sessions of at most 6 s (``maxSessionTimeout``), which the negotiated-timeout
test relies on. Each test leaves ZooKeeper running.

Issue items: 6 (bounded shutdown), 7 (shutdown during create_message_streams),
10 (ZooKeeper errors never reach the application; deliveries during an outage),
13b (the lease uses the negotiated session timeout), 13c (one live session per
consumer id); and a process that never calls ``shutdown()`` still exits while ZooKeeper is down.
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
from typing import Dict, Iterator, List, Optional, Tuple

import pytest
from kazoo.client import KazooClient
from support import PROGRAMS
from support.common import Cli, Member, Producer, assert_nothing_lost, consumer_props, new_topic, owners, unique, wait_until
from support.offsets import ChildProcess

from zkconsumer import ZookeeperConsumerConnector
from zkconsumer.errors import ConsumerShutdownError, ZkConsumerError
from zkconsumer.testing import LocalCluster
from zkconsumer.zookeeper import lease as leases
from zkconsumer.zookeeper import migration
from zkconsumer.zookeeper.group import GroupClient
from zkconsumer.zookeeper.heartbeat import SessionHeartbeat

MAX_SESSION_MS = 6000


@pytest.fixture(scope="module")
def zk_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(brokers=1, partitions=4, zookeeper_config={"maxSessionTimeout": MAX_SESSION_MS}) as local:
        yield local


@pytest.fixture(autouse=True)
def zookeeper_left_running(zk_cluster: LocalCluster) -> Iterator[None]:
    yield
    if zk_cluster.zookeeper_running():
        zk_cluster.resume_zookeeper()
    else:
        zk_cluster.start_zookeeper()

    def broker_registered() -> bool:  # the broker's (and the harness's) sessions may have expired
        try:
            return zk_cluster.registered_brokers() == zk_cluster.broker_ids
        except Exception:  # noqa: BLE001 - the harness client is opening a new session
            return False

    wait_until(broker_registered, 60, "the broker to be registered again")


#: Threads of the test harness (LocalCluster), not of a connector.
HARNESS_THREADS = {"zkconsumer-spawner"}


def zkconsumer_threads() -> List[str]:
    return sorted(t.name for t in threading.enumerate()
                  if t.name.startswith("zkconsumer-") and t.name not in HARNESS_THREADS and t.is_alive())


def wait_no_zkconsumer_threads(timeout: float = 5.0) -> List[str]:
    deadline = time.monotonic() + timeout
    while zkconsumer_threads() and time.monotonic() < deadline:
        time.sleep(0.1)
    return zkconsumer_threads()


def owners_now(zk: KazooClient, group: str, topic: str) -> Dict[int, str]:
    """The group's owners as the test's own client sees them ({} while that client reconnects after a fault)."""
    try:
        return owners(zk, group, topic)
    except Exception:  # noqa: BLE001 - the test's client may itself be opening a new session
        return {}


def run_in_thread(fn, name: str) -> Tuple[threading.Thread, Dict[str, object]]:
    box: Dict[str, object] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - examined by the test
            box["error"] = exc

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread, box


# ----------------------------------------------------------------------------- item 6


@pytest.mark.parametrize("fault", ["paused", "killed"])
def test_item6_shutdown_returns_within_its_bound_while_zookeeper_is_away(
        zk_cluster: LocalCluster, fault: str, caplog: pytest.LogCaptureFixture) -> None:
    group = unique("g")
    topic = new_topic(zk_cluster, "shut", 2)
    session_s = 4.0
    connector = ZookeeperConsumerConnector(consumer_props(
        zk_cluster, group, **{"zookeeper.session.timeout.ms": int(session_s * 1000), "auto.commit.enable": "true",
                              "auto.commit.interval.ms": 600000, "consumer.timeout.ms": 2000}))
    stream = connector.create_message_streams({topic: 1})[topic][0]
    zk_cluster.produce(topic, [f"m{i}".encode() for i in range(10)])
    got = [m for _, m in zip(range(10), stream)]
    assert len(got) == 10

    if fault == "paused":
        zk_cluster.pause_zookeeper()
    else:
        zk_cluster.kill_zookeeper()
    caplog.set_level(logging.WARNING, logger="zkconsumer")
    # Documented bound: one session timeout to stop threads and commit, at most one more for kazoo to
    # give up a server that does not answer, 5 s to join what that released; plus slack for a busy machine.
    bound = 2 * session_s + 5 + 5
    started = time.monotonic()
    thread, box = run_in_thread(connector.shutdown, "test-shutdown")
    thread.join(bound)
    took = time.monotonic() - started
    try:
        assert not thread.is_alive(), f"shutdown() still running after {bound}s with ZooKeeper {fault}"
    finally:
        if thread.is_alive():  # let the old code finish so the module can go on
            if fault == "paused":
                zk_cluster.resume_zookeeper()
            else:
                zk_cluster.start_zookeeper()
            thread.join(60)
    assert "error" not in box, box.get("error")
    assert wait_no_zkconsumer_threads(1.0) == [], "threads the connector started outlive shutdown()"
    uncommitted = [r.getMessage() for r in caplog.records if "NOT committed" in r.getMessage()]
    assert uncommitted, "no WARNING named the offsets that could not be committed"
    assert f"{topic}-" in uncommitted[0] and "at offset" in uncommitted[0]
    print(f"shutdown with ZooKeeper {fault} took {took:.1f}s")


# ----------------------------------------------------------------------------- item 7


def test_item7_shutdown_during_create_message_streams_ends_the_join(zk_cluster: LocalCluster) -> None:
    group = unique("g")
    topic = new_topic(zk_cluster, "join", 1)
    # Another client holds the only partition's owner node: every claim of the first rebalance conflicts.
    holder = zk_cluster.kazoo_client()
    holder.create(f"/consumers/{group}/owners/{topic}/0", b"someone-else-0", ephemeral=True, makepath=True)
    connector = ZookeeperConsumerConnector(consumer_props(
        zk_cluster, group, **{"auto.commit.enable": "true", "rebalance.max.retries": 50,
                              "rebalance.backoff.ms": 300}))
    try:
        thread, box = run_in_thread(lambda: connector.create_message_streams({topic: 1}), "test-create")
        wait_until(lambda: connector.status is not None and connector.status.failed_attempts >= 1, 20,
                   "the first rebalance to fail a claim")
        connector.shutdown()
        thread.join(10)
        assert not thread.is_alive(), "create_message_streams() goes on after shutdown()"
        assert isinstance(box.get("error"), ConsumerShutdownError), box
        assert wait_no_zkconsumer_threads(2.0) == [], "threads started by the join outlive shutdown()"
        with pytest.raises(ConsumerShutdownError):
            connector.create_message_streams({topic: 1})
    finally:
        connector.shutdown()
        holder.stop()
        holder.close()


def test_item7_shutdown_while_zookeeper_is_paused_during_the_join(zk_cluster: LocalCluster) -> None:
    group = unique("g")
    topic = new_topic(zk_cluster, "join", 2)
    connector = ZookeeperConsumerConnector(consumer_props(
        zk_cluster, group, **{"auto.commit.enable": "true", "zookeeper.session.timeout.ms": 4000}))
    try:
        zk_cluster.pause_zookeeper()
        thread, box = run_in_thread(lambda: connector.create_message_streams({topic: 1}), "test-create")
        time.sleep(1.0)
        connector.shutdown()
        thread.join(15)
        assert not thread.is_alive(), "create_message_streams() goes on after shutdown()"
        assert isinstance(box.get("error"), ConsumerShutdownError), box
        assert wait_no_zkconsumer_threads(2.0) == []
    finally:
        zk_cluster.resume_zookeeper()
        connector.shutdown()


# ----------------------------------------------------------------------------- item 10


class OffsetWatch:
    """Polls the group's offset nodes; records any committed offset that moved backwards."""

    def __init__(self, cluster: LocalCluster, group: str, topic: str, partitions: int) -> None:
        self._client = KazooClient(hosts=cluster.zk_connect, timeout=10,
                                   connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0})
        self._client.start(30)
        self._paths = {p: f"/consumers/{group}/offsets/{topic}/{p}" for p in range(partitions)}
        self.highest: Dict[int, int] = {}
        self.backwards: List[Tuple[int, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="test-offset-watch")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for p, path in self._paths.items():
                try:
                    data, _ = self._client.get_async(path).get(timeout=1.0)
                except Exception:  # noqa: BLE001 - absent, or ZooKeeper away
                    continue
                value = int(data)
                if value < self.highest.get(p, -1):
                    self.backwards.append((p, self.highest[p], value))
                self.highest[p] = max(value, self.highest.get(p, -1))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._client.stop()
        self._client.close()


@pytest.mark.parametrize("fault", ["paused-15s", "killed-restarted-10s"])
def test_item10_members_survive_a_zookeeper_outage_and_lose_nothing(zk_cluster: LocalCluster, fault: str) -> None:
    group = unique("g")
    partitions = 12
    topic = new_topic(zk_cluster, "outage", partitions)
    members: List[Member] = []
    producer: Optional[Producer] = None
    watch = OffsetWatch(zk_cluster, group, topic, partitions)
    zk = zk_cluster.kazoo_client()
    try:
        members = [Member(zk_cluster, group, topic, 6000) for _ in range(3)]
        wait_until(lambda: len(owners(zk, group, topic)) == partitions, 30, "the group to own every partition")
        producer = Producer(zk_cluster, topic)
        wait_until(lambda: all(len(m.consumed) > 0 for m in members), 30, "every member to consume")
        if fault == "paused-15s":
            zk_cluster.pause_zookeeper()
            time.sleep(15)
            zk_cluster.resume_zookeeper()
        else:
            zk_cluster.kill_zookeeper()
            time.sleep(10)
            zk_cluster.start_zookeeper()
        time.sleep(3)  # production goes on after the outage
        produced = producer.stop()
        producer = None

        assert_nothing_lost(members, produced, 60)
        wait_until(lambda: len(owners_now(zk, group, topic)) == partitions, 30, "the group to settle again")
        threads = {t for t in owners_now(zk, group, topic).values()}
        assert {t.rsplit("-", 1)[0] for t in threads} <= {m.connector.consumer_id for m in members}
    finally:
        if producer is not None:
            producer.stop()
        for m in members:
            m.stop()
        watch.stop()
    assert watch.backwards == [], f"committed offsets moved backwards: {watch.backwards}"
    assert all(not m.fatal for m in members), [repr(e) for m in members for e in m.fatal]


def check_deliveries_during_an_outage(cluster: LocalCluster, configured_ms: int, session_s: float) -> None:
    """Pause ZooKeeper: deliveries go on within ``session_s``, are held after it, and resume with nothing lost."""
    group = unique("g")
    topic = new_topic(cluster, "hold", 2)
    member = Member(cluster, group, topic, configured_ms)
    try:
        cluster.produce(topic, [b"before"] * 5)
        wait_until(lambda: len(member.consumed) >= 5, 20, "the first messages")
        cluster.pause_zookeeper()
        paused = time.monotonic()
        cluster.produce(topic, [b"early"] * 5)  # within the session timeout: still delivered
        wait_until(lambda: len(member.consumed) >= 10, session_s - 1.0, "deliveries within the session timeout")
        time.sleep(max(0.0, paused + session_s + 1.0 - time.monotonic()))
        cluster.produce(topic, [b"held"] * 5)  # the session may have expired by now: held back
        time.sleep(2.0)
        assert [v for _, _, v in member.consumed].count(b"held") == 0, (
            f"delivered {time.monotonic() - paused:.1f}s into the outage, past the {session_s}s session")
        cluster.resume_zookeeper()
        wait_until(lambda: [v for _, _, v in member.consumed].count(b"held") >= 5, 30,
                   "the held messages once ZooKeeper is back")
        assert member.fatal == []
    finally:
        cluster.resume_zookeeper()
        member.stop()


def test_item10_deliveries_hold_after_the_session_timeout_and_resume_without_loss(zk_cluster: LocalCluster) -> None:
    """While ZooKeeper is away: queued data is handed out, new data is held once the lease ran out, nothing is lost."""
    check_deliveries_during_an_outage(zk_cluster, 4000, 4.0)


# ----------------------------------------------------------------------------- item 13b


def test_item13b_deliveries_hold_after_the_negotiated_not_the_requested_session_timeout(
        zk_cluster: LocalCluster) -> None:
    # 20 s requested, MAX_SESSION_MS granted: a member frozen for 7 s may have lost its session already.
    check_deliveries_during_an_outage(zk_cluster, 20000, MAX_SESSION_MS / 1000.0)


def test_item13b_the_lease_uses_the_negotiated_session_timeout(zk_cluster: LocalCluster) -> None:
    requested_s = 20.0  # the server grants at most MAX_SESSION_MS
    connector = ZookeeperConsumerConnector(consumer_props(
        zk_cluster, unique("g"), **{"zookeeper.session.timeout.ms": int(requested_s * 1000)}))
    try:
        assert connector.session_timeout_s == MAX_SESSION_MS / 1000.0
    finally:
        connector.shutdown()

    client = KazooClient(hosts=zk_cluster.zk_connect, timeout=requested_s)
    heartbeat = SessionHeartbeat.install(client)
    client.start(30)
    try:
        lease = leases.SessionLease(client, "/", requested_s, heartbeat=heartbeat)
        assert lease.timeout == MAX_SESSION_MS / 1000.0
        assert lease.prove() and lease.valid()
        zk_cluster.pause_zookeeper()  # no proof succeeds from now on
        time.sleep(MAX_SESSION_MS / 1000.0 + 0.5)
        assert not lease.valid(), "the lease outlived the session the server granted"
    finally:
        zk_cluster.resume_zookeeper()
        client.stop()
        client.close()
        heartbeat.stop()


# ----------------------------------------------------------------------------- item 13c


def test_item13c_a_consumer_id_held_by_another_live_session_is_refused(zk_cluster: LocalCluster) -> None:
    group = unique("g")
    topic = new_topic(zk_cluster, "dup", 2)
    props = consumer_props(zk_cluster, group, **{"consumer.id": "fixed", "zookeeper.session.timeout.ms": 4000})
    zk = zk_cluster.kazoo_client()
    first = ZookeeperConsumerConnector(props)
    second = ZookeeperConsumerConnector(props)
    try:
        first.create_message_streams({topic: 1})
        member_path = f"/consumers/{group}/ids/{group}_fixed"
        owner_session = zk.get(member_path)[1].ephemeralOwner
        assert owner_session == first.zk_client.client_id[0]
        with pytest.raises(ZkConsumerError) as raised:
            second.create_message_streams({topic: 1})
        assert type(raised.value).__name__ == "ConsumerIdInUseError"
        assert f"{group}_fixed" in str(raised.value) and f"0x{owner_session:x}" in str(raised.value)
        assert not raised.value.retriable and isinstance(raised.value, ZkConsumerError)
        # The first member was left alone: its registration and its owner nodes are still its own.
        assert zk.get(member_path)[1].ephemeralOwner == owner_session
        assert len(owners(zk, group, topic)) == 2
        assert all(zk.get(f"/consumers/{group}/owners/{topic}/{p}")[1].ephemeralOwner == owner_session
                   for p in range(2))
    finally:
        second.shutdown()
        first.shutdown()


def test_item13c_the_id_is_taken_over_once_the_other_session_ends(zk_cluster: LocalCluster) -> None:
    group = unique("g")
    old = zk_cluster.kazoo_client()
    new = zk_cluster.kazoo_client()
    GroupClient(old, group, f"{group}_fixed").register(b'{"version":1}')
    taker = GroupClient(new, group, f"{group}_fixed", retry_timeout_s=4.0, id_wait_s=15.0)
    thread, box = run_in_thread(lambda: taker.register(b'{"version":1}'), "test-register")
    time.sleep(1.0)
    assert thread.is_alive(), "registered over a live session's node"
    old.stop()  # the other process ends (a crashed one's session expires the same way, later)
    thread.join(15)
    assert not thread.is_alive() and "error" not in box, box
    assert new.get(f"/consumers/{group}/ids/{group}_fixed")[1].ephemeralOwner == new.client_id[0]


def test_item13c_our_own_earlier_session_is_still_replaced_after_expiry(zk_cluster: LocalCluster) -> None:
    group = unique("g")
    topic = new_topic(zk_cluster, "exp", 2)
    props = consumer_props(zk_cluster, group, **{"consumer.id": "fixed", "zookeeper.session.timeout.ms": 4000})
    zk = zk_cluster.kazoo_client()
    with ZookeeperConsumerConnector(props) as connector:
        connector.create_message_streams({topic: 1})
        before = connector.zk_client.client_id[0]
        zk_cluster.expire_session(connector.zk_client)
        path = f"/consumers/{group}/ids/{group}_fixed"

        def rejoined() -> bool:
            stat = zk.exists(path)
            session = connector.zk_client.client_id
            return bool(stat and session and stat.ephemeralOwner == session[0] != before
                        and len(owners(zk, group, topic)) == 2)

        wait_until(rejoined, 30, "the member to re-register and reclaim under its new session")


# ----------------------------------------------------------------------------- exit without shutdown()

#: How long a process may take to exit once its ``main`` returned (a hang is what this catches).
EXIT_BOUND_S = 30.0


class ExitingMember(ChildProcess):
    """``programs/exit_member.py``: a member whose application returns without ``shutdown()`` on ``EXIT``."""

    def __init__(self, props: Dict[str, object], topic: str) -> None:
        super().__init__(PROGRAMS / "exit_member.py", [json.dumps(props), topic], stdin=True)
        self.lines: List[str] = []
        self._start_reading()

    def on_line(self, line: str) -> None:
        self.lines.append(line)

    def said(self, first_word: str) -> bool:
        with self._lock:
            return any(line.split(" ", 1)[0] == first_word for line in self.lines)

    def send(self, line: str) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(line + "\n")
        self._proc.stdin.flush()

    def exit_code(self, timeout: float) -> Optional[int]:
        """The process's exit status, waited for at most ``timeout`` seconds (``None``: still running)."""
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


def test_a_process_that_never_calls_shutdown_exits_while_zookeeper_is_down(
        zk_cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    """An application that just returns (or a test that leaks a member) while ZooKeeper is gone:
    the interpreter still exits. kazoo's atexit handler joins its callback thread without a bound,
    so nothing of ours may block that thread; kazoo's ``DataWatch`` recipe did (its re-read after
    the connection loss waits for a connection that never comes back), and the process hung.

    The member first has its migration-node watch fire (the node is written, naming the membership
    it is on: nothing to do) and applies a live seek (``offsets seek --execute`` completes), then
    ZooKeeper is stopped and its ``main`` returns. The bound is a timeout, not a speed claim.
    """
    group = unique("g")
    topic = new_topic(zk_cluster, "exit", 2)
    for p in range(2):
        zk_cluster.produce(topic, [f"m{p}-{i}".encode() for i in range(5)], partition=p)
    member = ExitingMember(consumer_props(zk_cluster, group, **{"zookeeper.session.timeout.ms": 4000,
                                                                  "auto.commit.enable": "true",
                                                                  "auto.commit.interval.ms": 500}), topic)
    try:
        wait_until(lambda: member.said("READY"), 60, "the member to join")
        zk = zk_cluster.kazoo_client()
        try:
            migration.write_intent(zk, group, "zookeeper")
            wait_until(lambda: len(owners(zk, group, topic)) == 2, 30, "the member to own both partitions")
        finally:
            zk.stop()
            zk.close()
        code, out, err = Cli(zk_cluster, capsys)("offsets", "seek", "--group", group, "--topic", topic,
                                                 "--to", "earliest", "--execute", "--timeout-s", "60")
        assert code == 0 and "Seek done" in out, (out, err)

        zk_cluster.stop_zookeeper()
        member.send("EXIT")
        wait_until(lambda: member.said("RETURNING"), 90, "the member's main to return")
        assert member.said("DISCONNECTED"), member.lines
        code = member.exit_code(EXIT_BOUND_S)
        assert code is not None, f"the process did not exit within {EXIT_BOUND_S}s of its main returning"
        assert code == 0, member.lines
    finally:
        member.kill()
