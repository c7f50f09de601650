"""zkconsumer.wire.connection against a scripted local TCP server (no Kafka)."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple, Union

import pytest
from kafka.protocol.old.metadata import MetadataResponse_v0

from harness.ports import refused_port
from zkconsumer.errors import BrokerUnavailableError
from zkconsumer.wire import connection
from zkconsumer.wire.connection import BrokerConnection

#: handler(correlation_id, api_key, request bytes) -> response body, or
#: (correlation id to answer with, body), or None to close the connection
Handler = Callable[[int, int, bytes], Union[None, bytes, Tuple[int, bytes]]]

METADATA_BODY = MetadataResponse_v0(brokers=[(1, "h", 9092)], topics=[]).encode()


class ScriptedServer:
    """Accepts connections and answers each request with ``handler``; records requests."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests: List[bytes] = []
        self.connections = 0
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            while True:
                head = conn.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                (size,) = struct.unpack(">i", head)
                request = conn.recv(size, socket.MSG_WAITALL)
                self.requests.append(request)
                api_key, _, cid = struct.unpack_from(">hhi", request)
                body = self.handler(cid, api_key, request)
                if body is None:
                    return
                if isinstance(body, tuple):
                    cid, body = body
                conn.sendall(struct.pack(">ii", 4 + len(body), cid) + body)

    def close(self) -> None:
        self._stop = True
        self.listener.close()


@pytest.fixture
def server_factory():
    servers: List[ScriptedServer] = []

    def make(handler: Handler) -> ScriptedServer:
        servers.append(ScriptedServer(handler))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def connect(server: ScriptedServer, timeout_ms: int = 2000) -> BrokerConnection:
    return BrokerConnection("127.0.0.1", server.port, "unit-client", timeout_ms, 65536)


def test_lazy_connect_and_request_framing(server_factory) -> None:
    server = server_factory(lambda cid, key, req: METADATA_BODY)
    conn = connect(server)
    assert not conn.connected and server.connections == 0
    resp = conn.metadata(["t"])
    assert resp.brokers[0].node_id == 1 and conn.connected
    api_key, version, cid = struct.unpack_from(">hhi", server.requests[0])
    assert (api_key, version) == (3, 0)
    assert server.requests[0][8:10] == struct.pack(">h", len("unit-client"))
    conn.metadata(["t"])
    cid2 = struct.unpack_from(">i", server.requests[1], 4)[0]
    assert cid2 == cid + 1 and server.connections == 1
    conn.close()
    assert not conn.connected


def test_large_response_is_read_completely(server_factory) -> None:
    from kafka.protocol.old.fetch import FetchResponse_v0

    payload = bytes(range(256)) * 40000  # 10 MB, many recv_into calls
    body = FetchResponse_v0(topics=[("t", [(0, 0, 5, payload)])]).encode()
    server = server_factory(lambda cid, key, req: body)
    resp = connect(server).fetch([], 100, 1)
    assert bytes(resp.partitions[0].message_set) == payload


def test_correlation_mismatch_closes_and_raises(server_factory) -> None:
    answers = iter([(999999, METADATA_BODY), METADATA_BODY])
    server = server_factory(lambda cid, key, req: next(answers))
    conn = connect(server)
    with pytest.raises(BrokerUnavailableError, match="correlation id 999999"):
        conn.metadata([])
    assert not conn.connected
    assert conn.metadata([]).brokers and server.connections == 2  # reconnects


def test_refused_connection_names_the_broker() -> None:
    with refused_port() as port:
        conn = BrokerConnection("127.0.0.1", port, "c", 1000, 0)
        with pytest.raises(BrokerUnavailableError, match=f"127.0.0.1:{port}") as info:
            conn.metadata([])
    assert info.value.retriable


def test_timeout_raises_and_closes(server_factory) -> None:
    server = server_factory(lambda cid, key, req: time.sleep(1) or METADATA_BODY)
    conn = connect(server, timeout_ms=100)
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match="did not answer within 100 ms"):
        conn.metadata([])
    assert time.monotonic() - started < 0.9
    assert not conn.connected


@pytest.mark.parametrize("path", ["C", "pure Python"])
def test_a_requests_own_timeout_bounds_it_whoever_opened_the_connection(server_factory, monkeypatch, path) -> None:
    """``timeout_ms`` given to one request bounds that request, not the socket's timeout of when it was connected
    (a consumer's deadline must hold on a connection the fetcher thread opened, and the fetcher thread's
    socket.timeout.ms on one a consumer opened), with the C receive loop and without it."""
    if path == "pure Python":
        monkeypatch.setattr(connection, "_recv_frame", None)
        monkeypatch.setattr(connection, "_recv_exactly", None)
    delays = [0.0, 2.0, 0.0, 0.5]
    server = server_factory(lambda cid, key, req: time.sleep(delays.pop(0)) or struct.pack(">i", 0))
    conn = BrokerConnection("127.0.0.1", server.port, "unit-client", 5000, 65536, reuse_buffer=True)
    try:
        assert conn.fetch([], 10, 1).partitions == ()  # connected with socket.timeout.ms (5 s)
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError, match="did not answer within 200 ms") as raised:
            conn.fetch([], 10, 1, timeout_ms=200)
        assert raised.value.timed_out and time.monotonic() - started < 1.0
        assert conn.fetch([], 10, 1, timeout_ms=200).partitions == ()  # reconnected under the short bound
        assert conn.fetch([], 10, 1).partitions == ()  # answered after 0.5 s: the short bound is gone
    finally:
        conn.close()


def test_peer_closing_mid_request_raises(server_factory) -> None:
    server = server_factory(lambda cid, key, req: None)
    conn = connect(server)
    with pytest.raises(BrokerUnavailableError, match="closed by peer"):
        conn.metadata([])
    assert server.connections == 1  # a fresh connection is not retried


def test_stale_reused_connection_is_retried_once(server_factory) -> None:
    calls = {"n": 0}

    def handler(cid: int, key: int, req: bytes) -> Optional[bytes]:
        calls["n"] += 1
        return None if calls["n"] == 2 else METADATA_BODY  # the 2nd request finds the socket closed

    server = server_factory(handler)
    conn = connect(server)
    conn.metadata([])
    assert conn.metadata([]).brokers
    assert server.connections == 2 and calls["n"] == 3


def raised_when_woken(call: Callable[[], object], wake: Callable[[], None],
                      after_s: float = 0.2) -> Tuple[Optional[BaseException], float]:
    """Runs ``call`` (a request left blocked) on a thread and ``wake()`` ``after_s`` later; returns what ``call``
    raised (``None`` if it returned) and the seconds from ``wake()`` until the thread ended, which must be
    within 2 s."""
    raised: List[Optional[BaseException]] = []

    def run() -> None:
        try:
            call()
            raised.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(after_s)
    woken = time.monotonic()
    wake()
    thread.join(2.0)
    assert not thread.is_alive(), "the request was still blocked 2 s after it was woken"
    return raised[0], time.monotonic() - woken


def test_abort_wakes_a_blocked_request_and_refuses_later_ones(server_factory) -> None:
    server = server_factory(lambda cid, key, req: time.sleep(5) or METADATA_BODY)
    conn = connect(server, timeout_ms=10_000)
    raised, took_s = raised_when_woken(lambda: conn.metadata([]), conn.abort)
    assert took_s < 1
    assert isinstance(raised, BrokerUnavailableError) and "aborted" in str(raised)
    with pytest.raises(BrokerUnavailableError, match="aborted"):
        conn.metadata([])


# ---------------------------------------------------------------------- issue 15: the fetcher's receive path

def _tick(ticks: Dict[str, int]) -> None:
    """Counts for 0.15 s: runs Python code only while the thread under test does not hold the GIL."""
    end = time.monotonic() + 0.15
    while time.monotonic() < end:
        ticks["n"] += 1


def test_issue15_recv_exactly_reads_a_response_sent_in_pieces_with_the_gil_released() -> None:
    from zkconsumer.wire.messageset import speedups

    if speedups is None:
        pytest.skip("the C extension is not built")
    a, b = socket.socketpair()
    a.settimeout(5)  # a Python timeout makes the descriptor non-blocking underneath
    payload = bytes(range(256)) * 4096
    ticks = {"n": 0}

    def writer() -> None:
        for i in range(0, len(payload), 65536):
            b.sendall(payload[i:i + 65536])
            time.sleep(0.01)

    threads = [threading.Thread(target=writer), threading.Thread(target=_tick, args=(ticks,))]
    for t in threads:
        t.start()
    buf = bytearray(len(payload))
    assert speedups.recv_exactly(a.fileno(), buf, 5000) == len(payload)
    for t in threads:
        t.join(5)
    assert bytes(buf) == payload and ticks["n"] > 0
    a.close(), b.close()


def test_issue15_recv_exactly_reports_eof_and_timeout() -> None:
    from zkconsumer.wire.messageset import speedups

    if speedups is None:
        pytest.skip("the C extension is not built")
    a, b = socket.socketpair()
    b.sendall(b"abc")
    started = time.monotonic()
    assert speedups.recv_exactly(a.fileno(), bytearray(10), 200) == -1  # 3 bytes, then nothing: timed out
    assert 0.15 < time.monotonic() - started < 2
    b.sendall(b"defg")
    b.close()
    buf = bytearray(10)
    assert speedups.recv_exactly(a.fileno(), buf, 1000) == 4  # the rest, then EOF
    assert bytes(buf[:4]) == b"defg"
    a.close()
    with pytest.raises(OSError):
        speedups.recv_exactly(a.fileno(), bytearray(1), 100)


def test_issue15_reused_fetch_buffer_is_not_touched_by_other_requests(server_factory) -> None:
    from kafka.protocol.old.fetch import FetchResponse_v0

    sets = [bytes([n]) * 300_000 for n in (1, 2)]
    bodies = iter([FetchResponse_v0(topics=[("t", [(0, 0, 5, s)])]).encode() for s in sets])

    def handler(cid: int, key: int, req: bytes) -> bytes:
        return next(bodies) if key == 1 else METADATA_BODY

    server = server_factory(handler)
    conn = BrokerConnection("127.0.0.1", server.port, "unit-client", 2000, 65536, reuse_buffer=True)
    first = conn.fetch([], 100, 1).partitions[0].message_set
    assert conn.metadata([]).brokers  # e.g. an offset lookup while a response is processed
    assert bytes(first) == sets[0], "a non-fetch request overwrote the fetch response"
    second = conn.fetch([], 100, 1).partitions[0].message_set
    assert bytes(second) == sets[1]
    assert bytes(first) == sets[1], "the second fetch did not reuse the first one's buffer"


def test_issue15_recv_frame_reads_size_and_body_or_says_why_not() -> None:
    from zkconsumer.wire.messageset import speedups

    if speedups is None:
        pytest.skip("the C extension is not built")
    a, b = socket.socketpair()
    buf = bytearray(16)
    b.sendall(struct.pack(">i", 5) + b"hello")
    assert speedups.recv_frame(a.fileno(), buf, 1000) == (0, 5, 5, 1) and bytes(buf[:5]) == b"hello"
    b.sendall(struct.pack(">i", 100))  # larger than the buffer: the body is left to the caller
    assert speedups.recv_frame(a.fileno(), buf, 1000) == (0, 100, 0, 1)
    b.sendall(b"x" * 100)
    assert speedups.recv_exactly(a.fileno(), bytearray(100), 1000) == 100
    b.sendall(struct.pack(">i", -1))  # implausible sizes are reported, not read
    assert speedups.recv_frame(a.fileno(), buf, 1000) == (0, -1, 0, 1)
    assert speedups.recv_frame(a.fileno(), buf, 100) == (1, 0, 0, 1)  # nothing comes: timed out
    b.sendall(struct.pack(">i", 8) + b"abc")
    b.close()
    assert speedups.recv_frame(a.fileno(), buf, 1000) == (0, 8, 3, 1)  # EOF inside the body
    a.close()
    a, b = socket.socketpair()
    b.sendall(b"\x00\x00")
    b.close()
    assert speedups.recv_frame(a.fileno(), buf, 1000) == (2, 0, 2, 1)  # EOF inside the size
    a.close()


def test_issue15_recv_frame_sends_the_request_first_in_the_same_gil_release() -> None:
    from zkconsumer.wire.messageset import speedups

    if speedups is None:
        pytest.skip("the C extension is not built")
    a, b = socket.socketpair()
    a.settimeout(5)
    request = bytes(range(256)) * 8192  # 2 MB: more than the socket buffers hold, so sending waits for room
    got = bytearray()
    ticks = {"n": 0}

    def peer() -> None:  # reads the whole request, then answers it
        while len(got) < len(request):
            got.extend(b.recv(1 << 20))
        b.sendall(struct.pack(">i", 5) + b"hello")

    threads = [threading.Thread(target=peer), threading.Thread(target=_tick, args=(ticks,))]
    for t in threads:
        t.start()
    buf = bytearray(16)
    assert speedups.recv_frame(a.fileno(), buf, 5000, request) == (0, 5, 5, 1)
    for t in threads:
        t.join(5)
    assert bytes(got) == request and bytes(buf[:5]) == b"hello" and ticks["n"] > 0
    assert speedups.recv_frame(a.fileno(), buf, 100, b"again") == (1, 0, 0, 1)  # sent; no answer: timed out
    assert b.recv(16) == b"again"
    assert speedups.recv_frame(a.fileno(), buf, 100, memoryview(bytearray(b"bytes-like"))) == (1, 0, 0, 1)
    assert b.recv(16) == b"bytes-like"
    for wrong in ("a str", 5):  # refused before anything is sent: a str is not encoded behind the caller's back
        with pytest.raises(TypeError):
            speedups.recv_frame(a.fileno(), buf, 100, wrong)  # type: ignore[arg-type]
    b.setblocking(False)
    with pytest.raises(BlockingIOError):
        b.recv(16)
    b.setblocking(True)
    b.close()
    with pytest.raises(OSError):  # the peer is gone: the send fails as sock.sendall would
        speedups.recv_frame(a.fileno(), buf, 1000, b"x" * (1 << 22))
    a.close()


def _tcp_pair() -> Tuple[socket.socket, socket.socket]:
    """A connected pair of loopback TCP sockets (low-water marks work on TCP, not on socketpair())."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        a = socket.create_connection(server.getsockname())
        b, _ = server.accept()
    return a, b


def _voluntary_switches() -> int:
    with open("/proc/thread-self/status") as f:
        return int(f.read().split("voluntary_ctxt_switches:")[1].split()[0])


def _send_in_pieces(sock: socket.socket, data: bytes, piece: int, pause_s: float) -> threading.Thread:
    def writer() -> None:
        for i in range(0, len(data), piece):
            time.sleep(pause_s)
            sock.sendall(data[i:i + piece])

    thread = threading.Thread(target=writer)
    thread.start()
    return thread


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/status"), reason="counts context switches in /proc")
def test_issue15_recv_frame_wakes_once_for_a_body_that_arrives_in_pieces() -> None:
    from zkconsumer.wire.messageset import speedups

    if speedups is None:
        pytest.skip("the C extension is not built")
    a, b = _tcp_pair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    body = bytes(range(256)) * 4096  # 1 MB in 16 pieces, 5 ms apart: 16 waits if every segment woke the reader
    b.sendall(struct.pack(">i", len(body)))
    writer = _send_in_pieces(b, body, 65536, 0.005)
    buf = bytearray(len(body))
    before = _voluntary_switches()
    assert speedups.recv_frame(a.fileno(), buf, 5000) == (0, len(body), len(body), 1)
    woken = _voluntary_switches() - before
    writer.join(5)
    assert bytes(buf) == body
    assert woken <= 4, f"the reader was woken {woken} times for one body"
    assert a.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 1, "the low-water mark was left set"
    a.close(), b.close()


def test_issue15_recv_frame_times_out_only_without_progress() -> None:
    from zkconsumer.wire.messageset import speedups

    if speedups is None:
        pytest.skip("the C extension is not built")
    a, b = _tcp_pair()
    body = b"y" * (800 * 1024)  # 8 pieces 100 ms apart: 0.8 s in all, never 300 ms without a byte
    b.sendall(struct.pack(">i", len(body)))
    writer = _send_in_pieces(b, body, 100 * 1024, 0.1)
    buf = bytearray(len(body))
    assert speedups.recv_frame(a.fileno(), buf, 300) == (0, len(body), len(body), 1)
    writer.join(5)
    assert bytes(buf) == body
    b.sendall(struct.pack(">i", len(body)) + body[:100 * 1024])  # then nothing: a timeout
    started = time.monotonic()
    assert speedups.recv_frame(a.fileno(), buf, 300) == (1, 0, 0, 1)
    assert time.monotonic() - started < 1.5
    assert a.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 1
    a.close(), b.close()


def test_issue15_a_long_timeout_is_counted_from_the_last_byte_to_within_a_second() -> None:
    """Bytes below the low-water mark are progress, and the reader looks for them at least every
    second: a broker that sends part of a response and stops is noticed timeout_ms (+ <= 1 s)
    after its last byte, not twice timeout_ms."""
    from zkconsumer.wire.messageset import speedups

    if speedups is None:
        pytest.skip("the C extension is not built")
    a, b = _tcp_pair()
    body = b"z" * (1 << 20)
    b.sendall(struct.pack(">i", len(body)))
    writer = _send_in_pieces(b, body[: 3 * 65536], 65536, 1.2)  # a piece at 1.2, 2.4 and 3.6 s, then silence
    buf = bytearray(len(body))
    started = time.monotonic()
    assert speedups.recv_frame(a.fileno(), buf, 2500) == (1, 0, 0, 1)
    took = time.monotonic() - started
    writer.join(5)
    assert 3.6 + 2.5 <= took + 0.05 and took < 3.6 + 2.5 + 1.0 + 0.2, f"timed out after {took:.2f}s"
    a.close(), b.close()


@pytest.mark.parametrize("reuse", [True, False], ids=["reused-buffer", "fresh-buffer"])
def test_issue15_fetch_message_sets_are_read_only_so_the_decoder_copies_them_without_the_gil(
        server_factory, reuse: bool) -> None:
    from kafka.protocol.old.fetch import FetchResponse_v0

    body = FetchResponse_v0(topics=[("t", [(0, 0, 5, b"m" * 300_000)])]).encode()
    server = server_factory(lambda cid, key, req: body)
    conn = BrokerConnection("127.0.0.1", server.port, "unit-client", 2000, 65536, reuse_buffer=reuse)
    message_set = conn.fetch([], 100, 1).partitions[0].message_set
    assert isinstance(message_set, memoryview) and message_set.readonly
    assert bytes(message_set) == b"m" * 300_000


def test_issue15_shared_buffer_grows_for_a_larger_fetch_response(server_factory) -> None:
    from kafka.protocol.old.fetch import FetchResponse_v0

    sets = [b"a" * 1000, b"b" * 3_000_000, b"c" * 10]
    bodies = iter([FetchResponse_v0(topics=[("t", [(0, 0, 5, s)])]).encode() for s in sets])
    server = server_factory(lambda cid, key, req: next(bodies))
    conn = BrokerConnection("127.0.0.1", server.port, "unit-client", 2000, 65536, reuse_buffer=True)
    for expected in sets:
        assert bytes(conn.fetch([], 100, 1).partitions[0].message_set) == expected
