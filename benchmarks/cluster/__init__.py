"""LocalCluster plus what only this project's tests and benchmarks use (not shipped).

:class:`ProjectCluster` is :class:`zkconsumer.testing.LocalCluster` with Kafka's own
Scala tools run on the cluster's classpath (:mod:`.tools`), SSL listeners with generated
certificates (:mod:`.tls`), a ZooKeeper ensemble (:mod:`.ensemble`) of Kafka's ZooKeeper
3.4.6 or Debian's 3.8 (:mod:`.debian`) and production JVM options for the brokers
(``broker_jvm_options``, for benchmarks). :mod:`.proxy` is the TCP proxy that cuts one
client off from ZooKeeper (chaos runs, partition tests).
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

from zkconsumer.testing.core import KAFKA_MAIN

from .debian import DebianZooKeeper
from .ensemble import ZooKeeperEnsemble
from .tls import SslFiles, SslListeners, SslOptions
from .tools import KafkaTools

__all__ = ["DebianZooKeeper", "KafkaTools", "ProjectCluster", "SslFiles", "SslListeners", "SslOptions",
           "ZooKeeperEnsemble"]


class ProjectCluster(SslListeners, DebianZooKeeper, ZooKeeperEnsemble, KafkaTools):
    """A LocalCluster for this project's own suite.

    Takes LocalCluster's arguments, ``ssl`` (:class:`~benchmarks.cluster.tls.SslListeners`),
    ``zookeeper`` (:class:`~benchmarks.cluster.debian.DebianZooKeeper`), ``zookeeper_nodes``
    (:class:`~benchmarks.cluster.ensemble.ZooKeeperEnsemble`) and
    ``broker_jvm_options``: added last to the brokers' JVM options (which favour a quick
    start on a small machine: C1 only, serial GC), e.g. a production broker's for benchmarks.
    """

    def __init__(self, *args: Any, broker_jvm_options: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._broker_jvm_options = tuple(broker_jvm_options)

    def _java_argv(self, main_class: str, args: Sequence[str], log4j: str,
                   extra_options: Sequence[str] = (), classpath: Optional[str] = None) -> List[str]:
        if main_class == KAFKA_MAIN:
            extra_options = (*extra_options, *self._broker_jvm_options)
        return super()._java_argv(main_class, args, log4j, extra_options, classpath)
