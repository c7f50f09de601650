"""The native heartbeat thread (``zkconsumer.zookeeper._heartbeat``) on a loopback TCP connection.

A plain socket server stands in for ZooKeeper here: these tests check the thread's own
contract (frame bytes, cadence after writes, no interleaving, unanswered pings, descriptor
hygiene, fork). What a real ZooKeeper server makes of it is tested in
tests/integration/test_zookeeper_heartbeat.py.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from typing import Iterator, Tuple

import pytest

from zkconsumer.zookeeper.heartbeat import QUIET_AVAILABLE

pytestmark = pytest.mark.skipif(not QUIET_AVAILABLE, reason="the _heartbeat C extension is not built")

PING_FRAME = struct.pack(">iii", 8, -2, 11)  # length, xid -2, type 11 (ping)
PING_REPLY = struct.pack(">iiqi", 16, -2, 0, 0)  # length, xid, zxid, err
INTERVAL, ANSWER = 0.3, 0.15


@pytest.fixture
def link() -> Iterator[Tuple[socket.socket, socket.socket, socket.socket, socket.socket]]:
    """``(client, server, wake_read, wake_write)``: a connected loopback TCP pair and a wake-up socket pair."""
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    wake_read, wake_write = socket.socketpair()
    yield client, server, wake_read, wake_write
    for s in (client, server, wake_read, wake_write):
        s.close()


def native() -> object:
    from zkconsumer.zookeeper import _heartbeat

    return _heartbeat.Heartbeat()


def receive(sock: socket.socket, n: int, timeout: float) -> bytes:
    sock.settimeout(timeout)
    data = b""
    try:
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pass
    return data


def test_an_idle_connection_gets_one_ping_frame_per_interval_and_answers_pop_oldest_first(link) -> None:
    client, server, _, wake_write = link
    hb = native()
    try:
        attached = time.monotonic()
        hb.attach(client.fileno(), wake_write.fileno(), INTERVAL, 0.0, ANSWER)
        assert receive(server, 12, 2.0) == PING_FRAME
        first = time.monotonic()
        assert first - attached >= INTERVAL
        assert receive(server, 12, 2.0) == PING_FRAME  # unanswered but data-less: still pinged on schedule
        assert hb.pings == 2
        sent = [hb.answered(), hb.answered()]
        assert None not in sent and sent[0] < sent[1] and abs(sent[0] - first) < 0.1
        assert hb.answered() is None
    finally:
        hb.stop()


def test_client_writes_postpone_pings_and_are_never_interleaved(link) -> None:
    client, server, _, wake_write = link
    hb = native()
    try:
        hb.attach(client.fileno(), wake_write.fileno(), INTERVAL, 0.0, ANSWER)
        hb.write_begin()  # a request is being written: no ping may start, however long it takes
        assert receive(server, 12, 2 * INTERVAL) == b""
        client.sendall(b"request")
        hb.write_end(False)
        ended = time.monotonic()
        assert receive(server, 7, 1.0) == b"request"
        assert receive(server, 12, 2.0) == PING_FRAME
        assert time.monotonic() - ended >= INTERVAL - 0.01  # the write counted as traffic
    finally:
        hb.stop()


def test_a_ping_without_any_byte_back_makes_the_connection_suspect_and_wakes_the_client(link) -> None:
    client, server, wake_read, wake_write = link
    hb = native()
    try:
        hb.attach(client.fileno(), wake_write.fileno(), INTERVAL, 0.0, ANSWER)
        assert receive(server, 12, 2.0) == PING_FRAME
        assert not hb.suspect()
        assert receive(wake_read, 1, 2.0) == b"\0"  # the client's connection thread is woken
        assert hb.suspect() and not hb.suspect()  # reported once
        assert hb.drops == 1
    finally:
        hb.stop()


def test_an_answer_that_comes_after_the_wake_up_but_before_the_client_asks_clears_the_suspicion(link) -> None:
    client, server, wake_read, wake_write = link
    hb = native()
    try:
        hb.attach(client.fileno(), wake_write.fileno(), INTERVAL, 0.0, ANSWER)
        assert receive(server, 12, 2.0) == PING_FRAME
        assert receive(wake_read, 1, 2.0) == b"\0"
        server.sendall(PING_REPLY)  # late, but before the client's thread looked
        time.sleep(0.05)
        assert not hb.suspect()
    finally:
        hb.stop()


def test_a_reply_received_but_not_yet_read_is_an_answer(link) -> None:
    """A client whose reader is stalled (the GIL) must not lose a connection that answers."""
    client, server, wake_read, wake_write = link
    hb = native()
    try:
        hb.attach(client.fileno(), wake_write.fileno(), INTERVAL, 0.0, ANSWER)
        for _ in range(2):
            assert receive(server, 12, 2.0) == PING_FRAME
            server.sendall(PING_REPLY)  # nobody reads it on the client side
        assert receive(wake_read, 1, ANSWER + 0.2) == b""
        assert not hb.suspect() and hb.drops == 0
    finally:
        hb.stop()


def test_after_a_last_write_no_ping_until_the_next_attach(link) -> None:
    client, server, _, wake_write = link
    hb = native()
    try:
        hb.attach(client.fileno(), wake_write.fileno(), INTERVAL, 0.0, ANSWER)
        hb.write_begin()
        hb.write_end(True)  # e.g. the client sent Close
        assert receive(server, 12, 3 * INTERVAL) == b""
        hb.attach(client.fileno(), wake_write.fileno(), INTERVAL, 0.0, ANSWER)
        assert receive(server, 12, 2.0) == PING_FRAME
    finally:
        hb.stop()


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_detach_closes_its_descriptors_and_stop_joins_the_thread(link) -> None:
    client, server, _, wake_write = link
    before_threads = threading.active_count()  # the native thread is not a Python thread: counted via /proc
    tasks = len(os.listdir("/proc/self/task"))
    hb = native()
    fds = open_descriptors()
    hb.attach(client.fileno(), wake_write.fileno(), INTERVAL, 0.0, ANSWER)
    assert open_descriptors() == fds + 2 and len(os.listdir("/proc/self/task")) == tasks + 1
    hb.detach()
    hb.detach()  # idempotent
    assert open_descriptors() == fds
    assert receive(server, 12, 2 * INTERVAL) == b""  # detached: silent
    hb.stop()
    hb.stop()  # idempotent
    assert len(os.listdir("/proc/self/task")) == tasks and threading.active_count() == before_threads
    with pytest.raises(RuntimeError):
        hb.attach(client.fileno(), wake_write.fileno(), INTERVAL, 0.0, ANSWER)


def test_bad_timings_are_refused() -> None:
    hb = native()
    with pytest.raises(ValueError):
        hb.attach(0, 0, 1.0, 0.0, 1.0)  # the answer must be due before the next ping
    with pytest.raises(ValueError):
        hb.attach(0, 0, 1.0, -0.1, 0.5)
    hb.stop()


def test_in_a_forked_child_it_does_nothing(link) -> None:
    client, _, _, wake_write = link
    hb = native()
    hb.attach(client.fileno(), wake_write.fileno(), INTERVAL, 0.0, ANSWER)
    try:
        pid = os.fork()
        if pid == 0:  # the child: no thread here; nothing may block or write
            code = 0
            try:
                hb.write_begin()
                hb.write_end(False)
                hb.detach()
                hb.stop()
                try:
                    hb.attach(client.fileno(), wake_write.fileno(), INTERVAL, 0.0, ANSWER)
                    code = 2
                except RuntimeError:
                    pass
            except BaseException:  # noqa: BLE001 - reported through the exit code
                code = 3
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        hb.stop()
