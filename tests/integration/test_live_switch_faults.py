"""A live switch (``zkconsumer groups migrate --to kafka``) interrupted by a real fault completes, nothing lost.

Three members (Kafka offsets, ZooKeeper membership) consume eight partitions under a steady
producer. The fault strikes as the first member deregisters from ZooKeeper (the tests poll
``/consumers/<g>/ids`` once the migration node exists): the switch is then half done, some
members gone from ZooKeeper and waiting at the barrier, some still registered. Faults: a member
SIGKILLed, the command SIGKILLed right after it wrote the node, ZooKeeper stopped and started
again, the only broker (so the group's coordinator) killed and started again. Each test then
waits for the group to settle on the coordinator and runs the live-switch referee
(:func:`support.switch.check_deliveries`): every acknowledged message delivered, and per
partition offsets only go up in time order, except where a member takes a partition over from
one that was killed or whose final commit could not reach the brokers (at-least-once: it starts
again from the last commit), and never two members alternating on one partition.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import pytest
from kazoo.exceptions import NoNodeError
from support.common import Producer, consumer_props, new_topic, unique, wait_until
from support.switch import Recorder, RecorderProcess, check_deliveries, migrate, referee, settled

from zkconsumer.zookeeper import migration

pytestmark = pytest.mark.integration

PARTITIONS = 8
MEMBERS = 3


def switch_props(cluster, group: str) -> Dict[str, object]:
    return consumer_props(cluster, group, offsets_storage="kafka", dual_commit_enabled="false",
                          auto_commit_enable="true", auto_commit_interval_ms=1000, session_timeout_ms=6000,
                          heartbeat_interval_ms=500, rebalance_max_retries=10)


def registered(zk, group: str) -> List[str]:
    path = f"/consumers/{group}/ids"
    return sorted(zk.get_children(path)) if zk.exists(path) else []


def owners_of(zk, group: str, topic: str, consumer_id: str) -> int:
    """How many owner nodes name one of ``consumer_id``'s streams."""
    path = f"/consumers/{group}/owners/{topic}"
    count = 0
    for name in (zk.get_children(path) if zk.exists(path) else []):
        try:
            data, _ = zk.get(f"{path}/{name}")
        except NoNodeError:  # released meanwhile
            continue
        count += data.decode().startswith(consumer_id + "-")
    return count


def on_coordinator(zk, group: str, count: int) -> bool:
    """:func:`support.switch.settled` on ``kafka``, False while ZooKeeper or the coordinator cannot tell."""
    try:
        return settled(zk, group, "kafka", count)
    except Exception:  # noqa: BLE001 - reconnecting after the fault: not settled yet
        return False


def first_deregistration(zk, group: str, before: Sequence[str], timeout: float = 60.0,
                         at_node: bool = False) -> List[str]:
    """Once the migration node exists (``at_node``: at once), wait for the first member of ``before``
    to leave ``/ids``; returns who is still registered then (polled every 2 ms: the fault strikes
    mid-switch)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if migration.read_intent(zk, group) is not None:
            now = registered(zk, group)
            if at_node or len(now) < len(before):
                return now
        time.sleep(0.002)
    raise AssertionError("no member deregistered after the migration node was written")


def started_group(cluster, zk, group: str, topic: str, processes: bool) -> List:
    members: List = []
    props = switch_props(cluster, group)
    for i in range(MEMBERS):
        members.append(RecorderProcess(f"m{i}", props, topic) if processes else Recorder(f"m{i}", props, topic))
    for m in members:
        assert (m.ready if processes else m.joined).wait(90), f"{m.name} did not join"
    wait_until(lambda: len(registered(zk, group)) == MEMBERS and all(m.delivered for m in members), 90,
               "every member registered and delivering")
    return members


def migrate_in_background(cluster, group: str, timeout_s: float) -> Tuple[threading.Thread, Dict[str, object]]:
    result: Dict[str, object] = {}
    runner = threading.Thread(target=lambda: result.update(out=migrate(cluster, group, "kafka", "--execute",
                                                                       "--timeout-s", str(timeout_s))), daemon=True)
    runner.start()
    return runner, result


def consumer_id(member) -> str:
    return member.consumer_id if isinstance(member, RecorderProcess) else member.connector.consumer_id


def test_a_member_killed_mid_switch_leaves_the_others_to_complete_it(cluster, zk) -> None:
    """SIGKILL a member still registered as the first one deregisters: its registration (and owner
    nodes, if it still held them) stay until its session expires; the barrier holds the others
    until then; they complete the switch and take its partitions over from its last commit. The
    command sees the switch complete (exit 0): it does not wait for the killed member, whose
    session has ended, and names it.

    The victim is armed to block before it releases anything (``RecorderProcess.arm_hold``), so it
    is certain to be registered when it is killed: left to race, it deregistered first in one CI
    run, and the switch was over before the kill."""
    group = unique("g-kill")
    victims: List[str] = []

    def kill(members: List[RecorderProcess], left: List[str], topic: str) -> str:
        victim = members[0]
        assert victim.consumer_id in left, f"the held member {victim.consumer_id} deregistered: {left}"
        victim.kill()
        held = owners_of(zk, group, topic, victim.consumer_id or "?")
        assert victim.consumer_id in registered(zk, group), "the killed member's registration went with it"
        assert not settled(zk, group, "kafka", MEMBERS - 1), "the switch was over before the kill"
        print(f"killed {victim.name} ({victim.consumer_id}): registered then={victim.consumer_id in left}, "
              f"registered at kill: {left}, owner nodes of its session left: {held}")
        victims.append(victim.consumer_id or "?")
        return victim.name

    counts = fault_mid_switch(cluster, zk, group, kill, processes=True, command_timeout_s=60, hold_first=True)
    says = str(counts["says"])
    assert counts["command"] == 0, f"the command did not see the switch complete: {says}"
    assert f"{victims[0]}: its ZooKeeper session ended" in says, says
    assert f"group {group} is on kafka membership: {MEMBERS - 1} member(s)" in says, says


def test_the_command_killed_right_after_writing_the_node_changes_nothing(cluster, zk, make_topic) -> None:
    """The command only writes the node and watches: SIGKILLed as soon as it says it wrote it, the
    members complete the switch by themselves."""
    topic = make_topic(partitions=PARTITIONS)
    group = unique("g-cmdkill")
    producer = Producer(cluster, topic)
    members: List[Recorder] = []
    try:
        members = started_group(cluster, zk, group, topic, processes=False)
        command = subprocess.Popen([sys.executable, "-m", "zkconsumer", "groups", "migrate", "--zookeeper",
                                    cluster.zk_connect, "--group", group, "--to", "kafka", "--execute"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert command.stderr is not None
        for line in command.stderr:
            if line.startswith("wrote "):
                command.send_signal(signal.SIGKILL)
                break
        assert command.wait(30) == -signal.SIGKILL, "the command ended before it was killed"
        command.stderr.close()
        still = registered(zk, group)
        assert migration.read_intent(zk, group) is not None
        print(f"command killed with {len(still)} member(s) still registered")
        wait_until(lambda: settled(zk, group, "kafka", MEMBERS), 60, f"{MEMBERS} coordinator members and no /ids")
        assert {m.kind for m in members} == {"kafka"}
        time.sleep(3)
        print(f"referee: {referee(producer, members)}")
    finally:
        producer.stop()
        for m in members:
            m.stop()


def fault_mid_switch(cluster, zk, group: str, fault: Callable[[List, List[str], str], Optional[str]], *,
                     at_node: bool = False, processes: bool = False, command_timeout_s: float = 120,
                     hold_first: bool = False) -> Dict[str, object]:
    """Three members of ``cluster`` (``processes``: each in a child process, else in this one) switch
    to the coordinator under a steady producer; ``fault(members, registered, topic)`` runs as the first one
    deregisters (``at_node``: as the migration node appears), given who was still registered then
    and the topic, and returns the name of the member it killed, if any (``hold_first``, with
    ``processes``: the first member is armed to block before it releases anything, so it stays
    registered for the fault). The group must then settle on the
    coordinator (every member but the killed one), no owner node left, and the referee judges,
    allowing at-least-once redelivery after the killed member, or after any member when none was
    killed (see the module docstring). Returns the referee's counts, the command's exit status
    (``command``) and what it printed (``says``: stdout, then stderr)."""
    topic = new_topic(cluster, "t-switch", PARTITIONS)
    producer = Producer(cluster, topic)
    members: List = []
    runner: Optional[threading.Thread] = None
    try:
        members = started_group(cluster, zk, group, topic, processes=processes)
        if hold_first:
            members[0].arm_hold()
        before = registered(zk, group)
        runner, result = migrate_in_background(cluster, group, command_timeout_s)
        left = first_deregistration(zk, group, before, at_node=at_node)
        killed = fault(members, left, topic)
        print(f"fault with {len(left)} of {len(before)} member(s) still registered")
        assert left, "every member had deregistered before the fault: the switch was no longer under way"
        survivors = MEMBERS - (killed is not None)
        wait_until(lambda: on_coordinator(zk, group, survivors), 90,
                   f"{survivors} coordinator members and no /ids after the fault")
        owners = f"/consumers/{group}/owners/{topic}"
        assert not zk.exists(owners) or zk.get_children(owners) == [], "owner nodes left after the switch"
        if not processes:
            assert {m.kind for m in members} == {"kafka"}
        time.sleep(3)  # consume a while on the coordinator
        counts: Dict[str, object] = dict(referee(producer, members,
                                                 may_redeliver_after=lambda name: killed in (None, name)))
        runner.join(command_timeout_s + 30)
        out = result.get("out")
        counts["command"] = getattr(out, "returncode", "running")
        print(f"referee: {counts}")
        counts["says"] = f"{getattr(out, 'stdout', '')}{getattr(out, 'stderr', '')}"
        return counts
    finally:
        producer.stop()
        for m in members:
            m.stop()
        if runner is not None:
            runner.join(command_timeout_s + 30)


def test_zookeeper_stopped_mid_switch_and_started_again(local, local_zk) -> None:
    """ZooKeeper stopped (SIGTERM) mid-switch for longer than the members' 6 s session timeout, then
    started again: the members still registered release and deregister once it is back, the
    others wait at the barrier meanwhile; the switch completes, nothing lost. Members reach the
    coordinator at different times (one waited for ZooKeeper), so the coordinator rebalances
    after the first one consumed: a commit refused then is re-delivered (at-least-once)."""

    def stop_and_start() -> None:
        local.stop_zookeeper()
        time.sleep(8)
        local.start_zookeeper()

    fault_mid_switch(local, local_zk, unique("g-zkdown"), lambda *_: stop_and_start(), at_node=True)


def test_the_coordinator_broker_killed_mid_switch_and_started_again(local, local_zk) -> None:
    """The only broker (the group's coordinator, and every partition's leader) SIGKILLed as the
    migration node appears (the members are stopping and making their final commits) and started
    again: joins and final commits fail meanwhile and are retried; the switch completes, nothing
    lost (a final commit that could not reach the broker is re-delivered from the last one)."""

    def kill_and_start() -> None:
        local.kill_broker(0)
        time.sleep(2)
        local.start_broker(0)

    fault_mid_switch(local, local_zk, unique("g-brokerdown"), lambda *_: kill_and_start(), at_node=True)


class _Seen:
    def __init__(self, name: str, delivered: List[Tuple[float, int, int, bytes]]) -> None:
        self.name = name
        self.delivered = delivered


def test_the_referee_tells_a_redelivery_after_a_crash_from_two_members_at_once() -> None:
    """The relaxed referee is not vacuous: a take-over from a killed member's last commit passes;
    the same offsets handed out by two live members alternately do not, nor a step back without a crash."""
    killed = _Seen("a", [(1.0, 0, 10, b"x10"), (1.1, 0, 11, b"x11"), (1.2, 0, 12, b"x12")])
    successor = _Seen("b", [(5.0, 0, 11, b"x11"), (5.1, 0, 12, b"x12"), (5.2, 0, 13, b"x13")])
    acked = {b"x10", b"x11", b"x12", b"x13"}
    counts = check_deliveries([killed, successor], acked, may_redeliver_after=lambda name: name == "a")
    assert counts == {"delivered": 6, "redelivered": 2, "steps_back": 1}
    with pytest.raises(AssertionError, match="two members delivered one partition at once"):
        check_deliveries([killed, successor], acked)
    a = _Seen("a", [(1.0, 0, 10, b"x10"), (1.2, 0, 11, b"x11"), (1.4, 0, 12, b"x12")])
    b = _Seen("b", [(1.1, 0, 10, b"x10"), (1.3, 0, 11, b"x11"), (1.5, 0, 12, b"x12")])
    with pytest.raises(AssertionError, match="two members delivered one partition at once"):
        check_deliveries([a, b], {b"x10", b"x11", b"x12"}, may_redeliver_after=lambda name: True)


def test_a_member_cut_off_from_zookeeper_beyond_its_session_timeout_mid_switch(cluster, zk, make_topic) -> None:
    """One member reaches ZooKeeper through a proxy, cut (silence) for 10 s, longer than its 6 s session
    timeout, as the migration node appears: its session expires with ZooKeeper up, so its
    registration and owner nodes vanish and the barrier opens while it may still hold fetched
    data; its session lease must stop it handing out before the others start, and once the proxy
    heals it joins the coordinator on a new session (its old registration may not come back)."""
    from harness.cluster.proxy import TcpProxy

    topic = make_topic(partitions=PARTITIONS)
    group = unique("g-cut")
    producer = Producer(cluster, topic)
    members: List[Recorder] = []
    host, port = cluster.zk_connect.split(",")[0].split("/")[0].rsplit(":", 1)
    with TcpProxy(host, int(port), name="zk-proxy") as proxy:
        try:
            props = switch_props(cluster, group)
            members = [Recorder(f"m{i}", props, topic) for i in range(MEMBERS - 1)]
            members.append(Recorder("cut", dict(props, **{"zookeeper.connect": proxy.address}), topic))
            for m in members:
                assert m.joined.wait(90), f"{m.name} did not join"
            wait_until(lambda: len(registered(zk, group)) == MEMBERS and all(m.delivered for m in members), 90,
                       "every member registered and delivering")
            cut_id = members[-1].connector.consumer_id
            before = registered(zk, group)
            runner, result = migrate_in_background(cluster, group, 120)
            session = members[-1].connector.zk_client.client_id[0]
            left = first_deregistration(zk, group, before, at_node=True)
            proxy.cut("blackhole")
            held = owners_of(zk, group, topic, cut_id)
            print(f"cut with {left} registered ({cut_id} among them: {cut_id in left}), its owner nodes: {held}")
            assert cut_id in left, "the cut member had deregistered before the cut"
            wait_until(lambda: cut_id not in registered(zk, group), 30, "the cut member's session to expire")
            time.sleep(4)
            proxy.heal()
            wait_until(lambda: on_coordinator(zk, group, MEMBERS), 90, f"{MEMBERS} coordinator members and no /ids")
            assert {m.kind for m in members} == {"kafka"}
            assert members[-1].connector.zk_client.client_id[0] != session, "the cut member's session did not expire"
            time.sleep(3)
            counts = referee(producer, members, may_redeliver_after=lambda name: name == "cut")
            runner.join(150)
            print(f"referee: {counts}; command: {getattr(result.get('out'), 'returncode', 'running')}")
        finally:
            producer.stop()
            for m in members:
                m.stop()
