"""LocalCluster against itself: real ZooKeeper and brokers, Kafka's own tools as referees."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, List

import pytest
from kafka import KafkaConsumer, TopicPartition
from kazoo.protocol.states import KazooState

from harness.cluster import ProjectCluster
from zkconsumer.testing import ClusterStartError, LocalCluster, LocalClusterError
from zkconsumer.testing.probes import fetch_metadata
from zkconsumer.testing.workdir import sweep_abandoned

REPO = Path(__file__).resolve().parents[2]


def cluster_pids(tag: Path) -> List[int]:
    """Pids of live (non-zombie) processes whose command line carries the cluster's tag (its work dir)."""
    marker = f"-Dzkconsumer.cluster={tag}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:  # exited meanwhile
            continue
        if marker in argv and state != "Z":
            pids.append(int(entry.name))
    return pids


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.1)


def read_partition(cluster: LocalCluster, topic: str, partition: int, count: int) -> List[bytes]:
    """The first ``count`` values of one partition, read with kafka-python (independent of us)."""
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, api_version=(0, 9),
                             enable_auto_commit=False, consumer_timeout_ms=10000)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values = []
        for record in consumer:
            values.append(record.value)
            if len(values) == count:
                break
        return values
    finally:
        consumer.close()


def test_fresh_cluster_lifecycle_failover_and_cleanup() -> None:
    with ProjectCluster(brokers=2, partitions=2) as cluster:  # a LocalCluster that can also run Kafka's tools
        tag = cluster.work_dir
        zk = cluster.kazoo_client()
        assert sorted(zk.get_children("/brokers/ids")) == ["0", "1"]
        assert cluster.broker_ids == [0, 1]
        assert cluster.bootstrap_servers == ",".join(f"127.0.0.1:{cluster.broker_port(b)}" for b in (0, 1))
        registration = json.loads(zk.get("/brokers/ids/1")[0])
        assert (registration["host"], registration["port"]) == ("127.0.0.1", cluster.broker_port(1))

        topic = cluster.create_topic("lifecycle", partitions=2)
        assert cluster.leader(topic, 1) == 1
        assert cluster.produce(topic, [b"before-0", b"before-1"], partition=1) == [(1, 0), (1, 1)]

        cluster.kill_broker(1)
        assert not cluster.is_running(1)
        assert cluster.registered_brokers() == [0, 1]  # the session outlives the process for a while
        cluster.start_broker(1)
        assert cluster.is_running(1) and cluster.registered_brokers() == [0, 1]
        cluster.wait_for_leaders(topic)
        assert cluster.produce(topic, ["after"], keys=["k"], partition=1) == [(1, 2)]
        assert read_partition(cluster, topic, 1, 3) == [b"before-0", b"before-1", b"after"]

        cluster.stop_broker(0)
        assert cluster.registered_brokers() == [1]
        cluster.start_broker(0)
        assert cluster.registered_brokers() == [0, 1]

        lingering_tool = cluster.start_tool("kafka.tools.ConsoleConsumer", "--zookeeper", cluster.zk_connect,
                                            "--topic", topic)
        assert len(cluster_pids(tag)) == 4  # ZooKeeper, 2 brokers, the tool
    assert lingering_tool.poll() is not None
    assert cluster_pids(tag) == []
    assert not tag.exists()
    cluster.stop()  # idempotent
    with pytest.raises(LocalClusterError):
        cluster.start()


def test_create_topic_returns_with_leaders_known_to_every_broker(cluster: LocalCluster) -> None:
    topic = cluster.create_topic(f"leaders-{os.getpid()}-{time.monotonic_ns()}", partitions=5, replication=2,
                                 config={"retention.ms": 3600000})
    expected = {0: 0, 1: 1, 2: 2, 3: 0, 4: 1}
    assert {p: cluster.leader(topic, p) for p in range(5)} == expected
    assert cluster.topic_partitions(topic) == {0: [0, 1], 1: [1, 2], 2: [2, 0], 3: [0, 1], 4: [1, 2]}
    for broker in cluster.broker_ids:
        assert fetch_metadata("127.0.0.1", cluster.broker_port(broker), [topic])[topic] == expected
    zk = cluster.kazoo_client()
    assert json.loads(zk.get(f"/config/topics/{topic}")[0])["config"] == {"retention.ms": "3600000"}
    with pytest.raises(LocalClusterError, match="already exists"):
        cluster.create_topic(topic)


def test_expire_session_removes_ephemerals_and_client_sees_lost(cluster: LocalCluster) -> None:
    client = cluster.kazoo_client()
    observer = cluster.kazoo_client()
    path = f"/expiry-test-{os.getpid()}-{time.monotonic_ns()}"
    client.create(path, b"mine", ephemeral=True)
    states: List[str] = []
    client.add_listener(states.append)
    old_session = client.client_id[0]

    cluster.expire_session(client)

    assert observer.exists(path) is None
    assert KazooState.LOST in states
    wait_until(lambda: client.state == KazooState.CONNECTED, 15, "kazoo to open a new session")
    assert client.client_id[0] != old_session


def test_kafkas_console_consumer_reads_what_produce_wrote(cluster: ProjectCluster,
                                                          make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=3)
    values = [f"value-{i}" for i in range(12)]
    placed = cluster.produce(topic, values)
    assert len(placed) == len(values) and {p for p, _ in placed} <= {0, 1, 2}

    result = cluster.run_tool("kafka.tools.ConsoleConsumer", "--zookeeper", cluster.zk_connect, "--topic", topic,
                              "--from-beginning", "--max-messages", str(len(values)), timeout=90, check=True)
    assert sorted(result.stdout.split()) == sorted(values)

    tool = cluster.start_tool("kafka.tools.ConsoleConsumer", "--zookeeper", cluster.zk_connect, "--topic", topic,
                              "--from-beginning")
    lines: List[str] = []
    reader = threading.Thread(target=lambda: lines.extend(line.strip() for line in tool.stdout), daemon=True)
    reader.start()
    wait_until(lambda: len(lines) >= len(values), 60, f"ConsoleConsumer to print {len(values)} lines")
    cluster.stop_tool(tool)
    reader.join(10)
    assert sorted(lines) == sorted(values)
    assert tool.poll() is not None


def test_cluster_processes_die_with_a_killed_test_process(tmp_path: Path) -> None:
    script = ("import sys, time\n"
              "from zkconsumer.testing import LocalCluster\n"
              "cluster = LocalCluster(brokers=1).start()\n"
              "print(cluster.work_dir, flush=True)\n"
              "time.sleep(600)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None
        work_dir = Path(child.stdout.readline().strip())
        assert work_dir.is_dir() and len(cluster_pids(work_dir)) == 2
        os.kill(child.pid, signal.SIGKILL)  # no atexit, no finally: only the kernel can clean up
        child.wait()
        wait_until(lambda: cluster_pids(work_dir) == [], 15, "the orphaned JVMs to die")
        assert work_dir in sweep_abandoned()
        assert not work_dir.exists()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_broker_that_cannot_start_fails_fast_with_its_log_and_leaves_nothing() -> None:
    cluster = LocalCluster(brokers=1, broker_config={"num.partitions": "not-a-number"})
    started = time.monotonic()
    with pytest.raises(ClusterStartError) as failure:
        cluster.start()
    assert time.monotonic() - started < 60
    message = str(failure.value)
    assert "broker 0 exited" in message and "num.partitions" in message
    log_path = re.search(r"end of (\S+/logs/broker-0\.log)", message)
    assert log_path is not None
    work_dir = Path(log_path.group(1)).parents[1]
    assert cluster_pids(work_dir) == []
    assert not work_dir.exists()
