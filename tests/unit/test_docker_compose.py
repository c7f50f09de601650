"""docker-compose.yml: ZooKeeper + three ZooKeeper-mode Kafka brokers + a Spark runner."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to parse docker-compose.yml (pip install PyYAML)")

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def interpolate(value: object) -> str:
    """Compose's ``${VAR:-default}`` with no variables set."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", str(value))


@pytest.fixture(scope="module")
def services() -> Dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def test_zookeeper_service(services: Dict[str, Any]) -> None:
    assert services["zookeeper"]["image"].startswith("zookeeper:3.4")
    assert [interpolate(p) for p in services["zookeeper"]["ports"]] == ["2181:2181"]


def test_three_kafka_brokers_in_zookeeper_mode(services: Dict[str, Any]) -> None:
    brokers = {name: s for name, s in services.items() if name.startswith("kafka")}
    assert sorted(brokers) == ["kafka1", "kafka2", "kafka3"]
    ids = set()
    for service in brokers.values():
        assert service["image"] == "wurstmeister/kafka:2.11-0.9.0.1"
        assert "zookeeper" in service["depends_on"]
        env = service["environment"]
        assert env["KAFKA_ZOOKEEPER_CONNECT"] == "zookeeper:2181"
        assert env["KAFKA_PORT"] == env["KAFKA_ADVERTISED_PORT"]
        host_port, container_port = interpolate(service["ports"][0]).split(":")
        assert host_port == container_port == interpolate(env["KAFKA_PORT"])
        ids.add(env["KAFKA_BROKER_ID"])
    assert ids == {0, 1, 2}
    assert sorted(interpolate(s["environment"]["KAFKA_PORT"]) for s in brokers.values()) == ["9092", "9093", "9094"]


def test_spark_runner_installs_the_project_with_its_spark_extra(services: Dict[str, Any]) -> None:
    spark = services["spark"]
    script = " ".join(spark["command"])
    assert "pip install" in script and ".[spark]" in script
    assert "openjdk-17-jre-headless" in script
    assert spark["network_mode"] == "host"
    assert "ZKCONSUMER_ZOOKEEPER_CONNECT" in spark["environment"]
