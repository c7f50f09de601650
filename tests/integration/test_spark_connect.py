"""The zkconsumer data source from a Spark Connect client, against a real Connect server and the real cluster.

The Connect server is started from the installed PySpark (``spark-submit
--class org.apache.spark.sql.connect.service.SparkConnectServer``, local[2])
as a child process of the test process, on a free loopback port. The client
registers the source with ``spark.dataSource.register`` (what
``register_data_source`` calls); the server's Python workers import
``spark_integration`` from this checkout (PYTHONPATH).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Dict, Iterator

import pytest
from support.common import consumer_props, produced_values

from spark_integration import (
    KafkaStreamSource,
    SparkConnectUnsupportedError,
    create_rdd,
    is_connect_session,
    register_data_source,
)
from zkconsumer import ZkConsumerError

pytestmark = pytest.mark.spark

CONNECT_CLIENT_MODULES = ("grpc", "grpc_status", "google.rpc", "pandas", "pyarrow", "zstandard")


def _missing_client_modules() -> list:
    import importlib

    missing = []
    for name in CONNECT_CLIENT_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory) -> Iterator["object"]:
    missing = _missing_client_modules()
    if missing:
        pytest.skip(f"the Spark Connect client needs {', '.join(missing)} (pip install -e '.[spark]' in this checkout)")
    from spark_integration.connect_server import LocalConnectServer

    server = LocalConnectServer(tmp_path_factory.mktemp("connect"))
    started = time.monotonic()
    server.start(timeout=180)
    print(f"Spark Connect server up at {server.url} in {time.monotonic() - started:.1f}s")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def remote(connect_server) -> Iterator["object"]:
    """A Spark Connect client session; PySpark's process-wide Connect flag is undone afterwards."""
    from pyspark.sql import SparkSession

    flag_was_set = "SPARK_CONNECT_MODE_ENABLED" in os.environ
    session = SparkSession.builder.remote(connect_server.url).getOrCreate()
    assert is_connect_session(session), type(session)
    assert register_data_source(session) == "zkconsumer"
    yield session
    session.stop()
    if not flag_was_set:  # remote() marks the whole process as Connect; classic sessions of later modules must not be
        os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)


def _props(cluster, group: str) -> Dict[str, str]:
    return {"zookeeper.connect": cluster.zk_connect, "group.id": group, "auto.offset.reset": "smallest"}


def test_batch_read_from_a_spark_connect_client(remote, cluster, make_topic, group_id) -> None:
    topic = make_topic(partitions=4)
    values = produced_values(25, prefix="c")
    cluster.produce(topic, values)
    df = (remote.read.format("zkconsumer").option("zookeeper.connect", cluster.zk_connect)
          .option("group.id", group_id).option("topics", topic).option("auto.offset.reset", "smallest").load())
    got = [r.value for r in df.select("value").collect()]
    assert sorted(got) == sorted(values)


def test_streaming_source_from_a_spark_connect_client_reads_every_message_once(
        remote, cluster, make_topic, group_id, tmp_path: Path) -> None:
    topic = make_topic(partitions=4)
    first = produced_values(30, prefix="a")
    cluster.produce(topic, first)

    def run(query_name: str) -> None:
        df = (remote.readStream.format("zkconsumer")
              .option("zookeeper.connect", cluster.zk_connect).option("group.id", group_id)
              .option("topics", topic).option("auto.offset.reset", "smallest").load())
        query = (df.selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
                 .writeStream.format("parquet").option("path", str(tmp_path / "table"))
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .queryName(query_name).trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert not query.isActive, "the availableNow query did not finish within 120 s"
        assert query.exception() is None

    run("connect_run_1")
    rows = remote.read.parquet(str(tmp_path / "table")).collect()
    assert sorted(r.value.encode() for r in rows) == sorted(first)

    second = produced_values(20, prefix="b")
    cluster.produce(topic, second)
    run("connect_run_2")  # same checkpoint: only the new messages
    rows = remote.read.parquet(str(tmp_path / "table")).collect()
    assert len(rows) == len(first) + len(second)
    assert sorted(r.value.encode() for r in rows) == sorted(first + second)
    assert len({(r.partition, r.offset) for r in rows}) == len(rows)


@pytest.mark.parametrize("api", ["foreach_stream", "create_rdd"])
def test_rdd_apis_with_a_spark_connect_session_raise_a_clear_error(remote, cluster, group_id, api: str) -> None:
    props = consumer_props(cluster, group_id, consumer_timeout_ms=1000)
    with pytest.raises(SparkConnectUnsupportedError) as raised:
        if api == "foreach_stream":
            KafkaStreamSource(props, {"any-topic": 1}).foreach_stream(remote, lambda stream: None)
        else:
            create_rdd(remote, _props(cluster, group_id), ["any-topic"])
    error = raised.value
    assert isinstance(error, ZkConsumerError) and isinstance(error, TypeError)
    assert not isinstance(error, AttributeError)
    assert error.retriable is False and error.api == api
    message = str(error)
    assert "Spark Connect" in message and api in message
    assert 'format("zkconsumer")' in message  # names the alternative
