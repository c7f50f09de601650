"""Fixtures shared by integration modules that need a cluster of their own.

The session-wide ones (``cluster``, ``make_topic``, ``topic``, ``zk``, ``group_id``) are in
``tests/conftest.py``. A module whose tests pause, stop or fill a cluster asks for ``local``
instead: a one-broker cluster started for that module only, with ``local_zk`` its ZooKeeper
client for one test. A module may set ``LOCAL_PARTITIONS`` (default 3): how many partitions
the cluster gives a topic it auto-creates.
"""

from __future__ import annotations

from typing import Iterator

import pytest
from kazoo.client import KazooClient
from support import Cli

from benchmarks.cluster import ProjectCluster


@pytest.fixture(scope="module")
def local(request: pytest.FixtureRequest) -> Iterator[ProjectCluster]:
    """ZooKeeper + one broker of the test module's own (a ProjectCluster: Kafka's tools run against it)."""
    partitions = getattr(request.module, "LOCAL_PARTITIONS", 3)
    with ProjectCluster(brokers=1, partitions=partitions) as cluster:
        yield cluster


@pytest.fixture
def local_zk(local: ProjectCluster) -> Iterator[KazooClient]:
    """A ZooKeeper client of ``local`` for this test, closed after it."""
    client = local.kazoo_client()
    yield client
    client.stop()
    client.close()


@pytest.fixture
def cli(cluster, capsys) -> Cli:
    """The CLI in-process against the session's cluster: ``code, out, err = cli("groups", "list")``."""
    return Cli(cluster, capsys)
