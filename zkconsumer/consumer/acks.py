"""Commit only what was processed (``commit.processed.only``): which handed-out offsets were acked.

With ``commit.processed.only=true`` a message handed out by a stream is *in
flight* until the application acks it (``stream.ack(message)`` or
``connector.ack(message)``), from any thread, in any order. Every commit
(``commit_offsets()``, auto-commit, the commit before a rebalance releases a
partition, the commit at shutdown) then writes, for each partition, its
*processed position*: the first offset handed out and not yet acked, or, when
every message handed out was acked, the position after the last one (Kafka's
meaning of a committed offset: the next one to read). A member that dies
therefore loses nothing, and its partitions' next owner re-reads at most what
was handed out beyond the first unacked message.

:class:`PartitionAcks` keeps that for one *incarnation* of one owned partition
(one :class:`~zkconsumer.fetch.handoff.PartitionTopicInfo`): the offsets handed
out, as runs of consecutive offsets registered chunk by chunk (offsets a log
does not hold, e.g. after compaction, are never waited for), and the offsets
acked beyond the first unacked one. Its memory is bounded by what is in flight:
a run is dropped once all of it was acked, an acked offset once everything
below it was.

:class:`ProcessedOffsets` is a connector's set of them: the iterator registers
each chunk it installs (:meth:`~ProcessedOffsets.note_chunk`), ``ack()`` finds
the partition's current incarnation. An ack of a message handed out by an
earlier incarnation (before a rebalance moved the partition away, or before it
came back) is ignored, returning ``False``: that incarnation's offsets were
committed, or will be re-delivered; an ack of an offset this member never
handed out raises :class:`~zkconsumer.errors.UnknownAckError`. A message that a
new incarnation handed out again counts as processed when either hand-out is
acked (it is the same message).

Thread-safe: each partition's tracker has its own lock, the registry one for its
maps (taken before a tracker's, never after).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Deque, Dict, List, Sequence, Set, Tuple

from ..errors import UnknownAckError
from ..fetch.handoff import PartitionTopicInfo
from ..structs import TopicPartition

__all__ = ["PartitionAcks", "ProcessedOffsets", "chunk_runs"]


class PartitionAcks:
    """Acked offsets of one incarnation of one partition, which started at offset ``start``.

    :meth:`note_run` registers offsets the stream will hand out (ascending);
    :meth:`ack` marks one processed; :meth:`position` is the processed position
    given how far the stream has handed out (``consumed``: the offset after the
    last message handed out). Offsets at or beyond ``consumed`` are not handed
    out yet, whatever was registered.
    """

    __slots__ = ("start", "_runs", "_acked", "_end", "_lock")

    def __init__(self, start: int) -> None:
        self.start = start
        #: Registered offsets not yet all processed: ``[first unprocessed, end)`` runs, ascending, disjoint.
        self._runs: Deque[List[int]] = deque()
        #: Acked offsets above the first unprocessed one.
        self._acked: Set[int] = set()
        #: Offsets below this were registered (or precede the incarnation).
        self._end = start
        self._lock = threading.Lock()

    def note_run(self, first: int, end: int) -> None:
        """Register the consecutive offsets ``[first, end)`` as about to be handed out.

        Offsets already registered (below the end of the last run) are left as they are: a
        chunk fetched twice, or the rest of a chunk a rebalance dropped, fetched again.
        """
        with self._lock:
            first = max(first, self._end)
            if first >= end:
                return
            runs = self._runs
            if runs and runs[-1][1] == first:
                runs[-1][1] = end
            else:
                runs.append([first, end])
            self._end = end

    def ack(self, offset: int) -> bool:
        """Mark ``offset`` processed; ``False`` if it was not registered (a gap: never handed out).

        The caller checks that ``start <= offset < consumed``. Acking twice is harmless.
        """
        with self._lock:
            runs = self._runs
            if not runs or offset < runs[0][0]:
                return offset < self._end  # processed already (or a gap we no longer know of)
            if not any(first <= offset < end for first, end in runs):
                return False
            if offset == runs[0][0]:
                self._advance()
            else:
                self._acked.add(offset)
            return True

    def _advance(self) -> None:
        """The first unprocessed offset was acked: move past it and every acked offset after it."""
        runs, acked = self._runs, self._acked
        at = runs[0][0] + 1
        while True:
            run = runs[0]
            while at < run[1] and at in acked:
                acked.discard(at)
                at += 1
            if at < run[1]:
                run[0] = at
                return
            runs.popleft()
            if not runs:
                return
            at = runs[0][0]
            if at not in acked:
                return
            acked.discard(at)
            at += 1

    def position(self, consumed: int) -> int:
        """The offset to commit: the first handed out and unacked, else ``consumed``."""
        with self._lock:
            if self._runs and self._runs[0][0] < consumed:
                return self._runs[0][0]
            return consumed

    def in_flight(self, consumed: int) -> int:
        """How many messages were handed out and not acked (a snapshot, for metrics and tests)."""
        with self._lock:
            handed = sum(max(0, min(end, consumed) - first) for first, end in self._runs)
            return handed - sum(1 for o in self._acked if o < consumed)

    def __repr__(self) -> str:
        with self._lock:
            return f"PartitionAcks(start={self.start}, runs={list(map(tuple, self._runs))}, acked={len(self._acked)})"


def chunk_runs(messages: Sequence[Any], pos: int, below: int) -> List[Tuple[int, int]]:
    """The offsets of ``messages[pos:]`` not below ``below`` as ``[first, end)`` runs of consecutive offsets.

    ``messages`` is ascending: a ``MessageBlock`` (``offset_at``) or a sequence of
    ``(offset, key, value)``. A chunk without gaps (the usual case) costs two lookups.
    """
    count = len(messages)
    if pos >= count:
        return []
    offset_at = getattr(messages, "offset_at", None)
    at = offset_at if offset_at is not None else (lambda i: messages[i][0])
    first, last = at(pos), at(count - 1)
    if last - first == count - 1 - pos:  # consecutive
        start = max(first, below)
        return [(start, last + 1)] if start <= last else []
    runs: List[Tuple[int, int]] = []
    for i in range(pos, count):
        offset = at(i)
        if offset < below:
            continue
        if runs and runs[-1][1] == offset:
            runs[-1] = (runs[-1][0], offset + 1)
        else:
            runs.append((offset, offset + 1))
    return runs


class ProcessedOffsets:
    """A connector's acks: the current incarnation of each partition its streams delivered; see the module doc."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: Dict[TopicPartition, PartitionTopicInfo] = {}
        #: Per partition, the offset after the last message an earlier incarnation handed out (the highest).
        self._earlier: Dict[TopicPartition, int] = {}

    def note_chunk(self, info: PartitionTopicInfo, messages: Sequence[Any], pos: int = 0) -> None:
        """The iterator installed ``messages[pos:]`` of ``info``: register what it will hand out.

        The first chunk of an incarnation attaches its tracker (``info.acks``), starting at
        ``info.consumed_offset``, and retires the partition's earlier incarnation.
        """
        tp = (info.topic, info.partition)
        with self._lock:
            acks = info.acks
            if acks is None:
                acks = info.acks = PartitionAcks(info.consumed_offset)
                previous = self._current.get(tp)
                if previous is not None and previous is not info:
                    self._retire(tp, previous)
                self._current[tp] = info
            for first, end in chunk_runs(messages, pos, info.consumed_offset):
                acks.note_run(first, end)

    def restart(self, info: PartitionTopicInfo) -> None:
        """``info`` is about to move to another position (a live seek): its acks so far are of an earlier
        incarnation (acks of offsets it handed out are ignored from now on) and its next chunk starts
        a new tracker. Call before changing its positions, while none of its messages is handed out."""
        tp = (info.topic, info.partition)
        with self._lock:
            if self._current.get(tp) is info:
                self._retire(tp, info)
                del self._current[tp]
            info.acks = None

    def _retire(self, tp: TopicPartition, info: PartitionTopicInfo) -> None:
        self._earlier[tp] = max(self._earlier.get(tp, 0), info.consumed_offset)

    def ack(self, topic: str, partition: int, offset: int) -> bool:
        """Mark the message at ``offset`` processed; see :meth:`KafkaStream.ack`."""
        tp = (topic, partition)
        with self._lock:
            info = self._current.get(tp)
            if info is not None and info.revoked:  # moved away: its last commit is written or under way
                self._retire(tp, info)
                del self._current[tp]
                info = None
            acks = None if info is None else info.acks
            if info is not None and acks is not None and acks.start <= offset < info.consumed_offset:
                if acks.ack(offset):
                    return True
                raise UnknownAckError(topic, partition, offset, "the partition's log has no message there "
                                      "(a gap between the offsets handed out)")
            if offset < self._earlier.get(tp, -1):
                return False  # handed out by an earlier incarnation: ignored
        if info is None:
            raise UnknownAckError(topic, partition, offset, "this member has not handed out a message of the "
                                  "partition (acked on another connector?)")
        raise UnknownAckError(topic, partition, offset, f"this member handed out offsets {acks.start if acks else '?'}"
                              f"..{info.consumed_offset - 1} of the partition only")

    def in_flight(self) -> Dict[TopicPartition, int]:
        """Messages handed out and not yet acked, per partition currently delivered (a snapshot)."""
        with self._lock:
            infos = [i for i in self._current.values() if not i.revoked]
        return {(i.topic, i.partition): i.acks.in_flight(i.consumed_offset) for i in infos if i.acks is not None}
