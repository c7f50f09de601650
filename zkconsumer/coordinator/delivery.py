"""What an assignment from the coordinator means on this member: fetchers, queues, positions.

The membership thread (:mod:`.membership`) calls :meth:`Delivery.assign` after
each SyncGroup and :meth:`Delivery.revoke` before each rejoin; the connector's
commits read :meth:`Delivery.to_commit` (what was handed out, also while a
rebalance is in progress). The same guarantees as the ZooKeeper
rebalancer's (:mod:`zkconsumer.rebalance.rebalancer`):

* **revoke**: fetchers stop, every queue and the chunk each stream is
  iterating are dropped, so after a revoke nothing fetched before it is handed
  out; then (``auto.commit.enable``, and while the generation is still valid)
  the consumed offsets are committed under that generation, and the listener's
  ``before_releasing_partitions`` runs.
* **assign**: a partition this member consumed in the *immediately preceding*
  generation under the same member id (generation ``g`` then ``g + 1``: nobody
  else can have owned it in between) continues from the offset already handed
  to the application, committed or not; every other partition starts from its
  committed offset (``auto.offset.reset`` if none). Then fetching starts.

Thread ids in an assignment are ``<member id>-<i>``; stream ``i`` of this
connector (local thread id ``<consumer id>-<i>``) receives them.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from ..assignors import split_thread_id
from ..commits import Generation
from ..consumer.membership import ConsumerRebalanceListener, FetcherControl
from ..consumer.stream import KafkaStream, clear_streams
from ..consumer.topic_count import make_thread_id
from ..errors import ZkConsumerError
from ..fetch.handoff import ChunkQueue, PartitionTopicInfo
from ..offsets.committer import OffsetCommitter
from ..structs import INVALID_OFFSET, TopicPartition

__all__ = ["Delivery"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Revoked:
    """What the generation that was just revoked handed out: its partitions and their positions."""

    generation: Generation
    positions: Mapping[TopicPartition, int]
    delivered: Tuple[Tuple[PartitionTopicInfo, str], ...] = ()


class Delivery:
    """Installs and revokes this member's partitions; see the module docstring.

    ``queue_for(topic, local_thread_id)`` gives the queue feeding that stream.
    """

    def __init__(self, *, consumer_id: str, queue_for: Callable[[str, str], ChunkQueue],
                 streams: Iterable[KafkaStream], fetchers: FetcherControl, committer: OffsetCommitter,
                 auto_commit: bool, fetch_size: int, listener: Optional[ConsumerRebalanceListener] = None) -> None:
        self._consumer_id = consumer_id
        self._queue_for = queue_for
        self._streams = list(streams)
        self._fetchers = fetchers
        self._committer = committer
        self._auto_commit = auto_commit
        self._fetch_size = fetch_size
        self._listener = listener
        self._lock = threading.Lock()
        self._generation: Optional[Generation] = None
        self._registry: Dict[TopicPartition, Tuple[PartitionTopicInfo, str]] = {}
        self._fetching = False
        self._revoked: Optional[_Revoked] = None

    # ------------------------------------------------------------------ read by other threads

    def owned(self) -> Tuple[Optional[Generation], List[Tuple[PartitionTopicInfo, str]]]:
        """The generation and ``(partition info, thread id)`` of what is delivered now (for commits)."""
        with self._lock:
            return self._generation, list(self._registry.values())

    def to_commit(self) -> Tuple[Optional[Generation], List[Tuple[PartitionTopicInfo, str]], bool]:
        """What a commit covers now, read atomically: ``(generation, delivered, rebalancing)``.

        With an assignment installed: its generation and partitions, ``False``.
        While a rebalance is in progress (revoked, the next assignment not
        installed): the generation revoked last and what it had handed out,
        ``True``; its positions no longer move (nothing is handed out after a
        revoke), and the coordinator accepts a commit under it only while the
        group has not moved on to the next generation. Before the first
        assignment: ``(None, [], True)``.
        """
        with self._lock:
            if self._generation is not None:
                return self._generation, list(self._registry.values()), False
            if self._revoked is not None:
                return self._revoked.generation, list(self._revoked.delivered), True
            return None, [], True

    def owned_map(self) -> Dict[TopicPartition, str]:
        """Partition -> this connector's stream (local thread id ``<consumer id>-<i>``) delivering it now."""
        with self._lock:
            return {tp: self._local(thread_id) for tp, (_, thread_id) in self._registry.items()}

    def assignment(self) -> Dict[TopicPartition, str]:
        """Partition -> the group's thread id (``<member id>-<i>``) of what is delivered now."""
        with self._lock:
            return {tp: thread_id for tp, (_, thread_id) in self._registry.items()}

    # ------------------------------------------------------------------ membership thread

    def assign(self, generation: Generation, share: Mapping[TopicPartition, str]) -> None:
        """Start delivering ``share`` (partition -> thread id) of ``generation``.

        Raises what reading committed offsets raises (nothing is started then;
        the caller retries or rejoins).
        """
        carried = self._carried_positions(generation, share)
        committed = self._committer.read_offsets([tp for tp in share if tp not in carried])
        registry: Dict[TopicPartition, Tuple[PartitionTopicInfo, str]] = {}
        for tp, thread_id in sorted(share.items()):
            if tp in carried:
                offset = carried[tp]
            else:
                found = committed.get(tp)
                offset = INVALID_OFFSET if found is None else found
                if found is not None:
                    self._committer.checkpoint(tp[0], tp[1], found)
            queue = self._queue_for(tp[0], self._local(thread_id))
            registry[tp] = (PartitionTopicInfo(tp[0], tp[1], queue, offset, self._fetch_size), thread_id)
        if self._listener is not None:
            by_topic: Dict[str, Dict[int, str]] = {}
            for (topic, partition), thread_id in share.items():  # the thread ids of the streams that deliver them
                by_topic.setdefault(topic, {})[partition] = self._local(thread_id)
            self._listener.before_starting_fetchers(self._consumer_id, by_topic)
        with self._lock:
            self._generation = generation
            self._registry = registry
            self._revoked = None
        if registry:
            self._fetchers.start_connections(info for info, _ in registry.values())
            self._fetching = True
        log.info("%s: generation %d, member %s: consuming %s", self._consumer_id, generation.generation_id,
                 generation.member_id, ", ".join(f"{t}-{p}" for t, p in sorted(share)) or "nothing")

    def revoke(self, commit: bool) -> None:
        """Stop delivering everything; commit first if ``commit`` and ``auto.commit.enable``.

        ``commit`` is ``False`` when the generation is known to be over
        (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, session presumed expired):
        the coordinator would refuse the commit anyway.
        """
        with self._lock:
            generation, registry = self._generation, dict(self._registry)
        if self._fetching:
            self._fetchers.stop_connections()
            self._fetching = False
        for info, _ in registry.values():  # moved away, as far as this generation knows: a late ack is
            info.revoked = True           # ignored, and an iterator stops at the chunk it is in
        clear_streams(self._streams)
        if generation is None:
            return
        if commit and self._auto_commit and registry:
            try:
                self._committer.commit(registry.values(), generation)
            except ZkConsumerError as exc:
                log.warning("%s: commit before rejoining failed: %s", self._consumer_id, exc)
        if self._listener is not None and registry:
            by_topic: Dict[str, Set[int]] = {}
            for topic, partition in registry:
                by_topic.setdefault(topic, set()).add(partition)
            if commit:
                self._listener.before_releasing_partitions(by_topic)
            else:  # the generation is over: no hand-over, and what was not committed before is not now
                told = getattr(self._listener, "partitions_lost", None)
                if told is not None:
                    told(by_topic)
        positions = {tp: info.commit_position for tp, (info, _) in registry.items() if info.commit_position >= 0}
        with self._lock:
            self._revoked = _Revoked(generation, positions, tuple(registry.values()))
            self._generation = None
            self._registry = {}

    # ------------------------------------------------------------------ internals

    def _local(self, thread_id: str) -> str:
        """``<member id>-<i>`` -> ``<consumer id>-<i>``: the stream that delivers it."""
        return make_thread_id(self._consumer_id, split_thread_id(thread_id)[1])

    def _carried_positions(self, generation: Generation, share: Mapping[TopicPartition, str]) -> Dict[TopicPartition, int]:
        with self._lock:
            revoked = self._revoked
        if revoked is None:
            return {}
        previous = revoked.generation
        if previous.member_id != generation.member_id or previous.generation_id + 1 != generation.generation_id:
            return {}
        return {tp: offset for tp, offset in revoked.positions.items() if tp in share}

