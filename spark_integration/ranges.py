"""Offset ranges: what a batch reads from each Kafka partition (pure functions, no I/O).

An :class:`OffsetRange` is the half-open interval ``[from_offset, until_offset)``
of one partition, as in Spark's ``kafka-0-8`` integration. The driver plans
ranges from three facts per partition: the group's committed offset (``None``
if it never committed), the log start and the log end (high watermark)::

    >>> start = resolve_start(committed=None, log_start=3, log_end=10, reset="smallest")
    >>> start, resolve_start(committed=7, log_start=3, log_end=10, reset="smallest")
    (3, 7)
    >>> plan_ranges({("t", 0): start}, {("t", 0): 10}, max_messages_per_partition=5)
    [OffsetRange(topic='t', partition=0, from_offset=3, until_offset=8)]

Streaming offsets (what Spark checkpoints) are JSON objects keyed
``"<topic>/<partition>"``; Kafka topic names cannot contain ``/``, so the key
is unambiguous::

    >>> encode_offsets({("t", 1): 5, ("t", 0): 2})
    {'t/0': 2, 't/1': 5}
    >>> decode_offsets({'t/0': 2})
    {('t', 0): 2}
"""

from __future__ import annotations

import math
import time
from typing import Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence

from zkconsumer.structs import TopicPartition

__all__ = [
    "OffsetRange", "resolve_start", "plan_ranges", "offset_key", "parse_offset_key",
    "encode_offsets", "decode_offsets", "limit_total", "rate_limit", "new_messages", "TriggerDelay",
    "split_ranges",
]


class OffsetRange(NamedTuple):
    """Messages ``from_offset <= offset < until_offset`` of ``topic``/``partition``.

    Plain data (a tuple): picklable and cheap to ship to executors.
    ``until_offset`` is what :func:`~spark_integration.commit_offset_ranges`
    writes as the group's next offset to consume.
    """

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property  # deliberately shadows tuple.count: the range's size is the useful "count"
    def count(self) -> int:  # type: ignore[override]
        """Upper bound of the messages in the range (exact unless the topic is compacted)."""
        return max(0, self.until_offset - self.from_offset)

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)


def resolve_start(committed: Optional[int], log_start: int, log_end: int, reset: str) -> int:
    """Where a group resumes reading a partition, as Kafka's consumer would.

    The committed offset if it lies in ``[log_start, log_end]``; otherwise (none
    committed, deleted by retention, or beyond the log after the topic was
    recreated) ``log_start`` for ``reset == "smallest"`` and ``log_end`` for
    ``"largest"`` (``auto.offset.reset``).

    >>> resolve_start(2, 5, 9, "smallest"), resolve_start(2, 5, 9, "largest"), resolve_start(9, 5, 9, "smallest")
    (5, 9, 9)
    """
    if reset not in ("smallest", "largest"):
        raise ValueError(f"auto.offset.reset must be smallest or largest, not {reset!r}")
    if committed is not None and log_start <= committed <= log_end:
        return committed
    return log_start if reset == "smallest" else log_end


def plan_ranges(
    positions: Mapping[TopicPartition, int],
    log_ends: Mapping[TopicPartition, int],
    max_messages_per_partition: Optional[int] = None,
) -> List[OffsetRange]:
    """One range per partition of ``positions``, sorted by topic then partition.

    Each range starts at the position and ends at the log end, or after
    ``max_messages_per_partition`` offsets. A log end below the position (the log
    was truncated) gives an empty range at the position, never a negative one.

    >>> for r in plan_ranges({("t", 1): 4, ("t", 0): 0}, {("t", 0): 3, ("t", 1): 2}):
    ...     print(r)
    OffsetRange(topic='t', partition=0, from_offset=0, until_offset=3)
    OffsetRange(topic='t', partition=1, from_offset=4, until_offset=4)
    """
    if max_messages_per_partition is not None and max_messages_per_partition < 1:
        raise ValueError(f"max_messages_per_partition must be >= 1, not {max_messages_per_partition}")
    ranges = []
    for tp in sorted(positions):
        start = positions[tp]
        until = max(start, log_ends[tp])
        if max_messages_per_partition is not None:
            until = min(until, start + max_messages_per_partition)
        ranges.append(OffsetRange(tp[0], tp[1], start, until))
    return ranges


def offset_key(topic: str, partition: int) -> str:
    """``"<topic>/<partition>"``, the key of a streaming offset."""
    return f"{topic}/{partition}"


def parse_offset_key(key: str) -> TopicPartition:
    """Inverse of :func:`offset_key`; ``ValueError`` naming the key if it is malformed."""
    topic, sep, partition = key.rpartition("/")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"malformed offset key {key!r}: expected '<topic>/<partition>'")
    return topic, int(partition)


def encode_offsets(offsets: Mapping[TopicPartition, int]) -> Dict[str, int]:
    """``{(topic, partition): offset}`` as a JSON-ready dict, keys sorted."""
    return {offset_key(t, p): int(o) for (t, p), o in sorted(offsets.items())}


def decode_offsets(offsets: Mapping[str, object]) -> Dict[TopicPartition, int]:
    """Inverse of :func:`encode_offsets`; ``ValueError`` for a malformed key or offset."""
    result: Dict[TopicPartition, int] = {}
    for key, value in offsets.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"malformed offset {value!r} for {key!r}: expected a non-negative integer")
        result[parse_offset_key(key)] = value
    return result


def limit_total(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], max_messages: int
) -> Dict[TopicPartition, int]:
    """Move ``start`` towards ``end`` by at most ``max_messages`` offsets in total.

    Partitions get shares proportional to their backlog (floor), and the
    remainder goes one offset each to the largest fractional shares (ties by
    topic/partition), so every call with a backlog makes progress. Partitions
    only in ``end`` start at ``end`` (nothing to read). Deterministic.

    >>> limit_total({("t", 0): 0, ("t", 1): 0}, {("t", 0): 30, ("t", 1): 10}, 8)
    {('t', 0): 6, ('t', 1): 2}
    """
    if max_messages < 1:
        raise ValueError(f"max_messages must be >= 1, not {max_messages}")
    backlog = {tp: max(0, end[tp] - start.get(tp, end[tp])) for tp in end}
    total = sum(backlog.values())
    if total <= max_messages:
        return dict(end)
    shares = {tp: b * max_messages // total for tp, b in backlog.items()}
    leftover = max_messages - sum(shares.values())
    # The fractional parts sum to ``leftover`` and each is < 1, so at least ``leftover``
    # partitions have one, and each of those still has backlog beyond its floor share.
    by_remainder = sorted(backlog, key=lambda tp: (-(backlog[tp] * max_messages % total), tp))
    for tp in by_remainder[:leftover]:
        shares[tp] += 1
    return {tp: start.get(tp, end[tp]) + shares[tp] for tp in end}


def rate_limit(
    max_messages: int, start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
) -> Dict[TopicPartition, int]:
    """Spark's ``maxOffsetsPerTrigger`` split: ``end`` moved back so ``start`` advances by about ``max_messages``.

    As Spark's Kafka source does it: each partition with a backlog
    (``end - start > 0``) gets ``max_messages * backlog / total backlog``
    offsets, rounded down, except that a share below 1 is rounded up (a small
    partition is never starved), and never past its end; so the total may
    exceed ``max_messages`` by at most one per partition. Partitions without a
    backlog, or only in ``end``, stay at ``end``.

    >>> rate_limit(10, {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}, {("t", 0): 1000, ("t", 1): 10, ("t", 2): 0})
    {('t', 0): 9, ('t', 1): 1, ('t', 2): 0}
    """
    if max_messages < 1:
        raise ValueError(f"max_messages must be >= 1, not {max_messages}")
    sizes = {tp: e - start[tp] for tp, e in end.items() if tp in start and e - start[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(end)
    result: Dict[TopicPartition, int] = {}
    for tp, e in end.items():
        size = sizes.get(tp)
        if size is None:
            result[tp] = e
            continue
        share = max_messages * size / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        result[tp] = min(e, start[tp] + step)
    return result


def new_messages(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> int:
    """Offsets between ``start`` and ``end`` summed over the partitions of both (at least 0 each)."""
    return sum(max(0, e - start[tp]) for tp, e in end.items() if tp in start)


class TriggerDelay:
    """``minOffsetsPerTrigger`` with ``maxTriggerDelay``, as Spark's Kafka source decides it.

    :meth:`skip` says whether to hold the next micro-batch back: never when
    ``max_delay_ms`` passed since the last micro-batch that went ahead (the
    first call always goes ahead), else when fewer than ``min_messages`` new
    messages are there. Each call that goes ahead restarts the delay.

    >>> now = [0.0]
    >>> gate = TriggerDelay(100, 60_000, clock=lambda: now[0])
    >>> gate.skip(5), gate.skip(5), gate.skip(150)
    (False, True, False)
    >>> now[0] = 30.0; gate.skip(5)
    True
    >>> now[0] = 61.0; gate.skip(5)
    False
    """

    def __init__(self, min_messages: int, max_delay_ms: int, clock: Callable[[], float] = time.time) -> None:
        self.min_messages = min_messages
        self.max_delay_ms = max_delay_ms
        self._clock = clock
        self._last_ms: Optional[float] = None

    def skip(self, available: int) -> bool:
        """Whether the micro-batch with ``available`` new messages waits (see the class docstring)."""
        now_ms = self._clock() * 1000.0
        if self._last_ms is None or now_ms - self._last_ms >= self.max_delay_ms or available >= self.min_messages:
            self._last_ms = now_ms
            return False
        return True


def _divide(r: OffsetRange, parts: int) -> List[OffsetRange]:
    """``r`` cut into ``parts`` consecutive pieces, Spark's way: each ``remaining // parts left`` long."""
    pieces, remaining, start = [], r.count, r.from_offset
    for part in range(parts):
        size = remaining // (parts - part)
        remaining -= size
        end = min(start + size, r.until_offset)
        pieces.append(OffsetRange(r.topic, r.partition, start, end))
        start = end
    return pieces


def _part_count(size: int, total: int, min_parts: int) -> int:
    """Spark's ``getPartCount``: ``max(round(size / total * min_parts), 1)``, rounding halves up as Java's
    ``Math.round`` does (Python's ``round`` rounds them to even)."""
    return max(math.floor(size / total * min_parts + 0.5), 1)


def split_ranges(ranges: Sequence[OffsetRange], min_partitions: Optional[int] = None,
                 max_records_per_partition: Optional[int] = None) -> List[OffsetRange]:
    """Spark's ``KafkaOffsetRangeCalculator``: the options ``minPartitions`` and ``maxRecordsPerPartition``.

    Without either, ``ranges`` come back as they are (empty ones included: the
    caller decides). Otherwise empty ranges are dropped, then:

    * ``maxRecordsPerPartition``: each range is cut into
      ``ceil(size / maxRecordsPerPartition)`` near-equal pieces;
    * ``minPartitions``, if there are still fewer pieces than it: the ranges whose
      share of the total (``round(size / total * minPartitions)``) is 1 stay whole,
      and each other range is cut into ``max(round(size / rest * (minPartitions -
      whole ones)), 1)`` pieces, ``rest`` being the other ranges' total size.

    Pieces are cut as Spark cuts them (``remaining // parts left``, so the last
    ones are the longest); the order is the input order. The ``minPartitions``
    part is ``KafkaOffsetRangeCalculator.getRanges`` (Spark 3.x/4.x); the
    ``maxRecordsPerPartition`` part (Spark 4.0) follows Spark's documentation of
    the option (cut to at most that many, then ``minPartitions`` if still fewer).

    >>> r = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 5, 5)]
    >>> [(x.partition, x.from_offset, x.until_offset) for x in split_ranges(r, min_partitions=4)]
    [(0, 0, 33), (0, 33, 66), (0, 66, 100), (1, 0, 10)]
    >>> [(x.partition, x.from_offset, x.until_offset) for x in split_ranges(r, max_records_per_partition=40)]
    [(0, 0, 33), (0, 33, 66), (0, 66, 100), (1, 0, 10)]
    """
    if min_partitions is not None and min_partitions < 1:
        raise ValueError(f"min_partitions must be >= 1, not {min_partitions}")
    if max_records_per_partition is not None and max_records_per_partition < 1:
        raise ValueError(f"max_records_per_partition must be >= 1, not {max_records_per_partition}")
    if min_partitions is None and max_records_per_partition is None:
        return list(ranges)
    pieces = [r for r in ranges if r.count > 0]
    if max_records_per_partition is not None:
        pieces = [p for r in pieces for p in _divide(r, -(-r.count // max_records_per_partition))]
    if min_partitions is None or len(pieces) >= min_partitions:
        return [p for p in pieces if p.count > 0]
    total = sum(r.count for r in pieces)
    whole = [_part_count(r.count, total, min_partitions) == 1 for r in pieces]
    rest = total - sum(r.count for r, w in zip(pieces, whole) if w)
    rest_partitions = max(min_partitions - sum(whole), 1)
    result: List[OffsetRange] = []
    for r, w in zip(pieces, whole):
        result.extend([r] if w else _divide(r, _part_count(r.count, rest, rest_partitions)))
    return [p for p in result if p.count > 0]
