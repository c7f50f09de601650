"""Fixtures shared by integration modules that need a cluster of their own.

The session-wide ones (``cluster``, ``make_topic``, ``topic``, ``zk``, ``group_id``) are in
``tests/conftest.py``. A module whose tests pause, stop or fill a cluster asks for ``local``
instead: a one-broker cluster started for that module only, with ``local_zk`` its ZooKeeper
client for one test. A module may set ``LOCAL_PARTITIONS`` (default 3): how many partitions
the cluster gives a topic it auto-creates.

``spark`` is a local SparkSession for one module, with zkconsumer's data source registered. A
module may set ``SPARK_MASTER`` (default ``local[2]``) and ``SPARK_PICKLE_BY_VALUE = True`` when
its tasks call functions defined in the module itself (executors cannot import test modules).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Iterator

import pytest
from kazoo.client import KazooClient
from support.common import Cli

from harness.cluster import ProjectCluster

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession


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


@pytest.fixture(scope="module")
def spark(request: pytest.FixtureRequest) -> Iterator["SparkSession"]:
    """A local SparkSession for the module (``SPARK_MASTER``, default ``local[2]``), stopped after it."""
    from pyspark import cloudpickle

    from spark_integration import register_data_source
    from spark_integration.testing import local_spark

    module = request.module
    by_value = getattr(module, "SPARK_PICKLE_BY_VALUE", False)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if by_value:
        cloudpickle.register_pickle_by_value(module)
    session = local_spark(f"zkconsumer {module.__name__}", master=getattr(module, "SPARK_MASTER", "local[2]"))
    session.sparkContext.setLogLevel("ERROR")
    register_data_source(session)
    try:
        yield session
    finally:
        session.stop()
        if by_value:
            cloudpickle.unregister_pickle_by_value(module)
