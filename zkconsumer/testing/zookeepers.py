"""ZooKeeper of a :class:`~zkconsumer.testing.LocalCluster`: starting its server, and its fault controls.

The server keeps its port and data directory across a restart, so sessions whose
timeout has not run out survive a kill and restart (ZooKeeper restores them from
its log and restarts their timers), as they do on a real ensemble.
:meth:`ZooKeeperControls.expire_session` ends a client's session for real.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from typing import Any, List, Optional

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from zkconsumer.testing import processes
from zkconsumer.testing.core import HOST, ZOOKEEPER_MAIN, ClusterCore
from zkconsumer.testing.errors import ClusterStartError, ClusterTimeoutError, LocalClusterError
from zkconsumer.testing.probes import sessions_with_ephemerals, srvr_fields, zookeeper_command
from zkconsumer.testing.properties import render_properties, zookeeper_properties


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
