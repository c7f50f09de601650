"""Terminal progress for long-running commands: what the terminal can do, a status line, a rate ticker.

Contract: nothing here ever writes unless the stream it is given is an
interactive terminal (:func:`terminal_caps`): output that is piped or
redirected gets no progress and no escape codes. ``TERM=dumb`` counts as "no
cursor control": no status line is drawn there either. ``NO_COLOR`` (any
non-empty value, https://no-color.org) turns colour off; cursor control stays.

:class:`StatusLine` is one redrawable line (``\\r`` + text + erase-to-end),
thread-safe so a :class:`RateTicker` thread can redraw it while the main
thread writes elsewhere. Formatting helpers are pure.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, TextIO, Tuple

from ..threads import ShutdownableThread

__all__ = ["TerminalCaps", "terminal_caps", "StatusLine", "RateTicker", "format_count", "format_rate",
           "format_duration"]

#: How long :meth:`RateTicker.stop` waits for its thread.
JOIN_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class TerminalCaps:
    """What a stream can show. ``tty``: an interactive terminal; ``ansi``: it understands cursor
    control (a TTY whose ``TERM`` is not ``dumb``); ``color``: ANSI and no ``NO_COLOR``;
    ``unicode``: its encoding can write the sparkline's block characters."""

    tty: bool
    ansi: bool
    color: bool
    unicode: bool


def _is_tty(stream: object) -> bool:
    try:
        return bool(getattr(stream, "isatty", lambda: False)())
    except (OSError, ValueError):  # a closed stream
        return False


def terminal_caps(stream: object, env: Optional[Mapping[str, str]] = None) -> TerminalCaps:
    """The capabilities of ``stream`` under environment ``env`` (default ``os.environ``)."""
    env = os.environ if env is None else env
    tty = _is_tty(stream)
    ansi = tty and env.get("TERM", "") != "dumb"
    color = ansi and not env.get("NO_COLOR")
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        "▁█".encode(encoding)
        unicode = True
    except (UnicodeEncodeError, LookupError):
        unicode = False
    return TerminalCaps(tty, ansi, color, unicode)


def format_count(n: float) -> str:
    """``1234567`` → ``'1,234,567'`` (integers), ``1234.5`` → ``'1,234.5'``.

    >>> format_count(1234567), format_count(1234.56)
    ('1,234,567', '1,234.6')
    """
    if float(n).is_integer():
        return f"{int(n):,}"
    return f"{n:,.1f}"


def format_duration(seconds: float) -> str:
    """``75.2`` → ``'1:15'``; ``3725`` → ``'1:02:05'``.

    >>> format_duration(5), format_duration(75.2), format_duration(3725)
    ('0:05', '1:15', '1:02:05')
    """
    s = int(max(0.0, seconds))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def format_rate(label: str, messages: int, nbytes: Optional[int], elapsed_s: float,
                recent: Optional[Tuple[int, float]] = None) -> str:
    """One progress line: ``label: N messages, R msg/s[, M MB/s], elapsed``.

    The rate is over ``recent`` (``(messages, seconds)`` of the last interval)
    when given, else over the whole run.

    >>> format_rate("consuming", 1500, None, 3.0)
    'consuming: 1,500 messages  500.0 msg/s  0:03'
    >>> format_rate("perf", 2000, 2 * 1048576, 2.0, recent=(300, 0.5))
    'perf: 2,000 messages  600.0 msg/s  1.00 MB/s  0:02'
    """
    count, seconds = recent if recent is not None else (messages, elapsed_s)
    rate = count / seconds if seconds > 0 else 0.0
    parts = [f"{label}: {format_count(messages)} messages", f"{rate:,.1f} msg/s"]
    if nbytes is not None:
        mb_s = (nbytes / 1048576.0) / elapsed_s if elapsed_s > 0 else 0.0
        parts.append(f"{mb_s:,.2f} MB/s")
    parts.append(format_duration(elapsed_s))
    return "  ".join(parts)


class StatusLine:
    """One line of status on ``stream``, redrawn in place; inert unless ``stream`` is an ANSI terminal.

    :meth:`draw` replaces the line, :meth:`clear` erases it (call it before
    writing anything else to the same terminal, and at the end). Thread-safe.
    Lines are cut to ``width`` columns so they never wrap (a wrapped line
    cannot be redrawn in place).
    """

    def __init__(self, stream: TextIO, env: Optional[Mapping[str, str]] = None, width: Optional[int] = None) -> None:
        self._stream = stream
        self.enabled = terminal_caps(stream, env).ansi
        self._width = width
        self._lock = threading.Lock()
        self._drawn = False

    def _columns(self) -> int:
        if self._width is not None:
            return self._width
        try:
            columns = os.get_terminal_size(self._stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            return 80
        return columns if columns > 0 else 80  # a terminal that does not know its size reports 0

    def draw(self, text: str) -> None:
        if not self.enabled:
            return
        text = text[: max(1, self._columns() - 1)]
        with self._lock:
            try:
                self._stream.write(f"\r{text}\x1b[K")
                self._stream.flush()
                self._drawn = True
            except (OSError, ValueError):
                self.enabled = False  # the terminal went away: stay quiet from now on

    def clear(self) -> None:
        """Erase the line if one is drawn (a no-op otherwise)."""
        with self._lock:
            self.clear_locked()

    @property
    def lock(self) -> threading.Lock:
        """Held while the line is written: hold it to write to the same terminal without interleaving."""
        return self._lock

    @property
    def drawn(self) -> bool:
        return self._drawn

    def clear_locked(self) -> None:
        """:meth:`clear` for a caller already holding :attr:`lock`."""
        if self._drawn:
            self._drawn = False
            try:
                self._stream.write("\r\x1b[K")
                self._stream.flush()
            except (OSError, ValueError):
                self.enabled = False


class RateTicker:
    """Redraws ``status`` every ``interval_s`` on its own thread with ``render(counts, elapsed, recent)``.

    ``counts()`` returns ``(messages, bytes)`` so far (read from another thread:
    it must be cheap and never block); ``render`` gets them, the seconds since
    :meth:`start`, and ``(messages, seconds)`` of the last interval. Starts no
    thread when ``status`` is disabled. :meth:`stop` joins the thread (within
    :data:`JOIN_TIMEOUT_S`) and erases the line; idempotent.
    """

    def __init__(self, status: StatusLine, counts: Callable[[], Tuple[int, int]],
                 render: Callable[[Tuple[int, int], float, Tuple[int, float]], str], interval_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._status = status
        self._counts = counts
        self._render = render
        self._interval_s = interval_s
        self._clock = clock
        self._thread: Optional[ShutdownableThread] = None
        self._start = clock()
        self._last: Tuple[int, float] = (0, self._start)

    def start(self) -> "RateTicker":
        if self._status.enabled and self._thread is None:
            self._start = self._clock()
            self._last = (0, self._start)
            self._thread = ShutdownableThread("zkconsumer-cli-progress", self._run)
            self._thread.start()
        return self

    def tick(self) -> None:
        """Redraw now (the thread calls this every interval)."""
        now = self._clock()
        try:
            counts = self._counts()
        except Exception:  # noqa: BLE001 - progress must never break the command
            return
        last_messages, last_at = self._last
        self._last = (counts[0], now)
        self._status.draw(self._render(counts, now - self._start, (counts[0] - last_messages, now - last_at)))

    def _run(self) -> None:
        thread = self._thread
        assert thread is not None
        while not thread.wait(self._interval_s):
            self.tick()

    def stop(self, timeout: Optional[float] = JOIN_TIMEOUT_S) -> bool:
        """Stop and join the thread (within ``timeout``) and erase the line; ``True`` once the thread ended."""
        ended = self._thread is None or self._thread.stop(timeout)
        self._status.clear()
        return ended
