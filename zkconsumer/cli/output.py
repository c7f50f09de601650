"""Rendering CLI results as aligned tables, JSON or CSV, and TTY-only progress.

Pure text functions (no I/O) except :class:`TtyProgress`, which writes to the
stream it is given. ``None`` cells render as ``-`` in tables, empty in CSV and
``null`` in JSON.
"""

from __future__ import annotations

import csv
import io
import json
import time
from typing import Any, Callable, Iterable, List, Mapping, Optional, Sequence, TextIO

from ..admin import GroupDescription, ResetPlan
from .progress import terminal_caps

FORMATS = ("table", "json", "csv")

Cell = Any


def _cell(value: Cell) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ",".join(f"{k}:{v}" for k, v in value.items()) or "-"
    return str(value)


def render_table(headers: Sequence[str], rows: Iterable[Sequence[Cell]]) -> str:
    """Left-aligned columns separated by two spaces, headers first, one line per row.

    >>> print(render_table(["A", "BB"], [[1, None], ["long", "x"]]), end="")
    A     BB
    1     -
    long  x
    """
    text_rows = [[_cell(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    lines = []
    for row in [list(headers)] + text_rows:
        line = "  ".join(c.ljust(widths[i]) for i, c in enumerate(row))
        lines.append(line.rstrip())
    return "\n".join(lines) + "\n"


def render_csv(headers: Sequence[str], rows: Iterable[Sequence[Cell]]) -> str:
    """RFC 4180 CSV with a header line; ``None`` is an empty field, dicts are JSON.

    >>> render_csv(["a", "b"], [[1, None]])
    'a,b\\r\\n1,\\r\\n'
    """
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(headers)
    for row in rows:
        writer.writerow(["" if c is None else json.dumps(c, sort_keys=True) if isinstance(c, dict) else c for c in row])
    return buf.getvalue()


def render_json(value: Any) -> str:
    """Indented JSON with a trailing newline, keys in insertion order."""
    return json.dumps(value, indent=2) + "\n"


# --------------------------------------------------------------------------- describe

PARTITION_COLUMNS = ("topic", "partition", "offset", "log_end_offset", "lag", "owner")


#: Columns added when both stores were read (``--offsets-storage both``).
BOTH_COLUMNS = ("zookeeper_offset", "kafka_offset", "disagree")


def _columns(description: GroupDescription) -> Sequence[str]:
    return PARTITION_COLUMNS + (BOTH_COLUMNS if description.offsets_storage == "both" else ())


def _partition_cells(description: GroupDescription, disagree: Callable[[bool], Cell] = bool) -> List[List[Cell]]:
    both = description.offsets_storage == "both"
    return [[p.topic, p.partition, p.offset, p.log_end_offset, p.lag, p.owner]
            + ([p.zookeeper_offset, p.kafka_offset, disagree(p.disagree)] if both else [])
            for p in description.partitions]


def render_description(description: GroupDescription, fmt: str) -> str:
    """``groups describe`` output in ``fmt`` (``table``, ``json`` or ``csv``).

    The table shows members, partitions and warnings; CSV has one row per
    partition with a leading ``group`` column (warnings are the caller's to
    print elsewhere); JSON is :meth:`GroupDescription.to_dict` plus
    ``total_lag``.
    """
    if fmt == "json":
        doc = description.to_dict()
        doc["total_lag"] = sum(p.lag for p in description.partitions if p.lag is not None)
        return render_json(doc)
    if fmt == "csv":
        return render_csv(("group",) + tuple(_columns(description)),
                          [[description.group] + row for row in _partition_cells(description, int)])
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}")
    out = [f"Group: {description.group}\n", f"{description.storage_note()}\n"]
    if description.members:
        out.append(f"\nMembers ({len(description.members)}):\n")
        out.append(render_table(
            ["CONSUMER ID", "PATTERN", "SUBSCRIPTION", "REGISTERED SINCE"],
            [[m.id, m.pattern, m.subscription, m.registered_since] for m in description.members],
        ))
    else:
        out.append("\nMembers: none (the group is not running)\n")
    if description.partitions:
        out.append("\n")
        out.append(render_table([c.upper().replace("_", "-") for c in _columns(description)],
                                _partition_cells(description, lambda d: "DISAGREE" if d else "")))
        total = sum(p.lag for p in description.partitions if p.lag is not None)
        out.append(f"\nTotal lag: {total}\n")
    else:
        out.append("\nNo offsets, owners or subscribed topics.\n")
    if description.warnings:
        out.append("\nWarnings:\n")
        out.extend(f"  - {w}\n" for w in description.warnings)
    return "".join(out)


# --------------------------------------------------------------------------- reset

def _arrow(current: Optional[int], new: Optional[int]) -> str:
    return f"{_cell(current)} -> {_cell(new) if new is not None else 'unchanged'}"


def render_plan(plan: ResetPlan, fmt: str) -> str:
    """A reset plan: per partition ``current -> new``, the log range, and notes (clamping)."""
    if fmt == "json":
        return render_json(plan.to_dict())
    headers = ["TOPIC", "PARTITION", "CURRENT -> NEW", "LOG-START", "LOG-END", "NOTE"]
    rows = [[r.topic, r.partition, _arrow(r.current, r.new), r.log_start, r.log_end, r.note] for r in plan.rows]
    if fmt == "csv":
        return render_csv(["topic", "partition", "current", "new", "log_start", "log_end", "note"],
                          [[r.topic, r.partition, r.current, r.new, r.log_start, r.log_end, r.note] for r in plan.rows])
    head = f"Reset group {plan.group} topic {plan.topic} to {plan.target}"
    if not plan.group_exists:
        head += f" (group {plan.group} has no znode yet: this would create its offsets)"
    return head + ":\n" + render_table(headers, rows)


# --------------------------------------------------------------------------- progress


class TtyProgress:
    """A ``progress(done, total)`` callable that redraws one status line on ``stream``,
    only when ``stream`` is a terminal with cursor control (otherwise, e.g. piped or
    ``TERM=dumb``, it does nothing), at most every ``min_interval_s``. :meth:`finish`
    erases the line."""

    def __init__(self, label: str, stream: TextIO, min_interval_s: float = 0.1,
                 clock: Callable[[], float] = time.monotonic, env: Optional[Mapping[str, str]] = None) -> None:
        self._label = label
        self._stream = stream
        self._enabled = terminal_caps(stream, env).ansi
        self._min_interval_s = min_interval_s
        self._clock = clock
        self._last = float("-inf")
        self._drawn = False

    @property
    def enabled(self) -> bool:
        return self._enabled

    def __call__(self, done: int, total: int) -> None:
        if not self._enabled:
            return
        now = self._clock()
        if done < total and now - self._last < self._min_interval_s:
            return
        self._last = now
        self._stream.write(f"\r{self._label}: {done}/{total}")
        self._stream.flush()
        self._drawn = True

    def finish(self) -> None:
        if self._drawn:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._drawn = False


# --------------------------------------------------------------------------- status


def render_group_lag(result: Any, fmt: str) -> str:
    """``groups status`` output: a :class:`~zkconsumer.monitoring.lag.GroupLag` as a table or JSON.

    The table has one line per partition with its Burrow status and the first
    and last commit of its window (``offset@lag``).
    """
    if fmt == "json":
        return render_json(result.to_dict())
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}")
    out = [f"Group: {result.group}\nStatus: {result.status.value}\n"
           f"Members: {len(result.members)}  Owned partitions: {result.owned_partitions}  "
           f"Total lag: {result.total_lag}\n\n"]
    rows = []
    for p in result.partitions:
        window = "-"
        if p.window:
            first, last = p.window[0], p.window[-1]
            window = f"{first.offset}@{_cell(first.lag)} .. {last.offset}@{_cell(last.lag)} ({len(p.window)})"
        rows.append([p.topic, p.partition, p.offset, p.log_end_offset, p.lag, p.owner, p.status.value, window])
    out.append(render_table(["TOPIC", "PARTITION", "OFFSET", "LOG-END-OFFSET", "LAG", "OWNER", "STATUS",
                             "WINDOW (offset@lag first .. last)"], rows))
    if result.warnings:
        out.append("\nWarnings:\n")
        out.extend(f"  - {w}\n" for w in result.warnings)
    return "".join(out)
