"""A small TCP proxy for fault injection: cut, delay and heal one client's connection.

This project's chaos runs and partition tests put one in front of ZooKeeper per
group member, to prove the rebalancer's fencing when one member (and only it) is
cut off. A user's own tests fail ZooKeeper for every client with LocalCluster's
fault controls (``pause_zookeeper`` past the session timeout, ``kill_zookeeper``,
``restart_zookeeper``) or expire one kazoo client's session (``expire_session``).

:class:`TcpProxy` listens on a free loopback port and forwards every
connection it accepts to ``target_host:target_port``, byte for byte, both ways.
Put one in front of ZooKeeper per member process and that member (and only it)
can be partitioned from ZooKeeper while everything else keeps talking to it::

    with TcpProxy("127.0.0.1", cluster.zk_port) as proxy:
        client = KazooClient(hosts=proxy.address)       # 127.0.0.1:<proxy port>
        proxy.cut()        # a network partition: silence, both ways
        proxy.heal()       # new connections go through again
        proxy.delay(0.5)   # 0.5 s more latency each way

Faults (:meth:`TcpProxy.cut`):

``"blackhole"`` (a partition)
    Every current connection is *silenced*: bytes from either side are read and
    discarded, nothing is closed, so each peer sees a connection that stays up
    but never answers (a client times out on its own; a server sees no
    heartbeats and, for ZooKeeper, expires the session after its timeout). New
    connections are accepted and silenced too, never forwarded.
``"reset"``
    Every current connection is closed with a TCP reset, and so is every new
    one as soon as it is accepted (to the client, like a refused connection).

:meth:`TcpProxy.heal` ends the fault: new connections are forwarded again, and
connections silenced by a blackhole are closed (bytes were dropped from their
streams, so they can never be valid again; the client reconnects).

Threads: one accept thread, and per forwarded connection one thread per
direction (a silenced new connection has one thread draining the client).
:meth:`TcpProxy.close` closes every socket, which ends each thread's blocking
call, and joins every thread within its ``timeout``.

:class:`ZooKeeperProxy` also reads the ZooKeeper handshake in each
connection's first reply (the ``ConnectResponse``), so the session id and
password of the client behind it are known to whoever wants to expire that
session (:meth:`ZooKeeperProxy.sessions`).
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from typing import Dict, List, Optional, Tuple

log = logging.getLogger(__name__)

MODES = ("blackhole", "reset")
_CHUNK = 65536


class ProxyConnection:
    """One accepted client connection and, when forwarded, its upstream connection."""

    def __init__(self, number: int, client: socket.socket, silenced: bool) -> None:
        self.number = number
        self.client = client
        self.upstream: Optional[socket.socket] = None
        self.silenced = silenced
        self.closed = threading.Event()
        self._lock = threading.Lock()

    def close(self, reset: bool = False) -> None:
        """Close both sockets (with a TCP reset if ``reset``); idempotent, any thread."""
        with self._lock:
            if self.closed.is_set():
                return
            self.closed.set()
            sockets = [s for s in (self.client, self.upstream) if s is not None]
        for sock in sockets:
            try:
                if reset:  # SO_LINGER 0: the close sends RST instead of FIN; SHUT_RD sends nothing
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                # wake a thread blocked in recv() on this socket: close() alone would not
                sock.shutdown(socket.SHUT_RD if reset else socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass

    def attach_upstream(self, upstream: socket.socket) -> bool:
        """Set the upstream socket; False (and ``upstream`` closed) if the connection is already closed."""
        with self._lock:
            if not self.closed.is_set():
                self.upstream = upstream
                return True
        upstream.close()
        return False


class TcpProxy:
    """Forwards connections from ``127.0.0.1:<port>`` to ``target_host:target_port``; see the module docstring.

    ``port`` is chosen by the kernel (a free loopback port) unless given.
    Thread-safe. Use as a context manager or call :meth:`start` and
    :meth:`close`; a closed proxy cannot be started again.
    """

    def __init__(self, target_host: str, target_port: int, *, listen_host: str = "127.0.0.1",
                 port: int = 0, name: str = "tcp-proxy", connect_timeout: float = 5.0) -> None:
        self.target = (target_host, target_port)
        self.name = name
        self._connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._mode: Optional[str] = None
        self._delay = 0.0
        self._closing = threading.Event()
        self._connections: Dict[int, ProxyConnection] = {}
        self._threads: List[threading.Thread] = []
        self._counter = 0
        self.accepted = 0
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((listen_host, port))
        self._listener.listen(64)
        self._listener.settimeout(0.2)  # the accept loop checks for close() this often
        self.host, self.port = self._listener.getsockname()[:2]
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"{name}-accept", daemon=True)
        self._started = False

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> "TcpProxy":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.address} -> {self.target[0]}:{self.target[1]} {self.state}>"

    @property
    def address(self) -> str:
        """``host:port`` clients connect to (a ZooKeeper connect string, for instance)."""
        return f"{self.host}:{self.port}"

    @property
    def state(self) -> str:
        """``"forwarding"``, ``"blackhole"``, ``"reset"`` or ``"closed"``."""
        if self._closing.is_set():
            return "closed"
        return self._mode or "forwarding"

    def start(self) -> "TcpProxy":
        """Start accepting (idempotent)."""
        with self._lock:
            if self._closing.is_set():
                raise RuntimeError("this proxy was closed")
            if not self._started:
                self._started = True
                self._acceptor.start()
        return self

    def close(self, timeout: float = 5.0) -> bool:
        """Stop accepting, close every connection, join every thread within ``timeout`` s (idempotent).

        Returns True if every thread ended in time (a thread that did not is logged).
        """
        self._closing.set()
        with self._lock:
            connections = list(self._connections.values())
        for connection in connections:
            connection.close()
        deadline = time.monotonic() + timeout
        if self._started:
            self._acceptor.join(max(0.0, deadline - time.monotonic()))
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:  # the acceptor has stopped: no thread is added after this
            connections = list(self._connections.values())
            threads = list(self._threads)
        for connection in connections:  # accepted in the acceptor's last instant
            connection.close()
        while threads and time.monotonic() < deadline:  # a connection thread may have started one more
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
            with self._lock:
                threads = [t for t in self._threads if t.is_alive()]
        with self._lock:
            threads = list(self._threads)
        stuck = [t.name for t in threads + [self._acceptor] if t.is_alive()]
        if stuck:
            log.warning("%r: threads still running after %.1fs: %s", self, timeout, stuck)
        return not stuck

    # ------------------------------------------------------------ faults

    def cut(self, mode: str = "blackhole") -> None:
        """Start a fault: ``"blackhole"`` (silence, a partition) or ``"reset"`` (TCP resets); see the module docstring."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        with self._lock:
            self._mode = mode
            connections = list(self._connections.values())
            for connection in connections:
                connection.silenced = True
        if mode == "reset":
            for connection in connections:
                connection.close(reset=True)
        log.info("%r: cut (%s), %d connections", self, mode, len(connections))

    def heal(self) -> None:
        """End the fault: forward new connections again; close the connections a blackhole silenced."""
        with self._lock:
            self._mode = None
            silenced = [c for c in self._connections.values() if c.silenced]
        for connection in silenced:
            connection.close()
        log.info("%r: healed, closed %d silenced connections", self, len(silenced))

    def delay(self, seconds: float) -> None:
        """Hold every chunk ``seconds`` (each way) before forwarding it; 0 removes the latency."""
        if seconds < 0:
            raise ValueError("delay must be >= 0")
        with self._lock:
            self._delay = float(seconds)

    def connection_count(self) -> int:
        """Connections currently open through the proxy (forwarded or silenced)."""
        with self._lock:
            return sum(1 for c in self._connections.values() if not c.closed.is_set())

    # ------------------------------------------------------------ threads

    def _spawn(self, target: object, name: str, *args: object) -> bool:
        """Start a thread close() will join; False (nothing started) once the proxy is closing."""
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)  # type: ignore[arg-type]
        with self._lock:
            if self._closing.is_set():
                return False
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
            thread.start()
        return True

    def _accept_loop(self) -> None:
        while not self._closing.is_set():
            try:
                client, _peer = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                if self._closing.is_set():
                    return
                time.sleep(0.05)
                continue
            client.settimeout(None)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._counter += 1
                self.accepted += 1
                mode = self._mode
                connection = ProxyConnection(self._counter, client, silenced=mode is not None)
                if mode != "reset":
                    self._connections[connection.number] = connection
            if mode == "reset":
                connection.close(reset=True)
                continue
            handler = self._drain if mode == "blackhole" else self._connect_and_forward
            if not self._spawn(handler, f"{self.name}-{connection.number}-{'drain' if mode else 'up'}", connection):
                self._forget(connection)

    def _forget(self, connection: ProxyConnection) -> None:
        connection.close()
        with self._lock:
            self._connections.pop(connection.number, None)

    def _drain(self, connection: ProxyConnection) -> None:
        """A connection accepted during a blackhole: read and discard until either end closes it."""
        try:
            while not connection.closed.is_set():
                try:
                    if not connection.client.recv(_CHUNK):
                        break
                except OSError:
                    break
        finally:
            self._forget(connection)

    def _connect_and_forward(self, connection: ProxyConnection) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=self._connect_timeout)
        except OSError as exc:  # the target is down: the client sees its connection closed
            log.debug("%r: connection %d: target unreachable: %s", self, connection.number, exc)
            self._forget(connection)
            return
        upstream.settimeout(None)
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not connection.attach_upstream(upstream):
            self._forget(connection)
            return
        if not self._spawn(self._pump, f"{self.name}-{connection.number}-down", connection, upstream,
                           connection.client, True):
            self._forget(connection)
            return
        self._pump(connection, connection.client, upstream, False)

    def _pump(self, connection: ProxyConnection, source: socket.socket, sink: socket.socket, reply: bool) -> None:
        """Copy ``source`` to ``sink`` until either closes; ``reply``: target-to-client direction."""
        try:
            while True:
                try:
                    data = source.recv(_CHUNK)
                except OSError:
                    return
                if not data:
                    return
                received = time.monotonic()
                if connection.silenced:
                    continue
                with self._lock:
                    delay = self._delay
                wait = received + delay - time.monotonic()
                if wait > 0 and self._closing.wait(wait):
                    return
                if connection.silenced:
                    continue
                if reply:
                    self._observe_reply(connection, data)
                try:
                    sink.sendall(data)
                except OSError:
                    return
        finally:
            self._forget(connection)

    def _observe_reply(self, connection: ProxyConnection, data: bytes) -> None:
        """Called with every chunk forwarded from the target to the client (a subclass hook; must not block)."""


# ---------------------------------------------------------------------------- ZooKeeper


def parse_connect_response(frame: bytes) -> Optional[Tuple[int, bytes, int]]:
    """``(session id, password, negotiated timeout ms)`` from a ZooKeeper ``ConnectResponse``.

    ``frame`` starts with the 4-byte length prefix. Returns None while ``frame``
    is incomplete, or when the server refused the session (session id 0).

    >>> body = struct.pack(">iiqi", 0, 6000, 0x1234, 4) + b"pass"
    >>> parse_connect_response(struct.pack(">i", len(body)) + body)
    (4660, b'pass', 6000)
    """
    if len(frame) < 4:
        return None
    (length,) = struct.unpack(">i", frame[:4])
    if len(frame) < 4 + length or length < 20:
        return None
    _protocol, timeout_ms, session_id, password_length = struct.unpack(">iiqi", frame[4:24])
    if session_id == 0 or password_length < 0 or 20 + password_length > length:
        return None
    return session_id, bytes(frame[24:24 + password_length]), timeout_ms


class ZooKeeperProxy(TcpProxy):
    """A :class:`TcpProxy` in front of ZooKeeper that knows the session of each connection it carries.

    The first reply on every connection is ZooKeeper's ``ConnectResponse``
    (session id, password, negotiated timeout); :meth:`sessions` returns those
    of the connections open now, :attr:`last_session` the latest one seen.
    """

    def __init__(self, target_host: str, target_port: int, **kwargs: object) -> None:
        super().__init__(target_host, target_port, **kwargs)  # type: ignore[arg-type]
        self._handshakes: Dict[int, bytearray] = {}
        self._sessions: Dict[int, Tuple[int, bytes]] = {}
        self.last_session: Optional[Tuple[int, bytes]] = None

    def _observe_reply(self, connection: ProxyConnection, data: bytes) -> None:
        with self._lock:
            if connection.number in self._sessions:
                return
            buffer = self._handshakes.setdefault(connection.number, bytearray())
            if len(buffer) > 4096:  # not a ZooKeeper handshake: stop looking
                return
            buffer.extend(data)
            parsed = parse_connect_response(bytes(buffer))
            if parsed is not None:
                self._sessions[connection.number] = (parsed[0], parsed[1])
                self.last_session = (parsed[0], parsed[1])
                del self._handshakes[connection.number]

    def _forget(self, connection: ProxyConnection) -> None:
        super()._forget(connection)
        with self._lock:
            self._sessions.pop(connection.number, None)
            self._handshakes.pop(connection.number, None)

    def sessions(self) -> List[Tuple[int, bytes]]:
        """``(session id, password)`` of every connection open through the proxy now, distinct."""
        with self._lock:
            return sorted(set(self._sessions.values()))


def expire_zookeeper_session(zk_connect: str, session: Tuple[int, bytes], timeout: float = 30.0) -> None:
    """Make ZooKeeper at ``zk_connect`` end ``session`` (id, password) now, as an expiry does.

    A second client joins the session with its id and password and closes it:
    the server deletes the session's ephemeral nodes, fires their watches and
    drops the original client's connection, whose next reconnect is told the
    session expired. Works for any client (kazoo, ZkClient) whose session a
    :class:`ZooKeeperProxy` saw. Returns once the server has processed the
    close; a session that had already ended is a no-op. Raises kazoo's
    timeout error if ZooKeeper cannot be reached within ``timeout`` s.
    """
    from kazoo.client import KazooClient  # only this helper needs kazoo

    twin = KazooClient(hosts=zk_connect, client_id=session, timeout=10.0)
    try:
        twin.start(timeout=timeout)
        twin.stop()
    finally:
        twin.close()
