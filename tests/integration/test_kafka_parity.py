"""zkconsumer reads shared settings as Kafka's own consumer does, checked against Kafka's tools.

Issue "Correct under faults": item 4 (a consumer properties file means the same to zkconsumer and to
Kafka's ZooKeeper consumer, or zkconsumer refuses it) and item 5 (a wildcard in Java-only regex
syntax is evaluated as Java evaluates it, so a mixed group agrees on Kafka's Range assignment).
Kafka's side is kafka.tools.ConsoleConsumer --zookeeper (Kafka 0.9.0.1's old consumer, which
builds kafka.consumer.ConsumerConfig from the same properties file).
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List, Tuple

import pytest
from kazoo.client import KazooClient
from support.common import consumer_props, owners, unique, wait_until

from harness.assignment import expected_range
from harness.cluster import ProjectCluster
from zkconsumer import ConsumerConfig, ZookeeperConsumerConnector
from zkconsumer.consumer.topic_count import Whitelist
from zkconsumer.errors import ConfigurationError

#: ``local`` (tests/integration/conftest.py), one broker of its own: these tests only need ZooKeeper and a
#: few small topics
LOCAL_PARTITIONS = 2


def _kafka_accepts(cluster: ProjectCluster, topic: str, config: Path) -> Tuple[bool, str]:
    """Start Kafka's ZooKeeper consumer on ``config``: True if it starts (and stops), False if it refuses."""
    result = cluster.run_tool("kafka.tools.ConsoleConsumer", "--zookeeper", cluster.zk_connect, "--topic", topic,
                              "--consumer.config", str(config), "--max-messages", "0", timeout=90)
    refusal = next((line for line in result.stderr.splitlines()
                    if "InvalidConfigException" in line or "IllegalArgumentException" in line
                    or "NumberFormatException" in line), "")
    return result.returncode == 0, refusal or result.stderr[-400:]


def _zkconsumer_accepts(cluster: ProjectCluster, config: Path, prop: str) -> bool:
    try:
        ConsumerConfig.from_properties(config, **{"zookeeper.connect": cluster.zk_connect})
    except ConfigurationError as exc:
        assert exc.property == prop, exc
        return False
    return True


# (property, value as written in the file, Kafka 0.9.0.1 accepts, zkconsumer accepts)
SHARED_FILE_VALUES: List[Tuple[str, str, bool, bool]] = [
    ("partition.assignment.strategy", "range", True, True),
    ("partition.assignment.strategy", "roundrobin", True, True),
    ("partition.assignment.strategy", "RoundRobin", False, False),
    ("partition.assignment.strategy", "ROUNDROBIN", False, False),
    ("partition.assignment.strategy", "Range", False, False),
    ("partition.assignment.strategy", "round-robin", False, False),
    # Kafka 0.9.0.1 trims values, 0.8.2.2 does not and silently assigns by Range for anything but
    # exactly "roundrobin": the one value the two versions read differently, so zkconsumer refuses it.
    ("partition.assignment.strategy", "roundrobin ", True, False),
    ("auto.commit.enable", "True", False, False),
    ("exclude.internal.topics", "FALSE", False, False),
    ("offsets.storage", "zk", False, False),
    ("fetch.min.bytes", "+5", True, True),
    ("fetch.min.bytes", "5k", False, False),
]


def test_item4_shared_properties_file_is_refused_exactly_when_kafka_refuses(local: ProjectCluster,
                                                                             tmp_path: Path) -> None:
    topic = local.create_topic(unique("parity"), partitions=1)
    files: List[Path] = []
    for i, (prop, value, _, _) in enumerate(SHARED_FILE_VALUES):
        path = tmp_path / f"shared-{i}.properties"
        # Written as a user would: the value verbatim after '=', trailing blanks included.
        path.write_text(f"group.id={unique('parity-g')}\nzookeeper.session.timeout.ms=6000\n{prop}={value}\n")
        files.append(path)
    with ThreadPoolExecutor(max_workers=3) as pool:
        kafka = list(pool.map(lambda f: _kafka_accepts(local, topic, f), files))

    problems: List[str] = []
    for (prop, value, kafka_expected, zk_expected), path, (kafka_ok, kafka_said) in zip(SHARED_FILE_VALUES, files, kafka):
        if kafka_ok != kafka_expected:
            problems.append(f"Kafka's consumer {'accepted' if kafka_ok else 'refused'} {prop}={value!r}: {kafka_said}")
        zk_ok = _zkconsumer_accepts(local, path, prop)
        if zk_ok != zk_expected:
            problems.append(f"zkconsumer {'accepted' if zk_ok else 'refused'} {prop}={value!r}")
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- item 5


def _start_kafka_member(cluster: ProjectCluster, group: str, consumer_id: str, whitelist: str,
                        directory: Path) -> "subprocess.Popen[str]":
    config = directory / f"{consumer_id}.properties"
    config.write_text(f"group.id={group}\nconsumer.id={consumer_id}\nzookeeper.session.timeout.ms=6000\n"
                      "rebalance.backoff.ms=1000\nauto.commit.interval.ms=500\n")
    return cluster.start_tool("kafka.tools.ConsoleConsumer", "--zookeeper", cluster.zk_connect,
                              "--whitelist", whitelist, "--consumer.config", str(config),
                              stdout=subprocess.DEVNULL)


@pytest.mark.parametrize("subscription", ["same-whitelist", "static-topics"])
def test_item5_mixed_group_with_java_only_whitelist_agrees_on_kafkas_range_assignment(
    local: ProjectCluster, local_zk: KazooClient, tmp_path: Path, subscription: str
) -> None:
    prefix = unique("jre")
    sizes = {f"{prefix}-a1": 3, f"{prefix}-b2": 2, f"{prefix}-x3": 2, f"{prefix}-A4": 2}
    for name, partitions in sizes.items():
        local.create_topic(name, partitions=partitions)
    # \Q..\E quoting, a POSIX class intersected with a negated nested class, a possessive quantifier:
    # Java-only syntax (Python's re rejects \p and \Q, and reads && and ++ differently).
    whitelist = r"\Q" + prefix + r"-\E[\p{Lower}&&[^x]]\p{Digit}++"
    matching = [f"{prefix}-a1", f"{prefix}-b2"]
    group = unique("g-jre")
    kafka_thread, zk_thread = f"{group}_kafka1-0", f"{group}_zk1-0"

    kafka_member = _start_kafka_member(local, group, "kafka1", whitelist, tmp_path)
    try:
        wait_until(lambda: all(len(owners(local_zk, group, t)) == sizes[t] for t in matching), 60,
                   "Kafka's consumer to own every partition of the matching topics")
        props = consumer_props(local, group, consumer_id="zk1")
        with ZookeeperConsumerConnector(props) as connector:
            if subscription == "same-whitelist":
                connector.create_message_streams_by_filter(Whitelist(whitelist), 1)
            else:
                connector.create_message_streams({t: 1 for t in matching})
            expected = {t: expected_range([kafka_thread, zk_thread], sizes[t]) for t in matching}

            def settled() -> bool:
                return all(owners(local_zk, group, t) == expected[t] for t in matching)

            wait_until(settled, 60, f"owner znodes to settle on Kafka's Range assignment {expected}")
            assert all(owners(local_zk, group, t) == {} for t in sizes if t not in matching)
            assert kafka_member.poll() is None, local.tool_log(kafka_member)[-2000:]
    finally:
        local.stop_tool(kafka_member)
