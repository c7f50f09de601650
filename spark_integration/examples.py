"""Helpers shared by the runnable examples ``scripts/spark_*.py`` (not needed by applications).

Each example either starts a throw-away :class:`~zkconsumer.testing.LocalCluster`
(one broker) or, given ``--zookeeper``, uses an existing cluster; produces
sample data; and runs its Spark job on ``local[2]`` (or on ``$ZKCONSUMER_SPARK_MASTER``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import uuid
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Tuple, Union

from zkconsumer import ConsumerConfig

from .group_view import GroupView

__all__ = ["ExampleCluster", "example_cluster", "example_parser", "local_spark"]


class ExampleCluster:
    """Where an example runs: a LocalCluster it started, or an existing cluster found through ZooKeeper."""

    def __init__(self, zk_connect: str, local: Any = None) -> None:
        self.zk_connect = zk_connect
        self._local = local

    def create_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic`` on a local cluster; on an existing cluster rely on broker auto-creation."""
        if self._local is not None:
            self._local.create_topic(topic, partitions=partitions, replication=1)
        else:
            print(f"  (existing cluster: {topic!r} is created by the broker on first use if it does not exist)")

    def produce(self, topic: str, values: Sequence[Union[str, bytes]],
                keys: Optional[Sequence[Union[str, bytes]]] = None) -> List[Tuple[int, int]]:
        """Send ``values`` (str is encoded as UTF-8); returns ``(partition, offset)`` of each."""
        if self._local is not None:
            return list(self._local.produce(topic, values, keys=keys))
        from kafka import KafkaProducer

        config = ConsumerConfig({"zookeeper.connect": self.zk_connect, "group.id": "zkconsumer-example"})
        with GroupView(config) as view:
            servers = [f"{host}:{port}" for host, port in view.brokers()]
        producer = KafkaProducer(bootstrap_servers=servers, api_version=(0, 8, 2), acks="all", linger_ms=0)
        try:
            key_list = list(keys) if keys is not None else [None] * len(values)
            futures = [producer.send(topic, value=_bytes(v), key=_bytes(k)) for k, v in zip(key_list, values)]
            producer.flush(30)
            return [(md.partition, md.offset) for md in (f.get(30) for f in futures)]
        finally:
            producer.close(5)


def _bytes(value: Union[str, bytes, None]) -> Optional[bytes]:
    return value.encode() if isinstance(value, str) else value


@contextlib.contextmanager
def example_cluster(zookeeper: Optional[str], partitions: int = 4) -> Iterator[ExampleCluster]:
    """An :class:`ExampleCluster`: ``zookeeper`` if given, else a LocalCluster(brokers=1) stopped on exit."""
    if zookeeper:
        yield ExampleCluster(zookeeper)
        return
    from zkconsumer.testing import LocalCluster

    print("Starting ZooKeeper and 1 Kafka broker (first run: downloads Kafka 0.9.0.1) ...", flush=True)
    with LocalCluster(brokers=1, partitions=partitions) as cluster:
        print(f"  ZooKeeper: {cluster.zk_connect}")
        yield ExampleCluster(cluster.zk_connect, cluster)


def example_parser(description: str, default_topic: str) -> argparse.ArgumentParser:
    """``--zookeeper``, ``--topic``, ``--group``, ``--messages`` (unique topic/group names by default)."""
    suffix = uuid.uuid4().hex[:6]
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--zookeeper", help="use this cluster (host:port[/chroot]) instead of starting a local one")
    parser.add_argument("--topic", default=f"{default_topic}-{suffix}", help="topic to produce to and consume")
    parser.add_argument("--group", default=f"spark-example-{suffix}", help="consumer group id")
    parser.add_argument("--messages", type=int, default=40, help="sample messages to produce")
    return parser


def local_spark(app_name: str, master: str = "local[2]") -> Any:
    """A small SparkSession whose Python workers run this interpreter and can import this checkout.

    ``$ZKCONSUMER_SPARK_MASTER``, when set, replaces ``master`` (the compose runner sets it to
    its Spark standalone Master, ``spark://127.0.0.1:7077``).
    """
    master = os.environ.get("ZKCONSUMER_SPARK_MASTER") or master
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    root = str(Path(__file__).resolve().parent.parent)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master(master).appName(app_name)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.memory", "512m")
            .getOrCreate())
