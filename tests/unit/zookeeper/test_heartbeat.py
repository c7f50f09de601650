"""The native heartbeat thread (``zkconsumer.zookeeper._heartbeat``) on a loopback TCP connection.

A plain socket server stands in for ZooKeeper here: these tests check the thread's own
contract (frame bytes, cadence after writes, frames written whole, unanswered writes,
descriptor and thread hygiene, fork). What a real ZooKeeper server makes of it is tested in
tests/integration/test_zookeeper_heartbeat.py.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from typing import Iterator, Set, Tuple

import pytest

from zkconsumer.zookeeper.heartbeat import QUIET_AVAILABLE

pytestmark = pytest.mark.skipif(not QUIET_AVAILABLE, reason="the _heartbeat C extension is not built")

PING_FRAME = struct.pack(">iii", 8, -2, 11)  # length, xid -2, type 11 (ping)
PING_REPLY = struct.pack(">iiqi", 16, -2, 0, 0)  # length, xid, zxid, err
INTERVAL, ANSWER = 0.3, 0.15
Link = Tuple[socket.socket, socket.socket, socket.socket, socket.socket]


@pytest.fixture
def link() -> Iterator[Link]:
    """``(client, server, wake_read, wake_write)``: a connected loopback TCP pair and a wake-up socket pair."""
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    client.setblocking(False)  # as kazoo's
    wake_read, wake_write = socket.socketpair()
    yield client, server, wake_read, wake_write
    for s in (client, server, wake_read, wake_write):
        s.close()


@pytest.fixture
def hb() -> Iterator[object]:
    from zkconsumer.zookeeper import _heartbeat

    heartbeat = _heartbeat.Heartbeat()
    yield heartbeat
    heartbeat.stop()


def attach(hb: object, link: Link) -> None:
    client, _, _, wake_write = link
    hb.attach(client.fileno(), wake_write.fileno(), INTERVAL, 0.0, ANSWER)  # type: ignore[attr-defined]


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


def test_an_idle_connection_gets_one_ping_frame_per_interval_and_answers_pop_oldest_first(hb, link) -> None:
    _, server, _, _ = link
    attached = time.monotonic()
    attach(hb, link)
    assert receive(server, 12, 2.0) == PING_FRAME
    first = time.monotonic()
    assert first - attached >= INTERVAL
    assert receive(server, 12, 2.0) == PING_FRAME  # unanswered: pinged on schedule all the same
    assert hb.pings == 2
    sent = [hb.answered(), hb.answered()]
    assert None not in sent and sent[0] < sent[1] <= time.monotonic()
    assert attached + INTERVAL <= sent[0] <= first  # the time the ping started
    assert hb.answered() is None


def test_client_frames_are_written_whole_and_postpone_pings(hb, link) -> None:
    client, server, _, _ = link
    assert hb.write(b"early", 1.0) is False  # nothing attached: the client writes it itself
    attach(hb, link)
    time.sleep(INTERVAL * 0.6)
    frame = struct.pack(">i", 300_000) + b"x" * 300_000  # larger than one send()
    assert hb.write(frame, 2.0) is True
    written = time.monotonic()
    assert receive(server, len(frame), 2.0) == frame  # not a ping byte in it
    assert receive(server, 12, 2.0) == PING_FRAME
    assert time.monotonic() - written >= INTERVAL - 0.01  # the frame counted as traffic


def test_a_write_the_peer_never_takes_times_out(hb, link) -> None:
    attach(hb, link)
    frame = b"y" * (64 << 20)  # the server reads nothing: the socket buffers fill up
    started = time.monotonic()
    assert hb.write(frame, 0.3) is None
    assert 0.3 <= time.monotonic() - started < 2.0


def test_a_ping_without_any_byte_back_makes_the_connection_suspect_and_wakes_the_client(hb, link) -> None:
    _, server, wake_read, _ = link
    attach(hb, link)
    assert receive(server, 12, 2.0) == PING_FRAME
    assert receive(wake_read, 1, 2.0) == b"\0"  # the client's connection thread is woken
    assert hb.suspect() and not hb.suspect()  # reported once
    assert hb.suspicions == 1


def test_an_unanswered_client_write_makes_the_connection_suspect_before_any_ping(hb, link) -> None:
    """A request into a hung server: the next ping is 0.7 T away, the watch must not wait for it."""
    _, server, wake_read, _ = link
    attach(hb, link)
    assert hb.write(b"request", 1.0) is True
    assert receive(server, 7, 1.0) == b"request"
    assert receive(wake_read, 1, INTERVAL) == b"\0"  # within the answer timeout, before the ping
    assert hb.suspect() and hb.pings == 0


def test_writes_that_keep_coming_do_not_hide_a_silent_server(hb, link) -> None:
    """The oldest unanswered write is watched: a stream of writes (a lease's retries) cannot postpone it."""
    _, server, wake_read, _ = link
    attach(hb, link)
    deadline = time.monotonic() + 3 * ANSWER
    while time.monotonic() < deadline and not receive(wake_read, 1, 0.001):
        hb.write(b"r", 1.0)
        time.sleep(ANSWER / 5)
    assert hb.suspect()


def test_an_answer_that_comes_after_the_wake_up_but_before_the_client_asks_clears_the_suspicion(hb, link) -> None:
    _, server, wake_read, _ = link
    attach(hb, link)
    assert receive(server, 12, 2.0) == PING_FRAME
    assert receive(wake_read, 1, 2.0) == b"\0"
    server.sendall(PING_REPLY)  # late, but before the client's thread looked
    time.sleep(0.05)
    assert not hb.suspect()


def test_a_reply_received_but_not_yet_read_is_an_answer(hb, link) -> None:
    """A client whose reader is stalled (the GIL) must not lose a connection that answers."""
    _, server, wake_read, _ = link
    attach(hb, link)
    for _ in range(2):
        assert receive(server, 12, 2.0) == PING_FRAME
        server.sendall(PING_REPLY)  # nobody reads it on the client side
    assert receive(wake_read, 1, ANSWER + 0.2) == b""
    assert not hb.suspect() and hb.suspicions == 0


def test_after_closing_no_ping_but_an_unanswered_close_is_still_suspect(hb, link) -> None:
    """A client shutting down against a hung server must learn it, or kazoo's stop() waits for ever."""
    _, server, wake_read, _ = link
    attach(hb, link)
    hb.closing()
    assert hb.write(b"close", 1.0) is True
    assert receive(wake_read, 1, 1.0) == b"\0"
    assert hb.suspect()
    assert receive(server, 5 + 12, 3 * INTERVAL) == b"close"  # and no ping after it
    attach(hb, link)  # a new connection pings again
    assert receive(server, 12, 2.0) == PING_FRAME


# --- ``since_receive`` (the default ``kafka`` mode): silence counted from the last byte received

SILENCE = 0.6  # longer than INTERVAL, as 2T/3 is longer than T/3


def attach_since_receive(hb: object, link: Link) -> None:
    client, _, _, wake_write = link
    hb.attach(client.fileno(), wake_write.fileno(), INTERVAL, 0.0, SILENCE, True)  # type: ignore[attr-defined]


def test_since_receive_a_silent_server_is_suspect_once_nothing_came_for_the_silence_timeout(hb, link) -> None:
    """ZooKeeper's Java client's rule: dropped after 2T/3 without a byte, not T/3 after the ping."""
    _, server, wake_read, _ = link
    attached = time.monotonic()
    attach_since_receive(hb, link)
    assert receive(server, 12, 2.0) == PING_FRAME  # a ping after INTERVAL: nothing comes back
    assert receive(wake_read, 1, 2.0) == b"\0"
    woken = time.monotonic()
    # the connection's last byte came at its start (here: nothing at all, so the attach): the
    # suspicion waits for SILENCE after it, not for SILENCE after the ping
    assert woken - attached >= SILENCE - 0.02
    assert woken - attached < INTERVAL + SILENCE
    assert hb.suspect()


def test_since_receive_answers_that_keep_coming_keep_the_connection(hb, link) -> None:
    """Each ping answered within the silence timeout: never suspect, however many intervals pass."""
    _, server, wake_read, _ = link
    attach_since_receive(hb, link)
    for _ in range(4):
        assert receive(server, 12, 2.0) == PING_FRAME
        server.sendall(PING_REPLY)
    assert receive(wake_read, 1, 0.05) == b""
    assert not hb.suspect() and hb.suspicions == 0


def test_since_receive_a_late_answer_within_the_silence_timeout_is_no_suspicion(hb, link) -> None:
    """An answer later than the next ping is due, but within 2T/3 of the last byte: kept (quiet would drop)."""
    _, server, wake_read, _ = link
    attach_since_receive(hb, link)
    assert receive(server, 12, 2.0) == PING_FRAME
    time.sleep(SILENCE - INTERVAL - 0.1)  # past nothing: the answer is late but inside the window
    server.sendall(PING_REPLY)
    # the pings after it go unanswered: the connection is suspect SILENCE after this answer, not before
    assert receive(wake_read, 1, SILENCE - 0.1) == b""
    assert not hb.suspect()


def test_since_receive_writes_after_the_last_answer_do_not_postpone_the_drop(hb, link) -> None:
    """A member writes every T/4 or so (the lease's syncs) when its server hangs: it is dropped once nothing
    came for the silence timeout, not half a timeout after whichever write was the last one then (that
    made a member on a SIGSTOPped follower move near T instead of 2T/3, and lose its session)."""
    client, server, wake_read, wake_write = link
    silence = 1.2
    hb.attach(client.fileno(), wake_write.fileno(), INTERVAL, 0.0, silence, True)  # type: ignore[attr-defined]
    assert hb.write(b"r", 1.0) is True
    assert receive(server, 1, 1.0) == b"r"
    server.sendall(PING_REPLY)  # the last byte the server sends
    answered = time.monotonic()
    woken = None
    while woken is None and time.monotonic() < answered + 3 * silence:
        hb.write(b"w", 1.0)  # every tenth of the silence timeout, each unanswered
        if receive(wake_read, 1, silence / 10):
            woken = time.monotonic()
    assert woken is not None and hb.suspect()
    assert silence - 0.05 <= woken - answered < silence + 0.3, woken - answered


def test_only_since_receive_allows_a_silence_timeout_longer_than_the_interval(hb) -> None:
    with pytest.raises(ValueError):
        hb.attach(0, 0, 1.0, 0.0, 0.0, True)
    with pytest.raises(ValueError):
        hb.attach(0, 0, 1.0, 0.0, 2.0)  # only with since_receive


def native_threads() -> Set[str]:
    return set(os.listdir("/proc/self/task"))


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_detach_closes_its_descriptors_and_stop_joins_the_thread(link) -> None:
    from zkconsumer.zookeeper import _heartbeat

    _, server, _, _ = link
    hb = _heartbeat.Heartbeat()
    # Sets of descriptor numbers, not counts: leftover threads of earlier tests in this process may
    # open or close descriptors meanwhile; the heartbeat's two are new at attach, gone at detach.
    before, fds = native_threads(), set(os.listdir("/proc/self/fd"))
    attach(hb, link)
    started = native_threads() - before
    opened = set(os.listdir("/proc/self/fd")) - fds
    assert len(started) == 1 and len(opened) >= 2
    hb.detach()
    hb.detach()  # idempotent
    assert len(opened & set(os.listdir("/proc/self/fd"))) <= len(opened) - 2
    assert receive(server, 12, 2 * INTERVAL) == b""  # detached: silent
    hb.stop()
    hb.stop()  # idempotent
    assert not started & native_threads()  # joined
    with pytest.raises(RuntimeError):
        attach(hb, link)


def test_bad_timings_are_refused(hb) -> None:
    with pytest.raises(ValueError):
        hb.attach(0, 0, 1.0, 0.0, 1.0)  # the answer must be due before the next ping
    with pytest.raises(ValueError):
        hb.attach(0, 0, 1.0, -0.1, 0.5)


def test_in_a_forked_child_it_does_nothing(hb, link) -> None:
    attach(hb, link)
    pid = os.fork()
    if pid == 0:  # the child: no thread here; nothing may block or write
        code = 0
        try:
            if hb.write(b"x", 0.1) is not False or hb.answered() is not None or hb.suspect():
                code = 1
            hb.closing()
            hb.detach()
            hb.stop()
            try:
                attach(hb, link)
                code = 2
            except RuntimeError:
                pass
        except BaseException:  # noqa: BLE001 - reported through the exit code
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_since_receive_after_a_long_silence_a_fresh_write_still_gets_half_the_window(hb, link) -> None:
    """A process resumed from a freeze: the last byte is older than the window, but the write it
    sends now gets SILENCE / 2 to be answered instead of being suspect at once."""
    client, server, wake_read, wake_write = link
    hb.attach(client.fileno(), wake_write.fileno(), 10.0, 0.0, SILENCE, True)  # no ping meanwhile
    time.sleep(SILENCE + 0.1)  # nothing outstanding, nothing received: no suspicion without a write
    assert receive(wake_read, 1, 0.01) == b""
    written = time.monotonic()
    assert hb.write(b"request", 1.0) is True
    assert receive(server, 7, 1.0) == b"request"
    assert receive(wake_read, 1, 2.0) == b"\0"
    assert time.monotonic() - written >= SILENCE / 2 - 0.02
    assert hb.suspect()
