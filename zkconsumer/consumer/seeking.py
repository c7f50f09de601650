"""A live group-wide seek, the member's side (``zkconsumer offsets seek``; ZooKeeper membership).

The command writes a request to ``/consumers/<g>/seek`` (format: :mod:`zkconsumer.zookeeper.seek_nodes`):
a target offset per partition. Each member watches the node (a
:class:`~zkconsumer.zookeeper.watchers.PathWatch`: asynchronous requests only, armed again after a
reconnection or a new session; kazoo's own ``DataWatch`` recipe blocked kazoo's callback thread
while ZooKeeper was unreachable, which hung the exit of a process that never shut down). The
watch's callbacks only keep the request and signal the rebalancer
(:meth:`Rebalancer.seek_requested`), whose thread applies it between rebalances
(:meth:`GroupSeeks.apply`), so no partition is claimed or released meanwhile. For every partition
of the request this member owns and that is not acknowledged yet:

1. the partition stops being fetched and handed out, its queued chunks are dropped
   (:meth:`Pauses.reposition`: as a pause);
2. under the committer's lock (no commit of this member in flight, and a commit that comes
   next reads the new position) both positions move to the target and the
   ``commit.processed.only`` acks start afresh; a commit before this point wrote the old
   position, every commit after it writes the target or beyond;
3. the target is committed, fenced by the owner node (a partition found owned by another
   member is given up, not acknowledged), and fetching resumes from the target (unless the
   application paused the partition: it stays paused, at the target);
4. an acknowledgement node is created for the partition.

A member that claims a partition while a request is pending (joining, or taking over a
partition at a rebalance) starts it from the target when it is not acknowledged yet
(:meth:`GroupSeeks.read_offsets`, where the rebalancer reads committed offsets; until the
watch's first read is answered it reads the node there itself), then commits
and acknowledges it after the rebalance. A partition acknowledged before it moved starts from
its committed offset, which is the target or beyond. A failed step is tried again a second later.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from ..errors import MalformedZnodeError, ZkConsumerError
from ..fetch.handoff import PartitionTopicInfo
from ..offsets.committer import OffsetCommitter
from ..structs import TopicPartition
from ..zookeeper import seek_nodes
from ..zookeeper.watchers import PathWatch, Value
from ..zookeeper.zkcalls import BoundedZooKeeper
from .acks import ProcessedOffsets
from .pausing import Pauses

__all__ = ["GroupSeeks"]

log = logging.getLogger(__name__)

OffsetReader = Callable[[List[TopicPartition]], Mapping[TopicPartition, Optional[int]]]
Owned = List[Tuple[PartitionTopicInfo, str]]


class GroupSeeks:
    """One member's part in live seeks (module docstring). :meth:`start` arms the watch (any thread);
    :meth:`read_offsets`' reader and :meth:`apply` run on the rebalancer thread only."""

    def __init__(self, client: BoundedZooKeeper, group_root: str, committer: OffsetCommitter, pauses: Pauses,
                 processed: Optional[ProcessedOffsets], acl: Optional[List[Any]] = None) -> None:
        self._client = client
        self._path = seek_nodes.seek_path(group_root)
        self._committer = committer
        self._pauses = pauses
        self._processed = processed
        self._acl = acl
        self._lock = threading.Lock()
        self._pending: Optional[seek_nodes.SeekRequest] = None  # the watch's latest view
        self._known = False  # whether the watch has read the node yet (else _pending says nothing)
        self._signal: Optional[Callable[[], None]] = None
        self._watch: Optional[PathWatch] = None
        self._epoch = 0  # one per start() and stop(): a callback of an earlier watch does nothing
        # Rebalancer thread only:
        self._claimed: Dict[TopicPartition, Tuple[str, int]] = {}  # started from a target at a claim
        self._applied: Dict[TopicPartition, PartitionTopicInfo] = {}  # moved to the current request's target
        self._applied_id: Optional[str] = None

    # ------------------------------------------------------------------ the watch

    def start(self, signal: Callable[[], None]) -> None:
        """Arm the watch of the request node (its read is sent before this returns; never blocks).
        ``signal()`` (never blocking) is called when a request is there: once the watch's first read
        finds one, at every change to a request, and after a new session while one is there. After
        :meth:`stop` (a member that switched memberships and came back) it watches afresh."""
        with self._lock:
            if self._watch is not None:
                return
            self._epoch += 1
            epoch = self._epoch
            watch = PathWatch(self._client.raw, self._path, children=False, describe=_request_changed,
                              signal=lambda _reason: self._on_signal(epoch),
                              keep=lambda data: self._on_data(epoch, data), name="live seek request")
            self._signal, self._watch, self._known, self._pending = signal, watch, False, None
        watch.start()

    def stop(self) -> None:
        """Stop the watch (at once, without waiting for ZooKeeper); nothing is signalled any more."""
        with self._lock:
            watch, self._watch = self._watch, None
            self._epoch += 1
        if watch is not None:
            watch.stop()

    def _on_data(self, epoch: int, data: Value) -> None:
        """kazoo's completion thread: keep what the watch read (the first request found signals). Never blocks."""
        request = None
        if isinstance(data, bytes) and data:
            try:
                request = seek_nodes.decode_request(self._path, data)
            except MalformedZnodeError as exc:
                log.warning("ignoring the seek request: %s", exc)
        with self._lock:
            if epoch != self._epoch:
                return
            first, self._known, self._pending = not self._known, True, request
            signal = self._signal if first and request is not None else None
        if signal is not None:
            signal()

    def _on_signal(self, epoch: int) -> None:
        """kazoo's threads: the node changed (or the watch was re-armed on a new session); what it holds
        now was kept first (:meth:`_on_data`). Never blocks."""
        with self._lock:
            signal = self._signal if epoch == self._epoch and self._pending is not None else None
        if signal is not None:
            signal()

    # ------------------------------------------------------------------ the rebalancer thread

    def read_offsets(self, inner: OffsetReader) -> OffsetReader:
        """``inner`` (the committed offsets a claim starts from), with the target of each partition a
        pending request moves and that is not acknowledged yet."""

        def read(tps: List[TopicPartition]) -> Mapping[TopicPartition, Optional[int]]:
            committed = inner(tps)
            with self._lock:
                pending, known = self._pending, self._known
            # Before the watch's first answer (it may come after a claim) the node is read here.
            if known and (pending is None or not any(tp in pending.offsets for tp in tps)):
                return committed
            fresh = self._read_request()
            if fresh is None:
                return committed
            request, acked = fresh
            out = dict(committed)
            for tp in tps:
                if tp in request.offsets and tp not in acked:
                    out[tp] = request.offsets[tp]
                    self._claimed[tp] = (request.id, request.offsets[tp])
                    log.info("claiming %s-%d at the seek target %d (pending seek %s)", tp[0], tp[1],
                             request.offsets[tp], request.id)
            return out

        return read

    def apply(self, owned: Owned, lost: Callable[[List[TopicPartition]], None]) -> bool:
        """Apply the pending request to the partitions this member owns (``owned``: ``(info, thread id)``);
        ``lost(partitions)`` for partitions a fenced commit found owned by another member. Returns whether
        to try again later (ZooKeeper or the offset storage failed)."""
        with self._lock:
            pending = self._pending
        if pending is None and not self._claimed:
            return False
        try:
            fresh = self._read_request()
        except (KazooException, ZkConsumerError) as exc:
            log.warning("cannot read the seek request, will retry: %r", exc)
            return True
        claimed, self._claimed = self._claimed, {}
        if fresh is None:
            self._applied, self._applied_id = {}, None
            return False
        request, acked = fresh
        if request.id != self._applied_id:
            self._applied, self._applied_id = {}, request.id
        mine = {(info.topic, info.partition): (info, owner) for info, owner in owned}
        todo = {tp: mine[tp] for tp in sorted(request.offsets) if tp in mine and tp not in acked}
        for tp, (request_id, target) in claimed.items():
            if request_id == request.id and tp in todo and todo[tp][0].started_at == target:
                self._applied[tp] = todo[tp][0]  # started from the target when claimed
        move = {tp: info for tp, (info, _) in todo.items() if self._applied.get(tp) is not info}
        if move:
            self._pauses.reposition(list(move.values()), lambda: self._move(move, request))
            self._applied.update(move)
            log.info("seek %s: moved %s", request.id,
                     ", ".join(f"{t}-{p} to {request.offsets[(t, p)]}" for t, p in sorted(move)))
        return self._commit_and_ack(request, todo, lost)

    def _move(self, move: Mapping[TopicPartition, PartitionTopicInfo], request: seek_nodes.SeekRequest) -> None:
        """Step 2: both positions to the target, under the committer's lock (no commit in flight; the next
        one reads the target)."""
        with self._committer.no_commit_in_flight():
            for tp, info in move.items():
                if self._processed is not None:
                    self._processed.restart(info)  # first: it remembers how far the old position went
                info.reset_offsets(request.offsets[tp])

    def _commit_and_ack(self, request: seek_nodes.SeekRequest, todo: Mapping[TopicPartition, Tuple[
            PartitionTopicInfo, str]], lost: Callable[[List[TopicPartition]], None]) -> bool:
        if not todo:
            return False
        for tp in todo:
            self._committer.forget(*tp)  # write it even if this member believes the storage holds it
        try:
            fenced = self._committer.commit(list(todo.values()))
        except ZkConsumerError as exc:
            fenced = list(getattr(exc, "fenced", None) or [])
            if fenced:
                lost(fenced)
            log.warning("seek %s: committing the targets failed, will retry: %r", request.id, exc)
            return True
        if fenced:
            lost(fenced)
        retry = False
        for tp, (_info, owner) in todo.items():
            if tp in fenced:
                continue
            try:
                self._client.create(f"{self._path}/{seek_nodes.ack_name(request.id, tp)}",
                                    seek_nodes.encode_ack(owner, request.offsets[tp]), acl=self._acl)
            except (NodeExistsError, NoNodeError):
                pass  # acknowledged already, or the request is over
            except (KazooException, ZkConsumerError) as exc:
                log.warning("seek %s: cannot acknowledge %s-%d, will retry: %r", request.id, tp[0], tp[1], exc)
                retry = True
        return retry

    def _read_request(self) -> Optional[Tuple[seek_nodes.SeekRequest, Set[TopicPartition]]]:
        """The request in ZooKeeper now and the partitions it has acknowledged; ``None``: no request."""
        try:
            data, _ = self._client.get(self._path)
            names = self._client.get_children(self._path)
        except NoNodeError:
            return None
        try:
            request = seek_nodes.decode_request(self._path, data)
        except MalformedZnodeError as exc:
            log.warning("ignoring the seek request: %s", exc)
            return None
        return request, _acked(request.id, names)


def _request_changed(_previous: Value, current: Value) -> Optional[str]:
    return None if current is None else "live seek request written"


def _acked(request_id: str, names: Iterable[str]) -> Set[TopicPartition]:
    found: Set[TopicPartition] = set()
    for name in names:
        parsed = seek_nodes.parse_ack_name(name)
        if parsed is not None and parsed[0] == request_id:
            found.add(parsed[1])
    return found
