"""LocalCluster plus what only this project's tests and benchmarks use (not shipped).

:class:`ProjectCluster` is :class:`zkconsumer.testing.LocalCluster` with Kafka's own
Scala tools run on the cluster's classpath (:mod:`.tools`), SSL listeners with generated
certificates (:mod:`.tls`), with LocalCluster's ``kerberos=`` a SASL_SSL listener as well
(:mod:`.kerberos`), a ZooKeeper ensemble (:mod:`.ensemble`) of Kafka's ZooKeeper
3.4.6 or Debian's 3.8 (:mod:`.debian`) and production JVM options for the brokers
(``broker_jvm_options``, for benchmarks), and keeps its work directory on request
(``keep_work_dir``, for the chaos runs' post-mortems). :mod:`.proxy` is the TCP proxy that cuts one
client off from ZooKeeper (chaos runs, partition tests).
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence

from zkconsumer.testing import LocalCluster, processes
from zkconsumer.testing.core import KAFKA_MAIN

from .debian import DebianZooKeeper
from .ensemble import ZooKeeperEnsemble
from .kerberos import KerberosOptions
from .tls import SslFiles, SslListeners, SslOptions
from .tools import KafkaTools

__all__ = ["DebianZooKeeper", "KafkaTools", "KerberosOptions", "ProjectCluster", "SslFiles",
           "SslListeners", "SslOptions", "ZooKeeperEnsemble"]


class ProjectCluster(LocalCluster, SslListeners, DebianZooKeeper, ZooKeeperEnsemble, KafkaTools):
    """A LocalCluster for this project's own suite.

    Takes LocalCluster's arguments, ``kerberos`` (LocalCluster's own),
    ``ssl`` (:class:`~harness.cluster.tls.SslListeners`),
    ``zookeeper`` (:class:`~harness.cluster.debian.DebianZooKeeper`), ``zookeeper_nodes``
    (:class:`~harness.cluster.ensemble.ZooKeeperEnsemble`) and
    ``broker_jvm_options``: added last to the brokers' JVM options (which favour a quick
    start on a small machine: C1 only, serial GC), e.g. a production broker's for benchmarks.
    ``keep_work_dir`` (default: whether ``ZKCONSUMER_KEEP_CLUSTER_DIR`` is set and not ``0``)
    keeps the work directory, logs and data, after stop(); later clusters' sweeps leave it alone.
    """

    def __init__(self, *args: Any, broker_jvm_options: Sequence[str] = (), keep_work_dir: Optional[bool] = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._broker_jvm_options = tuple(broker_jvm_options)
        if keep_work_dir is None:
            keep_work_dir = os.environ.get("ZKCONSUMER_KEEP_CLUSTER_DIR", "") not in ("", "0")
        self._keep_work_dir = keep_work_dir

    def stop(self, grace: float = 5.0) -> None:
        """LocalCluster's stop(); with ``keep_work_dir`` the brokers stop gracefully first
        (SIGTERM, SIGKILL after ``grace`` s), so the kept data is consistent."""
        with self._lock:
            if self._keep_work_dir and self._state == "running" and self._work is not None:
                processes.terminate_all([b.process for b in self._brokers.values() if b.process is not None], grace)
                self._work.release()  # keeps the directory: LocalCluster.stop() has nothing to remove then
            super().stop(grace)

    def _java_argv(self, main_class: str, args: Sequence[str], log4j: str,
                   extra_options: Sequence[str] = (), classpath: Optional[str] = None) -> List[str]:
        if main_class == KAFKA_MAIN:
            extra_options = (*extra_options, *self._broker_jvm_options)
        return super()._java_argv(main_class, args, log4j, extra_options, classpath)
