"""TcpProxy and ZooKeeperProxy (harness.cluster.proxy) against a loopback echo server (no ZooKeeper needed)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Callable, Iterator, List

import pytest

from harness.cluster.proxy import TcpProxy, ZooKeeperProxy, parse_connect_response
from harness.ports import refused_port


class EchoServer:
    """Echoes every byte back; ``greeting`` (if any) is sent first on each connection."""

    def __init__(self, greeting: bytes = b"") -> None:
        self.greeting = greeting
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._threads: List[threading.Thread] = []
        self._conns: List[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted += 1
            self._conns.append(conn)
            thread = threading.Thread(target=self._echo, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _echo(self, conn: socket.socket) -> None:
        try:
            if self.greeting:
                conn.sendall(self.greeting)
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                conn.sendall(data)
        except OSError:
            return
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.listener.close()
        for conn in self._conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self._threads:
            thread.join(2)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[TcpProxy]:
    p = TcpProxy("127.0.0.1", echo.port).start()
    yield p
    assert p.close(timeout=5)


def connect(proxy: TcpProxy, timeout: float = 2.0) -> socket.socket:
    sock = socket.create_connection((proxy.host, proxy.port), timeout=timeout)
    return sock


def roundtrip(sock: socket.socket, data: bytes = b"ping") -> bytes:
    sock.sendall(data)
    received = b""
    while len(received) < len(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    return received


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def closed_by_peer(sock: socket.socket, timeout: float = 3.0) -> bool:
    """True if ``sock`` reads EOF or a reset within ``timeout``."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_forwards_both_ways_on_several_connections(proxy: TcpProxy, echo: EchoServer) -> None:
    socks = [connect(proxy) for _ in range(3)]
    try:
        for i, sock in enumerate(socks):
            assert roundtrip(sock, f"hello {i}".encode()) == f"hello {i}".encode()
        big = bytes(range(256)) * 2000
        assert roundtrip(socks[0], big) == big
        assert proxy.connection_count() == 3
        assert echo.accepted == 3
    finally:
        for sock in socks:
            sock.close()
    assert wait_until(lambda: proxy.connection_count() == 0)


def test_delay_adds_latency_each_way(proxy: TcpProxy) -> None:
    with connect(proxy) as sock:
        proxy.delay(0.3)
        started = time.monotonic()
        assert roundtrip(sock) == b"ping"
        assert time.monotonic() - started >= 0.55  # 0.3 s each way
        proxy.delay(0)
        started = time.monotonic()
        assert roundtrip(sock) == b"ping"
        assert time.monotonic() - started < 0.3
    with pytest.raises(ValueError):
        proxy.delay(-1)


def test_blackhole_silences_current_and_new_connections_and_heal_closes_the_silenced(proxy: TcpProxy) -> None:
    old = connect(proxy)
    try:
        assert roundtrip(old) == b"ping"
        proxy.cut("blackhole")
        assert proxy.state == "blackhole"
        old.sendall(b"lost")
        assert not closed_by_peer(old, timeout=0.5)  # no answer, and not closed: a partition
        new = connect(proxy)  # accepted...
        new.sendall(b"anyone?")
        assert not closed_by_peer(new, timeout=0.5)  # ...but never forwarded
        proxy.heal()
        assert closed_by_peer(old) and closed_by_peer(new)  # their streams lost bytes: closed
        new.close()
        with connect(proxy) as fresh:
            assert roundtrip(fresh) == b"ping"
    finally:
        old.close()


def test_reset_closes_current_connections_and_refuses_new_ones(proxy: TcpProxy) -> None:
    old = connect(proxy)
    try:
        assert roundtrip(old) == b"ping"
        proxy.cut("reset")
        assert closed_by_peer(old)
        try:
            new = connect(proxy)
        except ConnectionError:  # the reset can beat the connect() call's return
            pass
        else:
            with new:
                assert closed_by_peer(new)
        proxy.heal()
        with connect(proxy) as fresh:
            assert roundtrip(fresh) == b"ping"
    finally:
        old.close()
    with pytest.raises(ValueError):
        proxy.cut("sideways")


def test_a_target_that_is_down_closes_the_client_connection() -> None:
    with refused_port() as port, TcpProxy("127.0.0.1", port) as proxy:
        with connect(proxy) as sock:
            assert closed_by_peer(sock)


def test_close_joins_every_thread_with_connections_open(echo: EchoServer) -> None:
    proxy = TcpProxy("127.0.0.1", echo.port, name="joined").start()
    socks = [connect(proxy) for _ in range(4)]
    for sock in socks:
        assert roundtrip(sock) == b"ping"
    proxy.cut("blackhole")
    socks.append(connect(proxy))  # a silenced one, with its draining thread
    assert wait_until(lambda: proxy.connection_count() == 5)
    started = time.monotonic()
    assert proxy.close(timeout=5)
    assert time.monotonic() - started < 5
    assert not [t for t in threading.enumerate() if t.name.startswith("joined-")]
    assert proxy.state == "closed"
    for sock in socks:
        assert closed_by_peer(sock)
        sock.close()
    assert proxy.close()  # idempotent


def _connect_response(session_id: int, password: bytes, timeout_ms: int = 6000) -> bytes:
    body = struct.pack(">iiqi", 0, timeout_ms, session_id, len(password)) + password + b"\x00"
    return struct.pack(">i", len(body)) + body


def test_parse_connect_response_needs_the_whole_frame_and_a_session() -> None:
    frame = _connect_response(0xABC, b"0123456789abcdef")
    assert parse_connect_response(frame) == (0xABC, b"0123456789abcdef", 6000)
    assert parse_connect_response(frame[:10]) is None
    assert parse_connect_response(frame[:-1]) is None
    assert parse_connect_response(_connect_response(0, b"x" * 16)) is None  # a refused session


def test_zookeeper_proxy_learns_the_session_of_each_open_connection() -> None:
    server = EchoServer(greeting=_connect_response(0x77, b"secret-password!"))
    try:
        with ZooKeeperProxy("127.0.0.1", server.port) as proxy:
            sock = connect(proxy)
            greeting = _connect_response(0x77, b"secret-password!")
            received = b""
            while len(received) < len(greeting):
                received += sock.recv(65536)
            assert received == greeting
            assert wait_until(lambda: proxy.sessions() == [(0x77, b"secret-password!")])
            assert roundtrip(sock) == b"ping"  # later replies are not handshakes
            assert proxy.sessions() == [(0x77, b"secret-password!")]
            sock.close()
            assert wait_until(lambda: proxy.sessions() == [])
            assert proxy.last_session == (0x77, b"secret-password!")
    finally:
        server.close()
