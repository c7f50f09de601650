"""Pure helpers of the throughput benchmark: CPU steal from ``/proc/stat``, medians over rounds, tables.

Nothing here starts a process or touches the network, so all of it is unit-tested
(tests/unit/benchmarks/test_report.py).

A *measurement* is a dict of one tool's run in one round, with at least
``messages``, ``msgs_per_sec``, ``mb_per_sec``, ``seconds`` (the timed window),
``cpu_seconds`` (the whole process, user + sys), ``peak_rss_mb`` and ``steal_pct``.
A *round* maps a tool key to its measurement.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

Measurement = Dict[str, Any]
Round = Dict[str, Measurement]

#: Runs whose timed window is shorter than this are marked in the tables.
MIN_TIMED_SECONDS = 10.0


@dataclass(frozen=True)
class CpuTimes:
    """The machine-wide ``cpu`` line of ``/proc/stat``, in clock ticks."""

    user: int = 0
    nice: int = 0
    system: int = 0
    idle: int = 0
    iowait: int = 0
    irq: int = 0
    softirq: int = 0
    steal: int = 0

    @property
    def total(self) -> int:
        """All ticks (guest time is already inside user and nice, so it is not added again)."""
        return self.user + self.nice + self.system + self.idle + self.iowait + self.irq + self.softirq + self.steal

    @property
    def busy(self) -> int:
        """Ticks the guest's CPUs ran something (not idle, not waiting for I/O, not stolen)."""
        return self.user + self.nice + self.system + self.irq + self.softirq


def parse_proc_stat(text: str) -> CpuTimes:
    """The aggregate ``cpu`` line of a ``/proc/stat`` text; fields a kernel does not report count as 0.

    Raises ValueError when there is no aggregate ``cpu`` line.
    """
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            numbers = [int(x) for x in fields[1:9]]
            numbers += [0] * (8 - len(numbers))
            return CpuTimes(*numbers)
    raise ValueError("no aggregate 'cpu' line in /proc/stat text")


def read_cpu_times(path: str = "/proc/stat") -> Optional[CpuTimes]:
    """The machine's CPU times now, ``None`` where ``/proc/stat`` is unavailable (not Linux)."""
    try:
        with open(path) as f:
            return parse_proc_stat(f.read())
    except (OSError, ValueError):
        return None


def steal_percent(before: Optional[CpuTimes], after: Optional[CpuTimes]) -> Optional[float]:
    """Share (0-100) of all CPU ticks between the two samples that the hypervisor stole."""
    if before is None or after is None:
        return None
    total = after.total - before.total
    if total <= 0:
        return 0.0
    return 100.0 * (after.steal - before.steal) / total


def busy_percent(before: Optional[CpuTimes], after: Optional[CpuTimes]) -> Optional[float]:
    """Share (0-100) of all CPU ticks between the two samples that the machine was busy (any process)."""
    if before is None or after is None:
        return None
    total = after.total - before.total
    if total <= 0:
        return 0.0
    return 100.0 * (after.busy - before.busy) / total


def median(values: Iterable[float]) -> float:
    """The median; raises ValueError on no values."""
    data = list(values)
    if not data:
        raise ValueError("median of no values")
    return float(statistics.median(data))


def cpu_per_million(measurement: Mapping[str, Any]) -> float:
    """Whole-process CPU seconds per million messages consumed."""
    messages = measurement["messages"]
    return float(measurement["cpu_seconds"]) * 1e6 / messages if messages else float("nan")


def ratios(rounds: Sequence[Round], tool: str, reference: str) -> List[float]:
    """``tool``'s rate over ``reference``'s in each round that has both (and a non-zero reference)."""
    out = []
    for r in rounds:
        if tool in r and reference in r and r[reference]["msgs_per_sec"]:
            out.append(r[tool]["msgs_per_sec"] / r[reference]["msgs_per_sec"])
    return out


@dataclass(frozen=True)
class Row:
    """One consumer's line of a table: medians over the rounds it ran in."""

    tool: str
    label: str
    messages: int
    rounds: int
    msgs_per_sec: float
    msgs_per_sec_min: float
    msgs_per_sec_max: float
    mb_per_sec: float
    seconds: float
    cpu_per_million: float
    peak_rss_mb: float
    steal_pct: Optional[float]
    ratios: Dict[str, List[float]]

    def as_dict(self) -> Dict[str, Any]:
        """A JSON-ready dict (ratios as their medians and the per-round values)."""
        out = {k: v for k, v in self.__dict__.items() if k != "ratios"}
        out["ratios"] = {ref: {"median": median(v), "rounds": v} for ref, v in self.ratios.items() if v}
        return out


def summarize(rounds: Sequence[Round], tool: str, label: str, references: Mapping[str, str]) -> Optional[Row]:
    """``tool``'s row over ``rounds``; ``references`` maps a column name to the tool key it is compared with.

    ``None`` if the tool ran in no round. A reference equal to ``tool`` itself gives no ratios.
    """
    runs = [r[tool] for r in rounds if tool in r]
    if not runs:
        return None
    steals = [x["steal_pct"] for x in runs if x.get("steal_pct") is not None]
    rates = [x["msgs_per_sec"] for x in runs]
    return Row(
        tool=tool, label=label, messages=int(median(x["messages"] for x in runs)), rounds=len(runs),
        msgs_per_sec=median(rates), msgs_per_sec_min=min(rates), msgs_per_sec_max=max(rates),
        mb_per_sec=median(x["mb_per_sec"] for x in runs), seconds=median(x["seconds"] for x in runs),
        cpu_per_million=median(cpu_per_million(x) for x in runs), peak_rss_mb=median(x["peak_rss_mb"] for x in runs),
        steal_pct=median(steals) if steals else None,
        ratios={column: ([] if ref == tool else ratios(rounds, tool, ref)) for column, ref in references.items()})


def format_ratio(values: Sequence[float]) -> str:
    """``1.23`` for one round, ``1.23 (1.10–1.30)`` for several, ``–`` for none."""
    if not values:
        return "–"
    text = f"{median(values):.2f}"
    if len(values) > 1:
        text += f" ({min(values):.2f}–{max(values):.2f})"
    return text


def format_rate(row: Row) -> str:
    """Median msgs/s, with the range over rounds when there were several."""
    text = f"{row.msgs_per_sec:,.0f}"
    if row.rounds > 1:
        text += f" ({row.msgs_per_sec_min / 1e3:,.0f}k–{row.msgs_per_sec_max / 1e3:,.0f}k)"
    return text


def format_table(title: str, rows: Sequence[Row], ratio_columns: Sequence[str]) -> str:
    """A Markdown table: one line per row, medians over rounds.

    A timed window under :data:`MIN_TIMED_SECONDS` is marked with ``†`` (too short to be steady).
    """
    head = ["consumer", "N", "msgs/s: median (min–max)", "MB/s", *ratio_columns, "CPU s / M msgs",
            "peak RSS MB", "timed s", "steal %"]
    align = ["---", "---:", "---:", "---:", *["---:"] * len(ratio_columns), "---:", "---:", "---:", "---:"]
    lines = [f"#### {title}", "", "| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    short = False
    for row in rows:
        mark = ""
        if row.seconds < MIN_TIMED_SECONDS:
            mark, short = " †", True
        steal = "–" if row.steal_pct is None else f"{row.steal_pct:.1f}"
        cells = [row.label, f"{row.messages:,}", format_rate(row), f"{row.mb_per_sec:,.1f}",
                 *[format_ratio(row.ratios.get(c, [])) for c in ratio_columns],
                 f"{row.cpu_per_million:.2f}", f"{row.peak_rss_mb:.0f}", f"{row.seconds:.1f}{mark}", steal]
        lines.append("| " + " | ".join(cells) + " |")
    if short:
        lines += ["", f"† timed window under {MIN_TIMED_SECONDS:.0f} s: not a steady-state figure."]
    return "\n".join(lines)


def rotate(items: Sequence[str], round_index: int) -> List[str]:
    """``items`` rotated left by ``round_index``, so each tool goes first in turn."""
    if not items:
        return []
    k = round_index % len(items)
    return list(items[k:]) + list(items[:k])


def size_map(text: str) -> Dict[int, int]:
    """``100=5000000,1000=1000000`` -> ``{100: 5000000, 1000: 1000000}``; the empty string -> ``{}``."""
    out: Dict[int, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"expected SIZE=COUNT, got {part!r}")
        out[int(key)] = int(value)
    return out
