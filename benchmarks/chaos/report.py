"""Chaos run results: per-side reports, the exact tally, the verdict and the side-by-side table."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from benchmarks.chaos.settings import KINDS


@dataclass
class MemberReport:
    """What happened to one member process."""

    name: str
    lines: int = 0
    killed_by_schedule: bool = False
    paused_by_schedule: bool = False
    partitioned_by_schedule: bool = False
    expired_by_schedule: bool = False
    exit_status: Optional[int] = None
    failed: bool = False
    why: List[str] = field(default_factory=list)


@dataclass
class Regression:
    """A committed offset seen going down."""

    at_s: float
    partition: int
    before: int
    after: int


@dataclass
class SideResult:
    """The figures of one side of a run; see the module docstring for definitions."""

    kind: str
    sent: int = 0
    acknowledged: int = 0
    send_failures: int = 0
    recorded_total: int = 0
    distinct_recorded: int = 0
    lost: int = 0
    missing_from_log: int = 0
    lost_examples: List[str] = field(default_factory=list)
    duplicate_pct: float = 0.0
    consumer_duplicate_pct: float = 0.0
    log_duplicates: int = 0
    drained: int = 0
    regressions: int = 0
    regression_examples: List[Regression] = field(default_factory=list)
    failed_members: int = 0
    stalled_partitions: int = 0
    stalled_detail: Dict[int, str] = field(default_factory=dict)
    max_stall_s: float = 0.0
    settle_s: Optional[float] = None
    longest_ownerless_s: float = 0.0
    longest_ownerless_detail: str = ""
    settled_again: bool = False
    settled_again_s: Optional[float] = None
    commits: str = ""
    offset_writes_seen: int = 0
    offset_writes_total: int = 0
    members: List[MemberReport] = field(default_factory=list)
    events: List[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    run_dir: str = ""

    @property
    def settled_again_text(self) -> str:
        """``yes (2.3 s)`` or ``no``."""
        return f"yes ({self.settled_again_s} s)" if self.settled_again else "no"

    @property
    def offset_writes(self) -> str:
        """``seen/made``: offset node writes the monitor observed, of those made (node versions)."""
        return f"{self.offset_writes_seen}/{self.offset_writes_total}"

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Tally:
    """Loss and duplicate figures of a run; see :func:`tally`."""

    acknowledged: int
    recorded_total: int
    distinct_recorded: int
    lost: List[str]
    missing_from_log: int
    duplicate_pct: float
    consumer_duplicate_pct: float
    log_duplicates: int


def tally(acked: Iterable[str], recordings: Iterable[Mapping[str, int]], drained: Iterable[str],
          log_values: Iterable[str]) -> Tally:
    """Count losses and duplicates by value (definitions in the module docstring).

    ``acked``: acknowledged values; ``recordings``: value → times recorded, one
    mapping per member; ``drained``: values the final drain read (each a
    recording); ``log_values``: every value in the log (a value twice in the log
    was written twice by the producer).

    A message the group skipped stays lost whatever the drain reads, since the
    drain starts at the committed offsets, past it:

    >>> t = tally(acked=["a", "b", "c", "d"], recordings=[{"a": 1, "b": 1}, {"b": 1}],
    ...           drained=["d"], log_values=["a", "b", "c", "d"])
    >>> t.lost, t.missing_from_log, t.duplicate_pct
    (['c'], 0, 33.333)

    A value the producer wrote twice, read twice, is not a consumer duplicate:

    >>> t = tally(["a"], [{"a": 2}], [], ["a", "a"])
    >>> t.duplicate_pct, t.consumer_duplicate_pct, t.log_duplicates
    (100.0, 0.0, 1)
    """
    acked_set = set(acked)
    recorded: "Counter[str]" = Counter()
    for counts in recordings:
        recorded.update(counts)
    recorded.update(drained)
    in_log: "Counter[str]" = Counter(log_values)
    total, distinct = sum(recorded.values()), len(recorded)
    excess = sum(max(0, n - max(1, in_log.get(v, 0))) for v, n in recorded.items())
    return Tally(
        acknowledged=len(acked_set),
        recorded_total=total,
        distinct_recorded=distinct,
        lost=sorted(acked_set - set(recorded)),
        missing_from_log=len(acked_set - set(in_log)),
        duplicate_pct=round(100.0 * (total - distinct) / max(1, distinct), 3),
        consumer_duplicate_pct=round(100.0 * excess / max(1, distinct), 3),
        log_duplicates=sum(n - 1 for n in in_log.values() if n > 1),
    )


# ---------------------------------------------------------------------------- both sides



def verdict(results: Mapping[str, SideResult]) -> Tuple[bool, List[str]]:
    """Does zkconsumer pass? 0 lost, 0 regressions, 0 failed members, 0 stalled partitions, the
    group settled again, and (when Kafka's side ran) a duplicate % at or below Kafka's.
    Returns (passed, reasons)."""
    zk = results.get("zkconsumer")
    if zk is None:
        return True, ["zkconsumer side not run"]
    problems = []
    for name in ("lost", "regressions", "failed_members", "stalled_partitions"):
        if getattr(zk, name):
            problems.append(f"zkconsumer {name} = {getattr(zk, name)}")
    if not zk.settled_again:
        problems.append("zkconsumer group did not settle again after the last fault")
    kafka = results.get("kafka")
    if kafka is not None and zk.duplicate_pct > kafka.duplicate_pct:
        problems.append(f"zkconsumer duplicate % {zk.duplicate_pct} > Kafka's {kafka.duplicate_pct}")
    return not problems, problems


ROWS: Tuple[Tuple[str, str], ...] = (
    ("commits", "commits"),
    ("sent", "sent"),
    ("acknowledged", "acknowledged"),
    ("send_failures", "send failures"),
    ("recorded_total", "recorded (all deliveries)"),
    ("distinct_recorded", "distinct values recorded"),
    ("lost", "LOST"),
    ("missing_from_log", "  of which missing from the log"),
    ("duplicate_pct", "duplicate %"),
    ("consumer_duplicate_pct", "  minus producer-retry copies %"),
    ("log_duplicates", "producer-retry copies in the log"),
    ("regressions", "COMMITTED-OFFSET REGRESSIONS"),
    ("offset_writes", "  offset writes observed/made"),
    ("failed_members", "FAILED MEMBERS"),
    ("stalled_partitions", "stalled partitions after settle"),
    ("drained", "left for the final drain"),
    ("max_stall_s", "max partition stall (s)"),
    ("longest_ownerless_s", "LONGEST OWNERLESS PARTITION (s)"),
    ("settled_again_text", "SETTLED AGAIN after last fault"),
    ("settle_s", "catch-up after producer stop (s)"),
    ("elapsed_s", "side wall time (s)"),
)


def _member_summary(member: MemberReport) -> str:
    """``zk-m1 kill -9 (212 lines)`` / ``zk-m4 paused exit 0 (549 lines)``."""
    fate = []
    if member.killed_by_schedule:
        fate.append("kill -9")
    if member.paused_by_schedule:
        fate.append("paused")
    if member.partitioned_by_schedule:
        fate.append("partitioned")
    if member.expired_by_schedule:
        fate.append("expired")
    if not member.killed_by_schedule:
        fate.append("still running" if member.exit_status is None else f"exit {member.exit_status}")
    if member.failed:
        fate.append("FAILED")
    return f"{member.name} {' '.join(fate)} ({member.lines} lines)"


def format_table(results: Mapping[str, SideResult]) -> str:
    """The figures of each side, side by side, then what went wrong where."""
    kinds = [k for k in KINDS if k in results]
    width = max(len(label) for _, label in ROWS) + 2
    lines = [f"{'':{width}}" + "".join(f"{k:>18}" for k in kinds)]
    for attr, label in ROWS:
        cells = []
        for k in kinds:
            value = getattr(results[k], attr)
            cells.append(f"{'-' if value is None else value:>18}")
        lines.append(f"{label:{width}}" + "".join(cells))
    for k in kinds:
        r = results[k]
        if r.longest_ownerless_detail:
            lines.append(f"{k} longest ownerless: {r.longest_ownerless_detail}")
        lines.append(f"{k} members: " + ", ".join(_member_summary(m) for m in r.members))
        for member in r.members:
            if member.failed or member.why:
                lines.append(f"{k} member {member.name}: " + "; ".join(member.why))
        for partition, detail in sorted(r.stalled_detail.items()):
            lines.append(f"{k} stalled partition {partition}: {detail}")
        for reg in r.regression_examples:
            lines.append(f"{k} regression at {reg.at_s}s: partition {reg.partition} {reg.before} -> {reg.after}")
        for example in r.lost_examples:
            lines.append(f"{k} lost {example}")
    return "\n".join(lines)


