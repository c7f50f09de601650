"""ZooKeeper of a :class:`~zkconsumer.testing.LocalCluster`: starting its nodes, and its fault controls.

A node keeps its port and data directory across a restart, so sessions whose
timeout has not run out survive a kill and restart (ZooKeeper restores them from
its log and restarts their timers), as they do on a real ensemble. ``node=None``
means every node (every running one, to pause, resume, kill or stop).
:meth:`ZooKeeperControls.expire_session` ends a client's session for real.
"""

from __future__ import annotations

import functools
import signal
import threading
import time
from typing import Any, Iterable, List, Mapping, Optional, Tuple

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from zkconsumer.testing import processes
from zkconsumer.testing.core import HOST, ZOOKEEPER_MAIN, ClusterCore
from zkconsumer.testing.errors import ClusterStartError, ClusterTimeoutError, LocalClusterError
from zkconsumer.testing.probes import sessions_with_ephemerals, srvr_fields, zookeeper_command
from zkconsumer.testing.properties import render_properties, zookeeper_properties


class ZooKeeperControls(ClusterCore):
    """The ZooKeeper part of :class:`~zkconsumer.testing.LocalCluster`: nodes, faults, clients, session expiry."""

    @property
    def zk_port(self) -> int:
        """ZooKeeper's client port (node 1's in an ensemble)."""
        return self.zookeeper_port(1)

    def zookeeper_port(self, node: int) -> int:
        """The client port of ZooKeeper node ``node`` (stable across restarts)."""
        self._require_running()
        self._check_zookeeper_node(node)
        return self._zk_ports[node]

    def _start_zookeepers(self, peers: Mapping[int, Tuple[int, int]]) -> None:
        """Write each node's config (and ``myid``), start every node, wait until all serve."""
        for node in self.zookeeper_nodes:
            name = "zookeeper" if self._zk_nodes == 1 else f"zookeeper-{node}"
            data_dir = self.work_dir / name
            data_dir.mkdir()
            if peers:
                (data_dir / "myid").write_text(f"{node}\n")
            props = zookeeper_properties(str(data_dir), self._zk_ports[node], self._zookeeper_config,
                                         peers=peers)
            config = self.work_dir / "conf" / f"{name}.properties"
            config.write_text(render_properties(props))
            argv = self._java_argv(ZOOKEEPER_MAIN, [str(config)], "log4j-server.properties")
            self._zookeepers[node] = processes.JavaProcess(name.replace("-", " "), argv,
                                                           str(self.log_dir / f"{name}.log"), cwd=str(self.work_dir))
            self._zookeepers[node].start()
        self._wait_serving(self.zookeeper_nodes, self._startup_timeout)
        # Reconnect attempts at most 0.5 s apart: after a ZooKeeper restart the cluster's own
        # client is back as soon as the server serves (kazoo's default backoff grows to ~10 s).
        self._admin = KazooClient(hosts=self.zk_connect, timeout=10.0,
                                  connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 0.5})
        self._admin.start(timeout=30)

    def _wait_serving(self, nodes: Iterable[int], timeout: float) -> None:
        for node in nodes:
            self._wait_for(f"ZooKeeper node {node} on port {self._zk_ports[node]} to serve",
                           functools.partial(self._serving, node), timeout, self._zookeepers[node], ClusterStartError)

    def _serving(self, node: int) -> bool:
        return self._zookeeper_mode(node) is not None

    def _zookeeper_mode(self, node: int) -> Optional[str]:
        """``standalone``, ``leader`` or ``follower`` per ``srvr``; None if not serving (or paused)."""
        try:
            return srvr_fields(zookeeper_command(HOST, self._zk_ports[node], "srvr", timeout=1.0)).get("Mode")
        except OSError:
            return None

    def pause_zookeeper(self, node: Optional[int] = None) -> None:
        """SIGSTOP ZooKeeper node(s): connections stay open but nothing answers."""
        with self._lock:
            for zookeeper in self._running_zookeepers(node):
                processes.signal_group(zookeeper.process, signal.SIGSTOP)  # type: ignore[arg-type]

    def resume_zookeeper(self, node: Optional[int] = None) -> None:
        """SIGCONT paused ZooKeeper node(s) (a no-op for a node that is not paused)."""
        with self._lock:
            for zookeeper in self._running_zookeepers(node):
                processes.signal_group(zookeeper.process, signal.SIGCONT)  # type: ignore[arg-type]

    def kill_zookeeper(self, node: Optional[int] = None) -> None:
        """SIGKILL ZooKeeper node(s) and return once gone (data directories stay)."""
        self.stop_zookeeper(node=node, grace=0.0)

    def stop_zookeeper(self, grace: float = 5.0, node: Optional[int] = None) -> None:
        """Stop ZooKeeper node(s) with SIGTERM (SIGKILL after ``grace`` s; at once if 0); data stays."""
        with self._lock:
            targets = [z.process for z in self._running_zookeepers(node)]
            for process in targets:
                processes.signal_group(process, signal.SIGCONT)  # type: ignore[arg-type]
            if grace > 0:
                processes.terminate_all(targets, grace)  # type: ignore[arg-type]
            else:
                processes.kill_all(targets)  # type: ignore[arg-type]

    def start_zookeeper(self, node: Optional[int] = None, timeout: Optional[float] = None) -> None:
        """Start killed or stopped ZooKeeper node(s) again on the same port and data directory.

        ``node=None`` starts every node that is down. Returns once they serve requests
        (``srvr`` answers with a mode: a node of an ensemble needs a quorum for that) and
        the cluster's own client is connected.
        """
        timeout = timeout or self._startup_timeout
        with self._lock:
            self._require_running()
            nodes = self.zookeeper_nodes if node is None else [node]
            for each in nodes:
                self._check_zookeeper_node(each)
            down = [each for each in nodes if not self._zookeepers[each].running()]
            if not down:
                raise LocalClusterError(f"ZooKeeper {'node %d ' % node if node else ''}is already running")
            for each in down:
                self._zookeepers[each].start()
            self._wait_serving(down, timeout)
        assert self._admin is not None
        admin = self._admin
        self._wait_for("the cluster's ZooKeeper client to reconnect",
                       lambda: admin.state == KazooState.CONNECTED, timeout)

    def restart_zookeeper(self, down_for: float = 0.0, *, kill: bool = True, node: Optional[int] = None) -> None:
        """Kill (or stop, ``kill=False``) ZooKeeper node(s), wait ``down_for`` seconds, start them again."""
        self.stop_zookeeper(grace=0.0 if kill else 5.0, node=node)
        if down_for > 0:
            time.sleep(down_for)
        self.start_zookeeper(node=node)

    def zookeeper_running(self, node: Optional[int] = None) -> bool:
        """True while node ``node``'s JVM (``None``: every node's) has not exited; it may be paused."""
        nodes = self.zookeeper_nodes if node is None else [node]
        return all(each in self._zookeepers and self._zookeepers[each].running() for each in nodes)

    def zookeeper_leader(self) -> int:
        """The node whose ``srvr`` says ``Mode: leader`` (a single server: ``standalone``); -1 if none."""
        self._require_running()
        lead = ("standalone", "leader")
        return next((node for node in self.zookeeper_nodes if self._zookeeper_mode(node) in lead), -1)

    def zookeeper_node_of(self, client: KazooClient) -> int:
        """The node ``client`` is connected to now, matched by the server port of its socket.

        Reads kazoo's connection socket (kazoo has no public accessor for it). Raises
        LocalClusterError while ``client`` has no connection.
        """
        try:
            port = client._connection._socket.getpeername()[1]
        except (AttributeError, OSError):
            raise LocalClusterError("the client is not connected to ZooKeeper now") from None
        node = next((n for n, p in self._zk_ports.items() if p == port), None)
        if node is None:
            raise LocalClusterError(f"the client is connected to port {port}, not to this cluster's ZooKeeper")
        return node

    def _running_zookeepers(self, node: Optional[int]) -> List[processes.JavaProcess]:
        self._require_running()
        if node is not None:
            self._check_zookeeper_node(node)
        targets = [z for n, z in self._zookeepers.items() if node in (None, n) and z.running()]
        if not targets:
            raise LocalClusterError(f"ZooKeeper {'node %d ' % node if node else ''}is not running")
        return targets

    def kazoo_client(self, chroot: str = "", **kwargs: Any) -> KazooClient:
        """A started KazooClient on this cluster (optionally under ``chroot``), closed by stop()."""
        client = KazooClient(hosts=self.zk_connect + chroot, **kwargs)
        client.start(timeout=30)
        with self._lock:
            self._clients.append(client)
        return client

    def expire_session(self, client: KazooClient, timeout: float = 30.0, wait_lost: bool = True) -> None:
        """Make ZooKeeper expire ``client``'s session for real.

        A second client joins the same session (id and password) and closes it: the
        server ends the session, deletes its ephemeral nodes and drops the first
        client's connection. Returns once the server no longer has the session's
        ephemerals and, with ``wait_lost``, once ``client`` has seen ``KazooState.LOST``
        (kazoo then opens a new session by itself).
        """
        session_id, password = client.client_id
        lost = threading.Event()

        def on_state(state: KazooState) -> bool:
            if state == KazooState.LOST:
                lost.set()
                return True
            return False

        client.add_listener(on_state)
        try:
            twin = KazooClient(hosts=self.zk_connect, client_id=(session_id, password), timeout=10.0)
            twin.start(timeout=timeout)
            twin.stop()
            twin.close()
            self._wait_for(f"session 0x{session_id:x} to end", lambda: not self._has_ephemerals(session_id), timeout)
            if wait_lost and not lost.wait(timeout):
                raise ClusterTimeoutError(f"client did not observe the expiry of session 0x{session_id:x}")
        finally:
            client.remove_listener(on_state)

    def _has_ephemerals(self, session_id: int) -> bool:
        leader = self.zookeeper_leader()  # the leader's view is the authoritative one
        dump = zookeeper_command(HOST, self._zk_ports[leader if leader > 0 else 1], "dump")
        return session_id in sessions_with_ephemerals(dump)
