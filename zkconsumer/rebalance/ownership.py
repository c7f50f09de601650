"""Claiming, installing and releasing one member's partitions: the owner-node and fetcher
bookkeeping of one group member (the half of Kafka's ``ZKRebalancerListener`` that acts on
ZooKeeper's owner nodes, the fetchers and the streams).

:class:`Ownership` is built by :class:`~zkconsumer.rebalance.rebalancer.Rebalancer`, which
decides *what* this member should own; an :class:`Ownership` makes it so. It holds, and is the
only object that changes, what the member owns:

* ``_registry``: the installed partitions, each with its :class:`PartitionTopicInfo` (what is
  fetched and delivered; Kafka's ``topicRegistry``), and ``_owned``, their owning thread ids;
* ``_nodes``: the owner nodes this session may hold (a superset of ``_owned``);
* ``_carried``: consumed offsets of partitions moving between our own streams, to resume from;
* ``_held_by_peer``: partitions a claim last found held by a peer, whose node has not changed;
* ``_fetching``: whether the fetchers were given partitions;
* ``_wakeup`` and ``_waiting``: the event a claim wait blocks on, and whether one waits.

Threads: every method runs on the rebalancer thread, except :meth:`Ownership.owned_partitions`,
:meth:`Ownership.owned_snapshot` and :meth:`Ownership.interrupt`. Other threads read only under
the lock the rebalancer lends (its condition, which also guards its signals); this object
writes ``_registry``, ``_owned`` and ``_waiting`` only under it. See the rebalancer's module
docstring for the protocol.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from kazoo.exceptions import KazooException

from .. import assignors
from ..consumer.membership import ConsumerRebalanceListener, FetcherControl
from ..consumer.stream import KafkaStream, clear_streams, revoke_partitions
from ..errors import ZkConsumerError
from ..fetch.handoff import ChunkQueue, PartitionTopicInfo
from ..offsets.committer import OffsetCommitter
from ..structs import INVALID_OFFSET, TopicPartition
from ..threads import Runtime
from ..zookeeper.group import GroupClient
from . import decisions as decide

log = logging.getLogger("zkconsumer.rebalance.rebalancer")

#: Reads committed offsets (``None``: none committed) of the partitions given.
OffsetReader = Callable[[List[TopicPartition]], Mapping[TopicPartition, Optional[int]]]


class ChangeFlag:
    """One watched owner node's flag: set when the node changed; also wakes the shared ``wakeup``."""

    def __init__(self, wakeup: threading.Event) -> None:
        self._event = threading.Event()
        self._wakeup = wakeup

    def set(self) -> None:
        self._event.set()
        self._wakeup.set()

    def on_event(self, _event: object) -> None:
        """A ZooKeeper watch callback (kazoo's thread): only signals."""
        self.set()

    def is_set(self) -> bool:
        return self._event.is_set()


class Ownership:
    """Release what moves away, claim what is new (waiting, bounded, for peers still releasing),
    install it for fetching; on a lost session, drop everything without touching ZooKeeper.

    ``group``: the member's ZooKeeper calls (owner nodes; ``consumer_id``, ``session_id``).
    ``fetchers``, ``streams``, ``queue_for(topic, thread_id)`` and ``fetch_size``: where an
    installed partition is fetched to and delivered from. ``committer`` and ``auto_commit``:
    offsets committed before partitions move. ``read_offsets``: committed offsets of newly
    claimed partitions. ``listener``: told before partitions are released and before fetching
    starts. ``claim_backoff_s`` × ``claim_retries`` bounds a wait for a peer still releasing
    (``rebalance.backoff.ms`` and ``rebalance.max.retries``, already floored by the caller);
    ``clock`` measures it and ``runtime`` gives the event it waits on.

    What it borrows from the rebalancer, which owns it: ``lock``, the rebalancer's condition
    (held whenever ``_registry``, ``_owned`` or ``_waiting`` change, and by every reader on
    another thread); ``new_event()``, called with ``lock`` held: has an event arrived that makes
    the current attempt's view stale (ends a claim wait)?; ``session_lost()``, called with
    ``lock`` held: has a session loss been signalled that the rebalancer thread has not acted on
    yet (nothing is then ours to commit)?
    """

    def __init__(
        self,
        *,
        group: GroupClient,
        fetchers: FetcherControl,
        streams: Iterable[KafkaStream],
        queue_for: Callable[[str, str], ChunkQueue],
        fetch_size: int,
        committer: OffsetCommitter,
        auto_commit: bool,
        read_offsets: OffsetReader,
        listener: Optional[ConsumerRebalanceListener],
        claim_backoff_s: float,
        claim_retries: int,
        clock: Callable[[], float],
        runtime: Runtime,
        lock: threading.Condition,
        new_event: Callable[[], bool],
        session_lost: Callable[[], bool],
    ) -> None:
        self._group = group
        self._consumer_id = group.consumer_id
        self._fetchers = fetchers
        self._streams = list(streams)
        self._queue_for = queue_for
        self._fetch_size = fetch_size
        self._committer = committer
        self._auto_commit = auto_commit
        self._read_offsets = read_offsets
        self._listener = listener
        self._backoff_s = claim_backoff_s
        self._max_retries = claim_retries
        self._clock = clock
        self._lock = lock
        self._new_event = new_event
        self._session_lost = session_lost

        self._registry: Dict[TopicPartition, PartitionTopicInfo] = {}
        self._owned: Dict[TopicPartition, str] = {}
        self._nodes: Dict[TopicPartition, str] = {}
        self._carried: Dict[TopicPartition, int] = {}
        #: Partitions last found held by a peer: holder, the flag the finding read's watch sets, session.
        self._held_by_peer: Dict[TopicPartition, Tuple[str, ChangeFlag, Optional[int]]] = {}
        self._fetching = False
        #: Set by every flag (a watched node changed) and, while a claim waits, by :meth:`interrupt`.
        self._wakeup = runtime.event()
        self._waiting = False

    # ------------------------------------------------------------- what is owned

    @property
    def owned(self) -> Mapping[TopicPartition, str]:
        """The partitions owned and installed, with their thread ids: the live mapping, for the rebalancer thread."""
        return self._owned

    @property
    def fetching(self) -> bool:
        """Whether partitions were given to the fetchers (rebalancer thread)."""
        return self._fetching

    def next_step(self, mine: Mapping[TopicPartition, str], confirm_owners: bool) -> decide.Step:
        """What an attempt whose share is ``mine`` must do, given what is owned (:func:`decisions.next_step`)."""
        return decide.next_step(mine, self._owned, self._fetching, set(self._nodes), confirm_owners)

    def owned_partitions(self) -> List[Tuple[PartitionTopicInfo, str]]:
        """``(partition info, owning thread id)`` of every partition owned now (for commits), a snapshot.

        Any thread; the contract of :meth:`Rebalancer.owned_partitions
        <zkconsumer.rebalance.rebalancer.Rebalancer.owned_partitions>`: nothing
        while ``session_lost()`` says a loss is signalled and not yet acted on.
        """
        with self._lock:
            if self._session_lost():
                return []
            return [(info, self._owned[tp]) for tp, info in self._registry.items() if tp in self._owned]

    def owned_snapshot(self) -> Dict[TopicPartition, str]:
        """A copy of :attr:`owned`; any thread."""
        with self._lock:
            return dict(self._owned)

    def interrupt(self) -> None:
        """A new event arrived: end a claim wait under way at once. Any thread; call with ``lock`` held."""
        if self._waiting:
            self._wakeup.set()

    def ownership_lost(self, partitions: Iterable[TopicPartition]) -> None:
        """A fenced commit reported ``partitions`` owned by someone else: those this session no longer
        holds (ZooKeeper says) stop counting as owned; the next attempt stops delivering them."""
        lost = self._really_lost(partitions)
        with self._lock:
            for tp in lost:
                self._owned.pop(tp, None)

    def reclaim(self, mine: Mapping[TopicPartition, str]) -> bool:
        """Confirm our owner nodes after our member node had vanished; ``False`` if one is now someone else's.

        A deleted member node usually went with the whole group (``rmr
        /consumers/<g>``): claiming re-creates owner nodes deleted with it and
        confirms those that are still ours, without pausing delivery. If a
        claim raises, the attempt fails and the next one confirms again.
        """
        return all(self._group.claim(tp[0], tp[1], mine[tp]) is None for tp in sorted(mine))

    def _really_lost(self, partitions: Iterable[TopicPartition]) -> List[TopicPartition]:
        """Those of ``partitions`` whose owner node this session no longer holds (ZooKeeper says).

        A fence can be stale (it compared against an ownership snapshot taken
        before a relabel); never give up a partition we still hold. If
        ZooKeeper cannot tell, count it lost: the next attempt's claim decides.
        """
        lost = []
        for tp in sorted(partitions):
            try:
                held = self._group.holds(tp[0], tp[1])
            except (KazooException, ZkConsumerError) as exc:
                log.info("%s: cannot check ownership of %s-%d (%s); treating it as lost", self._consumer_id,
                         tp[0], tp[1], exc)
                held = False
            if held:
                log.info("%s: %s-%d is still ours (a commit raced a rebalance); keeping it", self._consumer_id, *tp)
            else:
                lost.append(tp)
        return lost

    # ------------------------------------------------------------- one attempt

    def pause(self, mine: Mapping[TopicPartition, str]) -> None:
        """Stop delivering the partitions that move, then commit what was handed out.

        A partition moves when it is not assigned to us any more, goes to
        another of our streams, or was found taken from us. Retained partitions
        keep fetching, with their queued chunks. A failed commit is logged and
        the rebalance goes on: unwritten offsets stay pending for the next commit.
        """
        with self._lock:
            moving = decide.moving(self._registry, mine, self._owned)
        self._revoke(moving)
        if self._auto_commit and self._registry:
            fenced: List[TopicPartition] = []
            try:
                fenced = self._committer.commit(self.owned_partitions())
            except (KazooException, ZkConsumerError) as exc:
                fenced = list(getattr(exc, "fenced", []) or [])
                log.warning("%s: committing offsets before rebalancing failed (%s: %s); going on, they are "
                            "written at the next commit", self._consumer_id, type(exc).__name__, exc)
            if fenced:  # taken over behind our back: not ours to keep delivering or to retain
                lost = self._really_lost(fenced)
                self._revoke(lost)
                with self._lock:
                    for tp in lost:
                        self._owned.pop(tp, None)
        moved = {tp: info for tp, info in self._registry.items() if info.revoked}
        # To another stream of ours: resume where it was.
        self._carried.update(decide.carried({tp: info.consumed_offset for tp, info in moved.items()}, mine, self._owned))
        if self._listener is not None and moved:
            by_topic: Dict[str, Set[int]] = {}
            for topic, partition in moved:
                by_topic.setdefault(topic, set()).add(partition)
            self._listener.before_releasing_partitions(by_topic)
        with self._lock:
            for tp in moved:
                self._registry.pop(tp, None)
                self._owned.pop(tp, None)
            self._fetching = bool(self._registry)

    def _revoke(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching ``tps`` and drop their chunks (queued or being iterated); others flow on."""
        with self._lock:
            infos = [self._registry[tp] for tp in tps if tp in self._registry and not self._registry[tp].revoked]
        if not infos:
            return
        self._fetchers.remove_partitions([(i.topic, i.partition) for i in infos])
        revoke_partitions(self._streams, infos)

    def take_ownership(self, mine: Mapping[TopicPartition, str],
                       assignment: Mapping[TopicPartition, str]) -> Optional[bool]:
        """Release what moves away, claim what is new, start fetching; ``False`` if claims still conflict.

        ``None`` (*superseded*, not a failure): a new event arrived while waiting
        for a peer to release; what was claimed is installed (it is ours in this
        view) and the caller looks again once the burst settled, without backing off.

        ZooKeeper requests: a retained partition costs nothing, or one read
        (is the node still ours?) the first time or after its watch fired
        (:meth:`GroupClient.confirm_held_many`); one moving between our own
        streams a conditional write, after a read unless its version is known
        (:meth:`GroupClient.relabel_many`); a released one likewise a read at most
        (the nodes released together are then deleted by one multi-operation);
        a new one one create; a conflicting one also the read that finds its
        holder (which sets the watch the wait uses) and one create per change
        of that node, but nothing in a later attempt while that node has not
        changed (:meth:`_known_holder`). Claiming several partitions of a topic
        first lists its owner nodes (one request) and reads, instead of
        creating, the nodes listed (a failed create saved per node a peer still
        holds). Releases, claims and offset reads are each sent together
        (pipelined), so an attempt takes a few round trips, not a few per
        partition.

        On failure, and whatever raises, partitions newly claimed in this
        attempt are released again (or, if ZooKeeper refuses that too, kept in
        the books and released by the next attempt); retained ones keep being
        fetched: one partition stuck with a slow member does not stall the rest.
        """
        leaving = decide.leaving(set(self._nodes), mine)
        if leaving:
            self._group.release_many(leaving)
            for tp in leaving:
                self._drop_node(tp)

        retained = decide.retained(mine, set(self._registry), self._owned)
        claimed: List[TopicPartition] = []  # newly confirmed ours in this attempt, not yet installed
        flags: Dict[TopicPartition, ChangeFlag] = {}  # conflicting nodes whose holder's read set a watch
        try:
            conflicts: Dict[TopicPartition, str] = {}
            holders: Dict[TopicPartition, Optional[str]] = {}
            # Still ours: re-read only if its watch fired (one taken behind our back is not kept).
            kept = sorted(retained)
            confirmed = {tp for tp, held in zip(kept, self._group.confirm_held_many(kept)) if held}
            moving = [tp for tp in sorted(mine) if tp in self._nodes and tp not in retained]
            relabelled = {tp for tp, done in zip(moving, self._group.relabel_many(
                [(tp[0], tp[1], mine[tp]) for tp in moving])) if done}
            for tp in sorted(mine):
                if tp in confirmed:
                    continue
                if tp in relabelled:
                    holders[tp] = None  # moved between our own streams: relabelled
                    continue
                known = self._known_holder(tp)
                if known is not None:  # held by a peer, and its node unchanged since: no request
                    holders[tp], flags[tp] = known
                else:
                    flags[tp] = ChangeFlag(self._wakeup)
            holders.update(self._claim_all([tp for tp in sorted(mine) if tp in flags and tp not in holders],
                                           mine, flags, look_first=True))
            for tp, holder in sorted(holders.items()):
                if holder is None:
                    flags.pop(tp, None)
                    self._nodes[tp] = mine[tp]
                    if tp not in retained:
                        claimed.append(tp)
                else:
                    conflicts[tp] = holder
                    if tp in retained:
                        retained.discard(tp)
                        self._revoke([tp])
                        self._forget(tp)
            superseded = bool(conflicts) and self._wait_and_claim(conflicts, mine, claimed, flags)
            if conflicts:
                log.info("%s: partitions still owned by others%s: %s", self._consumer_id,
                         " (a new event came: looking again)" if superseded else "",
                         ", ".join(f"{t}-{p} ({h})" for (t, p), h in sorted(conflicts.items())))
                if not superseded:
                    return False  # the finally clause settles what was claimed

            committed = self._read_offsets([tp for tp in claimed if tp not in self._carried])
            if self._listener is not None:
                by_topic: Dict[str, Dict[int, str]] = {}
                for (topic, partition), thread_id in assignment.items():
                    by_topic.setdefault(topic, {})[partition] = thread_id
                self._listener.before_starting_fetchers(self._consumer_id, by_topic)
            self._install({tp: mine[tp] for tp in claimed}, committed)
            claimed = []
            return None if conflicts else True
        finally:
            if claimed:
                self._abandon(claimed, mine)

    def _known_holder(self, tp: TopicPartition) -> Optional[Tuple[str, ChangeFlag]]:
        """The peer that held ``tp`` when a claim last met it, if that node has not changed since.

        The read that found the holder set a data watch (its flag): while the
        flag is unset and the session is the same, the node is the very node
        read, so claiming it again would fail. A superseded attempt then costs
        nothing for the partitions it still waits for, where it used to cost a
        create and a read each (a burst of joins repeats attempts many times).
        """
        entry = self._held_by_peer.get(tp)
        if entry is None:
            return None
        holder, flag, session = entry
        if flag.is_set() or session is None or session != self._group.session_id:
            del self._held_by_peer[tp]
            return None
        return holder, flag

    def _claim_all(self, tps: List[TopicPartition], mine: Mapping[TopicPartition, str],
                   flags: Mapping[TopicPartition, ChangeFlag], look_first: bool = False
                   ) -> Dict[TopicPartition, Optional[str]]:
        """Claim ``tps`` at once (each read that finds a holder arms its flag's watch): the holders.

        ``look_first``: see :meth:`GroupClient.claim_many` (for an attempt's
        first claims, not for nodes whose deletion a watch just reported).
        A partition found held by a peer is remembered with its flag
        (:meth:`_known_holder`); a claimed one is forgotten. Our own nodes of an
        earlier session are not remembered: the wait releases them.

        If the claims raise part-way, the nodes they may have created are
        released (or kept in the books for the next attempt) before the error
        goes on: no attempt leaves an owner node nobody knows about.
        """
        session = self._group.session_id
        try:
            holders = self._group.claim_many([(tp[0], tp[1], mine[tp], flags[tp].on_event) for tp in tps],
                                             look_first=look_first)
        except BaseException:
            self._release_or_keep([tp for tp in tps if tp not in self._nodes], mine)
            raise
        same_session = session is not None and session == self._group.session_id
        for tp, holder in zip(tps, holders):
            if holder is None or not same_session or assignors.owned_by({tp: holder}, self._consumer_id):
                self._held_by_peer.pop(tp, None)
            else:
                self._held_by_peer[tp] = (holder, flags[tp], session)
        return dict(zip(tps, holders))

    def _release_or_keep(self, tps: List[TopicPartition], mine: Mapping[TopicPartition, str]) -> None:
        """Release each of ``tps`` if this session holds it; never raises.

        At the first release ZooKeeper does not make (away, refusing), that one
        and the rest stay in the books (``_nodes``) untried: each try waits up
        to the retry timeout, and with ZooKeeper away a hundred of them would
        hold the rebalancer for minutes. The next attempt releases what is left
        (releasing a node that is not ours, or gone, does nothing).
        """
        for i, tp in enumerate(tps):
            try:
                self._group.release(tp[0], tp[1])
            except (KazooException, ZkConsumerError) as exc:
                log.warning("%s: could not release %s-%d after a failed attempt (%s); the next attempt releases "
                            "it and %d more", self._consumer_id, tp[0], tp[1], exc, len(tps) - i - 1)
                for rest in tps[i:]:
                    self._nodes.setdefault(rest, mine[rest])
                return
            self._drop_node(tp)

    def _abandon(self, claimed: List[TopicPartition], mine: Mapping[TopicPartition, str]) -> None:
        """Settle the nodes a failed attempt claimed but did not install; never raises.

        A partition that only moved between our own streams stays ours and is
        fetched from where it was (as a retained one is); every other one is
        released. A release ZooKeeper refuses is retried by the next attempt
        (the node stays in ``_nodes``).
        """
        keep = {tp: mine[tp] for tp in claimed if tp in self._carried}
        if keep:
            try:
                self._install(keep, {})
                claimed = [tp for tp in claimed if tp not in keep]
            except (KazooException, ZkConsumerError) as exc:
                log.warning("%s: could not resume %s (%s); releasing them", self._consumer_id,
                            ", ".join(f"{t}-{p}" for t, p in sorted(keep)), exc)
        self._release_or_keep(claimed, mine)

    def _drop_node(self, tp: TopicPartition) -> None:
        """The owner node of ``tp`` is no longer ours (released): forget everything about it."""
        self._nodes.pop(tp, None)
        self._carried.pop(tp, None)
        self._forget(tp)

    def _install(self, claimed: Mapping[TopicPartition, str], committed: Mapping[TopicPartition, Optional[int]]) -> None:
        """Start fetching the newly claimed partitions and add them to the registry.

        Each starts from the offset it had in another of our streams (moved
        between our streams), else from its committed offset (``INVALID_OFFSET``
        if none: the fetcher applies ``auto.offset.reset``). The committer's
        checkpoint is set to the committed offset found, or cleared when none
        was, so the next commit writes whatever the position then is.
        """
        infos: Dict[TopicPartition, PartitionTopicInfo] = {}
        for tp, thread_id in claimed.items():
            carried = self._carried.pop(tp, None)
            if carried is not None:
                offset = carried
            else:
                found = committed.get(tp)
                offset = INVALID_OFFSET if found is None else found
                if found is not None:
                    self._committer.checkpoint(tp[0], tp[1], found)
                else:
                    self._committer.forget(tp[0], tp[1])
            infos[tp] = PartitionTopicInfo(tp[0], tp[1], self._queue_for(tp[0], thread_id), offset, self._fetch_size)
        if infos:
            self._fetchers.start_connections(infos.values())
        with self._lock:
            self._registry.update(infos)
            self._owned.update(claimed)
            self._fetching = bool(self._registry)

    def _wait_and_claim(self, conflicts: Dict[TopicPartition, str], mine: Mapping[TopicPartition, str],
                        claimed: List[TopicPartition], flags: Dict[TopicPartition, ChangeFlag]) -> bool:
        """Retry conflicting claims as their owner nodes are deleted; ``True`` if a new event ended the wait.

        Moves each partition it manages to claim from ``conflicts`` to
        ``claimed`` at once (so a later failure still releases it). A peer
        still releasing is waited for, not failed on: the wait lasts up to
        ``rebalance.backoff.ms`` × ``rebalance.max.retries`` (the time Kafka's
        consumer spends retrying before it gives up; at least the rebalancer's
        :data:`~zkconsumer.rebalance.rebalancer.MIN_BACKOFF_S`). A new rebalance
        event (:meth:`interrupt`) ends the wait at once (the view is stale) and
        the method returns ``True``.
        """
        deadline = decide.claim_deadline(self._clock(), self._backoff_s, self._max_retries)
        # ``flags``: a watch per conflicting node (set by the claim's read), set once it changed;
        # ``_wakeup``: any of them changed, or (while ``_waiting``) a new event arrived.
        stale_checked: Set[TopicPartition] = set()
        wakeup = self._wakeup
        with self._lock:
            self._waiting = True
        try:
            while conflicts:
                wakeup.clear()
                with self._lock:
                    if self._new_event():
                        return True
                # One watch per conflicting node, armed by the claim that met it: a wakeup retries
                # only the nodes that changed, so N conflicts cost O(N) requests, not O(N) per deletion.
                for tp, holder in sorted(conflicts.items()):
                    if tp not in stale_checked and assignors.owned_by({tp: holder}, self._consumer_id):
                        # Our own node from an earlier, expired session (ZOOKEEPER-1740); its
                        # deletion fires the watch.
                        self._group.release_stale(tp[0], tp[1], holder)
                    stale_checked.add(tp)
                    if tp not in flags:
                        flags[tp] = ChangeFlag(wakeup)
                        self._group.watch_deletion(tp[0], tp[1], flags[tp])  # type: ignore[arg-type]
                changed = [tp for tp in sorted(conflicts) if flags[tp].is_set()]
                if not changed:
                    remaining = deadline - self._clock()
                    if remaining <= 0:
                        break
                    wakeup.wait(remaining)
                    continue
                for tp in changed:
                    flags[tp] = ChangeFlag(wakeup)  # armed again by this claim's read if still held
                for tp, still_held_by in self._claim_all(changed, mine, flags).items():
                    if still_held_by is None:
                        del flags[tp]
                        self._nodes[tp] = mine[tp]
                        claimed.append(tp)
                        del conflicts[tp]
                    else:
                        conflicts[tp] = still_held_by
        finally:
            with self._lock:
                self._waiting = False
        return False

    def _forget(self, tp: TopicPartition) -> None:
        with self._lock:
            self._owned.pop(tp, None)
            self._registry.pop(tp, None)

    def drop_everything(self, why: str) -> None:
        """Stop fetching and forget ownership without touching ZooKeeper (the session is gone).

        The owner nodes in the books stay there, to be released or confirmed by the next attempt.
        """
        log.warning("%s: %s; stopping delivery until the group is rejoined", self._consumer_id, why)
        if self._fetching:
            self._fetchers.stop_connections()
            self._fetching = False
        clear_streams(self._streams)
        with self._lock:
            for info in self._registry.values():
                info.revoked = True
            self._registry = {}
            self._owned = {}
        # ``_nodes`` is kept. The server deletes the lost session's nodes, but an attempt that was
        # under way when the session was lost may have gone on (a retried request) on the *new*
        # session and claimed nodes there: forgetting them would leave them held by this member
        # for good, and the partitions stuck for whoever they are assigned to (found by the
        # simulator, tests/sim seed 201810). The next attempt releases every one of them not in
        # its share (a node that is gone, or not ours, costs a read and is left alone) and
        # relabels or re-claims the others.
        self._carried.clear()
        self._held_by_peer.clear()  # their watches went with the session
