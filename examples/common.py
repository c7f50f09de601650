"""Helpers shared by the runnable examples ``examples/spark_*.py`` (not shipped; not needed by applications).

Each example either starts a throw-away :class:`~zkconsumer.testing.LocalCluster`
(one broker) or, given ``--zookeeper``, uses an existing cluster; produces
sample data; and runs its Spark job on ``local[2]`` (or on ``$ZKCONSUMER_SPARK_MASTER``).
"""

from __future__ import annotations

import argparse
import contextlib
import uuid
from typing import Any, Iterator, List, Optional, Sequence, Tuple, Union

from spark_integration.group_view import GroupView
from spark_integration.testing import local_spark
from zkconsumer import ConsumerConfig

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
