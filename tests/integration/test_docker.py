"""The docker-compose cluster, for machines with a Docker engine (skipped otherwise).

Brings up ZooKeeper and the three brokers of docker-compose.yml on free host ports,
checks that all three register and that data goes in and comes out, then removes it all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

from zkconsumer.testing import free_ports

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]


def docker_engine_or_skip() -> None:
    try:
        import docker
    except ImportError:
        pytest.skip("the `docker` Python package is not installed (pip install '.[docker]')")
    try:
        client = docker.from_env(timeout=5)
        client.ping()
    except Exception as error:  # any failure to reach an engine means: nothing to test here
        pytest.skip(f"no Docker engine answers ({type(error).__name__}: {error}); "
                    "docker-compose.yml is for machines that have one")
    finally:
        if "client" in locals():
            client.close()


def compose_command() -> List[str]:
    docker_cli = shutil.which("docker")
    if docker_cli and subprocess.run([docker_cli, "compose", "version"], capture_output=True).returncode == 0:
        return [docker_cli, "compose"]
    legacy = shutil.which("docker-compose")
    if legacy:
        return [legacy]
    pytest.skip("a Docker engine answers but neither `docker compose` nor `docker-compose` is installed")


@pytest.fixture(scope="module")
def compose_cluster() -> Iterator[Dict[str, str]]:
    docker_engine_or_skip()
    compose = compose_command()
    zk_port, *kafka_ports = free_ports(4)
    env = dict(os.environ, ZOOKEEPER_PORT=str(zk_port), KAFKA1_PORT=str(kafka_ports[0]),
               KAFKA2_PORT=str(kafka_ports[1]), KAFKA3_PORT=str(kafka_ports[2]))
    project = ["-p", f"zkconsumer-test-{uuid.uuid4().hex[:8]}", "-f", str(REPO / "docker-compose.yml")]
    subprocess.run([*compose, *project, "up", "-d", "zookeeper", "kafka1", "kafka2", "kafka3"],
                   env=env, check=True, timeout=900)
    try:
        yield {"zk_connect": f"127.0.0.1:{zk_port}",
               "bootstrap_servers": ",".join(f"localhost:{p}" for p in kafka_ports)}
    finally:
        subprocess.run([*compose, *project, "down", "-v", "--remove-orphans"], env=env, timeout=300)


def test_three_brokers_register_in_zookeeper(compose_cluster: Dict[str, str]) -> None:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=compose_cluster["zk_connect"])
    zk.start(timeout=60)
    try:
        deadline = time.monotonic() + 180
        while not (zk.exists("/brokers/ids") and sorted(zk.get_children("/brokers/ids")) == ["0", "1", "2"]):
            assert time.monotonic() < deadline, "the three brokers did not register within 180 s"
            time.sleep(1)
    finally:
        zk.stop()
        zk.close()


def test_produce_and_read_back(compose_cluster: Dict[str, str]) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = f"docker-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=compose_cluster["bootstrap_servers"], api_version=(0, 9),
                             enable_idempotence=False, acks="all")
    try:
        for i in range(5):
            producer.send(topic, f"m{i}".encode(), partition=0).get(timeout=120)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=compose_cluster["bootstrap_servers"], api_version=(0, 9),
                             enable_auto_commit=False, consumer_timeout_ms=30000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        values = [record.value for _, record in zip(range(5), consumer)]
    finally:
        consumer.close()
    assert values == [f"m{i}".encode() for i in range(5)]
