"""Where a streaming query without a checkpoint starts, per the option ``startingOffsets`` (pure, no I/O).

The option means what it means in Spark's Kafka source: ``earliest`` (every
partition's log start), ``latest`` (its log end), or JSON naming *every*
subscribed partition, ``{"topic": {"0": 23, "1": -2}}``, with ``-2`` for the
log start and ``-1`` for the log end. Unset, the group's committed offsets are
used (:func:`~spark_integration.data_loss.initial_positions`). It applies only
when a query starts without a checkpoint: a restarted query goes on from its
checkpoint.

An explicit offset outside ``[log start, log end]`` is a possible data loss
(kind ``starting-offset-out-of-range``): with ``failOnDataLoss`` (the
default) the query fails, else it starts that partition at its log start
(what Spark's Kafka source does, whose driver resets to ``earliest``)::

    >>> spec = StartingOffsets("specific", {("t", 0): 5, ("t", 1): -1, ("t", 2): 99})
    >>> positions, losses = starting_positions(spec, [("t", 0), ("t", 1), ("t", 2)],
    ...                                         {("t", 0): 0, ("t", 1): 0, ("t", 2): 3}, {("t", 0): 9, ("t", 1): 7, ("t", 2): 8})
    >>> positions, [(loss.partition, loss.resume_at) for loss in losses]
    ({('t', 0): 5, ('t', 1): 7, ('t', 2): 3}, [(2, 3)])
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Tuple

from zkconsumer import ConfigurationError

from .data_loss import DataLoss
from .options import EARLIEST, LATEST, StartingOffsets
from .ranges import TopicPartition

__all__ = ["starting_positions", "STARTING_OFFSET_OUT_OF_RANGE"]

STARTING_OFFSET_OUT_OF_RANGE = "starting-offset-out-of-range"


def starting_positions(
    spec: StartingOffsets,
    partitions: Sequence[TopicPartition],
    starts: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
) -> Tuple[Dict[TopicPartition, int], List[DataLoss]]:
    """The first offset of each of ``partitions`` per ``spec``, and the losses (explicit offsets outside the log).

    Raises :class:`~zkconsumer.errors.ConfigurationError` (``startingOffsets``)
    if a JSON ``spec`` does not name exactly the subscribed ``partitions``, as
    Spark's Kafka source requires ("use -1 for latest, -2 for earliest").
    """
    if spec.kind == "earliest":
        return {tp: starts[tp] for tp in sorted(partitions)}, []
    if spec.kind == "latest":
        return {tp: ends[tp] for tp in sorted(partitions)}, []
    given = dict(spec.offsets or {})
    missing, extra = sorted(set(partitions) - set(given)), sorted(set(given) - set(partitions))
    if missing or extra:
        parts = []
        if missing:
            parts.append("it does not name " + ", ".join(f"{t}/{p}" for t, p in missing))
        if extra:
            parts.append("it names " + ", ".join(f"{t}/{p}" for t, p in extra) + ", which are not subscribed")
        raise ConfigurationError("startingOffsets", "must give an offset for every subscribed partition (-2: the "
                                                    "log start, -1: the log end): " + "; ".join(parts))
    positions: Dict[TopicPartition, int] = {}
    losses: List[DataLoss] = []
    for tp in sorted(given):
        offset, start, end = given[tp], starts[tp], ends[tp]
        if offset == EARLIEST:
            positions[tp] = start
        elif offset == LATEST:
            positions[tp] = end
        elif start <= offset <= end:
            positions[tp] = offset
        else:
            positions[tp] = start
            losses.append(DataLoss(tp[0], tp[1], STARTING_OFFSET_OUT_OF_RANGE, offset, start, end, start))
    return positions, losses
