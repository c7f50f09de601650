"""One broker-managed group, four kinds of member: zkconsumer, Kafka 0.9's Java ``KafkaConsumer``,
kafka-python and confluent-kafka (librdkafka), all speaking Kafka's consumer protocol.

The referee is the coordinator itself, read with kafka-python's admin client (DescribeGroups):
the group's protocol type and assignor, each member's id and the assignment bytes its leader
sent. At every settled moment the assignment must be Kafka's over the members' subscriptions
(whichever member led: a zkconsumer member or Kafka's Java consumer), each partition with one
member, every partition with one; each zkconsumer member must be fetching exactly what the
coordinator says is its share. Members join and leave while a producer keeps writing, and in
the end every message written was consumed by someone (0 lost; handovers may repeat some, as
in any consumer group with periodic commits).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List, Set, Tuple

import pytest
from kafka import KafkaAdminClient
from support.common import Drainer, consumer_props, unique, wait_until
from support.offsets import kafka_committed

from harness import modern_client
from harness.assignment import expected_member_range, expected_member_roundrobin
from zkconsumer import ZookeeperConsumerConnector

pytestmark = pytest.mark.integration

PARTITIONS = 12
MODERN_CLIENT = modern_client.__file__  # the child program: python MODERN_CLIENT KIND ...


class ClientProcess:
    """A member in a process of its own, its stdout read as it comes (values, and ``#`` notes)."""

    def __init__(self, proc: "subprocess.Popen[Any]", name: str) -> None:
        self.proc = proc
        self.name = name
        self.lines: List[str] = []
        self._reader = threading.Thread(target=self._read, name=f"read-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append((raw.decode() if isinstance(raw, bytes) else raw).rstrip("\n"))

    def values(self) -> List[str]:
        return [line for line in list(self.lines) if line and not line.startswith("#")]

    def stop(self) -> None:
        """A clean stop (SIGTERM): the client commits and leaves the group."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(10)


def python_client(kind: str, cluster, group: str, topic: str, strategy: str) -> ClientProcess:
    proc = subprocess.Popen([sys.executable, MODERN_CLIENT, kind, cluster.bootstrap_servers,
                             group, topic, strategy], stdout=subprocess.PIPE)
    return ClientProcess(proc, kind)


def java_client(cluster, group: str, topic: str, strategy: str, workdir: Path) -> ClientProcess:
    """Kafka 0.9.0.1's Java KafkaConsumer (kafka.tools.ConsoleConsumer --new-consumer)."""
    assignor = {"range": "org.apache.kafka.clients.consumer.RangeAssignor",
                "roundrobin": "org.apache.kafka.clients.consumer.RoundRobinAssignor"}[strategy]
    config = workdir / f"{unique('java')}.properties"
    config.write_text(f"group.id={group}\nclient.id=java\nauto.commit.interval.ms=200\nsession.timeout.ms=6000\n"
                      f"heartbeat.interval.ms=500\npartition.assignment.strategy={assignor}\n")
    proc = cluster.start_tool("kafka.tools.ConsoleConsumer", "--new-consumer", "--bootstrap-server",
                              cluster.bootstrap_servers, "--topic", topic, "--consumer.config", str(config),
                              "--from-beginning")
    return ClientProcess(proc, "java")


class Producer:
    """Writes ``m-<n>`` values, a few hundred a second, until stopped; remembers what was acknowledged."""

    def __init__(self, cluster, topic: str) -> None:
        self._cluster, self._topic = cluster, topic
        self.sent: List[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            batch = [f"m-{n + i:07d}" for i in range(20)]
            self._cluster.produce(self._topic, [v.encode() for v in batch])
            self.sent += batch
            n += len(batch)
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive()


def describe(cluster, group: str) -> Tuple[str, str, Dict[str, Tuple[List[str], List[Tuple[str, int]]]]]:
    """(protocol type, protocol, member id -> (subscribed topics, assigned partitions)) as the
    coordinator holds them, read and decoded by kafka-python's admin client (DescribeGroups)."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, api_version=(0, 9),
                             client_id="referee")
    try:
        info = admin.describe_groups([group])[group]
    finally:
        admin.close()
    members: Dict[str, Tuple[List[str], List[Tuple[str, int]]]] = {}
    for member in info["members"]:
        metadata, assignment = member["member_metadata"], member["member_assignment"]
        topics = list(metadata["topics"]) if metadata else []
        partitions = sorted((entry["topic"], p) for entry in (assignment["assigned_partitions"] if assignment else [])
                            for p in entry["partitions"])
        members[member["member_id"]] = (topics, partitions)
    return info["protocol_type"], info["protocol_data"], members


def kafkas_assignment_holds(cluster, group: str, topic: str, strategy: str, count: int,
                            zk_members: List[ZookeeperConsumerConnector]) -> bool:
    """The group is settled on Kafka's assignment of ``count`` members, and each zkconsumer member
    delivers exactly its share (see the module docstring)."""
    try:
        protocol_type, protocol, members = describe(cluster, group)
    except Exception:  # noqa: BLE001 - the coordinator may be between generations: look again
        return False
    if protocol_type != "consumer" or protocol != strategy or len(members) != count:
        return False
    kafkas = {"range": expected_member_range, "roundrobin": expected_member_roundrobin}[strategy]
    expected = kafkas({m: topics for m, (topics, _) in members.items()}, {topic: PARTITIONS})
    if {m: sorted(ps) for m, (_, ps) in members.items()} != expected:
        return False
    owned = [tp for _, ps in members.values() for tp in ps]
    assert len(owned) == len(set(owned)) == PARTITIONS, f"not one owner per partition: {members}"
    for zk in zk_members:
        mine = members.get(zk.membership.member_id or "")
        if mine is None or sorted(zk.status.owned) != sorted(mine[1]):
            return False
    return True


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("leader", "strategy"), [("zkconsumer", "range"), ("java", "roundrobin")])
def test_four_kinds_of_member_share_one_group_on_kafkas_assignment(cluster, workdir: Path, leader: str,
                                                                    strategy: str) -> None:
    topic, group = unique("modern"), unique("g-modern")
    cluster.create_topic(topic, partitions=PARTITIONS, replication=1)
    props = consumer_props(cluster, group, group_membership="kafka", offsets_storage="kafka",
                           session_timeout_ms=6000, heartbeat_interval_ms=500, auto_commit_enable="true",
                           auto_commit_interval_ms=200, partition_assignment_strategy=strategy)
    zk_members: List[ZookeeperConsumerConnector] = []
    drainers: List[Drainer] = []
    processes: Dict[str, ClientProcess] = {}
    producer = Producer(cluster, topic)

    def add_zkconsumer() -> None:
        member = ZookeeperConsumerConnector(props)
        zk_members.append(member)
        drainers.append(Drainer(member.create_message_streams({topic: 2})[topic]))

    def add(kind: str) -> None:
        processes[kind] = java_client(cluster, group, topic, strategy, workdir) if kind == "java" \
            else python_client(kind, cluster, group, topic, strategy)

    def settle(count: int, what: str) -> None:
        wait_until(lambda: kafkas_assignment_holds(cluster, group, topic, strategy, count, zk_members), 90,
                   f"{what}: {count} members on Kafka's {strategy} assignment", interval=0.5)

    try:
        if leader == "zkconsumer":
            add_zkconsumer()
            settle(1, "the zkconsumer member alone")
        else:
            add("java")
            settle(1, "Kafka's Java consumer alone")
        for kind in ("java", "kafka-python", "confluent"):
            if kind not in processes:
                add(kind)
        if not zk_members:
            add_zkconsumer()
        settle(4, "all four kinds")
        assert zk_members[0].membership.is_leader == (leader == "zkconsumer")

        processes["kafka-python"].stop()  # members leave and join under load
        settle(3, "kafka-python left")
        add_zkconsumer()
        settle(4, "a second zkconsumer member joined")
        processes["confluent"].stop()
        settle(3, "confluent-kafka left")
        assert zk_members[0].membership.is_leader == (leader == "zkconsumer")
    finally:
        producer.stop()
    try:
        sent = set(producer.sent)

        def seen() -> Set[str]:
            ours = {m.message.decode() for d in drainers for m in d.snapshot()}
            return ours | {v for p in processes.values() for v in p.values()}

        wait_until(lambda: sent <= seen(), 120, "every message written to be consumed by some member")
        assert not sent - seen(), f"lost: {sorted(sent - seen())[:10]}"
    finally:
        for drainer in drainers:
            drainer.stop()
        for member in zk_members:
            member.shutdown()
        for process in processes.values():
            process.stop()


@pytest.mark.timeout(600)
def test_a_group_switched_live_to_the_coordinator_is_handed_to_modern_clients_and_back(cluster, cli,
                                                                                        workdir: Path) -> None:
    """Issue 39 item 4: three zkconsumer members on ZooKeeper membership (offsets in Kafka) are moved
    to the coordinator by ``groups migrate`` while they run; the group is then handed over, one member
    at a time, to Kafka's Java consumer, kafka-python and confluent-kafka, then back to zkconsumer
    members (started with ZooKeeper membership in their configuration: they follow the group's
    migration node), under a steady producer. After every step the group settles on Kafka's
    assignment with one owner per partition, and nothing written is lost."""
    strategy = "range"
    topic, group = unique("handover"), unique("g-handover")
    cluster.create_topic(topic, partitions=PARTITIONS, replication=1)
    props = consumer_props(cluster, group, offsets_storage="kafka", dual_commit_enabled="false",
                           session_timeout_ms=6000, heartbeat_interval_ms=500, auto_commit_enable="true",
                           auto_commit_interval_ms=200, partition_assignment_strategy=strategy)
    live: List[ZookeeperConsumerConnector] = []
    drainers: List[Drainer] = []
    processes: List[ClientProcess] = []
    producer = Producer(cluster, topic)

    def add_zkconsumer() -> None:
        member = ZookeeperConsumerConnector(props)
        live.append(member)
        drainers.append(Drainer(member.create_message_streams({topic: 2})[topic]))

    def remove_zkconsumer() -> None:
        member = live.pop(0)
        member.shutdown()  # commits, then leaves the group; its drainer keeps what it was handed

    def add(kind: str) -> ClientProcess:
        process = java_client(cluster, group, topic, strategy, workdir) if kind == "java" \
            else python_client(kind, cluster, group, topic, strategy)
        processes.append(process)
        return process

    def settle(what: str) -> None:
        count = len(live) + sum(1 for p in processes if p.proc.poll() is None)
        wait_until(lambda: kafkas_assignment_holds(cluster, group, topic, strategy, count, live), 90,
                   f"{what}: {count} members on Kafka's {strategy} assignment", interval=0.5)

    modern: List[ClientProcess] = []
    try:
        for _ in range(3):
            add_zkconsumer()
        wait_until(lambda: None not in kafka_committed(cluster, group, topic, range(PARTITIONS)).values(), 90,
                   "the ZooKeeper members to have committed every partition to Kafka")
        code, _, err = cli("groups", "migrate", "--group", group, "--to", "kafka", "--execute")
        assert code == 0, err
        settle("the three members switched live to the coordinator")
        for kind in ("java", "kafka-python", "confluent"):  # out one by one, a modern client in for each
            remove_zkconsumer()
            settle(f"a zkconsumer member left before {kind} joins")
            modern.append(add(kind))
            settle(f"{kind} took its place")
        assert not live
        for process in modern:  # and back
            process.stop()
            settle(f"{process.name} left")
            add_zkconsumer()
            settle(f"a zkconsumer member took {process.name}'s place")
    finally:
        producer.stop()
    try:
        sent = set(producer.sent)

        def seen() -> Set[str]:
            ours = {m.message.decode() for d in drainers for m in d.snapshot()}
            return ours | {v for p in processes for v in p.values()}

        wait_until(lambda: sent <= seen(), 120, "every message written to be consumed by some member")
        assert not sent - seen(), f"lost: {sorted(sent - seen())[:10]}"
        every = [m.message.decode() for d in drainers for m in d.snapshot()] + [v for p in processes for v in p.values()]
        print(f"\nhand-over: {len(sent)} written, 0 lost, {len(every) - len(set(every))} consumed twice (handovers "
              f"re-read what was handed out after the last auto-commit)")
    finally:
        for drainer in drainers:
            drainer.stop()
        for member in live:
            member.shutdown()
        for process in processes:
            process.stop()
