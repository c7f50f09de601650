"""``BrokerConnection.fetch_walked`` on a socket kept from an earlier request: a fetcher's every round (issue 44).

That case runs in one frame (``_walk_on_open_socket``) instead of ``_send``'s chain; it must keep ``_send``'s
contract: the same frame, the buffer grown for a larger answer, a kept socket found closed retried once on a
fresh one, a timeout raised with ``timed_out`` and the socket closed, a wrong correlation id refused, an
interrupt failing the request without a retry. Against a scripted local TCP server (no Kafka).
"""

from __future__ import annotations

import struct
import time
from typing import Any, Dict, List, Tuple, Union

import pytest
from kafka.protocol.old.fetch import FetchResponse_v0

from zkconsumer.errors import BrokerUnavailableError
from zkconsumer.wire import connection
from zkconsumer.wire.connection import BrokerConnection
from zkconsumer.wire.fetch_walk import WalkedFetchRequest
from zkconsumer.wire.messageset import speedups

from .test_connection import ScriptedServer, raised_when_woken

pytestmark = pytest.mark.skipif(speedups is None, reason="the C extension is not built")


class State:
    """A fetcher's partition state, as far as the walk goes."""

    def __init__(self) -> None:
        self.high_watermark = -1


def body(high_watermark: int, message_set: bytes = b"", error: int = 0) -> bytes:
    """A Fetch v0 response body: topic ``t``, partition 0."""
    return FetchResponse_v0(topics=[("t", [(0, error, high_watermark, message_set)])]).encode()


def message_set(offset: int, value: bytes) -> bytes:
    """One magic-0 message at ``offset`` (its CRC is not checked by the walk)."""
    message = struct.pack(">bb", 0, 0) + struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    crc = speedups.crc32(message)
    entry = struct.pack(">I", crc) + message
    return struct.pack(">qi", offset, len(entry)) + entry


Answer = Union[None, bytes, Tuple[int, bytes]]


@pytest.fixture
def serve():
    servers: List[ScriptedServer] = []

    def make(answers: List[Any]) -> ScriptedServer:
        """Answer the n-th request with ``answers[n]`` (a body, ``(cid, body)``, ``None``: close, or a float: sleep
        that long first and answer the next item)."""
        pending = list(answers)

        def handler(cid: int, key: int, req: bytes) -> Answer:
            item = pending.pop(0)
            if isinstance(item, float):
                time.sleep(item)
                item = pending.pop(0)
            return item  # type: ignore[no-any-return]

        servers.append(ScriptedServer(handler))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def opened(server: ScriptedServer, timeout_ms: int = 5000) -> Tuple[BrokerConnection, Dict[Tuple[str, int], Any]]:
    """A fetcher's connection to ``server`` after one fetch (the socket is kept), and its requested dict."""
    conn = BrokerConnection("127.0.0.1", server.port, "walker", timeout_ms, 65536, reuse_buffer=True)
    requested: Dict[Tuple[str, int], Any] = {("t", 0): (State(), 7)}
    conn.fetch_walked(requested, 100, 1, 1 << 20)
    assert conn.connected
    return conn, requested


def no_send(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the kept socket's fetch went through _send")


def test_a_kept_socket_sends_the_same_frame_and_walks_the_answer_without_send(serve, monkeypatch) -> None:
    server = serve([body(1), body(42), body(43, message_set(7, b"x" * 10))])
    conn, requested = opened(server)
    monkeypatch.setattr(conn, "_send", no_send)
    st = requested[("t", 0)][0]
    walked = conn.fetch_walked(requested, 100, 1, 1 << 20)
    assert walked.rows == [] and walked.size == 0 and st.high_watermark == 42
    walked = conn.fetch_walked(requested, 250, 3, 1 << 20)
    assert walked.size > 0 and [(row[0], row[1]) for row in walked.rows] == [(st, 7)]
    assert bytes(walked.rows[0][2].message_set) == message_set(7, b"x" * 10)
    cid = struct.unpack_from(">i", server.requests[2], 4)[0]
    frame = WalkedFetchRequest(250, 3, 1 << 20, requested).encode_frame(cid, "walker")
    assert server.requests[2] == frame[4:] and server.connections == 1
    conn.close()


def test_a_larger_answer_on_a_kept_socket_grows_the_buffer(serve, monkeypatch) -> None:
    big = message_set(7, b"v" * 300_000)
    server = serve([body(1), body(9, big)])
    conn, requested = opened(server)
    monkeypatch.setattr(conn, "_send", no_send)
    walked = conn.fetch_walked(requested, 100, 1, 1 << 20)
    assert bytes(walked.rows[0][2].message_set) == big and len(conn._buffer) >= len(big)
    conn.close()


def test_a_kept_socket_the_broker_closed_is_retried_once_on_a_fresh_one(serve) -> None:
    server = serve([body(1), None, body(5)])
    conn, requested = opened(server)
    assert conn.fetch_walked(requested, 100, 1, 1 << 20).rows == []
    assert requested[("t", 0)][0].high_watermark == 5 and server.connections == 2
    conn.close()


def test_a_timeout_on_a_kept_socket_raises_timed_out_closes_and_is_not_retried(serve) -> None:
    server = serve([body(1), 1.0, body(2), body(3)])
    conn, requested = opened(server)
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match="did not answer within 200 ms") as raised:
        conn.fetch_walked(requested, 100, 1, 1 << 20, 200)
    assert raised.value.timed_out and time.monotonic() - started < 0.9
    assert not conn.connected and server.connections == 1
    assert conn.fetch_walked(requested, 100, 1, 1 << 20).rows == [] and server.connections == 2
    conn.close()


def test_a_wrong_correlation_id_on_a_kept_socket_is_refused_and_closes(serve) -> None:
    server = serve([body(1), (999999, body(2)), body(3)])
    conn, requested = opened(server)
    with pytest.raises(BrokerUnavailableError, match="correlation id 999999"):
        conn.fetch_walked(requested, 100, 1, 1 << 20)
    assert not conn.connected
    conn.fetch_walked(requested, 100, 1, 1 << 20)
    assert requested[("t", 0)][0].high_watermark == 3 and server.connections == 2
    conn.close()


def test_an_interrupt_fails_a_request_on_a_kept_socket_at_once_without_a_retry(serve) -> None:
    server = serve([body(1), 5.0, body(2), body(3)])
    conn, requested = opened(server)
    raised, took_s = raised_when_woken(lambda: conn.fetch_walked(requested, 100, 1, 1 << 20), conn.interrupt, 0.3)
    assert took_s < 1.5
    assert isinstance(raised, BrokerUnavailableError) and "interrupted" in str(raised)
    assert not raised.timed_out and server.connections == 1
    conn.close()


def test_without_the_c_walk_a_kept_socket_takes_send(serve, monkeypatch) -> None:
    server = serve([body(1), body(8)])
    conn, requested = opened(server)
    monkeypatch.setattr(connection, "_fetch_walk", None)
    assert conn.fetch_walked(requested, 100, 1, 1 << 20).rows == []
    assert requested[("t", 0)][0].high_watermark == 8
    conn.close()
