"""Pausing and resuming partitions and streams without leaving the group.

A paused partition keeps everything a member holds for it: the session, the owner
node (or the coordinator's assignment), its position. Only the fetching and the
handing out stop:

1. the fetcher manager stops fetching it (:meth:`FetcherManager.pause`), and returns
   once no chunk of it can be queued any more;
2. its ``PartitionTopicInfo.paused`` is set, its queued chunks are dropped, then any
   chunk of it a stream is iterating (as a revoke does), so no message of it is
   handed out once :meth:`Pauses.pause` returns;
3. its ``fetched_offset`` goes back to ``consumed_offset``: what was fetched and
   dropped is fetched again at :meth:`Pauses.resume`, which starts exactly at the
   first message not handed out. Nothing is skipped and nothing handed out twice.

Commits go on as usual: a paused partition's position is the offset after its last
message handed out, so auto-commit and :meth:`commit_offsets` write it as before.

Pauses last until resumed, across rebalances that leave the partition with this
member and across a new session that gives it back. A paused partition that leaves
the member (moved to another member at a rebalance, or not given back after the
session was lost) is no longer paused: a member that gets it later fetches it, and
the application is told through its rebalance listener's optional
``paused_partitions_moved(partitions)`` (``{topic: {partition, ...}}``), called on
the rebalancing thread right after ``before_starting_fetchers``. A stream's pause
(:meth:`Pauses.pause` with ``streams``) covers whatever partitions the stream is
given, now and after rebalances, until the stream is resumed.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Dict, Iterable, List, Mapping, Sequence, Set

from ..assignors import is_thread_of
from ..fetch.handoff import PartitionTopicInfo
from ..fetch.manager import FetcherManager
from ..structs import TopicPartition
from .stream import KafkaStream, stop_delivering

log = logging.getLogger(__name__)


class Pauses:
    """The connector's pause and resume (see the module docstring); thread-safe.

    ``streams`` is the connector's list of streams (read when pausing, so streams made
    later are covered). ``inner`` is the application's rebalance listener, or ``None``.
    """

    def __init__(self, fetchers: FetcherManager, streams: List[KafkaStream], inner: Any) -> None:
        self._fetchers = fetchers
        self._streams = streams
        self._inner = inner
        self._lock = threading.Lock()  # one pause or resume at a time: step 3 ends before a resume starts

    def pause(self, partitions: Iterable[TopicPartition] = (), streams: Iterable[KafkaStream] = ()) -> None:
        """Stop fetching and handing out ``partitions`` and ``streams``' partitions; returns once none of
        their messages can be handed out. Pausing what is paused, or a partition this member does not
        own yet, is allowed (it is not fetched while paused, should it be assigned)."""
        tps = _checked(partitions)
        with self._lock:
            infos = self._fetchers.pause(tps, [s.queue for s in streams])
            for info in infos:
                info.paused = True
            stop_delivering(self._streams, infos)
            for info in infos:
                info.rewind_to_consumed()
        if tps:
            log.info("paused %s", ", ".join(f"{t}-{p}" for t, p in sorted(tps)))

    def resume(self, partitions: Iterable[TopicPartition] = (), streams: Iterable[KafkaStream] = ()) -> None:
        """Fetch and hand out ``partitions`` and ``streams``' partitions again, from where they stopped.

        A partition paused both by itself and through its stream stays paused until both
        are resumed. Resuming what is not paused is a no-op.
        """
        tps = _checked(partitions)
        with self._lock:
            # The flag is cleared by the manager before a partition can be fetched again, so no
            # chunk fetched after the resume is dropped as paused.
            self._fetchers.resume(tps, [s.queue for s in streams])
        if tps:
            log.info("resumed %s", ", ".join(f"{t}-{p}" for t, p in sorted(tps)))

    def reposition(self, infos: Sequence[PartitionTopicInfo], move: Callable[[], None]) -> None:
        """A live seek (``consumer/seeking.py``): stop fetching and handing out ``infos`` as :meth:`pause`
        does, call ``move()`` (which moves their positions), then fetch them again from there, except
        those the application paused (they stay paused, at the new position)."""
        tps = {(info.topic, info.partition) for info in infos}
        with self._lock:
            kept = self._fetchers.paused() & tps
            held = self._fetchers.pause(tps)
            for info in held:
                info.paused = True
            stop_delivering(self._streams, held)
            try:
                move()
            finally:
                self._fetchers.resume(tps - kept)

    def paused(self) -> Set[TopicPartition]:
        """The partitions paused by :meth:`pause` (one by one, not through a stream), owned or not."""
        return self._fetchers.paused()

    def assigned(self, consumer_id: str, assignment: Mapping[str, Mapping[int, str]]) -> None:
        """After ``before_starting_fetchers``: forget and report paused partitions not in this member's share."""
        mine = {(topic, partition) for topic, threads in assignment.items()
                for partition, thread_id in threads.items() if is_thread_of(thread_id, consumer_id)}
        with self._lock:
            moved = self._fetchers.paused() - mine
            if not moved:
                return
            self._fetchers.forget_paused(moved)
        by_topic: Dict[str, Set[int]] = {}
        for topic, partition in sorted(moved):
            by_topic.setdefault(topic, set()).add(partition)
        log.info("paused partitions moved to other members (no longer paused): %s",
                 ", ".join(f"{t}-{p}" for t, p in sorted(moved)))
        report = getattr(self._inner, "paused_partitions_moved", None)
        if report is not None:
            report(by_topic)


def _checked(partitions: Iterable[TopicPartition]) -> Set[TopicPartition]:
    """``partitions`` as a set of ``(topic, partition)``; a clear error for anything else."""
    if isinstance(partitions, tuple) and len(partitions) == 2 and isinstance(partitions[0], str):
        raise TypeError(f"pass an iterable of (topic, partition) pairs, not one pair: [{partitions!r}]")
    out: Set[TopicPartition] = set()
    for tp in partitions:
        if (not isinstance(tp, tuple) or len(tp) != 2 or not isinstance(tp[0], str) or not tp[0]
                or not isinstance(tp[1], int) or isinstance(tp[1], bool) or tp[1] < 0):
            raise ValueError(f"not a (topic, partition) pair: {tp!r}")
        out.add((tp[0], tp[1]))
    return out

