"""Sliding windows of committed offsets per partition, judged by Burrow's rules.

:class:`LagMonitor` is fed one :class:`~zkconsumer.admin.snapshot.GroupSnapshot`
per poll and keeps, per ``(group, topic, partition)``, a
:class:`~zkconsumer.monitoring.burrow.PartitionWindow` of commits. A commit
enters the window when:

* the offset node changed since the last poll (a new offset, or the same offset
  written again: ZooKeeper bumps the node's mtime on every write); its
  timestamp is the node's mtime; or
* the offset node did not change but the partition is owned by a registered
  member of the group: the live owner re-affirms its position (Kafka 0.8's
  consumer and zkconsumer only write offsets that changed, so a live consumer
  that does not move writes nothing; Burrow, fed by consumers that commit every
  interval, would see that same offset again). Its timestamp is the poll time.

So a consumer that is alive but not moving fills its window with one offset
and a growing lag (``STALL``); a group whose members are gone adds nothing,
and once the time since its last commit exceeds the window's span, Burrow's
rule 4 says ``STOP``. Lags are ``log end - committed offset`` at the poll, as
``kafka.tools.ConsumerOffsetChecker`` computes them.

Not thread-safe: one poller thread feeds it; readers get immutable results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

from ..admin.snapshot import GroupSnapshot
from .burrow import DEFAULT_WINDOW, Commit, GroupStatus, PartitionStatus, PartitionWindow, evaluate_group, evaluate_partition

__all__ = ["PartitionLag", "GroupLag", "LagMonitor"]

_Key = Tuple[str, str, int]


@dataclass(frozen=True)
class PartitionLag:
    """One partition's figures at a poll and its Burrow status. ``offset``/``log_end_offset``/``lag``
    as ConsumerOffsetChecker prints them (``None``: unknown); ``window`` oldest first;
    ``ownerless_s`` how long it has had no owner as far as this monitor saw (``None``: owned)."""

    topic: str
    partition: int
    offset: Optional[int]
    log_end_offset: Optional[int]
    lag: Optional[int]
    owner: Optional[str]
    status: PartitionStatus
    window: Tuple[Commit, ...]
    complete: float
    ownerless_s: Optional[float]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "topic": self.topic, "partition": self.partition, "offset": self.offset,
            "log_end_offset": self.log_end_offset, "lag": self.lag, "owner": self.owner,
            "status": self.status.value, "complete": self.complete, "ownerless_s": self.ownerless_s,
            "window": [{"offset": c.offset, "timestamp_ms": c.timestamp_ms, "lag": c.lag} for c in self.window],
        }


@dataclass(frozen=True)
class GroupLag:
    """A group at one poll: its Burrow status (rule 7), members and partitions."""

    group: str
    status: GroupStatus
    members: List[str]
    partitions: List[PartitionLag]
    evaluated_at_ms: int
    ownerless_s_total: float = 0.0
    warnings: List[str] = field(default_factory=list)

    @property
    def total_lag(self) -> int:
        return sum(p.lag for p in self.partitions if p.lag is not None and p.lag > 0)

    @property
    def max_lag(self) -> Optional[PartitionLag]:
        """The partition with the largest lag (Burrow's ``maxlag``), ``None`` if no lag is known."""
        known = [p for p in self.partitions if p.lag is not None]
        return max(known, key=lambda p: p.lag) if known else None  # type: ignore[arg-type, return-value]

    @property
    def owned_partitions(self) -> int:
        return sum(1 for p in self.partitions if p.owner is not None)

    def to_dict(self) -> Dict[str, Any]:
        worst = self.max_lag
        return {
            "group": self.group, "status": self.status.value, "members": list(self.members),
            "total_lag": self.total_lag, "owned_partitions": self.owned_partitions,
            "max_lag": None if worst is None else {"topic": worst.topic, "partition": worst.partition,
                                                   "lag": worst.lag},
            "evaluated_at_ms": self.evaluated_at_ms,
            "partitions": [p.to_dict() for p in self.partitions],
            "warnings": list(self.warnings),
        }


@dataclass
class _PartitionState:
    window: PartitionWindow
    last_seen: Optional[Tuple[int, Optional[int]]] = None  # (offset, mtime)
    ownerless_since_ms: Optional[int] = None


def _member_of(thread_id: str) -> str:
    head, sep, tail = thread_id.rpartition("-")
    return head if sep and tail.isdigit() else thread_id


class LagMonitor:
    """Windows of ``window`` commits per partition, across polls of any number of groups."""

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        if window < 1:
            raise ValueError(f"the window holds at least one offset, got {window}")
        self.window = window
        self._partitions: Dict[_Key, _PartitionState] = {}
        self._last_poll_ms: Dict[str, int] = {}
        self._ownerless_total_s: Dict[str, float] = {}

    def groups(self) -> Set[str]:
        return set(self._last_poll_ms)

    def forget(self, group: str) -> None:
        """Drop everything known about ``group`` (it disappeared from ``/consumers``)."""
        self._last_poll_ms.pop(group, None)
        self._ownerless_total_s.pop(group, None)
        for key in [k for k in self._partitions if k[0] == group]:
            del self._partitions[key]

    def observe(self, snapshot: GroupSnapshot, now_ms: Optional[int] = None) -> GroupLag:
        """Feed one poll of a group; returns its evaluation at ``now_ms`` (default: the snapshot's time)."""
        description = snapshot.description
        group = description.group
        now = snapshot.taken_at_ms if now_ms is None else now_ms
        previous_poll = self._last_poll_ms.get(group)
        elapsed_s = 0.0 if previous_poll is None else max(0.0, (now - previous_poll) / 1000.0)
        self._last_poll_ms[group] = now
        members = {m.id for m in description.members}
        seen: Set[_Key] = set()
        rows: List[PartitionLag] = []
        ownerless_total = self._ownerless_total_s.get(group, 0.0)
        for row in description.partitions:
            key = (group, row.topic, row.partition)
            seen.add(key)
            state = self._partitions.get(key)
            if state is None:
                state = self._partitions[key] = _PartitionState(PartitionWindow(self.window))
            owner_live = row.owner is not None and _member_of(row.owner) in members
            if row.owner is None:
                if state.ownerless_since_ms is None:
                    state.ownerless_since_ms = now
                else:
                    ownerless_total += elapsed_s
            else:
                state.ownerless_since_ms = None
            if row.offset is not None:
                mtime = snapshot.commit_times_ms.get((row.topic, row.partition))
                current = (row.offset, mtime)
                if current != state.last_seen:
                    state.window.add(Commit.of(row.offset, mtime if mtime is not None else now, row.log_end_offset))
                    state.last_seen = current
                elif owner_live:
                    state.window.add(Commit.of(row.offset, now, row.log_end_offset))
            status = evaluate_partition(state.window.commits, row.lag, now)
            ownerless_s = None if state.ownerless_since_ms is None else (now - state.ownerless_since_ms) / 1000.0
            rows.append(PartitionLag(row.topic, row.partition, row.offset, row.log_end_offset, row.lag, row.owner,
                                     status, tuple(state.window.commits), state.window.complete, ownerless_s))
        for key in [k for k in self._partitions if k[0] == group and k not in seen]:
            del self._partitions[key]
        self._ownerless_total_s[group] = ownerless_total
        judged = [r.status for r in rows if r.offset is not None]
        return GroupLag(group, evaluate_group(judged), sorted(members), rows, now, ownerless_total,
                        list(description.warnings))
