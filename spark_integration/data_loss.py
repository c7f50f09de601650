"""Deciding where the streaming source goes on when data it was promised is gone (pure, no I/O).

A streaming query remembers, per partition, the next offset it will read.
Kafka can take data away from under it, and the source must never skip such a
range *silently*. Following Spark's Kafka source, the option ``failOnDataLoss``
decides what happens (:func:`report`):

* ``true`` (the default): :class:`DataLossError` fails the query, naming every
  partition, the offset the query had reached and the log's bounds now;
* ``false``: one warning per partition, and the query goes on from where the
  data now starts.

The cases (:class:`DataLoss` ``kind``), checked on the driver each time a
micro-batch is planned (:func:`plan_latest`) and when a query starts without a
checkpoint (:func:`initial_positions`):

==========================  ===========================================  ================================
kind                        what happened                                ``failOnDataLoss=false`` goes on
==========================  ===========================================  ================================
``log-end-moved-back``      the log now ends before the query's offset   from the log start: the next
                            (topic deleted and re-created, or an         batch is empty for the partition
                            unclean leader election truncated it)        and moves it back to the start
``offset-before-log-start`` retention deleted ``[offset, log start)``    the range is planned as usual;
                            before the query read it                     executors skip the deleted part
``partition-gone``          the partition (its topic) no longer exists   the partition is dropped; if it
                                                                         reappears it enters at its start
``new-partition-trimmed``   a partition appeared with its log starting   from its log start
                            after 0 (data deleted before it was seen)
``committed-out-of-range``  (no checkpoint) the group's committed        per ``auto.offset.reset``
                            offset lies outside the log
==========================  ===========================================  ================================

Executors apply the same option to what disappears between planning and
reading (:class:`~spark_integration.range_reader.RangeReader`).

Example: the query had reached offset 10 of ``t/0``; the topic was re-created
and holds 3 messages::

    >>> planned = plan_latest({("t", 0): 10}, starts={("t", 0): 0}, ends={("t", 0): 3})
    >>> planned.latest, sorted(planned.reset), [loss.kind for loss in planned.losses]
    ({('t', 0): 0}, [('t', 0)], ['log-end-moved-back'])
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Set, Tuple

from zkconsumer import ZkConsumerError
from zkconsumer.structs import TopicPartition

from .ranges import resolve_start

__all__ = [
    "DataLoss", "DataLossError", "Planned", "plan_latest", "initial_positions", "report",
    "LOG_END_MOVED_BACK", "OFFSET_BEFORE_LOG_START", "PARTITION_GONE", "NEW_PARTITION_TRIMMED",
    "COMMITTED_OUT_OF_RANGE",
]

LOG_END_MOVED_BACK = "log-end-moved-back"
OFFSET_BEFORE_LOG_START = "offset-before-log-start"
PARTITION_GONE = "partition-gone"
NEW_PARTITION_TRIMMED = "new-partition-trimmed"
COMMITTED_OUT_OF_RANGE = "committed-out-of-range"


class DataLoss(NamedTuple):
    """One partition whose data, from ``offset`` on, is (partly) no longer in Kafka.

    ``offset``: where the query (or, for ``committed-out-of-range``, the group)
    was; ``log_start``/``log_end``: the log's bounds now (``None`` for a
    partition that is gone); ``resume_at``: where ``failOnDataLoss=false`` goes
    on (``None``: the partition is dropped).
    """

    topic: str
    partition: int
    kind: str
    offset: int
    log_start: Optional[int]
    log_end: Optional[int]
    resume_at: Optional[int]

    def describe(self) -> str:
        """What happened, naming the partition and the offsets."""
        where = f"{self.topic}/{self.partition}"
        if self.kind == LOG_END_MOVED_BACK:
            return (f"{where}: the log now ends at offset {self.log_end}, before offset {self.offset} that this "
                    f"query had reached (the topic was deleted and re-created, or an unclean leader election "
                    f"truncated the log)")
        if self.kind == OFFSET_BEFORE_LOG_START:
            return (f"{where}: offsets [{self.offset}, {self.log_start}) were deleted (the log now starts at "
                    f"{self.log_start}) before this query read them")
        if self.kind == PARTITION_GONE:
            return f"{where} no longer exists (its topic was deleted); this query had reached offset {self.offset}"
        if self.kind == NEW_PARTITION_TRIMMED:
            return (f"{where} appeared with its log starting at offset {self.log_start}, not 0: offsets "
                    f"[0, {self.log_start}) were deleted before this query saw them")
        if self.kind == COMMITTED_OUT_OF_RANGE:
            return (f"{where}: the group's committed offset {self.offset} lies outside the log "
                    f"[{self.log_start}, {self.log_end}]")
        if self.kind == "starting-offset-out-of-range":
            return (f"{where}: the option startingOffsets gives offset {self.offset}, outside the log "
                    f"[{self.log_start}, {self.log_end}]")
        return f"{where}: {self.kind} at offset {self.offset}"

    def action(self) -> str:
        """What ``failOnDataLoss=false`` does about it."""
        if self.resume_at is None:
            return "dropping the partition (if it appears again, it is read from its log start)"
        return f"going on from offset {self.resume_at}"


class DataLossError(ZkConsumerError):
    """Data the query was to read is no longer in Kafka, and ``failOnDataLoss`` is true (the default).

    ``losses`` lists every affected partition (:class:`DataLoss`). Not
    retriable: the data will not come back; set ``failOnDataLoss`` to
    ``false`` to go on from where the data now starts.
    """

    retriable = False

    def __init__(self, group: str, losses: Sequence[DataLoss]) -> None:
        self.group = group
        self.losses = list(losses)
        details = "; ".join(loss.describe() for loss in self.losses)
        super().__init__(
            f"possible data loss for group {group} ({len(self.losses)} partition(s)): {details}. Some messages are "
            "no longer in Kafka and were never read by this query: deleted by retention, lost with a topic that "
            "was deleted and re-created, or truncated by an unclean leader election. To go on from where the "
            "data now starts, with a warning per partition instead of this error, set the source option "
            "failOnDataLoss to false"
        )


@dataclass(frozen=True)
class Planned:
    """The end offsets of the next micro-batch, before any read limit, and the losses met.

    ``reset``: partitions moved back to their log start (``log-end-moved-back``):
    their batch is empty, the one after reads from the start. Keep them out
    of read limits (their end lies below their start).
    """

    latest: Dict[TopicPartition, int]
    losses: List[DataLoss] = field(default_factory=list)
    reset: Set[TopicPartition] = field(default_factory=set)


def plan_latest(
    begin: Mapping[TopicPartition, int],
    starts: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    target: Optional[Mapping[TopicPartition, int]] = None,
) -> Planned:
    """Where the micro-batch starting at ``begin`` ends, for every partition, and what was lost.

    ``starts``/``ends``: the log start and end of every partition that exists
    now. ``target`` (``trigger(availableNow=True)``): the log ends recorded when
    the run was prepared; no partition goes past it, and partitions that
    appeared after it are left for a later run.

    The losses are reported, and the offsets are those ``failOnDataLoss=false``
    goes on with (with ``true`` the caller raises instead).

    >>> p = plan_latest({("t", 0): 4, ("t", 1): 2}, {("t", 0): 0, ("t", 1): 5, ("t", 2): 7},
    ...                 {("t", 0): 9, ("t", 1): 8, ("t", 2): 9})
    >>> p.latest
    {('t', 0): 9, ('t', 1): 8, ('t', 2): 7}
    >>> [(loss.partition, loss.kind) for loss in p.losses]
    [(1, 'offset-before-log-start'), (2, 'new-partition-trimmed')]
    """
    latest: Dict[TopicPartition, int] = {}
    losses: List[DataLoss] = []
    reset: Set[TopicPartition] = set()
    for tp, offset in sorted(begin.items()):
        if tp not in ends:
            losses.append(DataLoss(tp[0], tp[1], PARTITION_GONE, offset, None, None, None))
            continue
        start, end = starts[tp], ends[tp]
        if end < offset:
            losses.append(DataLoss(tp[0], tp[1], LOG_END_MOVED_BACK, offset, start, end, start))
            latest[tp] = start
            reset.add(tp)
            continue
        if offset < start:
            losses.append(DataLoss(tp[0], tp[1], OFFSET_BEFORE_LOG_START, offset, start, end, start))
        cap = end if target is None else min(end, target.get(tp, end))
        latest[tp] = max(offset, cap)
    for tp in sorted(ends):
        if tp in begin or (target is not None and tp not in target):
            continue
        start = starts[tp]
        latest[tp] = start
        if start > 0:
            losses.append(DataLoss(tp[0], tp[1], NEW_PARTITION_TRIMMED, 0, start, ends[tp], start))
    return Planned(latest, losses, reset)


def initial_positions(
    committed: Mapping[TopicPartition, Optional[int]],
    starts: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    reset: str,
) -> Tuple[Dict[TopicPartition, int], List[DataLoss]]:
    """Where a query without a checkpoint starts: the group's committed offsets, checked against the logs.

    A partition without a committed offset starts per ``reset``
    (``auto.offset.reset``), which is no loss; a committed offset outside
    ``[log start, log end]`` is a ``committed-out-of-range`` loss, and
    ``failOnDataLoss=false`` starts it per ``reset`` too.

    >>> initial_positions({("t", 0): 7, ("t", 1): None}, {("t", 0): 0, ("t", 1): 2}, {("t", 0): 5, ("t", 1): 9},
    ...                   "smallest")[0]
    {('t', 0): 0, ('t', 1): 2}
    """
    positions: Dict[TopicPartition, int] = {}
    losses: List[DataLoss] = []
    for tp in sorted(committed):
        value = committed[tp]
        positions[tp] = resolve_start(value, starts[tp], ends[tp], reset)
        if value is not None and positions[tp] != value:
            losses.append(DataLoss(tp[0], tp[1], COMMITTED_OUT_OF_RANGE, value, starts[tp], ends[tp], positions[tp]))
    return positions, losses


def report(group: str, losses: Sequence[DataLoss], fail_on_data_loss: bool, logger: logging.Logger) -> None:
    """Raise :class:`DataLossError` for ``losses`` (``fail_on_data_loss``), else log one warning each."""
    if not losses:
        return
    if fail_on_data_loss:
        raise DataLossError(group, losses)
    for loss in losses:
        logger.warning("group %s: possible data loss: %s; failOnDataLoss=false: %s", group, loss.describe(),
                       loss.action())
