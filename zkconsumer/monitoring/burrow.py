"""Burrow's consumer lag evaluation, as pure functions over a sliding window of commits.

LinkedIn's Burrow judges a consumer group without lag thresholds: for each
partition it keeps the last *N* committed offsets (the *window*), each with the
time it was committed and the lag at that moment (broker head offset minus the
committed offset, stored as 0 if negative), and applies these rules, numbered
as this module implements them (rules 1-5 are those of Burrow's wiki page
"Consumer Lag Evaluation Rules"; 6 and 7 are what Burrow's evaluator adds):

1. If any lag within the window is zero, the partition is ``OK``.
2. If the committed offset does not change over the window and the lag is
   fixed or increasing, the partition is ``STALL`` (an error: the consumer is
   alive and committing, but not moving).
3. If the committed offsets increase over the window but the lag stays the
   same or increases between every pair of offsets, the partition is ``WARN``
   (the consumer is slow and falling behind).
4. If the time from the most recent commit to now is greater than the time
   from the oldest to the most recent commit of the window, the partition is
   ``STOP`` (an error: the consumer stopped committing) -- unless the
   committed offset equals the current broker offset (current lag 0): a
   caught-up consumer is never in error.
5. If the lag is not known (no broker offset yet), the partition is ``OK``.
6. If a committed offset decreases from one commit to the next, the
   partition is ``REWIND`` (an error).
7. The group's status is the worst of its partitions': ``ERR`` if any
   partition is ``STOP``, ``STALL`` or ``REWIND``; else ``WARN`` if any is
   ``WARN``; else ``OK``.

Order of evaluation (as Burrow's evaluator): a partition whose current lag is
0 or unknown (rules 4's exception and 5), or with a zero lag in its window
(rule 1), is ``OK``; otherwise the first of REWIND (6), STOP (4), STALL (2),
WARN (3) that holds, else ``OK``.

Everything here is pure and deterministic (the caller passes ``now``);
:class:`PartitionWindow` is the only mutable type and is not thread-safe.

>>> w = PartitionWindow(3)
>>> for offset, ts, lag in [(10, 1000, 5), (10, 2000, 7), (10, 3000, 9)]:
...     w.add(Commit(offset, ts, lag))
>>> evaluate_partition(w.commits, current_lag=9, now_ms=3500).value
'STALL'
"""

from __future__ import annotations

import collections
import enum
from dataclasses import dataclass
from typing import Deque, Iterable, Optional, Sequence

__all__ = [
    "PartitionStatus", "GroupStatus", "Commit", "PartitionWindow", "evaluate_partition", "evaluate_group",
    "DEFAULT_WINDOW",
]

#: Burrow's default number of offsets kept per partition (its ``intervals`` setting).
DEFAULT_WINDOW = 10


class PartitionStatus(enum.Enum):
    """A partition's status; ``severity`` orders them (higher is worse)."""

    OK = "OK"
    WARN = "WARN"
    STALL = "STALL"
    STOP = "STOP"
    REWIND = "REWIND"

    @property
    def severity(self) -> int:
        return _PARTITION_SEVERITY[self]

    @property
    def is_error(self) -> bool:
        return self in (PartitionStatus.STALL, PartitionStatus.STOP, PartitionStatus.REWIND)


class GroupStatus(enum.Enum):
    """A group's status (rule 7); ``NOTFOUND`` when the group has no partitions to judge."""

    NOTFOUND = "NOTFOUND"
    OK = "OK"
    WARN = "WARN"
    ERR = "ERR"

    @property
    def severity(self) -> int:
        return _GROUP_SEVERITY[self]


_PARTITION_SEVERITY = {PartitionStatus.OK: 0, PartitionStatus.WARN: 1, PartitionStatus.STALL: 2,
                       PartitionStatus.STOP: 3, PartitionStatus.REWIND: 4}
_GROUP_SEVERITY = {GroupStatus.NOTFOUND: -1, GroupStatus.OK: 0, GroupStatus.WARN: 1, GroupStatus.ERR: 2}


@dataclass(frozen=True)
class Commit:
    """One committed offset in a window: the offset, when it was committed (ms since the
    epoch) and the lag then (``None`` if the broker offset was unknown; negative lags are
    stored as 0, as Burrow does -- see :meth:`of`)."""

    offset: int
    timestamp_ms: int
    lag: Optional[int]

    @classmethod
    def of(cls, offset: int, timestamp_ms: int, log_end_offset: Optional[int]) -> "Commit":
        """The commit of ``offset`` at ``timestamp_ms`` with lag ``max(0, log end - offset)``."""
        lag = None if log_end_offset is None else max(0, log_end_offset - offset)
        return cls(offset, timestamp_ms, lag)


class PartitionWindow:
    """The last ``size`` commits of one partition, oldest first (a bounded deque)."""

    def __init__(self, size: int = DEFAULT_WINDOW) -> None:
        if size < 1:
            raise ValueError(f"a window holds at least one offset, got {size}")
        self.size = size
        self._commits: Deque[Commit] = collections.deque(maxlen=size)

    def add(self, commit: Commit) -> None:
        """Append ``commit``; the oldest one drops out once the window is full."""
        self._commits.append(commit)

    @property
    def commits(self) -> Sequence[Commit]:
        return tuple(self._commits)

    @property
    def complete(self) -> float:
        """How full the window is, 0.0-1.0 (Burrow's ``complete``)."""
        return len(self._commits) / self.size

    def __len__(self) -> int:
        return len(self._commits)


def evaluate_partition(commits: Sequence[Commit], current_lag: Optional[int], now_ms: int) -> PartitionStatus:
    """The status of one partition from its window (oldest first), its lag now and the time now.

    ``current_lag`` is the broker's head offset now minus the latest committed
    offset (``None`` if unknown). An empty window is ``OK`` (nothing to judge).
    """
    if not commits or current_lag is None or current_lag <= 0:  # rules 5 and 4's exception
        return PartitionStatus.OK
    if any(c.lag is None or c.lag == 0 for c in commits):  # rules 1 and 5
        return PartitionStatus.OK
    if _rewinds(commits):
        return PartitionStatus.REWIND  # rule 6
    if _stopped(commits, now_ms):
        return PartitionStatus.STOP  # rule 4
    if _stalled(commits):
        return PartitionStatus.STALL  # rule 2
    if _lag_never_decreases(commits):
        return PartitionStatus.WARN  # rule 3
    return PartitionStatus.OK


def _rewinds(commits: Sequence[Commit]) -> bool:
    return any(b.offset < a.offset for a, b in zip(commits, commits[1:]))


def _stopped(commits: Sequence[Commit], now_ms: int) -> bool:
    first, last = commits[0].timestamp_ms, commits[-1].timestamp_ms
    return now_ms - last > last - first


def _stalled(commits: Sequence[Commit]) -> bool:
    # Rule 1 already ruled out a zero lag; an unchanging offset with lag > 0 cannot have a falling lag.
    return all(b.offset == a.offset for a, b in zip(commits, commits[1:]))


def _lag_never_decreases(commits: Sequence[Commit]) -> bool:
    return all((b.lag or 0) >= (a.lag or 0) for a, b in zip(commits, commits[1:]))


def evaluate_group(statuses: Iterable[PartitionStatus]) -> GroupStatus:
    """Rule 7: ``ERR`` if any partition is in error, else ``WARN`` if any warns, else ``OK``
    (``NOTFOUND`` for no partitions)."""
    result = GroupStatus.NOTFOUND
    for status in statuses:
        mapped = GroupStatus.ERR if status.is_error else GroupStatus.WARN if status is PartitionStatus.WARN \
            else GroupStatus.OK
        if mapped.severity > result.severity:
            result = mapped
    return result
