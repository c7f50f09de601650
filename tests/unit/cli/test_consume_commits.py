"""The pieces ``consume`` commits with: whole lines to a pipe (LineSink), Ctrl-C as a flag
(InterruptLatch), and the loop's bookkeeping (the unwritten message left out of the final commit) with a fake
connector. The promise against a real cluster: tests/integration/test_cli_commits.py.
"""

from __future__ import annotations

import io
import os
import signal
import threading
import time
from types import SimpleNamespace
from typing import Any, Iterator, List, Optional

import pytest

from zkconsumer.cli.consume import ConsumeLoop, LoopSettings
from zkconsumer.cli.interrupt import InterruptLatch
from zkconsumer.cli.progress import StatusLine
from zkconsumer.cli.sink import LineSink, StreamSink, sink_for
from zkconsumer.consumer.stream import MessageAndMetadata
from zkconsumer.errors import ConsumerTimeoutError


@pytest.fixture(autouse=True)
def sigint_restored() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def pipe() -> Iterator[List[int]]:
    read_fd, write_fd = os.pipe()
    yield [read_fd, write_fd]
    for fd in (read_fd, write_fd):
        try:
            os.close(fd)
        except OSError:
            pass


def fill(fd: int) -> int:
    """Fill a pipe's buffer; returns how many bytes it took."""
    os.set_blocking(fd, False)
    total = 0
    try:
        while True:
            total += os.write(fd, b"\0" * 4096)
    except BlockingIOError:
        pass
    os.set_blocking(fd, True)
    return total


def drain(fd: int) -> bytes:
    os.set_blocking(fd, False)
    data = b""
    try:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
    except BlockingIOError:
        pass
    return data


# --------------------------------------------------------------------------- LineSink


def test_a_line_is_written_whole_with_its_newline(pipe: List[int]) -> None:
    sink = LineSink(pipe[1], stop=lambda: False)
    assert sink.write_line(b"abc") and sink.write_line(None)
    assert drain(pipe[0]) == b"abc\nnull\n"


def test_a_write_waiting_for_a_full_pipe_gives_up_once_stop_says_so_and_writes_nothing(pipe: List[int]) -> None:
    fill(pipe[1])
    asked: List[int] = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) >= 3  # the third time it is asked

    sink = LineSink(pipe[1], stop=stop, poll_interval_s=0.01)
    assert sink.write_line(b"x" * 100) is False
    assert len(asked) == 3
    assert b"x" not in drain(pipe[0])  # a line of at most PIPE_BUF bytes: none of it


def test_a_write_finishes_once_the_reader_makes_room(pipe: List[int]) -> None:
    filled = fill(pipe[1])
    read: List[bytes] = []

    def reader() -> None:  # reads exactly what filled the pipe, so the late line stays for the check
        time.sleep(0.1)
        os.set_blocking(pipe[0], True)
        while sum(map(len, read)) < filled:
            read.append(os.read(pipe[0], filled - sum(map(len, read))))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        assert LineSink(pipe[1], stop=lambda: False, poll_interval_s=0.01).write_line(b"late")
    finally:
        thread.join(5)
    assert b"".join(read) == b"\0" * filled
    assert drain(pipe[0]) == b"late\n"


def test_stop_is_not_asked_while_the_pipe_has_room(pipe: List[int]) -> None:
    sink = LineSink(pipe[1], stop=lambda: True)
    assert sink.write_line(b"written anyway")
    assert drain(pipe[0]) == b"written anyway\n"


def test_a_closed_reader_raises_broken_pipe(pipe: List[int]) -> None:
    os.close(pipe[0])
    with pytest.raises(BrokenPipeError):
        LineSink(pipe[1], stop=lambda: False).write_line(b"nobody reads this")


def test_a_stream_without_a_descriptor_gets_a_stream_sink() -> None:
    out = io.BytesIO()
    sink = sink_for(out, stop=lambda: False)
    assert isinstance(sink, StreamSink) and sink.write_line(b"v")
    assert out.getvalue() == b"v\n"


# --------------------------------------------------------------------------- InterruptLatch


def interrupt_self() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(50):
        time.sleep(0.01)


def test_the_first_ctrl_c_sets_the_latch_instead_of_raising_and_the_handler_is_restored() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with InterruptLatch() as latch:
        interrupt_self()  # no KeyboardInterrupt
        assert latch.is_set
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_ctrl_c_goes_to_the_handler_found_on_entry() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with InterruptLatch() as latch:
        interrupt_self()
        with pytest.raises(KeyboardInterrupt):
            interrupt_self()
    assert latch.is_set


def test_an_ignored_sigint_stays_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with InterruptLatch() as latch:
        interrupt_self()
    assert not latch.is_set and signal.getsignal(signal.SIGINT) == signal.SIG_IGN


# --------------------------------------------------------------------------- ConsumeLoop


class FakeStream:
    """Hands out ``messages`` (advancing each partition's position as the real iterator does), then
    times out; ``then`` runs when the last one was handed out."""

    def __init__(self, infos: List[Any], messages: List[MessageAndMetadata]) -> None:
        self._infos = {(i.topic, i.partition): i for i in infos}
        self._messages = list(messages)

    def __iter__(self) -> "FakeStream":
        return self

    def __next__(self) -> MessageAndMetadata:
        if not self._messages:
            raise ConsumerTimeoutError("idle")
        m = self._messages.pop(0)
        self._infos[(m.topic, m.partition)].consumed_offset = m.offset + 1
        return m


class FakeConnector:
    """The connector's commit API: positions() and commit_offsets(offsets=None), as the real one."""

    def __init__(self, infos: List[Any]) -> None:
        self.infos = infos
        self.commits: List[dict] = []

    def positions(self) -> dict:
        return {(i.topic, i.partition): i.consumed_offset for i in self.infos}

    def commit_offsets(self, offsets: Optional[dict] = None) -> List[Any]:
        self.commits.append(self.positions() if offsets is None else dict(offsets))
        return []


class FailingSink:
    def __init__(self, fail_at: int, error: Optional[OSError]) -> None:
        self.fail_at, self.error, self.lines = fail_at, error, 0

    def write_line(self, value: Optional[bytes]) -> bool:
        if self.lines == self.fail_at:
            if self.error is not None:
                raise self.error
            return False
        self.lines += 1
        return True


def run_loop(fail_at: int, error: Optional[OSError]) -> "tuple[ConsumeLoop, FakeConnector]":
    infos = [SimpleNamespace(topic="t", partition=p, consumed_offset=0) for p in range(2)]
    messages = [MessageAndMetadata("t", i % 2, i // 2, None, b"v") for i in range(10)]
    connector = FakeConnector(infos)
    loop = ConsumeLoop(connector, FakeStream(infos, messages), io.BytesIO(),  # type: ignore[arg-type]
                       StatusLine(io.StringIO()), LoopSettings(None, 0.0, 0), None, stop=lambda: False)
    loop._sink = FailingSink(fail_at, error)
    loop.run()
    loop.commit_written()
    return loop, connector


@pytest.mark.parametrize("error", [BrokenPipeError(32, "Broken pipe"), None], ids=["closed pipe", "abandoned"])
def test_the_final_commit_leaves_out_the_message_that_was_not_written(error: Optional[OSError]) -> None:
    loop, connector = run_loop(fail_at=5, error=error)  # messages 0-4 written: t-0 at 0,1,2 and t-1 at 0,1
    assert loop.count == 5 and loop.unwritten is not None and loop.unwritten.offset == 2
    assert connector.commits == [{("t", 0): 3, ("t", 1): 2}]


def test_another_write_error_is_reported_and_what_was_written_is_committed() -> None:
    loop, connector = run_loop(fail_at=3, error=OSError(28, "No space left on device"))
    assert loop.count == 3 and isinstance(loop.write_error, OSError)
    assert connector.commits == [{("t", 0): 2, ("t", 1): 1}]
