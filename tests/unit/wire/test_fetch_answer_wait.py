"""recv_frame's wait for a Fetch answer: woken once the answer's floor has arrived, not at its first piece.

A broker writes a fetch response in pieces (its header, then each partition's header and message
set). Every Fetch v0 answer holds an entry for each partition asked for, so it is at least as long as
the answer with every message set empty: ``recv_frame`` sets the socket's low-water mark that high
for its first wait, and a reader is woken once, not once at the first piece and again for the rest.
An answer shorter than that (no broker sends one) is still read, once a wait slice (1 s) passed.

The reader runs in a process of its own, with one thread, so its count of voluntary context switches
counts its waits and nothing else; the broker's side is played over loopback TCP (``SO_RCVLOWAT``
is TCP's: Unix socket pairs wake at any byte).
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

import zkconsumer
from zkconsumer.wire.connection import BrokerConnection
from zkconsumer.wire.messageset import ACCELERATED
from zkconsumer.wire.protocol import FetchPartition, FetchRequest, MetadataRequest

pytestmark = pytest.mark.skipif(not ACCELERATED, reason="needs the C extension")

PARTITIONS = [FetchPartition("events", p, 100 + p, 1 << 20) for p in range(6)] + [FetchPartition("other-topic", 0, 5, 1 << 20)]

#: size, correlation id, topic count; per topic its name and partition count; per partition 18 bytes
FLOOR = 4 + 4 + 4 + (2 + len("events") + 4 + 6 * 18) + (2 + len("other-topic") + 4 + 1 * 18)

READER = r"""
import json, resource, socket, sys, time
from zkconsumer.wire import _speedups
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
conn, _ = listener.accept()
request = bytes.fromhex(sys.stdin.readline())
buffer = bytearray(1 << 16)
before, started = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw, time.monotonic()
state, size, got, _mark = _speedups.recv_frame(conn.fileno(), buffer, 10000, request)
waits = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw - before
print(json.dumps([state, size, got, waits, buffer[:size].hex(), time.monotonic() - started]), flush=True)
"""


def _answer_in_pieces(pieces: List[bytes], pause_s: float,
                      request: Optional[bytes] = None) -> Tuple[int, int, int, int, bytes, bytes, float]:
    """Start a reader process, send it ``request`` (by default a Fetch v0 for PARTITIONS), read it as the
    broker, answer it in ``pieces`` with ``pause_s`` between them: (state, size, body bytes read, the
    reader's waits, the body it read, the request the broker got, seconds the reader spent in recv_frame)."""
    if request is None:
        request = FetchRequest(1000, 1, tuple(PARTITIONS)).encode_frame(7, "reader")
    reader = subprocess.Popen([sys.executable, "-c", READER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              cwd=Path(zkconsumer.__file__).resolve().parent.parent)  # this test's zkconsumer
    try:
        assert reader.stdout is not None and reader.stdin is not None
        port = int(reader.stdout.readline())
        with socket.create_connection(("127.0.0.1", port), timeout=10) as broker:
            broker.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            reader.stdin.write(request.hex() + "\n")
            reader.stdin.flush()
            got = b""
            while len(got) < len(request):
                got += broker.recv(65536)
            for i, piece in enumerate(pieces):
                if i:
                    time.sleep(pause_s)
                broker.sendall(piece)
            state, size, read, waits, body, spent = json.loads(reader.stdout.readline())
        assert reader.wait(10) == 0
        return state, size, read, waits, bytes.fromhex(body), got, spent
    finally:
        reader.kill()


def _answer(body_size: int) -> bytes:
    """A frame of ``body_size`` bytes after its size (the reader does not parse it)."""
    return struct.pack(">i", body_size) + bytes((i * 7) % 251 for i in range(body_size))


def test_a_fetch_answer_arriving_in_pieces_wakes_its_reader_once() -> None:
    frame = _answer(FLOOR - 4 + 127)  # every partition, one with a message set of 127 bytes
    head = frame[:FLOOR - 40]  # what a broker may have written when the reader first looks
    state, size, read, waits, body, request, _ = _answer_in_pieces([head, frame[len(head):]], 0.3)
    assert request[4:6] == b"\x00\x01"
    assert (state, size, read, body) == (0, len(frame) - 4, len(frame) - 4, frame[4:])
    assert waits == 1  # without the floor as the mark: woken at the first piece, then again for the rest


def test_an_answer_shorter_than_any_broker_sends_is_still_read() -> None:
    frame = _answer(20)
    state, size, read, _, body, _, spent = _answer_in_pieces([frame], 0)
    assert (state, size, read, body) == (0, 20, 20, frame[4:])
    assert spent < 8  # read after a wait slice (1 s), well inside the 10 s timeout


@pytest.mark.parametrize("request_frame", [
    MetadataRequest(("events",)).encode_frame(7, "reader"),
    FetchRequest(1000, 1, tuple(PARTITIONS)).encode_frame(7, "reader")[:40],  # cut short: not parsed
], ids=["metadata", "truncated fetch"])
def test_other_requests_wait_for_their_first_byte_only(request_frame: bytes) -> None:
    frame = _answer(20)
    state, size, read, _, body, _, spent = _answer_in_pieces([frame], 0, request_frame)
    assert (state, size, read, body) == (0, 20, 20, frame[4:])
    assert spent < 0.9  # not held for a wait slice (1 s)


def test_a_wait_held_below_the_floor_ends_when_the_socket_is_shut_down() -> None:
    """``interrupt()`` and ``abort()`` shut the socket down to end a wait at once: below the mark too."""
    from zkconsumer.wire import _speedups

    listener = socket.create_server(("127.0.0.1", 0))
    reader = socket.create_connection(listener.getsockname()[:2])
    broker, _ = listener.accept()
    request = FetchRequest(1000, 1, tuple(PARTITIONS)).encode_frame(7, "reader")
    result: List[object] = []
    thread = threading.Thread(target=lambda: result.append(
        _speedups.recv_frame(reader.fileno(), bytearray(1 << 16), 30000, request)))
    try:
        thread.start()
        got = b""
        while len(got) < len(request):
            got += broker.recv(65536)
        broker.sendall(_answer(FLOOR + 100)[:24])  # the size and 20 bytes: far below the floor
        time.sleep(0.2)
        reader.shutdown(socket.SHUT_RDWR)
        thread.join(10)
        assert not thread.is_alive()
        assert result == [(0, FLOOR + 100, 20, 1)]  # the caller reports a connection closed mid-answer
    finally:
        for s in (reader, broker, listener):
            s.close()


# --------------------------------------------------------------------------- the mark kept between rounds

def _pair() -> Tuple[socket.socket, socket.socket, socket.socket]:
    listener = socket.create_server(("127.0.0.1", 0))
    reader = socket.create_connection(listener.getsockname()[:2])
    broker, _ = listener.accept()
    return listener, reader, broker


def _serve_one(broker: socket.socket, request: bytes, answer: bytes) -> threading.Thread:
    """The broker's side of one round: read ``request`` whole, then send ``answer`` at once."""

    def serve() -> None:
        got = b""
        while len(got) < len(request):
            got += broker.recv(65536)
        broker.sendall(answer)

    thread = threading.Thread(target=serve)
    thread.start()
    return thread


def test_a_kept_mark_stays_at_the_floor_round_after_round_and_goes_back_to_1_on_a_timeout() -> None:
    """``lowat`` given: a round that reads its answer leaves the mark where its wait set it (the floor, for an
    answer that came whole) and says so; the next round with the same floor finds it set. A round that does
    not end in an answer (here a timeout) puts it back to 1, so the socket is left as a plain read expects."""
    from zkconsumer.wire import _speedups

    listener, reader, broker = _pair()
    request = FetchRequest(1000, 1, tuple(PARTITIONS)).encode_frame(7, "reader")
    frame = _answer(FLOOR - 4 + 127)
    try:
        mark = 1
        for _ in range(3):
            thread = _serve_one(broker, request, frame)
            state, size, got, mark = _speedups.recv_frame(reader.fileno(), bytearray(1 << 16), 5000, request, mark)
            thread.join(10)
            assert (state, size, got) == (0, len(frame) - 4, len(frame) - 4)
            assert mark == FLOOR == reader.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)
        thread = _serve_one(broker, request, b"")  # the request is read, never answered
        assert _speedups.recv_frame(reader.fileno(), bytearray(1 << 16), 200, request, mark) == (1, 0, 0, 1)
        thread.join(10)
        assert reader.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 1
    finally:
        for s in (reader, broker, listener):
            s.close()


def test_a_short_answer_after_a_kept_mark_is_read_at_once_by_the_connection() -> None:
    """A fetcher's connection keeps the floor of its fetches as the mark; an offset lookup on the same
    connection (read by recv_exactly, which waits for any byte) puts it back to 1 first, so its answer,
    shorter than the floor, is read as soon as it comes, not when the request times out."""
    from kafka.protocol.old.fetch import FetchResponse_v0
    from kafka.protocol.old.list_offsets import ListOffsetsResponse_v0

    server = socket.create_server(("127.0.0.1", 0))
    fetch_body = FetchResponse_v0(topics=[("events", [(p.partition, 0, 200, b"") for p in PARTITIONS[:6]]),
                                          ("other-topic", [(0, 0, 9, b"")])]).encode()
    offsets_body = ListOffsetsResponse_v0(topics=[("events", [(0, 0, [150])])]).encode()

    def broker() -> None:
        conn, _ = server.accept()
        with conn:
            while True:
                head = conn.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                request = conn.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
                api_key, _, cid = struct.unpack_from(">hhi", request)
                body = fetch_body if api_key == 1 else offsets_body
                if api_key != 1:
                    time.sleep(0.05)  # the reader waits for it (not a read that finds it there)
                conn.sendall(struct.pack(">ii", 4 + len(body), cid) + body)

    thread = threading.Thread(target=broker, daemon=True)
    thread.start()
    conn = BrokerConnection("127.0.0.1", server.getsockname()[1], "reader", 5000, 0, reuse_buffer=True)
    try:
        for _ in range(2):  # the first answer is read into a new buffer, by the plain read: the second by recv_frame
            assert len(conn.fetch(PARTITIONS, 1000, 1).partitions) == 7
        assert conn._sock is not None and conn._sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == FLOOR
        assert len(offsets_body) + 8 < FLOOR
        started = time.monotonic()
        assert conn.list_offsets("events", 0, -1) == 150
        assert time.monotonic() - started < 0.9  # with the floor still the mark: the 5 s timeout
        assert conn._sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 1
        assert len(conn.fetch(PARTITIONS, 1000, 1).partitions) == 7  # and the next fetch sets it again
    finally:
        conn.close()
        server.close()
