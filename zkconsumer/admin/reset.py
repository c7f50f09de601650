"""Offset resets: parse a target, plan the new offsets (clamped to the log, nothing
written) and apply a plan (later Kafka's ``kafka-consumer-groups --reset-offsets``).

A plan is applied all at once or not at all (:mod:`.atomic`: one ZooKeeper
multi-operation), and only if every offset node is still as the plan found it:
an interrupted or refused reset leaves every partition where it was, so running
a ``shift:+N`` again never shifts some partitions twice.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from kazoo.client import KazooClient

from ..structs import TopicPartition
from ..wire.protocol import EARLIEST_TIME, LATEST_TIME
from ..zookeeper import zkformat
from . import atomic, reads, times
from .errors import AdminError, UnknownTopicError
from .log_offsets import NONE_BEFORE, TimeOffsets

__all__ = [
    "ResetTarget", "parse_reset_target", "compute_reset", "ResetRow", "ResetPlan", "plan_reset", "apply_reset",
]


@dataclass(frozen=True)
class ResetTarget:
    """Where to move offsets: ``kind`` is ``earliest``, ``latest``, ``offset`` (``value``
    is the offset), ``shift`` (``value`` is the signed distance) or ``time`` (``value`` is
    ms since the epoch: a log-segment boundary, :mod:`.times`)."""

    kind: str
    value: int = 0

    def __str__(self) -> str:
        if self.kind == "time":
            return times.format_time(self.value)
        if self.kind == "offset":
            return str(self.value)
        if self.kind == "shift":
            return f"shift:{self.value:+d}"
        return self.kind


def parse_reset_target(text: str) -> ResetTarget:
    """Parse ``earliest``, ``latest``, ``<offset>``, ``shift:+N`` or ``shift:-N``; ``ValueError`` otherwise.

    >>> parse_reset_target("shift:-5"), parse_reset_target("17")
    (ResetTarget(kind='shift', value=-5), ResetTarget(kind='offset', value=17))
    """
    t = text.strip().lower()
    if t in ("earliest", "smallest"):
        return ResetTarget("earliest")
    if t in ("latest", "largest"):
        return ResetTarget("latest")
    if t.isdigit():
        return ResetTarget("offset", int(t))
    match = re.fullmatch(r"shift:([+-]?)([0-9]+)", t)
    if match:
        return ResetTarget("shift", -int(match.group(2)) if match.group(1) == "-" else int(match.group(2)))
    raise ValueError(f"invalid reset target {text!r}: expected earliest, latest, an offset, shift:+N or shift:-N")


def compute_reset(
    target: ResetTarget, current: Optional[int], log_start: int, log_end: int, at_time: Optional[int] = None
) -> Tuple[Optional[int], Optional[str]]:
    """The new offset of one partition and a note for the plan (pure).

    Explicit and shifted offsets are clamped into ``[log_start, log_end]`` and
    the note says so; shifting a partition without a committed offset leaves it
    alone (``None``) with a note. A ``time`` target needs ``at_time``, the brokers'
    offsets-before-time answer (:data:`~.log_offsets.NONE_BEFORE`: the log start).

    >>> compute_reset(ResetTarget("shift", -10), 15, 8, 20)
    (8, 'clamped 5 up to the log start 8')
    >>> compute_reset(ResetTarget("latest"), None, 0, 20)
    (20, None)
    """
    if target.kind == "earliest":
        return log_start, None
    if target.kind == "latest":
        return log_end, None
    if target.kind == "time":
        if at_time is None:
            raise ValueError("a time target needs the offset looked up at that time")
        if at_time == NONE_BEFORE:
            return log_start, "no segment last written at or before the time: the log start"
        wanted = at_time
    elif target.kind == "shift":
        if current is None or current < 0:
            return None, "no committed offset to shift; left unchanged"
        wanted = current + target.value
    elif target.kind == "offset":
        wanted = target.value
    else:
        raise ValueError(f"unknown reset target kind {target.kind!r}")
    if wanted < log_start:
        return log_start, f"clamped {wanted} up to the log start {log_start}"
    if wanted > log_end:
        return log_end, f"clamped {wanted} down to the log end {log_end}"
    return wanted, None


@dataclass(frozen=True)
class ResetRow:
    """One partition of a reset plan; ``new`` is ``None`` when it is left unchanged."""

    topic: str
    partition: int
    current: Optional[int]
    new: Optional[int]
    log_start: int
    log_end: int
    note: Optional[str] = None

    @property
    def changes(self) -> bool:
        return self.new is not None and self.new != self.current


@dataclass(frozen=True)
class ResetPlan:
    """What :func:`apply_reset` would write; ``rows`` sorted by partition.

    ``versions``: each partition's offset node version when planned (absent: no node),
    which the write requires unchanged.
    """

    group: str
    topic: str
    target: ResetTarget
    rows: List[ResetRow]
    group_exists: bool = True
    versions: Dict[int, int] = field(default_factory=dict, compare=False)

    @property
    def changes(self) -> List[ResetRow]:
        return [r for r in self.rows if r.changes]

    def writes(self) -> List[atomic.OffsetWrite]:
        """The offset writes of the changed rows, each expecting its node as planned."""
        return [atomic.OffsetWrite(self.group, r.topic, r.partition, r.new, r.current, self.versions.get(r.partition))
                for r in self.changes if r.new is not None]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "group": self.group, "topic": self.topic, "target": str(self.target),
            "group_exists": self.group_exists,
            **({"timestamp_ms": self.target.value, "note": times.SEGMENT_NOTE} if self.target.kind == "time" else {}),
            "partitions": [dict(asdict(r), changes=r.changes) for r in self.rows],
        }


def plan_reset(
    zk: KazooClient, group: str, topic: str, target: ResetTarget, log_offsets: TimeOffsets,
    partitions: Optional[Sequence[int]] = None, current: Optional[Mapping[TopicPartition, Optional[int]]] = None,
) -> ResetPlan:
    """Compute, without writing anything, the new offset of each partition of ``topic``.

    ``partitions`` restricts the plan (default: every partition of the topic).
    A group that does not exist yet is allowed (a reset can seed its offsets);
    the plan says so in ``group_exists``. Raises :class:`UnknownTopicError`,
    :class:`AdminError` if a partition does not exist or a log offset cannot be
    looked up (the plan could not be clamped), and
    :class:`~zkconsumer.errors.MalformedZnodeError` for an unreadable offset node.
    ``current``, given, holds the committed offsets to start from (read from Kafka, or the
    larger of both stores: :mod:`.stored_io`) instead of ZooKeeper's; ``versions`` are
    still ZooKeeper's.
    """
    try:
        paths = zkformat.GroupPaths(group)
    except ValueError as exc:
        raise AdminError(f"invalid group name {group!r}: {exc}") from None
    client = reads.group_client(zk, group)
    all_partitions = client.partitions_for_topics([topic]).get(topic)
    if all_partitions is None:
        raise UnknownTopicError(topic)
    chosen = sorted(set(partitions)) if partitions is not None else all_partitions
    missing = sorted(set(chosen) - set(all_partitions))
    if missing:
        raise AdminError(f"topic {topic!r} has no partition {', '.join(map(str, missing))} "
                         f"(it has {len(all_partitions)})")
    tps = [(topic, p) for p in chosen]
    starts, start_problems = log_offsets.fetch(tps, EARLIEST_TIME)
    ends, end_problems = log_offsets.fetch(tps, LATEST_TIME)
    problems = {**start_problems, **end_problems}
    at_time: Dict[TopicPartition, int] = {}
    if target.kind == "time":
        at_time, time_problems = log_offsets.fetch(tps, target.value, empty=NONE_BEFORE)
        problems.update(time_problems)
    if problems:
        (t, p), why = sorted(problems.items())[0]
        raise AdminError(f"cannot look up the log offsets of {t}/{p}: {why}")
    current_from = current
    rows = []
    versions: Dict[int, int] = {}
    for tp in tps:
        in_zookeeper, version = atomic.planned(zk, group, *tp)
        committed = in_zookeeper if current_from is None else current_from.get(tp)
        if version is not None:
            versions[tp[1]] = version
        new, note = compute_reset(target, committed, starts[tp], ends[tp], at_time.get(tp))
        rows.append(ResetRow(tp[0], tp[1], committed, new, starts[tp], ends[tp], note))
    exists = zk.retry(zk.exists, paths.root) is not None
    return ResetPlan(group, topic, target, rows, exists, versions)


def apply_reset(zk: KazooClient, plan: ResetPlan, progress: Optional[reads.Progress] = None) -> List[ResetRow]:
    """Write the plan's changed offsets, all in one ZooKeeper multi-operation; returns the rows written
    (every changed row).

    All or nothing (:func:`.atomic.write_offsets`): refuses with :class:`GroupActiveError`
    while the group has live members and with :class:`~.atomic.TooLargeError` for a plan
    one request cannot carry; raises :class:`~.atomic.OffsetsChangedError` if an offset
    node changed since the plan; in each case nothing was written.
    :class:`~.atomic.OutcomeUnknownError` and :class:`~.atomic.Interrupted` (Ctrl-C) say
    what is known. ``progress(written, total)`` is called before (0) and after the write (all).
    """
    reads.refuse_if_live(zk, plan.group, "reset offsets")
    changes = plan.changes
    if progress is not None and changes:
        progress(0, len(changes))
    atomic.write_offsets(zk, plan.writes())
    if progress is not None and changes:
        progress(len(changes), len(changes))
    return changes
