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

from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from zkconsumer import ConfigurationError
from zkconsumer.structs import TopicPartition

from .data_loss import DataLoss
from .options import EARLIEST, LATEST, SourceOptions, StartingOffsets

__all__ = ["starting_positions", "STARTING_OFFSET_OUT_OF_RANGE", "require_every_partition", "timestamps_wanted",
           "timestamp_positions", "ending_positions"]

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
    require_every_partition("startingOffsets", given, partitions)
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


def require_every_partition(option: str, given: Iterable[TopicPartition], partitions: Sequence[TopicPartition]) -> None:
    """ConfigurationError naming ``option`` unless its JSON names exactly ``partitions`` (as Spark requires)."""
    named = set(given)
    missing, extra = sorted(set(partitions) - named), sorted(named - set(partitions))
    if missing or extra:
        parts = []
        if missing:
            parts.append("it does not name " + ", ".join(f"{t}/{p}" for t, p in missing))
        if extra:
            parts.append("it names " + ", ".join(f"{t}/{p}" for t, p in extra) + ", which are not subscribed")
        what = "a timestamp" if "Timestamp" in option else "an offset"
        hint = "" if "Timestamp" in option else " (-2: the log start, -1: the log end)"
        raise ConfigurationError(option, f"must give {what} for every subscribed partition{hint}: "
                                         + "; ".join(parts))


def timestamps_wanted(options: SourceOptions, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, int]:
    """The time (ms) to look up per partition: ``startingTimestamp`` for all, else ``startingOffsetsByTimestamp``
    (which must name every partition); ``{}`` if neither option is set."""
    if options.starting_timestamp is not None:
        return {tp: options.starting_timestamp for tp in partitions}
    if options.starting_timestamps is None:
        return {}
    require_every_partition("startingOffsetsByTimestamp", options.starting_timestamps, partitions)
    return dict(options.starting_timestamps)


def timestamp_positions(found: Mapping[TopicPartition, Optional[int]], starts: Mapping[TopicPartition, int],
                        ends: Mapping[TopicPartition, int]) -> Dict[TopicPartition, int]:
    """Where each partition starts from the offsets-before-time lookup (``None``: before every segment).

    ``None`` starts at the log start; an answer is kept inside ``[log start, log end]``.

    >>> timestamp_positions({("t", 0): None, ("t", 1): 40}, {("t", 0): 3, ("t", 1): 0}, {("t", 0): 9, ("t", 1): 50})
    {('t', 0): 3, ('t', 1): 40}
    """
    return {tp: starts[tp] if offset is None else min(max(offset, starts[tp]), ends[tp])
            for tp, offset in sorted(found.items())}


def ending_positions(spec: Optional[StartingOffsets], begin: Mapping[TopicPartition, int],
                     ends: Mapping[TopicPartition, int]) -> Dict[TopicPartition, int]:
    """Where a batch read ends per ``endingOffsets`` (``None`` or ``latest``: the log end; JSON: each named).

    Raises ConfigurationError if the JSON does not name every partition, or
    gives an end before the partition's start or after its log end.

    >>> ending_positions(StartingOffsets("specific", {("t", 0): 5, ("t", 1): -1}), {("t", 0): 2, ("t", 1): 0},
    ...                  {("t", 0): 9, ("t", 1): 7})
    {('t', 0): 5, ('t', 1): 7}
    """
    if spec is None or spec.kind == "latest":
        return {tp: max(begin[tp], ends[tp]) for tp in sorted(begin)}
    given = dict(spec.offsets or {})
    require_every_partition("endingOffsets", given, list(begin))
    until: Dict[TopicPartition, int] = {}
    for tp in sorted(begin):
        offset = ends[tp] if given[tp] == LATEST else given[tp]
        if offset < begin[tp]:
            raise ConfigurationError("endingOffsets", f"partition {tp[0]}-{tp[1]}'s end offset {offset} is smaller "
                                                      f"than its start offset {begin[tp]}")
        if offset > ends[tp]:
            raise ConfigurationError("endingOffsets", f"partition {tp[0]}-{tp[1]}'s end offset {offset} is after "
                                                      f"its log end {ends[tp]}: those messages do not exist yet")
        until[tp] = offset
    return until
