"""Claiming, installing and releasing one member's partitions: the owner-node and fetcher
bookkeeping of one group member (the half of Kafka's ``ZKRebalancerListener`` that acts on
ZooKeeper's owner nodes, the fetchers and the streams).

:class:`Ownership` is built by :class:`~zkconsumer.rebalance.rebalancer.Rebalancer`, which
decides *what* this member should own (the steps of an attempt decide in :mod:`.machine`, which
yields effects); an :class:`Ownership` makes it so, executing every effect but the view's
(:meth:`Ownership.run`). It holds, and is the
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
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from kazoo.exceptions import KazooException

from .. import assignors
from ..consumer.membership import ConsumerRebalanceListener, FetcherControl
from ..consumer.stream import KafkaStream, clear_streams, revoke_partitions
from ..errors import OperationCancelledError, ZkConsumerError
from ..fetch.handoff import ChunkQueue, PartitionTopicInfo
from ..offsets.committer import OffsetCommitter
from ..structs import INVALID_OFFSET, TopicPartition
from ..threads import Runtime
from ..zookeeper.group import GroupClient
from . import effects as fx
from . import machine

log = logging.getLogger("zkconsumer.rebalance.rebalancer")

#: Reads committed offsets (``None``: none committed) of the partitions given.
OffsetReader = Callable[[List[TopicPartition]], Mapping[TopicPartition, Optional[int]]]

#: The errors a step of :mod:`.machine` is sent as expected (it handles some); others it raises on.
EXPECTED = (KazooException, ZkConsumerError)

#: The effects that read or write ZooKeeper for an attempt (the view's, and taking ownership):
#: once the rebalancer is stopping, each fails at once (:class:`OperationCancelledError`) instead of
#: being carried out. Not the commit (the rebalance's commit is the application's data) nor the
#: read of a fenced commit's partitions (it only decides what stops being delivered).
CANCELLED_WHEN_STOPPING = (
    fx.ReadMembers, fx.Register, fx.ReadTopics, fx.WatchTopics, fx.ReadPartitions,
    fx.ReleaseMany, fx.Release, fx.ReleaseStale, fx.ConfirmHeld, fx.Relabel, fx.Claim, fx.ClaimOne,
    fx.WatchDeletion, fx.ReadOffsets,
)


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
    yet (nothing is then ours to commit)?; ``stopping()``, called with ``lock`` held: is the
    rebalancer stopping (shutdown)? Then an attempt under way goes no further in ZooKeeper: each
    of its remaining steps (:data:`CANCELLED_WHEN_STOPPING`), and each one-by-one claim of a
    :class:`~zkconsumer.zookeeper.group.GroupClient` ``claim_many``, fails at once with
    :class:`~zkconsumer.errors.OperationCancelledError`. What it claimed and did not install is
    then neither released nor installed but kept in the books: the shutdown closes the session,
    which deletes those nodes (a release one by one, each retried, could take a session timeout
    per node with ZooKeeper slow, and a shutdown must end within its bound).
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
        stopping: Callable[[], bool] = lambda: False,
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
        self._stopping_locked = stopping

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
        #: This step's watch flags, by partition (see :meth:`run`).
        self._flags: Dict[TopicPartition, ChangeFlag] = {}
        self._handlers = self._effect_handlers()

    # ------------------------------------------------------------- what is owned

    @property
    def owned(self) -> Mapping[TopicPartition, str]:
        """The partitions owned and installed, with their thread ids: the live mapping, for the rebalancer thread."""
        return self._owned

    @property
    def fetching(self) -> bool:
        """Whether partitions were given to the fetchers (rebalancer thread)."""
        return self._fetching

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
        holds (ZooKeeper says) stop counting as owned; the next attempt stops delivering them
        (:func:`.machine.lose`)."""
        self.run(machine.lose(self._consumer_id, list(partitions)))

    # ------------------------------------------------------------- one attempt

    def pause(self, mine: Mapping[TopicPartition, str]) -> None:
        """Stop delivering the partitions that move, then commit what was handed out (:func:`.machine.pause`).

        A partition moves when it is not assigned to us any more, goes to
        another of our streams, or was found taken from us. Retained partitions
        keep fetching, with their queued chunks. A failed commit is logged and
        the rebalance goes on: unwritten offsets stay pending for the next commit.
        """
        self.run(machine.pause(self._consumer_id, mine, self._auto_commit))

    def take_ownership(self, mine: Mapping[TopicPartition, str],
                       assignment: Mapping[TopicPartition, str]) -> Optional[bool]:
        """Release what moves away, claim what is new, start fetching; ``False`` if claims still conflict
        (:func:`.machine.take_ownership` decides; this object carries it out).

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
        return self.run(machine.take_ownership(self._consumer_id, mine, assignment, self._backoff_s,
                                               self._max_retries))

    # ------------------------------------------------------------- the driver

    def run(self, step: machine.Step[machine.T],
            more: Optional[Mapping[type, Callable[[Any], Any]]] = None) -> machine.T:
        """Run a step of :mod:`.machine` to its end, executing its effects here (and those of
        ``more``, by effect type: the rebalancer's view); what it returns or raises."""
        handlers = self._handlers if more is None else {**self._handlers, **more}

        def execute(effect: Any) -> Any:
            if isinstance(effect, CANCELLED_WHEN_STOPPING) and self._stopping():
                raise OperationCancelledError(f"{type(effect).__name__}: the rebalancer is stopping")
            return handlers[type(effect)](effect)

        self._flags = {}
        try:
            return machine.drive(step, execute, EXPECTED)
        finally:
            self._flags = {}

    def _stopping(self) -> bool:
        """Is the rebalancer stopping? Any thread."""
        with self._lock:
            return self._stopping_locked()

    def _effect_handlers(self) -> Dict[type, Callable[[Any], Any]]:
        """What each effect (but the view's) does, here: every call on ZooKeeper, the fetchers, the
        committer, the listener, the clock and the books."""
        group = self._group
        return {
            fx.ReadBooks: lambda e: self._read_books(),
            fx.Revoke: lambda e: self._revoke(e.tps),
            fx.Commit: lambda e: self._committer.commit(self.owned_partitions()),
            fx.Holds: lambda e: group.holds(e.tp[0], e.tp[1]),
            fx.ReadRevoked: lambda e: {tp: info.commit_position for tp, info in self._registry.items() if info.revoked},
            fx.Carry: lambda e: self._carried.update(e.offsets),
            fx.Disown: self._disown,
            fx.Forget: self._forget_all,
            fx.BeforeReleasing: self._before_releasing,
            fx.PartitionsLost: lambda e: self._partitions_lost(e.partitions),
            fx.BeforeStarting: self._before_starting,
            fx.ReadOffsets: lambda e: self._read_offsets(list(e.tps)),
            fx.Install: lambda e: self._install(e.claims, e.committed),
            fx.RecordNodes: self._record_nodes,
            fx.DropNodes: self._drop_nodes,
            # Never while a commit is in flight (see OffsetCommitter.no_commit_in_flight): it may have
            # checked these nodes' versions, which a peer's re-created node would match.
            fx.ReleaseMany: lambda e: self._releasing(group.release_many, list(e.tps)),
            fx.Release: lambda e: self._releasing(group.release, e.tp[0], e.tp[1]),
            fx.ReleaseStale: lambda e: group.release_stale(e.tp[0], e.tp[1], e.thread_id),
            fx.ConfirmHeld: lambda e: group.confirm_held_many(list(e.tps)),
            fx.Relabel: lambda e: group.relabel_many([(tp[0], tp[1], thread_id) for tp, thread_id in e.relabels]),
            fx.KnownHolders: self._known_holders,
            fx.Claim: self._claim_many,
            fx.ClaimOne: lambda e: group.claim(e.tp[0], e.tp[1], e.thread_id),
            fx.WatchDeletion: self._watch_deletion,
            fx.Now: lambda e: self._clock(),
            fx.BeginWait: lambda e: self._set_waiting(True),
            fx.EndWait: lambda e: self._set_waiting(False),
            fx.RearmWait: self._rearm_wait,
            fx.Changed: lambda e: [tp for tp in e.tps if self._flags[tp].is_set()],
            fx.Wait: lambda e: self._wakeup.wait(e.timeout) and None,
            fx.Log: lambda e: log.log(e.level, e.text),
        }

    def _releasing(self, release: Callable[..., None], *args: Any) -> None:
        """``release(*args)`` (owner nodes of this session) with no commit of ours in flight."""
        with self._committer.no_commit_in_flight():
            release(*args)

    def _read_books(self) -> fx.Books:
        with self._lock:
            return fx.Books(delivered=list(self._registry), owned=dict(self._owned), nodes=dict(self._nodes),
                            carried=set(self._carried), fetching=self._fetching)

    def _disown(self, effect: fx.Disown) -> None:
        with self._lock:
            for tp in effect.tps:
                self._owned.pop(tp, None)

    def _forget_all(self, effect: fx.Forget) -> None:
        with self._lock:
            for tp in effect.tps:
                self._registry.pop(tp, None)
                self._owned.pop(tp, None)
            if effect.update_fetching:
                self._fetching = bool(self._registry)

    def _before_releasing(self, effect: fx.BeforeReleasing) -> None:
        if self._listener is not None:
            self._listener.before_releasing_partitions(effect.partitions)

    def _partitions_lost(self, partitions: Mapping[str, Set[int]]) -> None:
        told = getattr(self._listener, "partitions_lost", None)
        if told is not None and partitions:
            told(partitions)

    def _before_starting(self, effect: fx.BeforeStarting) -> None:
        if self._listener is not None:
            self._listener.before_starting_fetchers(effect.consumer_id, effect.assignment)

    def _record_nodes(self, effect: fx.RecordNodes) -> None:
        for tp, thread_id in effect.nodes:
            if effect.overwrite:
                self._nodes[tp] = thread_id
            else:
                self._nodes.setdefault(tp, thread_id)

    def _holder(self, thread_id: str) -> fx.Holder:
        return fx.Holder(thread_id, assignors.is_thread_of(thread_id, self._consumer_id))

    def _known_holders(self, effect: fx.KnownHolders) -> Dict[TopicPartition, fx.Holder]:
        known: Dict[TopicPartition, fx.Holder] = {}
        for tp in effect.tps:
            found = self._known_holder(tp)
            if found is not None:
                known[tp] = self._holder(found[0])
                self._flags[tp] = found[1]
        return known

    def _claim_many(self, effect: fx.Claim) -> List[Optional[fx.Holder]]:
        """Claim at once, each with a fresh flag whose watch the read that finds a holder arms.

        ``look_first``: see :meth:`GroupClient.claim_many`. A partition found held by a peer is
        remembered with its flag (:meth:`_known_holder`); a claimed one is forgotten. Our own
        nodes of an earlier session are not remembered: the wait releases them.
        """
        tps = [tp for tp, _ in effect.claims]
        for tp in tps:
            self._flags[tp] = ChangeFlag(self._wakeup)
        session = self._group.session_id
        holders = self._group.claim_many([(tp[0], tp[1], thread_id, self._flags[tp].on_event)
                                          for tp, thread_id in effect.claims], look_first=effect.look_first,
                                         cancelled=self._stopping)
        same_session = session is not None and session == self._group.session_id
        for tp, holder in zip(tps, holders):
            if holder is None or not same_session or assignors.is_thread_of(holder, self._consumer_id):
                self._held_by_peer.pop(tp, None)
            else:
                self._held_by_peer[tp] = (holder, self._flags[tp], session)
        for tp, holder in zip(tps, holders):
            if holder is None:
                self._flags.pop(tp, None)
        return [None if holder is None else self._holder(holder) for holder in holders]

    def _watch_deletion(self, effect: fx.WatchDeletion) -> None:
        flag = self._flags[effect.tp] = ChangeFlag(self._wakeup)
        self._group.watch_deletion(effect.tp[0], effect.tp[1], flag)  # type: ignore[arg-type]

    def _set_waiting(self, waiting: bool) -> None:
        with self._lock:
            self._waiting = waiting

    def _rearm_wait(self, _effect: fx.RearmWait) -> bool:
        self._wakeup.clear()
        with self._lock:
            return self._new_event()

    def _revoke(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching ``tps`` and drop their chunks (queued or being iterated); others flow on."""
        with self._lock:
            infos = [self._registry[tp] for tp in tps if tp in self._registry and not self._registry[tp].revoked]
        if not infos:
            return
        self._fetchers.remove_partitions([(i.topic, i.partition) for i in infos])
        revoke_partitions(self._streams, infos)

    def _known_holder(self, tp: TopicPartition) -> Optional[Tuple[str, ChangeFlag]]:
        """The peer that held ``tp`` when a claim last met it, if that node has not changed since.

        The read that found the holder set a data watch (its flag): while the
        flag is unset and the session is the same, the node is the very node
        read, so claiming it again would fail. A superseded attempt then makes no
        request (no create, no read) for the partitions it still waits for (a burst
        of joins repeats attempts many times).
        """
        entry = self._held_by_peer.get(tp)
        if entry is None:
            return None
        holder, flag, session = entry
        if flag.is_set() or session is None or session != self._group.session_id:
            del self._held_by_peer[tp]
            return None
        return holder, flag

    def _drop_nodes(self, effect: fx.DropNodes) -> None:
        for tp in effect.tps:
            self._drop_node(tp)

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
            lost, self._registry = sorted(self._registry), {}
            self._owned = {}
        if lost:  # their owner nodes went with the session: nothing since the last commit is committed
            by_topic: Dict[str, Set[int]] = {}
            for topic, partition in lost:
                by_topic.setdefault(topic, set()).add(partition)
            self._partitions_lost(by_topic)
        # ``_nodes`` is kept. The server deletes the lost session's nodes, but an attempt that was
        # under way when the session was lost may have gone on (a retried request) on the *new*
        # session and claimed nodes there: forgetting them would leave them held by this member
        # for good, and the partitions stuck for whoever they are assigned to (found by the
        # simulator, tests/sim seed 201810). The next attempt releases every one of them not in
        # its share (a node that is gone, or not ours, costs a read and is left alone) and
        # relabels or re-claims the others.
        self._carried.clear()
        self._held_by_peer.clear()  # their watches went with the session
