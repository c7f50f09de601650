"""Where ``consume`` writes its messages: whole lines, each known written or not.

A :class:`LineSink` writes one message at a time to a file descriptor and says
whether every byte of it was written. It never sits in a ``write(2)`` that a full
pipe blocks: it waits for the descriptor to be writable (:func:`select.poll`, with a
timeout, polling ``stop()`` between waits) and then writes at most ``PIPE_BUF``
bytes, which a pipe with room accepts at once and whole. So a Ctrl-C taken as a
flag (:class:`~zkconsumer.cli.interrupt.InterruptLatch`) ends a write whose reader
stopped reading, and a message of at most ``PIPE_BUF`` - 1 bytes reaches a pipe
entirely or not at all (a longer one may be cut between two pieces; it then does
not count as written).

Other descriptors (a regular file, a terminal, a socket) are written the same way;
a terminal stopped with Ctrl-S or a socket whose buffer has less room than a piece
can block the write itself, which the command's grace period then ends.

Without a file descriptor (``sys.stdout`` replaced by a test's capture, an embedding
application's stream), :class:`StreamSink` writes through the stream's ``write`` and
``flush``: nothing there can be waited for, and the write counts once ``flush``
returned.
"""

from __future__ import annotations

import io
import os
import select
from typing import BinaryIO, Callable, Optional, Protocol, Union

__all__ = ["LineSink", "Sink", "StreamSink", "line_of", "sink_for"]

#: How long one wait for a writable descriptor lasts before ``stop()`` is asked again.
POLL_INTERVAL_S = 0.1


def line_of(value: Optional[bytes]) -> bytes:
    """A message as the console consumer prints it: the raw value (``null`` for none) and a newline."""
    return (b"null" if value is None else value) + b"\n"


class Sink(Protocol):
    def write_line(self, value: Optional[bytes]) -> bool:
        """Write one message; ``True`` once all of it was written, ``False`` if ``stop()`` ended the
        wait before (then none or only a part of it was written). Raises ``OSError``
        (``BrokenPipeError`` when the reader is gone): the message does not count as written."""


class LineSink:
    """Writes lines to file descriptor ``fd``; see the module docstring.

    ``stop()`` is asked only while the descriptor is not writable: a message whose
    pieces can all be written at once is finished even after ``stop()`` turned true.
    """

    def __init__(self, fd: int, stop: Callable[[], bool], poll_interval_s: float = POLL_INTERVAL_S) -> None:
        self._fd = fd
        self._stop = stop
        self._timeout_ms = max(1, int(poll_interval_s * 1000))
        self._poll = select.poll()
        self._poll.register(fd, select.POLLOUT)
        self._piece = getattr(select, "PIPE_BUF", 512)

    def write_line(self, value: Optional[bytes]) -> bool:
        view = memoryview(line_of(value))
        while view:
            if not self._wait_writable():
                return False
            try:
                written = os.write(self._fd, view[:self._piece])
            except BlockingIOError:  # a descriptor someone made non-blocking: wait again
                continue
            view = view[written:]
        return True

    def _wait_writable(self) -> bool:
        """Whether the descriptor can take a piece now; ``False`` once ``stop()`` said so while waiting.

        An error or hang-up condition counts as writable: the write then raises
        (``BrokenPipeError`` for a pipe whose reader closed it).
        """
        while True:
            if self._poll.poll(0):
                return True
            if self._stop():
                return False
            if self._poll.poll(self._timeout_ms):
                return True


class StreamSink:
    """Writes lines through a binary stream's ``write`` and ``flush`` (no descriptor to wait on)."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out

    def write_line(self, value: Optional[bytes]) -> bool:
        self._out.write(line_of(value))
        self._out.flush()
        return True


def sink_for(out: BinaryIO, stop: Callable[[], bool]) -> Union[LineSink, StreamSink]:
    """A :class:`LineSink` on ``out``'s file descriptor (its buffer flushed first), else a :class:`StreamSink`."""
    try:
        fd = out.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation, ValueError):
        return StreamSink(out)
    out.flush()
    return LineSink(fd, stop)
