"""``zkconsumer groups migrate``: a running group moves to coordinator membership and back without stopping.

Four zkconsumer members (Kafka offsets, ZooKeeper membership) consume under a steady producer;
``groups migrate --to kafka --execute`` moves them to the coordinator, a fifth member started
during the switch with the old configuration follows the migration node, and ``--to zookeeper``
moves all five back. The referee is what the members delivered: every acknowledged message is
delivered, no (partition, offset) twice, and within each partition the deliveries, in the order
they happened, have strictly increasing offsets (two members delivering one partition at once
would go back, or deliver an offset twice).
"""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Dict, List, Optional

import pytest
from support.common import Producer, consumer_props, unique, wait_until
from support.switch import Recorder, migrate, referee, settled

from zkconsumer.admin.stores import CoordinatorOffsets
from zkconsumer.zookeeper import migration

pytestmark = pytest.mark.integration

PARTITIONS = 8


def test_a_running_group_moves_to_the_coordinator_and_back_without_two_owners(cluster, zk, make_topic) -> None:
    topic = make_topic(partitions=PARTITIONS)
    group = unique("g-live")
    props = consumer_props(cluster, group, offsets_storage="kafka", dual_commit_enabled="false",
                           auto_commit_enable="true", auto_commit_interval_ms=1000, session_timeout_ms=6000,
                           heartbeat_interval_ms=500, rebalance_max_retries=10)
    producer = Producer(cluster, topic)
    members: List[Recorder] = []
    late: Optional[Recorder] = None
    try:
        members = [Recorder(f"m{i}", props, topic) for i in range(4)]
        for m in members:
            assert m.joined.wait(90), f"{m.name} did not join"
        wait_until(lambda: all(m.delivered for m in members) or sum(len(m.delivered) for m in members) > 400, 60,
                   "the ZooKeeper group to consume")
        assert {m.kind for m in members} == {"zookeeper"}

        # To the coordinator; a member with the old configuration starts while the switch runs.
        result: Dict[str, subprocess.CompletedProcess] = {}
        runner = threading.Thread(target=lambda: result.update(kafka=migrate(cluster, group, "kafka", "--execute")))
        runner.start()
        wait_until(lambda: migration.read_intent(zk, group) is not None, 30, "the migration node")
        late = Recorder("late", props, topic)
        runner.join(250)
        out = result["kafka"]
        assert out.returncode == 0, out.stdout + out.stderr
        assert late.joined.wait(90)
        everyone = members + [late]
        wait_until(lambda: {m.kind for m in everyone} == {"kafka"}, 60, "every member at the coordinator")
        wait_until(lambda: settled(zk, group, "kafka", 5), 60, "5 coordinator members and no /ids")
        owners = f"/consumers/{group}/owners/{topic}"
        assert not zk.exists(owners) or zk.get_children(owners) == [], "owner nodes left after the switch"
        time.sleep(3)  # consume a while on the coordinator

        # And back.
        out = migrate(cluster, group, "zookeeper", "--execute")
        assert out.returncode == 0, out.stdout + out.stderr
        wait_until(lambda: {m.kind for m in everyone} == {"zookeeper"}, 60, "every member back in ZooKeeper")
        wait_until(lambda: settled(zk, group, "zookeeper", 5), 60, "5 ZooKeeper members, none at the coordinator")
        time.sleep(3)

        referee(producer, everyone)
    finally:
        producer.stop()
        for m in members + ([late] if late is not None else []):
            m.stop()


def test_a_member_that_cannot_follow_holds_the_coordinator_back_until_it_stops(cluster, zk, make_topic) -> None:
    """One member keeps dual commit (its storage is fenced for ZooKeeper membership only), so it does
    not switch: the others leave ZooKeeper membership but must not deliver through the coordinator
    while it is registered (it takes over every partition meanwhile); once it stops they join."""
    topic = make_topic(partitions=PARTITIONS)
    group = unique("g-stuck")
    props = consumer_props(cluster, group, offsets_storage="kafka", dual_commit_enabled="false",
                           auto_commit_enable="true", auto_commit_interval_ms=1000, session_timeout_ms=6000,
                           heartbeat_interval_ms=500, rebalance_max_retries=3)
    producer = Producer(cluster, topic)
    members: List[Recorder] = []
    try:
        members = [Recorder(f"m{i}", props, topic) for i in range(3)]
        members.append(Recorder("stuck", dict(props, **{"dual.commit.enabled": "true"}), topic))
        for m in members:
            assert m.joined.wait(90), f"{m.name} did not join"
        wait_until(lambda: sum(len(m.delivered) for m in members) > 400, 60, "the ZooKeeper group to consume")
        out = migrate(cluster, group, "kafka", "--execute", "--timeout-s", "15")
        stuck = members[-1]
        assert out.returncode == 1 and stuck.connector.consumer_id in out.stderr, out.stdout + out.stderr
        assert stuck.kind == "zookeeper"
        assert zk.get_children(f"/consumers/{group}/ids") == [stuck.connector.consumer_id]
        with CoordinatorOffsets(zk, group) as coordinator:
            assert coordinator.live_members() == [], "a coordinator member joined while a ZooKeeper member runs"
        stuck.stop()
        wait_until(lambda: settled(zk, group, "kafka", 3), 60, "3 coordinator members once it stopped")
        time.sleep(3)
        referee(producer, members)
    finally:
        producer.stop()
        for m in members:
            m.stop()


def test_the_switch_refuses_while_kafkas_own_zookeeper_consumers_are_in_the_group(cluster, zk, make_topic,
                                                                                   tmp_path) -> None:
    from support.common import ScalaConsoleConsumer

    topic = make_topic(partitions=2)
    group = unique("g-scala")
    scala = ScalaConsoleConsumer(cluster, group, topic, tmp_path)
    try:
        wait_until(lambda: zk.exists(f"/consumers/{group}/ids") and zk.get_children(f"/consumers/{group}/ids"), 60,
                   "the Scala consumer to register")
        (scala_id,) = zk.get_children(f"/consumers/{group}/ids")
        out = migrate(cluster, group, "kafka", "--execute")
        assert out.returncode == 1, out.stdout + out.stderr
        assert "Kafka's own ZooKeeper consumers" in out.stderr and scala_id in out.stderr, out.stderr
        assert migration.read_intent(zk, group) is None, "the refusal wrote the migration node"
    finally:
        scala.stop()


def test_the_switch_refuses_while_the_groups_offsets_are_only_in_zookeeper(cluster, zk, make_topic) -> None:
    topic = make_topic(partitions=2)
    group = unique("g-zkoffsets")
    producer = Producer(cluster, topic)
    member = Recorder("zk", consumer_props(cluster, group, auto_commit_enable="true", auto_commit_interval_ms=200),
                      topic)
    try:
        assert member.joined.wait(90)
        wait_until(lambda: zk.exists(f"/consumers/{group}/offsets/{topic}/0") and member.delivered, 60,
                   "a commit to ZooKeeper")
        out = migrate(cluster, group, "kafka", "--execute")
        assert out.returncode == 1, out.stdout + out.stderr
        assert "offsets are not in Kafka yet" in out.stderr and "steps 1 and 2" in out.stderr, out.stderr
        assert migration.read_intent(zk, group) is None, "the refusal wrote the migration node"
        assert member.kind == "zookeeper"
    finally:
        producer.stop()
        member.stop()
