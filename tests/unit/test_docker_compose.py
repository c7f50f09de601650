"""docker-compose.yml and the application image's requirements, read as files (no engine needed)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any, Dict

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to parse docker-compose.yml (pip install PyYAML)")

ROOT = Path(__file__).resolve().parents[2]


def interpolate(value: object) -> str:
    """Compose's ``${VAR:-default}`` with no variables set."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", str(value))


@pytest.fixture(scope="module")
def services() -> Dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]


def test_every_service_uses_the_host_network_and_a_project_image(services: Dict[str, Any]) -> None:
    assert sorted(services) == ["kafka1", "kafka2", "kafka3", "runner", "spark-master", "spark-worker", "zookeeper"]
    for name, service in services.items():
        assert service["network_mode"] == "host", name
        assert "ports" not in service, name  # host networking publishes nothing
        assert interpolate(service["image"]) in ("zkconsumer/kafka:0.9.0.1", "zkconsumer/app:latest"), name


def test_three_brokers_with_distinct_ids_and_port_variables(services: Dict[str, Any]) -> None:
    brokers = [services[f"kafka{i}"] for i in (1, 2, 3)]
    assert [b["environment"]["BROKER_ID"] for b in brokers] == [0, 1, 2]
    assert [b["environment"]["BROKER_PORT"] for b in brokers] == [
        "${KAFKA1_PORT:-9092}", "${KAFKA2_PORT:-9093}", "${KAFKA3_PORT:-9094}"]
    for broker in brokers:
        assert interpolate(broker["environment"]["ZOOKEEPER_CONNECT"]) == "127.0.0.1:2181"
        assert broker["depends_on"]["zookeeper"]["condition"] == "service_healthy"
    assert services["zookeeper"]["environment"]["ZOOKEEPER_PORT"] == "${ZOOKEEPER_PORT:-2181}"


def test_runner_waits_for_a_healthy_cluster_and_shares_data_with_the_worker(services: Dict[str, Any]) -> None:
    runner = services["runner"]
    assert runner["command"] == ["run-examples"]
    assert {name: d["condition"] for name, d in runner["depends_on"].items()} == {
        "kafka1": "service_healthy", "kafka2": "service_healthy", "kafka3": "service_healthy",
        "spark-worker": "service_healthy"}
    assert "spark-data:/data" in runner["volumes"] and "spark-data:/data" in services["spark-worker"]["volumes"]


def test_image_requirements_are_setup_cfgs_with_the_spark_extra() -> None:
    spec = importlib.util.spec_from_file_location("requirements", ROOT / "docker" / "app" / "requirements.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lines = module.requirements(str(ROOT / "setup.cfg"), ["spark"])
    assert "kazoo>=2.9,<2.12" in lines and "pyspark>=4.0,<5" in lines
    assert not any(line.startswith("#") or "pytest" in line for line in lines)
