"""Issue 15 item 3: topics compressed by Kafka's own producer are consumed exactly.

Kafka 0.9.0.1's ``kafka.tools.ConsoleProducer`` writes numbered lines with
``--compression-codec gzip|snappy|lz4``; the broker stores message-format-0
wrappers (gzip, snappy in xerial framing, lz4 in Kafka 0.8/0.9's framing with
its wrong header checksum). A zkconsumer member must then deliver every message
exactly once, in production order within each partition, on the C path and on
the pure-Python path alike.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List

import pytest
from support.common import Drainer, consumer_props, unique

from harness.cluster import ProjectCluster
from zkconsumer import ZookeeperConsumerConnector
from zkconsumer.wire.connection import BrokerConnection
from zkconsumer.wire.protocol import LATEST_TIME, FetchPartition

PARTITIONS = 3
MESSAGES = 3000
CODECS = {"gzip": 1, "snappy": 2, "lz4": 3}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kafka() -> Iterator[ProjectCluster]:
    """One broker of its own: these topics are filled by a JVM producer and read in two processes."""
    with ProjectCluster(brokers=1, partitions=PARTITIONS) as local:
        yield local


@pytest.fixture(scope="module")
def topics(kafka: ProjectCluster) -> Dict[str, str]:
    """codec -> a topic filled by Kafka's ConsoleProducer with that codec (lines ``<codec>-000000`` ...)."""
    out = {}
    for codec in CODECS:
        topic = kafka.create_topic(unique(f"codec-{codec}"), partitions=PARTITIONS)
        lines = "".join(f"{codec}-{i:06d}\n" for i in range(MESSAGES))
        kafka.run_tool("kafka.tools.ConsoleProducer", "--broker-list", kafka.bootstrap_servers, "--topic", topic,
                       "--compression-codec", codec, "--request-required-acks", "1",
                       "--producer-property", "batch.size=4096", "--producer-property", "linger.ms=20",
                       input=lines, timeout=120, check=True)
        out[codec] = topic
    return out


def _log_ends(kafka: ProjectCluster, topic: str) -> Dict[int, int]:
    host, port = kafka.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with BrokerConnection(host, int(port), "test-codecs", 30000, 65536) as conn:
        return {p: conn.list_offsets(topic, p, LATEST_TIME) for p in range(PARTITIONS)}


@pytest.mark.parametrize("codec", list(CODECS))
def test_kafka_producer_writes_compressed_wrappers(kafka: ProjectCluster, topics: Dict[str, str], codec: str) -> None:
    """The topic really holds wrappers of the codec (message attributes), so the tests below test codecs."""
    host, port = kafka.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with BrokerConnection(host, int(port), "test-codecs", 30000, 65536) as conn:
        response = conn.fetch([FetchPartition(topics[codec], 0, 0, 1 << 20)], 1000, 1)
    data = bytes(response.partitions[0].message_set)
    assert len(data) > 26
    assert data[16] == 0  # magic 0: Kafka 0.9's message format
    assert data[17] & 0x07 == CODECS[codec]
    assert sum(_log_ends(kafka, topics[codec]).values()) == MESSAGES


def _consume(kafka: ProjectCluster, topic: str) -> Dict[int, List[bytes]]:
    """Every message of ``topic`` as one new group member sees it: partition -> values in delivery order."""
    with ZookeeperConsumerConnector(consumer_props(kafka, unique("g-codec"))) as connector:
        drainer = Drainer(connector.create_message_streams({topic: 1})[topic])
        drainer.wait_for(MESSAGES, timeout=60)
        got = drainer.stop()
    by_partition: Dict[int, List[bytes]] = {}
    for message in got:
        by_partition.setdefault(message.partition, []).append(message.message)
    return by_partition


def _check_exact(codec: str, by_partition: Dict[int, List[bytes]]) -> None:
    values = [v for vs in by_partition.values() for v in vs]
    assert len(values) == MESSAGES, f"{len(values)} messages delivered, {MESSAGES} produced"
    assert sorted(values) == [f"{codec}-{i:06d}".encode() for i in range(MESSAGES)]  # each exactly once
    for partition, vs in by_partition.items():
        assert vs == sorted(vs), f"partition {partition} out of production order"
    assert len(by_partition) == PARTITIONS


@pytest.mark.parametrize("codec", list(CODECS))
def test_every_message_of_a_compressed_topic_once_in_order(kafka: ProjectCluster, topics: Dict[str, str],
                                                           codec: str) -> None:
    _check_exact(codec, _consume(kafka, topics[codec]))


_PURE_SCRIPT = """
import json, sys
sys.path.insert(0, {tests!r})
from zkconsumer.wire import messageset
assert not messageset.ACCELERATED
from test_codec_topics import _consume
from harness.cluster import ProjectCluster
class K:  # the attributes of the cluster _consume and consumer_props use
    zk_connect = {zk!r}
    bootstrap_servers = {bootstrap!r}
print(json.dumps({{str(p): [v.decode() for v in vs] for p, vs in _consume(K, {topic!r}).items()}}))
"""


@pytest.mark.parametrize("codec", list(CODECS))
def test_pure_python_path_consumes_the_same(kafka: ProjectCluster, topics: Dict[str, str], codec: str) -> None:
    """The fallback without the C extension (``ZKCONSUMER_PURE_PYTHON=1``, another process) delivers the same."""
    import json

    script = _PURE_SCRIPT.format(tests=str(Path(__file__).resolve().parent), zk=kafka.zk_connect,
                                 bootstrap=kafka.bootstrap_servers, topic=topics[codec])
    env = dict(os.environ, ZKCONSUMER_PURE_PYTHON="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    _check_exact(codec, {int(p): [v.encode() for v in vs] for p, vs in got.items()})
