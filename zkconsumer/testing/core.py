"""The base of :class:`~zkconsumer.testing.LocalCluster`: its state, its JVMs, its ZooKeeper.

:class:`ClusterCore` sets up the cluster's state (it holds ``LocalCluster``'s constructor)
and the helpers every part uses: the running check, broker ids, the work and log
directories, the JVM argv (:meth:`ClusterCore._java_argv`), polling with a deadline
(:meth:`ClusterCore._wait_for`) and the cluster's own ZooKeeper client.

:class:`ZooKeeperControls` starts the ZooKeeper server and holds its fault controls. The
server keeps its port and data directory across a restart, so sessions whose timeout has
not run out survive a kill and restart (ZooKeeper restores them from its log and restarts
their timers), as they do on a real ensemble. :meth:`ZooKeeperControls.expire_session`
ends a client's session for real.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from zkconsumer.testing import processes
from zkconsumer.testing.errors import ClusterStartError, ClusterTimeoutError, LocalClusterError
from zkconsumer.testing.probes import sessions_with_ephemerals, srvr_fields, zookeeper_command
from zkconsumer.testing.properties import PropertyValue, render_properties, zookeeper_properties
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
        """The argv running ``main_class`` in a JVM of this cluster, logging as ``conf/<log4j>`` says.

        ``-Dzkconsumer.cluster=<work dir>`` tags it, so ``pgrep -f`` finds the cluster's
        processes; ``extra_options`` come last and win; ``classpath`` replaces Kafka's.
        """
        work = self.work_dir
        return [self._java, f"-Xmx{self._heap}", *JVM_OPTIONS, f"-Djava.io.tmpdir={work / 'tmp'}",
                f"-Dlog4j.configuration=file:{work / 'conf' / log4j}", f"-Dzkconsumer.cluster={work}",
                *extra_options, "-cp", classpath or self._classpath, main_class, *args]

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


class ZooKeeperControls(ClusterCore):
    """The ZooKeeper part of :class:`~zkconsumer.testing.LocalCluster`: its server, faults, clients, session expiry."""

    @property
    def zk_port(self) -> int:
        """ZooKeeper's client port (stable across restarts)."""
        self._require_running()
        return self._zk_port

    def _start_zookeeper(self) -> None:
        """Write the server's config, start it, wait until it serves, connect the cluster's own client."""
        data_dir = self.work_dir / "zookeeper"
        data_dir.mkdir()
        config = self.work_dir / "conf" / "zookeeper.properties"
        config.write_text(render_properties(zookeeper_properties(str(data_dir), self._zk_port, self._zookeeper_config)))
        self._zookeeper = self._zookeeper_process("zookeeper", str(config))
        self._zookeeper.start()
        self._wait_serving(self._zookeeper, self._zk_port, self._startup_timeout)
        self._connect_admin()

    def _zookeeper_process(self, name: str, config: str) -> processes.JavaProcess:
        """A ZooKeeper server JVM named ``name`` (its log: ``<name>.log``) reading ``config``."""
        argv = self._java_argv(ZOOKEEPER_MAIN, [config], "log4j-server.properties")
        return processes.JavaProcess(name, argv, str(self.log_dir / f"{name}.log"), cwd=str(self.work_dir))

    def _connect_admin(self) -> None:
        # Reconnect attempts at most 0.5 s apart: after a ZooKeeper restart the cluster's own
        # client is back as soon as the server serves (kazoo's default backoff grows to ~10 s).
        self._admin = KazooClient(hosts=self.zk_connect, timeout=10.0,
                                  connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 0.5})
        self._admin.start(timeout=30)

    def _wait_serving(self, server: processes.JavaProcess, port: int, timeout: float) -> None:
        self._wait_for(f"{server.name} on port {port} to serve", lambda: zookeeper_mode(port) is not None,
                       timeout, server, ClusterStartError)

    def _wait_admin_connected(self, timeout: float) -> None:
        admin = self._zk
        self._wait_for("the cluster's ZooKeeper client to reconnect", lambda: admin.state == KazooState.CONNECTED,
                       timeout)

    def _zookeeper_processes(self) -> List[processes.JavaProcess]:
        """Every ZooKeeper server of the cluster, running or not (``stop()`` stops them all)."""
        return [self._zookeeper] if self._zookeeper is not None else []

    def _running_zookeeper(self) -> "subprocess.Popen[bytes]":
        self._require_running()
        if self._zookeeper is None or self._zookeeper.process is None or not self._zookeeper.running():
            raise LocalClusterError("ZooKeeper is not running")
        return self._zookeeper.process

    def pause_zookeeper(self) -> None:
        """SIGSTOP ZooKeeper: connections stay open but nothing answers."""
        with self._lock:
            processes.signal_group(self._running_zookeeper(), signal.SIGSTOP)

    def resume_zookeeper(self) -> None:
        """SIGCONT a paused ZooKeeper (a no-op if it is not paused)."""
        with self._lock:
            processes.signal_group(self._running_zookeeper(), signal.SIGCONT)

    def kill_zookeeper(self) -> None:
        """SIGKILL ZooKeeper and return once it is gone (its data directory stays)."""
        self.stop_zookeeper(grace=0.0)

    def stop_zookeeper(self, grace: float = 5.0) -> None:
        """Stop ZooKeeper with SIGTERM (SIGKILL after ``grace`` s; at once if 0); its data stays."""
        with self._lock:
            stop_servers([self._running_zookeeper()], grace)

    def start_zookeeper(self, *, timeout: Optional[float] = None) -> None:
        """Start a killed or stopped ZooKeeper again on the same port and data directory.

        Returns once it serves requests and the cluster's own client is connected.
        """
        timeout = timeout or self._startup_timeout
        with self._lock:
            self._require_running()
            if self.zookeeper_running():
                raise LocalClusterError("ZooKeeper is already running")
            assert self._zookeeper is not None
            self._zookeeper.start()
            self._wait_serving(self._zookeeper, self._zk_port, timeout)
        self._wait_admin_connected(timeout)

    def restart_zookeeper(self, down_for: float = 0.0, *, kill: bool = True) -> None:
        """Kill (or stop, ``kill=False``) ZooKeeper, wait ``down_for`` seconds, start it again."""
        self.stop_zookeeper(grace=0.0 if kill else 5.0)
        if down_for > 0:
            time.sleep(down_for)
        self.start_zookeeper()

    def zookeeper_running(self) -> bool:
        """True while ZooKeeper's JVM has not exited; it may be paused."""
        return self._zookeeper is not None and self._zookeeper.running()

    def kazoo_client(self, chroot: str = "", **kwargs: Any) -> KazooClient:
        """A started KazooClient on this cluster (optionally under ``chroot``), closed by stop()."""
        client = KazooClient(hosts=self.zk_connect + chroot, **kwargs)
        client.start(timeout=30)
        with self._lock:
            self._clients.append(client)
        return client

    def expire_session(self, client: KazooClient, timeout: float = 30.0) -> None:
        """Make ZooKeeper expire ``client``'s session for real.

        A second client joins the same session (id and password) and closes it: the
        server ends the session, deletes its ephemeral nodes and drops the first
        client's connection. Returns once the server no longer has the session's
        ephemerals and ``client`` has seen ``KazooState.LOST`` (kazoo then opens a new
        session by itself).
        """
        session_id, password = client.client_id
        lost = threading.Event()

        def on_state(state: KazooState) -> None:
            if state == KazooState.LOST:
                lost.set()

        client.add_listener(on_state)
        try:
            twin = KazooClient(hosts=self.zk_connect, client_id=(session_id, password), timeout=10.0)
            twin.start(timeout=timeout)
            twin.stop()
            twin.close()
            self._wait_for(f"session 0x{session_id:x} to end", lambda: not self._has_ephemerals(session_id), timeout)
            if not lost.wait(timeout):
                raise ClusterTimeoutError(f"client did not observe the expiry of session 0x{session_id:x}")
        finally:
            client.remove_listener(on_state)

    def _has_ephemerals(self, session_id: int) -> bool:
        """Whether the server still lists ephemeral nodes of ``session_id`` (its ``dump``)."""
        return session_id in sessions_with_ephemerals(zookeeper_command(HOST, self._zk_port, "dump"))


def zookeeper_mode(port: int) -> Optional[str]:
    """``standalone``, ``leader`` or ``follower`` per the ``srvr`` of the server on ``port``;
    None if it does not serve (down, paused, or out of its ensemble's quorum)."""
    try:
        return srvr_fields(zookeeper_command(HOST, port, "srvr", timeout=1.0)).get("Mode")
    except OSError:
        return None


def stop_servers(servers: List["subprocess.Popen[bytes]"], grace: float) -> None:
    """SIGTERM ZooKeeper servers (SIGCONT first: a paused one would not see it), SIGKILL after
    ``grace`` seconds (at once if 0); return once they are gone."""
    for server in servers:
        processes.signal_group(server, signal.SIGCONT)
    if grace > 0:
        processes.terminate_all(servers, grace)
    else:
        processes.kill_all(servers)
