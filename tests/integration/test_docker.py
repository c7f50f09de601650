"""docker-compose.yml for real: the cluster, a group, a Spark job and faults, all through the engine.

One compose project for the module (free ports, so it never meets the session's LocalCluster):
ZooKeeper 3.4.6, brokers 0-2 and a Spark standalone Master + Worker in the images
scripts/setup-docker builds, every container on the host's network. Faults are made by the
engine (``docker kill``, ``pause``, ``restart``); each fault test leaves all three brokers
registered. The last test takes the project down and checks the engine holds nothing the
module made. In CI (``$CI`` set) a missing engine or image fails the module instead of
skipping it.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Iterator, List, Optional

import pytest
from support.common import (
    Drainer,
    Member,
    Producer,
    assert_nothing_lost,
    consumer_props,
    offset_checker,
    produced_values,
    unique,
    wait_until,
)
from support.compose import BROKER_SERVICES, ComposeCluster, EngineObjects, engine_problem

from zkconsumer import ZookeeperConsumerConnector

pytestmark = pytest.mark.docker

#: Partitions of every topic the module creates; replication 3, so a broker can die without data loss.
PARTITIONS = 4


@pytest.fixture(scope="module")
def engine_before() -> EngineObjects:
    problem = engine_problem()
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the docker tests, but {problem}")
        pytest.skip(problem)
    return EngineObjects.now()


@pytest.fixture(scope="module")
def compose(engine_before: EngineObjects) -> Iterator[ComposeCluster]:
    cluster = ComposeCluster()
    started = time.monotonic()
    try:
        cluster.up()
        cluster.wait_for_brokers()
        print(f"\n{cluster.project}: compose up to 3 registered brokers in {time.monotonic() - started:.1f}s")
        yield cluster
    finally:
        cluster.down()


def wait_for_owners(cluster: ComposeCluster, group: str, topic: str, members: int) -> None:
    """Wait until every partition of ``topic`` is owned and the owners span ``members`` members."""
    zk = cluster.kazoo_client()
    path = f"/consumers/{group}/owners/{topic}"

    def settled() -> bool:
        owners = [zk.get(f"{path}/{p}")[0].decode() for p in zk.get_children(path)] if zk.exists(path) else []
        return len(owners) == PARTITIONS and len({o.rsplit("-", 1)[0] for o in owners}) == members

    try:
        wait_until(settled, 60, f"{members} members to own every partition of {topic}", interval=0.5)
    finally:
        zk.stop()
        zk.close()


def group_members(cluster: ComposeCluster, group: str, topic: str, n: int = 2) -> List[Member]:
    """``n`` members of ``group`` (one stream each), every partition owned before returning."""
    members: List[Member] = []
    try:
        for _ in range(n):
            members.append(Member(cluster, group, topic, 6000))
        wait_for_owners(cluster, group, topic, n)
    except BaseException:  # the caller never gets them to stop: a live kazoo client hangs the interpreter's exit
        for m in members:
            m.stop()
        raise
    return members


def consume_through(cluster: ComposeCluster, fault: Callable[[], None]) -> None:
    """A group of two consumes while a producer (acks=all) runs and ``fault`` happens.

    Asserts that no member's application saw an exception, that every acknowledged message
    was consumed (0 lost), and that all three brokers are registered again afterwards.
    """
    group, topic = unique("g-docker"), cluster.create_topic(unique("docker-fault"), PARTITIONS, 3)
    members = group_members(cluster, group, topic)
    producer: Optional[Producer] = Producer(cluster, topic, acks="all")
    try:
        wait_until(lambda: all(m.consumed for m in members), 60, "every member to consume")
        fault()
        cluster.wait_for_brokers()
        time.sleep(3)  # production goes on after the fault
        produced = producer.stop()
        producer = None
        assert produced
        assert_nothing_lost(members, produced, 120)
    finally:
        if producer is not None:
            producer.stop()
        for m in members:
            m.stop()


def test_compose_up_registers_three_brokers_on_loopback(compose: ComposeCluster) -> None:
    zk = compose.kazoo_client()
    try:
        assert sorted(zk.get_children("/brokers/ids")) == ["0", "1", "2"]
        for broker_id in compose.broker_ids:
            data = zk.get(f"/brokers/ids/{broker_id}")[0].decode()
            assert '"host":"127.0.0.1"' in data and f'"port":{compose.ports[f"KAFKA{broker_id + 1}_PORT"]}' in data
    finally:
        zk.stop()
        zk.close()


def test_host_group_consumes_exactly_and_kafkas_offset_checker_in_the_container_shows_lag_0(
        compose: ComposeCluster) -> None:
    """The group settles first, then the set is produced: no rebalance replays anything, so exactly once."""
    from kafka import KafkaProducer

    group, topic = unique("g-docker"), compose.create_topic(unique("docker-exact"), PARTITIONS, 3)
    values = produced_values(2000)
    connectors = [ZookeeperConsumerConnector(consumer_props(compose, group)) for _ in range(2)]
    try:
        drainers = [Drainer(c.create_message_streams({topic: 2})[topic]) for c in connectors]
        wait_for_owners(compose, group, topic, len(connectors))
        producer = KafkaProducer(bootstrap_servers=compose.bootstrap_servers, api_version=(0, 9), acks="all")
        try:
            for future in [producer.send(topic, value) for value in values]:
                future.get(timeout=120)
        finally:
            producer.close(10)
        wait_until(lambda: sum(d.count() for d in drainers) >= len(values), 120, f"{len(values)} messages")
        time.sleep(1)  # a duplicate would arrive now
        consumed = [m.message for d in drainers for m in d.stop()]
        for c in connectors:
            c.commit_offsets()
    finally:
        for c in connectors:
            c.shutdown()
    assert sorted(consumed) == values
    rows = offset_checker(compose, group, topic)
    assert sorted(rows) == list(range(PARTITIONS)), rows
    assert all(lag == 0 for _, _, lag in rows.values()), rows
    assert sum(offset or 0 for offset, _, _ in rows.values()) == len(values), rows


def test_spark_job_in_the_containers_reads_exactly_and_commits(compose: ComposeCluster) -> None:
    """The runner's streaming example on the compose Spark Master: a Parquet sink holding every message once."""
    group, topic, per_run = unique("g-docker-spark"), unique("docker-spark"), 100
    result = compose.run_app("python", "examples/spark_streaming_source.py", "--zookeeper", compose.zk_connect,
                             "--topic", topic, "--group", group, "--messages", str(per_run))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert f"OK: {2 * per_run} rows for {2 * per_run} messages, each exactly once" in result.stdout, output[-4000:]
    rows = offset_checker(compose, group, topic)
    assert rows and all(lag == 0 for _, _, lag in rows.values()), rows
    assert sum(offset or 0 for offset, _, _ in rows.values()) == 2 * per_run, rows


def test_docker_kill_of_a_broker_while_a_group_consumes_loses_nothing(compose: ComposeCluster) -> None:
    broker = compose.container(BROKER_SERVICES[1])

    def kill_and_start() -> None:
        compose.docker("kill", broker)
        wait_until(lambda: 1 not in compose.registered_brokers(), 60, "broker 1 to leave /brokers/ids", interval=0.5)
        time.sleep(3)  # the group goes on with two brokers
        compose.docker("start", broker)

    consume_through(compose, kill_and_start)


def test_docker_pause_of_zookeeper_for_15s_fails_no_member_and_loses_nothing(compose: ComposeCluster) -> None:
    zookeeper = compose.container("zookeeper")

    def pause() -> None:
        compose.docker("pause", zookeeper)
        try:
            time.sleep(15)
        finally:
            compose.docker("unpause", zookeeper)

    consume_through(compose, pause)


def test_docker_restart_of_a_broker_while_a_group_consumes_loses_nothing(compose: ComposeCluster) -> None:
    broker = compose.container(BROKER_SERVICES[2])
    consume_through(compose, lambda: compose.docker("restart", "--time", "10", broker))


def test_compose_down_leaves_nothing_behind(compose: ComposeCluster, engine_before: EngineObjects) -> None:
    compose.down()
    assert EngineObjects.now().added_since(engine_before) == {}
