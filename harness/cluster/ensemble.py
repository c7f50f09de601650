"""A ZooKeeper ensemble in place of LocalCluster's single server.

This project's ensemble tests (``tests/integration/test_zookeeper_ensemble.py``) show
that a member rides out the loss of the node it is connected to (kazoo moves to another
node and keeps its session) and of a majority; a user's own tests fail LocalCluster's
one server instead.

With ``zookeeper_nodes=n`` (odd, e.g. 3) :class:`ZooKeeperEnsemble` (part of
:class:`~harness.cluster.ProjectCluster`) runs nodes 1..n (ZooKeeper's ``myid``),
each controllable on its own (``kill_zookeeper(node=2)``); ``node=None`` means every
node (every running one, to pause, resume, kill or stop). ``zk_connect`` lists them all,
``zk_port`` is node 1's. Each node keeps its ports and data directory across a restart.

``isolatable_node=k`` makes node ``k`` reach its peers through :class:`~harness.cluster.proxy.TcpProxy`
proxies (its own configuration names the proxies as the other servers' quorum and election
addresses), so :meth:`~ZooKeeperEnsemble.isolate_zookeeper` can cut it off from its leader while
its clients stay connected to it: a follower that still answers them from its own state, as a
network partition between ZooKeeper servers leaves it. Make ``k`` the lowest id, so that it is a
follower (a fresh ensemble elects its highest id) and its peers, which win ZooKeeper's
connection tie-break, open the election connections to it directly.
"""

from __future__ import annotations

import signal
import subprocess
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

from kazoo.client import KazooClient

from zkconsumer.testing import processes
from zkconsumer.testing.cluster import ClusterBase
from zkconsumer.testing.core import HOST, stop_servers, zookeeper_mode
from zkconsumer.testing.errors import LocalClusterError
from zkconsumer.testing.probes import sessions_with_ephemerals, zookeeper_command
from zkconsumer.testing.properties import PropertyValue, render_properties, zookeeper_properties

from .proxy import TcpProxy


def peer_properties(peers: Mapping[int, Tuple[int, int]]) -> Dict[str, PropertyValue]:
    """What makes a server one of an ensemble: ``server.<id>=127.0.0.1:<quorum>:<election>`` for
    each node of ``peers`` (node id -> (quorum port, election port)), and init/sync limits of 10
    and 5 ticks. Its own id goes into ``myid``.

    >>> peer_properties({1: (3001, 4001)})["server.1"]
    '127.0.0.1:3001:4001'
    """
    servers = {f"server.{node}": f"{HOST}:{quorum}:{election}" for node, (quorum, election) in sorted(peers.items())}
    return {"initLimit": 10, "syncLimit": 5, **servers}


class ZooKeeperEnsemble(ClusterBase):
    """A LocalCluster whose ZooKeeper may be an ensemble of ``zookeeper_nodes`` nodes (see
    the module docstring); every other argument is LocalCluster's."""

    def __init__(self, *args: Any, zookeeper_nodes: int = 1, isolatable_node: Optional[int] = None,
                 **kwargs: Any) -> None:
        if zookeeper_nodes < 1:
            raise ValueError("zookeeper_nodes must be >= 1")
        if isolatable_node is not None and not (zookeeper_nodes > 1 and 1 <= isolatable_node <= zookeeper_nodes):
            raise ValueError("isolatable_node must be one of the nodes of an ensemble of at least 2")
        super().__init__(*args, **kwargs)
        self._isolatable = isolatable_node
        self._peer_proxies: List[TcpProxy] = []
        self._node_count = zookeeper_nodes
        self._nodes: Dict[int, processes.JavaProcess] = {}
        self._node_ports: Dict[int, int] = {}
        self._peers: Dict[int, Tuple[int, int]] = {}

    @property
    def zookeeper_nodes(self) -> List[int]:
        """The ZooKeeper node ids (their ``myid``), running or not: ``[1, ..., n]``."""
        return list(range(1, self._node_count + 1))

    @property
    def zk_connect(self) -> str:
        """ZooKeeper connect string, ``127.0.0.1:<port>`` per node in node order (no chroot)."""
        self._require_running()
        return ",".join(f"{HOST}:{port}" for port in self._node_ports.values())

    def zookeeper_port(self, node: int) -> int:
        """The client port of ZooKeeper node ``node`` (stable across restarts)."""
        self._require_running()
        self._check_node(node)
        return self._node_ports[node]

    def _allocate_ports(self, extra: int = 0) -> List[int]:
        """Node 1 takes LocalCluster's ZooKeeper port; the others a client port each, and
        every node of an ensemble a quorum and an election port."""
        count = self._node_count
        more = 3 * count - 1 if count > 1 else 0
        ports = super()._allocate_ports(extra + more)
        self._node_ports = dict(zip(self.zookeeper_nodes, [self._zk_port, *ports[:count - 1]]))
        if count > 1:
            self._peers = {node: (ports[count - 1 + 2 * i], ports[count + 2 * i])
                           for i, node in enumerate(self.zookeeper_nodes)}
        return ports[more:]

    def _start_zookeeper(self) -> None:
        if not self._peers:  # one node: LocalCluster's standalone server
            super()._start_zookeeper()
            assert self._zookeeper is not None
            self._nodes = {1: self._zookeeper}
            return
        for node in self.zookeeper_nodes:
            name = f"zookeeper-{node}"
            data_dir = self.work_dir / name
            data_dir.mkdir()
            (data_dir / "myid").write_text(f"{node}\n")
            peers = self._proxied_peers() if node == self._isolatable else self._peers
            props = zookeeper_properties(str(data_dir), self._node_ports[node],
                                         {**peer_properties(peers), **self._zookeeper_config})
            config = self.work_dir / "conf" / f"{name}.properties"
            config.write_text(render_properties(props))
            self._nodes[node] = self._zookeeper_process(name, str(config))
            self._nodes[node].start()
        self._zookeeper = self._nodes[1]
        for node in self.zookeeper_nodes:
            self._wait_serving(self._nodes[node], self._node_ports[node], self._startup_timeout)
        self._connect_admin()

    def _proxied_peers(self) -> Dict[int, Tuple[int, int]]:
        """The isolatable node's view of the ensemble: every other node's quorum and election
        ports behind a proxy of their own (started here, closed by :meth:`stop`)."""
        view = dict(self._peers)
        for node, ports in self._peers.items():
            if node != self._isolatable:
                proxies = [TcpProxy(HOST, port, name=f"zk{self._isolatable}-to-zk{node}").start() for port in ports]
                self._peer_proxies.extend(proxies)
                view[node] = (proxies[0].port, proxies[1].port)
        return view

    def isolate_zookeeper(self) -> None:
        """Cut the isolatable node off from its peers (a blackhole: connections stay open, nothing
        passes) while its clients stay connected to it. It keeps answering them from its own state
        until it gives up on its leader (``syncLimit`` ticks) and closes their connections."""
        if not self._peer_proxies:
            raise LocalClusterError("no isolatable node: start the cluster with isolatable_node=<id>")
        for proxy in self._peer_proxies:
            proxy.cut("blackhole")

    def reconnect_zookeeper(self) -> None:
        """End :meth:`isolate_zookeeper`: the node reaches its peers again and rejoins the quorum."""
        for proxy in self._peer_proxies:
            proxy.heal()

    def stop(self, grace: float = 5.0) -> None:
        try:
            super().stop(grace)
        finally:
            for proxy in self._peer_proxies:
                proxy.close()

    def _zookeeper_processes(self) -> List[processes.JavaProcess]:
        # a single server that failed to start is LocalCluster's, not yet in _nodes
        return list(self._nodes.values()) or super()._zookeeper_processes()

    def _check_node(self, node: int) -> None:
        if node not in self._node_ports:
            raise LocalClusterError(f"no ZooKeeper node {node!r}; nodes are {self.zookeeper_nodes}")

    def _running_nodes(self, node: Optional[int]) -> List["subprocess.Popen[bytes]"]:
        self._require_running()
        if node is not None:
            self._check_node(node)
        targets = [z.process for n, z in self._nodes.items() if node in (None, n) and z.running() and z.process]
        if not targets:
            raise LocalClusterError(f"ZooKeeper {'node %d ' % node if node else ''}is not running")
        return targets

    def pause_zookeeper(self, node: Optional[int] = None) -> None:
        """SIGSTOP ZooKeeper node(s): connections stay open but nothing answers."""
        with self._lock:
            for server in self._running_nodes(node):
                processes.signal_group(server, signal.SIGSTOP)

    def resume_zookeeper(self, node: Optional[int] = None) -> None:
        """SIGCONT paused ZooKeeper node(s) (a no-op for a node that is not paused)."""
        with self._lock:
            for server in self._running_nodes(node):
                processes.signal_group(server, signal.SIGCONT)

    def kill_zookeeper(self, node: Optional[int] = None) -> None:
        """SIGKILL ZooKeeper node(s) and return once gone (data directories stay)."""
        self.stop_zookeeper(grace=0.0, node=node)

    def stop_zookeeper(self, grace: float = 5.0, node: Optional[int] = None) -> None:
        """Stop ZooKeeper node(s) with SIGTERM (SIGKILL after ``grace`` s; at once if 0); data stays."""
        with self._lock:
            stop_servers(self._running_nodes(node), grace)

    def start_zookeeper(self, node: Optional[int] = None, timeout: Optional[float] = None) -> None:
        """Start killed or stopped ZooKeeper node(s) again on the same ports and data directory.

        ``node=None`` starts every node that is down. Returns once they serve requests
        (``srvr`` answers with a mode: a node of an ensemble needs a quorum for that) and
        the cluster's own client is connected.
        """
        timeout = timeout or self._startup_timeout
        with self._lock:
            self._require_running()
            nodes = self.zookeeper_nodes if node is None else [node]
            for each in nodes:
                self._check_node(each)
            down = [each for each in nodes if not self._nodes[each].running()]
            if not down:
                raise LocalClusterError(f"ZooKeeper {'node %d ' % node if node else ''}is already running")
            for each in down:
                self._nodes[each].start()
            for each in down:
                self._wait_serving(self._nodes[each], self._node_ports[each], timeout)
        self._wait_admin_connected(timeout)

    def restart_zookeeper(self, down_for: float = 0.0, *, kill: bool = True, node: Optional[int] = None) -> None:
        """Kill (or stop, ``kill=False``) ZooKeeper node(s), wait ``down_for`` seconds, start them again."""
        self.stop_zookeeper(grace=0.0 if kill else 5.0, node=node)
        if down_for > 0:
            time.sleep(down_for)
        self.start_zookeeper(node=node)

    def zookeeper_running(self, node: Optional[int] = None) -> bool:
        """True while node ``node``'s JVM (``None``: every node's) has not exited; it may be paused."""
        nodes = self.zookeeper_nodes if node is None else [node]
        return all(each in self._nodes and self._nodes[each].running() for each in nodes)

    def zookeeper_leader(self) -> int:
        """The node whose ``srvr`` says ``Mode: leader`` (a single server: ``standalone``); -1 if none."""
        self._require_running()
        lead = ("standalone", "leader")
        return next((node for node in self.zookeeper_nodes if zookeeper_mode(self._node_ports[node]) in lead), -1)

    def zookeeper_node_of(self, client: KazooClient) -> int:
        """The node ``client`` is connected to now, matched by the server port of its socket.

        Reads kazoo's connection socket (kazoo has no public accessor for it). Raises
        LocalClusterError while ``client`` has no connection.
        """
        try:
            port = client._connection._socket.getpeername()[1]
        except (AttributeError, OSError):
            raise LocalClusterError("the client is not connected to ZooKeeper now") from None
        node = next((n for n, p in self._node_ports.items() if p == port), None)
        if node is None:
            raise LocalClusterError(f"the client is connected to port {port}, not to this cluster's ZooKeeper")
        return node

    def _has_ephemerals(self, session_id: int) -> bool:
        leader = self.zookeeper_leader()  # the leader's view is the authoritative one
        dump = zookeeper_command(HOST, self._node_ports[leader if leader > 0 else 1], "dump")
        return session_id in sessions_with_ephemerals(dump)
