"""docker-compose.yml's cluster on free loopback ports, driven through the Docker CLI.

Used by test_docker.py. :class:`ComposeCluster` runs one compose project (a unique name,
every port variable of docker-compose.yml set to a port free at the time), answers to
``zk_connect``, ``bootstrap_servers`` and ``run_tool`` the way the project's LocalCluster
does (so helpers written for that cluster work unchanged), and makes faults through the
engine: ``docker("kill", ...)``, ``pause``, ``restart``. :class:`EngineObjects` is what the
engine holds at one moment, to show that ``down -v`` leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import uuid
from typing import Dict, FrozenSet, List, Optional

from kazoo.client import KazooClient

from support import ROOT
from support.common import wait_until
from zkconsumer.testing import free_ports

COMPOSE_FILE = ROOT / "docker-compose.yml"
#: The images scripts/setup-docker builds (docker-compose.yml's defaults).
IMAGES = ("zkconsumer/kafka:0.9.0.1", "zkconsumer/app:latest")
#: docker-compose.yml's port variables, each given a free port.
PORT_VARIABLES = ("ZOOKEEPER_PORT", "KAFKA1_PORT", "KAFKA2_PORT", "KAFKA3_PORT", "SPARK_MASTER_PORT",
                  "SPARK_MASTER_WEBUI_PORT", "SPARK_WORKER_PORT", "SPARK_WORKER_WEBUI_PORT")
#: Broker id -> its compose service.
BROKER_SERVICES = {0: "kafka1", 1: "kafka2", 2: "kafka3"}
CLUSTER_SERVICES = ("zookeeper", *BROKER_SERVICES.values(), "spark-master", "spark-worker")


def run(argv: List[str], timeout: float, env: Optional[Dict[str, str]] = None,
        check: bool = True) -> "subprocess.CompletedProcess[str]":
    """Run a Docker CLI command to completion (text output); with ``check`` a failure raises, showing its output."""
    result = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {result.returncode}:\n{result.stdout[-3000:]}\n"
                             f"{result.stderr[-3000:]}")
    return result


def engine_problem() -> Optional[str]:
    """Why the compose cluster cannot run here (no engine, no images), or None when it can."""
    try:
        info = run(["docker", "info", "--format", "{{.ServerVersion}}"], timeout=30, check=False)
    except FileNotFoundError:
        return "no `docker` command (bash scripts/setup-docker installs Debian's docker.io)"
    if info.returncode != 0:
        return f"no Docker engine answers (`docker info`: {info.stderr.strip()[-300:]}); run bash scripts/setup-docker"
    missing = [image for image in IMAGES
               if run(["docker", "image", "inspect", image], timeout=30, check=False).returncode != 0]
    if missing:
        return f"images {missing} are not built; run bash scripts/setup-docker"
    return None


@dataclasses.dataclass(frozen=True)
class EngineObjects:
    """The ids of the engine's containers, networks, volumes and images at one moment."""

    containers: FrozenSet[str]
    networks: FrozenSet[str]
    volumes: FrozenSet[str]
    images: FrozenSet[str]

    @classmethod
    def now(cls) -> "EngineObjects":
        def ids(*argv: str) -> FrozenSet[str]:
            return frozenset(run(["docker", *argv], timeout=60).stdout.split())

        return cls(ids("ps", "--all", "--quiet", "--no-trunc"), ids("network", "ls", "--quiet", "--no-trunc"),
                   ids("volume", "ls", "--quiet"), ids("images", "--all", "--quiet", "--no-trunc"))

    def added_since(self, before: "EngineObjects") -> Dict[str, FrozenSet[str]]:
        """What exists now and did not ``before``, by kind (empty kinds left out)."""
        added = {field.name: getattr(self, field.name) - getattr(before, field.name)
                 for field in dataclasses.fields(self)}
        return {kind: ids for kind, ids in added.items() if ids}


class ComposeCluster:
    """One project of docker-compose.yml (ZooKeeper, brokers 0-2, Spark Master + Worker) on free ports."""

    def __init__(self) -> None:
        self.project = f"zkconsumer-test-{uuid.uuid4().hex[:8]}"
        self.ports = dict(zip(PORT_VARIABLES, free_ports(len(PORT_VARIABLES))))
        self.env = dict(os.environ, **{name: str(port) for name, port in self.ports.items()})
        self.broker_ids = sorted(BROKER_SERVICES)

    @property
    def zk_connect(self) -> str:
        return f"127.0.0.1:{self.ports['ZOOKEEPER_PORT']}"

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{self.ports[f'KAFKA{b + 1}_PORT']}" for b in self.broker_ids)

    # ------------------------------------------------------------------ compose and docker

    def compose(self, *args: str, timeout: float = 300, check: bool = True) -> "subprocess.CompletedProcess[str]":
        """``docker-compose -p <project> -f docker-compose.yml ARGS`` with this project's ports."""
        return run(["docker-compose", "-p", self.project, "-f", str(COMPOSE_FILE), *args], timeout, self.env, check)

    def up(self) -> None:
        """Start every service but the runner; returns once ZooKeeper and the brokers report healthy."""
        self.compose("up", "--detach", *CLUSTER_SERVICES, timeout=600)

    def down(self) -> None:
        """``down -v``: remove the project's containers, networks and volumes. Idempotent."""
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "10", timeout=300)

    def container(self, service: str) -> str:
        """The id of ``service``'s container."""
        container_id = self.compose("ps", "--quiet", service, timeout=60).stdout.strip()
        assert container_id, f"{service} has no container in {self.project}"
        return container_id

    def docker(self, *args: str, timeout: float = 120) -> "subprocess.CompletedProcess[str]":
        """A ``docker`` command (kill, pause, unpause, restart, start, exec ...); a failure raises."""
        return run(["docker", *args], timeout)

    def run_app(self, *argv: str, timeout: float = 900) -> "subprocess.CompletedProcess[str]":
        """``docker-compose run --rm runner ARGV``: a command in a fresh application container (not checked)."""
        return self.compose("run", "--rm", "-T", "runner", *argv, timeout=timeout, check=False)

    def run_tool(self, main_class: str, *args: str, timeout: float = 120.0) -> "subprocess.CompletedProcess[str]":
        """A Kafka tool run inside the ZooKeeper service's container (the Kafka image); not checked."""
        return run(["docker", "exec", self.container("zookeeper"), "kafka-entrypoint", "tool", main_class, *args],
                   timeout, check=False)

    # ------------------------------------------------------------------ ZooKeeper's view

    def kazoo_client(self) -> KazooClient:
        """A started client of the project's ZooKeeper; the caller stops and closes it."""
        client = KazooClient(hosts=self.zk_connect, timeout=10)
        client.start(60)
        return client

    def registered_brokers(self) -> List[int]:
        """The broker ids in /brokers/ids ([] while ZooKeeper does not answer)."""
        try:
            client = self.kazoo_client()
        except Exception:  # noqa: BLE001 - not up yet, or paused
            return []
        try:
            return sorted(int(b) for b in client.get_children("/brokers/ids")) if client.exists("/brokers/ids") else []
        finally:
            client.stop()
            client.close()

    def wait_for_brokers(self, timeout: float = 180) -> None:
        wait_until(lambda: self.registered_brokers() == self.broker_ids, timeout,
                   f"brokers {self.broker_ids} to be registered in {self.zk_connect}", interval=1)

    def create_topic(self, name: str, partitions: int, replication: int) -> str:
        """Create ``name`` with Kafka's TopicCommand (in the container); return once every partition has a leader."""
        result = self.run_tool("kafka.admin.TopicCommand", "--zookeeper", self.zk_connect, "--create", "--topic", name,
                               "--partitions", str(partitions), "--replication-factor", str(replication))
        assert result.returncode == 0, result.stdout + result.stderr
        client = self.kazoo_client()
        try:
            def leaders() -> bool:
                paths = [f"/brokers/topics/{name}/partitions/{p}/state" for p in range(partitions)]
                return all(client.exists(path) and b'"leader":-1' not in client.get(path)[0] for path in paths)

            wait_until(leaders, 120, f"a leader for every partition of {name}", interval=0.5)
        finally:
            client.stop()
            client.close()
        return name
