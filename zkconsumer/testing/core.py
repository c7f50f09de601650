"""What every part of :class:`~zkconsumer.testing.LocalCluster` shares: its state, the JVM command line, waiting.

:class:`ClusterCore` sets up the cluster's state (it holds ``LocalCluster``'s constructor)
and the helpers the ZooKeeper controls (:mod:`.zookeepers`) and the cluster itself
(:mod:`.cluster`) use: the running check, node and broker ids, the work and log
directories, the JVM argv (:func:`java_command`), polling with a deadline
(:meth:`ClusterCore._wait_for`) and the cluster's own ZooKeeper client.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Union

from kazoo.client import KazooClient

from zkconsumer.testing import processes
from zkconsumer.testing.errors import ClusterStartError, ClusterTimeoutError, LocalClusterError
from zkconsumer.testing.properties import PropertyValue
from zkconsumer.testing.workdir import WorkDir

HOST = "127.0.0.1"
#: JVM options of every JVM: small heap, serial GC and the C1 compiler only, which
#: start fast and stay light on a 2-core machine running several JVMs.
JVM_OPTIONS = (
    "-Xms64m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
    "-Djava.net.preferIPv4Stack=true",
)
ZOOKEEPER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
KAFKA_MAIN = "kafka.Kafka"


def java_command(java: str, classpath: str, main_class: str, args: Sequence[str], *, heap: str,
                 log4j_path: str, tmp_dir: str, tag: str, extra_options: Sequence[str] = ()) -> List[str]:
    """The argv running ``main_class`` in a JVM configured for the local cluster.

    ``tag`` is added as ``-Dzkconsumer.cluster=<tag>`` so the cluster's processes can be
    found with ``pgrep -f``; ``extra_options`` come last and win.
    """
    return [
        java, f"-Xmx{heap}", *JVM_OPTIONS,
        f"-Djava.io.tmpdir={tmp_dir}",
        f"-Dlog4j.configuration=file:{log4j_path}",
        f"-Dzkconsumer.cluster={tag}",
        *extra_options,
        "-cp", classpath, main_class, *args,
    ]


class ClusterCore:
    """The state and shared helpers of a local cluster (see the module docstring); not used alone."""

    def __init__(self, brokers: int = 3, partitions: int = 4, *,
                 broker_config: Optional[Mapping[str, Optional[PropertyValue]]] = None,
                 zookeeper_config: Optional[Mapping[str, Optional[PropertyValue]]] = None,
                 kafka_home: Optional[Union[str, Path]] = None, heap: str = "256m",
                 startup_timeout: float = 120.0) -> None:
        """See :class:`~zkconsumer.testing.LocalCluster` for the arguments."""
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        if partitions < 1:
            raise ValueError("partitions must be >= 1")
        self._broker_count = brokers
        self.partitions = partitions
        self._broker_config = dict(broker_config or {})
        self._zookeeper_config = dict(zookeeper_config or {})
        self._requested_home = Path(kafka_home) if kafka_home is not None else None
        self._heap = heap
        self._startup_timeout = startup_timeout
        self._lock = threading.RLock()
        self._state = "new"
        self._work: Optional[WorkDir] = None
        self._home: Optional[Path] = None
        self._java = ""
        self._classpath = ""
        self._zk_port = 0
        self._broker_ports: Dict[int, int] = {}
        self._zookeeper: Optional[processes.JavaProcess] = None
        self._brokers: Dict[int, processes.JavaProcess] = {}
        self._admin: Optional[KazooClient] = None
        self._clients: List[KazooClient] = []

    def _require_running(self) -> None:
        if self._state != "running":
            raise LocalClusterError(f"the cluster is {self._state}, not running")

    @property
    def zk_connect(self) -> str:
        """ZooKeeper connect string, ``127.0.0.1:<port>`` (no chroot)."""
        self._require_running()
        return f"{HOST}:{self._zk_port}"

    @property
    def broker_ids(self) -> List[int]:
        """The ids of all brokers of the cluster, running or not: ``[0, ..., n-1]``."""
        return list(range(self._broker_count))

    def _check_broker_id(self, broker_id: int) -> None:
        if broker_id not in self._broker_ports:
            raise LocalClusterError(f"no broker {broker_id}; brokers are {self.broker_ids}")

    @property
    def work_dir(self) -> Path:
        """The cluster's temporary directory (configs, data, logs)."""
        self._require_running()
        assert self._work is not None
        return self._work.path

    @property
    def log_dir(self) -> Path:
        """Where the JVMs log: ``zookeeper.log``, ``broker-<id>.log``."""
        return self.work_dir / "logs"

    def _java_argv(self, main_class: str, args: Sequence[str], log4j: str,
                   extra_options: Sequence[str] = (), classpath: Optional[str] = None) -> List[str]:
        return java_command(self._java, classpath or self._classpath, main_class, args, heap=self._heap,
                            log4j_path=str(self.work_dir / "conf" / log4j), tmp_dir=str(self.work_dir / "tmp"),
                            tag=str(self.work_dir), extra_options=extra_options)

    def _wait_for(self, what: str, condition: Callable[[], bool], timeout: float,
                  process: Optional[processes.JavaProcess] = None,
                  error: type = ClusterTimeoutError, interval: float = 0.1) -> None:
        """Poll ``condition`` until true; fail early if ``process`` exits, or after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not condition():
            if process is not None and not process.running():
                raise ClusterStartError(
                    f"{process.name} exited (status {process.exit_code()}) while waiting for {what}; "
                    f"end of {process.log_path}:\n{process.log_tail()}")
            if time.monotonic() > deadline:
                detail = f"; end of {process.log_path}:\n{process.log_tail()}" if process is not None else ""
                raise error(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
            time.sleep(interval)

    @property
    def _zk(self) -> KazooClient:
        self._require_running()
        assert self._admin is not None
        return self._admin
