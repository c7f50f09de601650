"""``groups describe --watch N``: the group's table redrawn every N seconds, each partition's lag as a sparkline.

Pure parts: :func:`sparkline`, :class:`LagHistory` (a bounded per-partition
history of lag samples) and :func:`render_watch` (one screen). :func:`watch`
is the loop: on an ANSI terminal each screen replaces the previous one in
place (cursor home, each line erased to its end, the rest of the screen
erased); otherwise (stdout piped or redirected, or ``TERM=dumb``) screens are
printed one after another, separated by a blank line, without escape codes.
Ctrl-C ends the loop (the caller exits 0).
"""

from __future__ import annotations

import datetime
import time
from collections import deque
from typing import Callable, Deque, Dict, Iterable, List, Mapping, Optional, Sequence, Set, TextIO, Tuple, Type

from ..admin import GroupDescription
from ..structs import TopicPartition
from .output import Cell, render_table
from .progress import TerminalCaps

__all__ = ["BLOCKS", "ASCII_BLOCKS", "sparkline", "resample", "LagHistory", "render_watch", "watch"]

#: Eight levels, lowest first.
BLOCKS = "▁▂▃▄▅▆▇█"
#: For terminals whose encoding cannot write :data:`BLOCKS`.
ASCII_BLOCKS = "_.-:=+*#"
#: Default span of the history drawn (seconds).
DEFAULT_HISTORY_S = 600.0
#: Default number of characters of a sparkline.
DEFAULT_WIDTH = 30

Sample = Tuple[float, Optional[int]]


def resample(values: Sequence[Optional[float]], width: int) -> List[Optional[float]]:
    """At most ``width`` values: consecutive values merged by their maximum (``None`` only if all are).

    Peaks survive the merge: a spike of lag is what a reader looks for.

    >>> resample([1, 5, 2, 2, None, None], 3)
    [5, 2, None]
    >>> resample([1, 2], 5)
    [1, 2]
    """
    if width < 1:
        return []
    n = len(values)
    if n <= width:
        return list(values)
    out: List[Optional[float]] = []
    for i in range(width):
        bucket = [v for v in values[i * n // width:(i + 1) * n // width] if v is not None]
        out.append(max(bucket) if bucket else None)
    return out


def sparkline(values: Sequence[Optional[float]], width: Optional[int] = None, top: Optional[float] = None,
              blocks: str = BLOCKS) -> str:
    """``values`` drawn as one character each (merged to ``width`` first if given).

    The scale runs from 0 to ``top`` (default: the largest value), so a
    partition whose lag grows draws a rising ramp, a steady lag a flat line
    (full for a steady backlog, lowest for none). ``None`` (lag unknown) is a
    space; negative values count as 0.

    >>> sparkline([0, 1, 2, 3, 4, 5, 6, 7])
    '▁▂▃▄▅▆▇█'
    >>> sparkline([0, 0, 0]), sparkline([5, 5]), sparkline([None, 8, 0])
    ('▁▁▁', '██', ' █▁')
    >>> sparkline([0, 10, 20, 40], blocks="_.-:=+*#")
    '_-=#'
    """
    if width is not None:
        values = resample(values, width)
    known = [max(0.0, float(v)) for v in values if v is not None]
    scale = top if top is not None else (max(known) if known else 0.0)
    last = len(blocks) - 1
    chars = []
    for v in values:
        if v is None:
            chars.append(" ")
        elif scale <= 0:
            chars.append(blocks[0])
        else:
            level = round(min(1.0, max(0.0, float(v)) / scale) * last)
            chars.append(blocks[level])
    return "".join(chars)


class LagHistory:
    """Lag samples per partition over the last ``span_s`` seconds (older ones dropped), at most
    ``max_samples`` each; a partition that stops appearing is forgotten once all its samples expired."""

    def __init__(self, span_s: float = DEFAULT_HISTORY_S, max_samples: int = 1000) -> None:
        if span_s <= 0 or max_samples < 1:
            raise ValueError("span_s must be > 0 and max_samples >= 1")
        self.span_s = span_s
        self._max = max_samples
        self._samples: Dict[TopicPartition, Deque[Sample]] = {}

    def record(self, now: float, lags: Mapping[TopicPartition, Optional[int]]) -> None:
        """Add one sample per partition of ``lags`` at time ``now``, then drop expired ones."""
        for tp, lag in lags.items():
            self._samples.setdefault(tp, deque(maxlen=self._max)).append((now, lag))
        horizon = now - self.span_s
        for tp in list(self._samples):
            samples = self._samples[tp]
            while samples and samples[0][0] < horizon:
                samples.popleft()
            if not samples:
                del self._samples[tp]

    def values(self, tp: TopicPartition) -> List[Optional[int]]:
        return [lag for _, lag in self._samples.get(tp, ())]

    def change(self, tp: TopicPartition) -> Optional[int]:
        """Last known lag minus the first known lag in the history (``None`` if fewer than two are known)."""
        known = [v for v in self.values(tp) if v is not None]
        return known[-1] - known[0] if len(known) >= 2 else None

    def span(self) -> float:
        """Seconds covered by the samples held (0 with fewer than two sample times)."""
        times = [t for samples in self._samples.values() for t, _ in samples]
        return max(times) - min(times) if len(times) >= 2 else 0.0

    def partitions(self) -> List[TopicPartition]:
        return sorted(self._samples)


def _signed(n: Optional[int]) -> str:
    if n is None:
        return "-"
    return f"{n:+d}" if n else "0"


def render_watch(description: GroupDescription, history: LagHistory, *, interval_s: float, when: str,
                 caps: TerminalCaps, width: int = DEFAULT_WIDTH, error: Optional[str] = None) -> str:
    """One screen: header, members, the partition table with each partition's lag trend and sparkline.

    ``TREND`` is the change of lag over the history shown; on a colour
    terminal a partition whose lag grew is red and its sparkline bold, so the
    one falling behind stands out. ``error`` (the last refresh failed) is shown
    under the header; the figures are then those of the last good refresh.
    """
    blocks = BLOCKS if caps.unicode else ASCII_BLOCKS
    minutes = history.span_s / 60.0
    out = [f"Group: {description.group}    every {interval_s:g}s    {when}    (Ctrl-C to quit)\n"]
    if error:
        out.append(f"refresh failed: {error} (showing the last good figures)\n")
    names = sorted({m.id for m in description.members})
    out.append(f"Members ({len(names)}): {', '.join(names) if names else 'none (the group is not running)'}\n\n")
    rows: List[List[Cell]] = []
    growing: Set[int] = set()
    for p in description.partitions:
        tp = (p.topic, p.partition)
        change = history.change(tp)
        if change is not None and change > 0:
            growing.add(len(rows))
        rows.append([p.topic, p.partition, p.offset, p.log_end_offset, p.lag, _signed(change), p.owner,
                     sparkline(history.values(tp), width, blocks=blocks)])
    headers = ["TOPIC", "PARTITION", "OFFSET", "LOG-END-OFFSET", "LAG", "TREND", "OWNER",
               f"LAG, LAST {minutes:g} MIN"]
    if not rows:
        out.append("No offsets, owners or subscribed topics.\n")
    else:
        table = render_table(headers, rows).splitlines()
        out.append(table[0] + "\n")
        for i, line in enumerate(table[1:]):
            if caps.color and i in growing:
                line = f"\x1b[31m{line}\x1b[0m"
            out.append(line + "\n")
        total = sum(p.lag for p in description.partitions if p.lag is not None)
        out.append(f"\nTotal lag: {total}\n")
    if description.warnings:
        out.append("\nWarnings:\n")
        out.extend(f"  - {w}\n" for w in description.warnings)
    return "".join(out)


def _in_place(screen: str) -> str:
    """``screen`` drawn over the previous one: cursor home, each line erased to its end, the rest erased."""
    return "\x1b[H" + "".join(line + "\x1b[K\n" for line in screen.splitlines()) + "\x1b[J"


def watch(describe: Callable[[], GroupDescription], out: TextIO, caps: TerminalCaps, interval_s: float, *,
          history_s: float = DEFAULT_HISTORY_S, width: int = DEFAULT_WIDTH,
          retriable: Iterable[Type[BaseException]] = (Exception,), count: Optional[int] = None,
          clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
          now: Callable[[], datetime.datetime] = datetime.datetime.now) -> int:
    """Describe, record, draw; every ``interval_s`` until Ctrl-C (or ``count`` screens). Returns screens drawn.

    The first ``describe()`` must succeed (its exception propagates: an
    unknown group is an error). Later ones that raise one of ``retriable`` keep
    the last figures on screen with the error shown, and are retried at the
    next interval. ``KeyboardInterrupt`` ends the loop normally.
    """
    history = LagHistory(history_s, max_samples=max(2, int(history_s / interval_s) + 2))
    retriable_types = tuple(retriable)
    screens = 0
    description: Optional[GroupDescription] = None
    if caps.ansi:
        out.write("\x1b[H\x1b[2J")  # start from a clear screen
    try:
        while count is None or screens < count:
            started = clock()
            error = None
            try:
                fresh = describe()
            except retriable_types as exc:
                if description is None:
                    raise
                error = f"{type(exc).__name__}: {exc}"
            else:
                description = fresh
                history.record(started, {(p.topic, p.partition): p.lag for p in fresh.partitions})
            assert description is not None
            screen = render_watch(description, history, interval_s=interval_s,
                                  when=now().strftime("%Y-%m-%d %H:%M:%S"), caps=caps, width=width, error=error)
            if caps.ansi:
                out.write(_in_place(screen))
            else:
                out.write(("\n" if screens else "") + screen)
            out.flush()
            screens += 1
            if count is not None and screens >= count:
                break
            sleep(max(0.0, interval_s - (clock() - started)))
    except KeyboardInterrupt:
        pass
    return screens
