"""The core connector against the real cluster, refereed by Kafka's own consumer and tools."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Callable, List, Set

import pytest
from kazoo.client import KazooClient
from support.common import (
    Drainer,
    ScalaConsoleConsumer,
    by_value,
    consumer_props,
    members,
    offset_checker,
    owners,
    produced_values,
    thread_ids_of,
    unique,
    verify_consumer_rebalance,
    wait_until,
)

from harness.assignment import expected_range, expected_roundrobin
from zkconsumer import ConsumerTimeoutError, ZookeeperConsumerConnector
from zkconsumer.consumer import base_connector as connector_module
from zkconsumer.consumer.membership import ConnectorParts, Membership
from zkconsumer.offsets import storage as storage_module
from zkconsumer.testing.probes import zookeeper_command


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_mixed_group_with_kafkas_consumer_settles_on_kafkas_assignment(cluster, zk, tmp_path: Path, strategy: str) -> None:
    topic, group = unique("mixed"), unique("g")
    cluster.create_topic(topic, partitions=7, replication=1)
    expected_of = {
        "range": lambda threads: expected_range(threads, 7),
        "roundrobin": lambda threads: expected_roundrobin(threads, topic, 7),
    }[strategy]

    scala = ScalaConsoleConsumer(cluster, group, topic, tmp_path, partition_assignment_strategy=strategy)
    try:
        wait_until(lambda: len(owners(zk, group, topic)) == 7, 60, "Kafka's consumer to own all 7 partitions")
        props = consumer_props(cluster, group, partition_assignment_strategy=strategy)
        with ZookeeperConsumerConnector(props) as connector:
            streams = connector.create_message_streams({topic: 2})[topic]

            def settled() -> bool:
                threads = thread_ids_of(zk, group, topic)
                return len(threads) == 3 and owners(zk, group, topic) == expected_of(threads)

            wait_until(settled, 60, f"owner znodes to settle on Kafka's {strategy} assignment")
            # Our members' fence nodes sit beside ids/owners/offsets; Kafka's own check reads the
            # owner of every partition, each one a registered thread of the group.
            assert zk.get_children(f"/consumers/{group}/fences")
            threads = thread_ids_of(zk, group, topic)
            owned, unowned = verify_consumer_rebalance(cluster, group)
            assert unowned == [] and owned == {(topic, p): t for p, t in expected_of(threads).items()}
            assert sorted(t for t in threads if t.startswith(connector.consumer_id)) == sorted(s.thread_id for s in streams)

            values = produced_values(70)
            placed = cluster.produce(topic, values)
            ours = {p for p, t in owners(zk, group, topic).items() if t.startswith(connector.consumer_id + "-")}
            expect_ours = sum(1 for p, _ in placed if p in ours)
            drainer = Drainer(streams)
            got = drainer.wait_for(expect_ours)
            wait_until(lambda: len(scala.lines) >= 70 - expect_ours, 60, "Kafka's consumer to print its share")
            mine = drainer.stop()
            assert len(mine) == expect_ours
            assert {m.partition for m in got} <= ours
            assert sorted(by_value(mine) + sorted(v.encode() for v in scala.lines)) == sorted(values)

            connector.commit_offsets()

            def lag_zero() -> bool:
                rows = offset_checker(cluster, group, topic)
                return len(rows) == 7 and all(lag == 0 for _, _, lag in rows.values())

            wait_until(lag_zero, 60, "ConsumerOffsetChecker to report lag 0 on every partition", interval=1)
    finally:
        scala.stop()


def test_a_successor_receives_exactly_the_rest(cluster) -> None:
    topic, group = unique("handover"), unique("g")
    cluster.create_topic(topic, partitions=4, replication=1)
    values = produced_values(100)
    cluster.produce(topic, values)

    with ZookeeperConsumerConnector(consumer_props(cluster, group)) as first:
        stream = first.create_message_streams({topic: 1})[topic][0]
        taken = []
        while len(taken) < 37:
            try:
                taken.append(next(iter(stream)))
            except ConsumerTimeoutError:  # fetchers still warming up
                continue
        first.commit_offsets()

    with ZookeeperConsumerConnector(consumer_props(cluster, group)) as second:
        drainer = Drainer(second.create_message_streams({topic: 1})[topic])
        drainer.wait_for(63)
        rest = drainer.stop()

    assert len(rest) == 63
    assert sorted(by_value(taken) + by_value(rest)) == sorted(values)


def test_session_expiry_rejoins_and_loses_nothing(cluster, zk) -> None:
    topic, group = unique("expiry"), unique("g")
    cluster.create_topic(topic, partitions=4, replication=1)
    first, second = produced_values(40, "a"), produced_values(40, "b")
    cluster.produce(topic, first)

    with ZookeeperConsumerConnector(consumer_props(cluster, group)) as connector:
        drainer = Drainer(connector.create_message_streams({topic: 1})[topic])
        drainer.wait_for(40)
        connector.commit_offsets()
        old_session = connector.zk_client.client_id[0]

        cluster.expire_session(connector.zk_client)

        def rejoined() -> bool:
            path = f"/consumers/{group}/ids/{connector.consumer_id}"
            stat = zk.exists(path)
            return bool(stat) and stat.ephemeralOwner != old_session and len(owners(zk, group, topic)) == 4

        wait_until(rejoined, 60, "the member to re-register under a new session and own all partitions")
        cluster.produce(topic, second)
        got = drainer.wait_for(80)
        drainer.stop()
    assert set(by_value(got)) == set(first + second)
    assert len(got) == 80  # the commit before expiry was honoured: nothing replayed


def test_members_joining_and_leaving_move_partitions_and_lose_nothing(cluster, zk) -> None:
    topic, group = unique("churn"), unique("g")
    cluster.create_topic(topic, partitions=6, replication=1)
    props = consumer_props(cluster, group, auto_commit_enable="true", auto_commit_interval_ms=300)
    batches = [produced_values(60, prefix) for prefix in "abc"]

    first = ZookeeperConsumerConnector(props)
    first_drainer = Drainer(first.create_message_streams({topic: 1})[topic])
    cluster.produce(topic, batches[0])
    first_drainer.wait_for(60)

    second = ZookeeperConsumerConnector(props)
    try:
        second_drainer = Drainer(second.create_message_streams({topic: 2})[topic])
        wait_until(lambda: len(set(owners(zk, group, topic).values())) == 3, 60, "three threads to share the topic")
        assert set(owners(zk, group, topic).values()) == {
            f"{first.consumer_id}-0", f"{second.consumer_id}-0", f"{second.consumer_id}-1"
        }
        cluster.produce(topic, batches[1])
        wait_until(lambda: first_drainer.count() + second_drainer.count() >= 120, 60, "the second batch")

        first_drainer.stop()
        first.shutdown()
        wait_until(lambda: set(owners(zk, group, topic).values()) == {f"{second.consumer_id}-0", f"{second.consumer_id}-1"},
                   60, "the leaver's partitions to move to the remaining member")
        assert len(members(zk, group)) == 1
        cluster.produce(topic, batches[2])
        everything = set(batches[0] + batches[1] + batches[2])
        wait_until(lambda: everything <= set(by_value(first_drainer.snapshot() + second_drainer.snapshot())), 60,
                   "every message to be consumed by someone")
        second_drainer.stop()
    finally:
        first.shutdown()
        second.shutdown()


def test_registration_is_written_as_kafka_writes_it(cluster, zk) -> None:
    topic, group = unique("reg"), unique("g")
    cluster.create_topic(topic, partitions=1, replication=1)
    with ZookeeperConsumerConnector(consumer_props(cluster, group, consumer_id="fixed")) as connector:
        connector.create_message_streams({topic: 3})
        assert connector.consumer_id == f"{group}_fixed"
        raw = zk.get(f"/consumers/{group}/ids/{group}_fixed")[0].decode()
        data = json.loads(raw)
        assert raw == json.dumps(data, separators=(",", ":"))
        assert list(data) == ["version", "subscription", "pattern", "timestamp"]
        assert data["version"] == 1 and data["subscription"] == {topic: 3} and data["pattern"] == "static"
        assert data["timestamp"].isdigit()
    assert not zk.exists(f"/consumers/{group}/ids/{group}_fixed")


def test_metrics_report_delivery_ownership_rebalances_and_lag(cluster) -> None:
    topic, group = unique("metrics"), unique("g")
    cluster.create_topic(topic, partitions=4, replication=1)
    cluster.produce(topic, produced_values(50))
    with ZookeeperConsumerConnector(consumer_props(cluster, group), metrics_interval_s=0.2) as connector:
        streams = connector.create_message_streams({topic: 2})[topic]
        drainer = Drainer(streams)
        drainer.wait_for(50)

        def caught_up() -> bool:
            snap = connector.metrics_snapshot()
            return snap["messages"] == 50 and len(snap["lag"]) == 4 and snap["total_lag"] == 0

        wait_until(caught_up, 30, "metrics to show 50 messages and zero lag on 4 partitions")
        snap = connector.metrics_snapshot()
        drainer.stop()
    assert snap["bytes"] == sum(len(v) for v in produced_values(50))
    assert snap["owned_partitions"] == 4 and snap["rebalances"] >= 1
    assert sorted(snap["streams"]) == sorted(s.thread_id for s in streams)
    assert all(len(s["partitions"]) == 2 for s in snap["streams"].values())


def test_streams_are_created_once_and_not_after_shutdown(cluster) -> None:
    from zkconsumer import ConfigurationError, ConsumerShutdownError

    topic, group = unique("once"), unique("g")
    cluster.create_topic(topic, partitions=1, replication=1)
    connector = ZookeeperConsumerConnector(consumer_props(cluster, group))
    try:
        connector.create_message_streams({topic: 1})
        with pytest.raises(ConfigurationError, match="only once"):
            connector.create_message_streams({topic: 1})
    finally:
        connector.shutdown()
    late = ZookeeperConsumerConnector(consumer_props(cluster, group))
    late.shutdown()
    with pytest.raises(ConsumerShutdownError, match="after shutdown"):
        late.create_message_streams({topic: 1})



class Refused(Exception):
    """What a constructor step made to fail raises."""


def os_threads() -> Set[str]:
    """The process's thread ids as the kernel lists them: kazoo's and the native heartbeat's too."""
    return set(os.listdir("/proc/self/task"))


def server_sessions(cluster) -> Set[int]:
    """The sessions the ZooKeeper server has a connection for (its ``cons``)."""
    reply = zookeeper_command("127.0.0.1", cluster.zk_port, "cons")
    return {int(sid, 16) for sid in re.findall(r"sid=0x([0-9a-f]+)", reply)}


@pytest.mark.parametrize("fault", ["membership", "fetchers", "fetchers, then closing the storage", "metrics"])
def test_a_constructor_that_raises_leaves_no_session_and_no_thread(cluster, monkeypatch, fault: str) -> None:
    """Whatever step after the ZooKeeper connect raises, the caller (who has no connector to shut
    down) gets that very exception and nothing keeps running: ZooKeeper no longer has the session,
    every thread the constructor started has ended."""
    error: BaseException = Refused(f"{fault}: made to fail")

    def refuse(*args: object, **kwargs: object) -> object:
        raise error

    def refuse_too(*args: object, **kwargs: object) -> object:
        raise Refused("closing the storage failed too")

    class UnbuildableMembership(ZookeeperConsumerConnector):
        def _make_membership(self, member: ConnectorParts) -> Membership:
            raise error

    opened: List[int] = []
    connect = connector_module.ConsumerConnectorBase._connect_zookeeper

    def connect_and_record(self: connector_module.ConsumerConnectorBase) -> KazooClient:
        client = connect(self)
        opened.append(client.client_id[0])
        return client

    monkeypatch.setattr(connector_module.ConsumerConnectorBase, "_connect_zookeeper", connect_and_record)
    props = consumer_props(cluster, unique("g-unbuilt"))
    make: Callable[[], object] = lambda: ZookeeperConsumerConnector(props)  # noqa: E731
    if fault == "membership":  # the last step before the metrics
        make = lambda: UnbuildableMembership(props)  # noqa: E731
    elif fault.startswith("fetchers"):  # after a real Kafka offset storage was built
        props.update({"offsets.storage": "kafka", "dual.commit.enabled": "true"})
        monkeypatch.setattr(connector_module, "FetcherManager", refuse)
        if fault.endswith("closing the storage"):  # a failing cleanup hides nothing and stops nothing else
            monkeypatch.setattr(storage_module.KafkaOffsetStorage, "close", refuse_too)
    else:  # a real bad argument, found only when the metrics are registered on it
        make = lambda: ZookeeperConsumerConnector(props, metrics_registry=object())  # noqa: E731
    threads, tids, sessions = set(threading.enumerate()), os_threads(), server_sessions(cluster)

    with pytest.raises(BaseException) as raised:
        make()

    if fault == "metrics":
        assert isinstance(raised.value, AttributeError)
    else:
        assert raised.value is error
    [session] = opened
    assert session not in sessions  # the constructor had a session of its own
    wait_until(lambda: session not in server_sessions(cluster), 10, f"ZooKeeper to drop session 0x{session:x}")
    wait_until(lambda: not [t for t in threading.enumerate() if t not in threads and t.is_alive()], 10,
               "the Python threads the constructor started to end")
    wait_until(lambda: not os_threads() - tids, 10, "every thread the constructor started (native ones too) to end")
