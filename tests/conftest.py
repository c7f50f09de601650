"""Shared fixtures: one real cluster per test session, unique topic and group names.

Tests under ``tests/integration`` are marked ``integration`` automatically, so
``pytest -m "not integration"`` runs only the unit tier (no JVM is started then:
the ``cluster`` fixture is lazy).
"""

from __future__ import annotations

import itertools
import re
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, List, Mapping, Optional

import pytest
from kazoo.client import KazooClient
from skip_policy import SkipPolicy  # tests/skip_policy.py, beside this file

from zkconsumer.testing import LocalCluster

if TYPE_CHECKING:  # pragma: no cover
    from harness.cluster import ProjectCluster
    from spark_integration.testing import LocalSparkCluster

INTEGRATION_DIR = Path(__file__).parent / "integration"


def pytest_configure(config: pytest.Config) -> None:
    """Register the skip policy (tests/skip_policy.py): skips listed, and fatal in CI unless allowed."""
    config.pluginmanager.register(SkipPolicy.from_environment(config.rootpath), "zkconsumer-skip-policy")


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Mark every test collected from tests/integration as ``integration``."""
    for item in items:
        if INTEGRATION_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def cluster() -> Iterator["ProjectCluster"]:
    """ZooKeeper + brokers 0, 1, 2 (4 partitions per auto-created topic), shared by the session.

    A LocalCluster that also runs Kafka's own tools (:mod:`harness.cluster`).
    Tests must leave it as they found it: restart brokers they stop or kill.
    """
    from harness.cluster import ProjectCluster  # imported here: unit-only runs never need it

    with ProjectCluster(brokers=3, partitions=4) as local:
        yield local


@pytest.fixture(scope="session")
def spark_cluster() -> Iterator["LocalSparkCluster"]:
    """A standalone Spark Master and two 1-core Workers on loopback, shared by the session.

    Executors are separate JVMs whose Python workers import this checkout. Tests may kill
    executors (Workers start new ones) but must stop the SparkSessions they create.
    """
    from spark_integration.testing import LocalSparkCluster  # imported here: unit-only runs never need it

    with LocalSparkCluster(workers=2, cores=1, pythonpath=[str(Path(__file__).resolve().parent.parent)]) as local:
        yield local


def _slug(request: pytest.FixtureRequest, limit: int = 40) -> str:
    """The test's name reduced to Kafka's legal characters, e.g. ``test_x-param-1``."""
    return re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name).strip("-")[:limit]


@pytest.fixture
def make_topic(cluster: "ProjectCluster", request: pytest.FixtureRequest) -> Callable[..., str]:
    """Factory creating a fresh topic on the session cluster; returns its unique name.

    ``make_topic(partitions=4, replication=1, config=None)`` returns once every partition
    has a leader known to every broker.
    """
    counter = itertools.count()
    slug = _slug(request)

    def make(partitions: int = 4, replication: int = 1, config: Optional[Mapping[str, object]] = None) -> str:
        name = f"t-{slug}-{next(counter)}-{uuid.uuid4().hex[:6]}"
        return cluster.create_topic(name, partitions=partitions, replication=replication, config=config)

    return make


@pytest.fixture
def topic(make_topic: Callable[..., str]) -> str:
    """A fresh topic with 4 partitions, replication 1."""
    return make_topic()


@pytest.fixture
def zk(cluster: LocalCluster) -> Iterator[KazooClient]:
    """A ZooKeeper client of the session cluster for this test, closed after it."""
    client = KazooClient(hosts=cluster.zk_connect)
    client.start()
    yield client
    client.stop()
    client.close()


@pytest.fixture
def group_id(request: pytest.FixtureRequest) -> str:
    """A consumer group id unique to this test (legal as a Kafka group.id)."""
    return f"g-{_slug(request)}-{uuid.uuid4().hex[:8]}"
