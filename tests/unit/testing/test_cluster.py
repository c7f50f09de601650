"""The pure parts of zkconsumer.testing.cluster: placement, names, JVM command lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cluster import ProjectCluster
from zkconsumer.testing import LocalCluster, LocalClusterError, MissingDependencyError, replica_assignment
from zkconsumer.testing.cluster import validate_topic_name
from zkconsumer.testing.workdir import WorkDir


def test_replica_assignment_is_round_robin_from_the_lowest_broker() -> None:
    assert replica_assignment([0, 1, 2], 4, 1) == {0: [0], 1: [1], 2: [2], 3: [0]}
    assert replica_assignment([5, 3], 3, 2) == {0: [3, 5], 1: [5, 3], 2: [3, 5]}


def test_replica_assignment_rejects_impossible_requests() -> None:
    with pytest.raises(LocalClusterError):
        replica_assignment([0, 1], 2, 3)
    with pytest.raises(LocalClusterError):
        replica_assignment([0], 0, 1)


@pytest.mark.parametrize("name", ["events", "a.b_c-D9", "x" * 249])
def test_legal_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize("name", ["", ".", "..", "has space", "slash/", "x" * 250, "ünï"])
def test_illegal_topic_names(name: str) -> None:
    with pytest.raises(LocalClusterError):
        validate_topic_name(name)


def test_jvm_command_lines_are_small_tagged_and_end_with_the_class(tmp_path: Path) -> None:
    cluster = ProjectCluster(brokers=1, heap="256m", broker_jvm_options=["-Dx=1"])
    cluster._state, cluster._work = "running", WorkDir(str(tmp_path))  # as start() leaves them
    cluster._java, cluster._classpath = "/usr/bin/java", "/k/a.jar:/k/b.jar"
    work = cluster.work_dir
    try:
        argv = cluster._java_argv("kafka.Kafka", ["server.properties"], "log4j.properties")
        assert argv[0] == "/usr/bin/java" and "-Xmx256m" in argv and "-XX:+UseSerialGC" in argv
        assert f"-Djava.io.tmpdir={work}/tmp" in argv and f"-Dlog4j.configuration=file:{work}/conf/log4j.properties" in argv
        assert f"-Dzkconsumer.cluster={work}" in argv
        assert argv.index("-Dx=1") < argv.index("-cp")  # ProjectCluster's broker options come last
        assert argv[-4:] == ["-cp", "/k/a.jar:/k/b.jar", "kafka.Kafka", "server.properties"]
    finally:
        cluster._work.remove()


def test_an_unstarted_cluster_has_no_addresses_and_stops_quietly() -> None:
    cluster = LocalCluster(brokers=2)
    assert cluster.broker_ids == [0, 1]
    with pytest.raises(LocalClusterError, match="not running"):
        print(cluster.zk_connect)
    cluster.stop()
    cluster.stop()
    with pytest.raises(ValueError):
        LocalCluster(brokers=0)


def test_zookeeper_options_are_checked_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="zookeeper_nodes"):
        ProjectCluster(brokers=1, zookeeper_nodes=0)
    with pytest.raises(ValueError, match="unknown ZooKeeper"):
        ProjectCluster(brokers=1, zookeeper="3.9")
    cluster = ProjectCluster(brokers=1, zookeeper_nodes=3, zookeeper="3.8", zookeeper_config={"admin.enableServer": True})
    assert cluster.zookeeper_nodes == [1, 2, 3]
    assert cluster._zookeeper_config == {"admin.enableServer": True, "4lw.commands.whitelist": "*"}
    with pytest.raises(LocalClusterError, match="not running"):
        cluster.zookeeper_leader()


def test_starting_without_java_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    cluster = LocalCluster(brokers=1)
    with pytest.raises(MissingDependencyError, match="openjdk-17-jre-headless"):
        cluster.start()
    with pytest.raises(LocalClusterError, match="stopped"):
        cluster.start()
