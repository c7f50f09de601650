"""The rebalance state machine and the one thread that runs it.

Watch callbacks (kazoo's thread) and session-state listeners only *signal*:
:meth:`Rebalancer.request`, :meth:`Rebalancer.session_lost` and
:meth:`Rebalancer.session_restored` set flags and return. The rebalancer thread
coalesces whatever arrived into one pass, so a burst of N membership events
costs one rebalance, not N.

States (:class:`RebalanceState`) and transitions::

    STARTING ──request──▶ REBALANCING ──success──▶ STABLE ──request──▶ REBALANCING
                              │   ▲                                        │
                      failure │   │ backoff over or new event              │
                              ▼   │                                        │
                           RETRYING (keeps retrying with jittered backoff; │
                                     never gives up silently)              │
    any ──session_lost──▶ DISCONNECTED ──session_restored──▶ REBALANCING ◀─┘
    any ──stop──▶ STOPPED

One rebalance attempt (compare Kafka's ``ZKRebalancerListener.rebalance``):

1. read members, their subscriptions and the partitions of the subscribed topics;
2. compute the group's assignment with the configured pure assignor and take
   this member's share. **If it equals what we own and fetch, stop here**: other
   members joining or leaving does not disturb partitions that stay put;
3. stop fetchers, clear queues and the chunk each stream is iterating, commit
   consumed offsets (``auto.commit.enable``), call the listener's
   ``before_releasing_partitions``;
4. release only the owner nodes of partitions that move away;
5. claim the newly assigned partitions. A claim that meets another member's
   node waits on a watch of that node and retries as soon as it is deleted,
   bounded by ``rebalance.backoff.ms`` (Kafka sleeps the whole backoff); a new
   event abandons the wait at once. If claims still conflict, the attempt fails
   and releases what it claimed;
6. read the committed offsets of newly claimed partitions (after claiming, so
   the previous owner's final commit is seen); retained partitions continue from
   the offset already handed to the application;
7. call ``before_starting_fetchers`` and start fetching.

After ``rebalance.max.retries`` failed attempts Kafka gives up and leaves
partitions ownerless until the next ZooKeeper event. Here the rebalancer logs
a warning, exposes the state (:attr:`Rebalancer.status`) and keeps retrying
with jittered backoff so a whole group does not retry in lock-step.
"""

from __future__ import annotations

import enum
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Protocol, Set, Tuple

from kazoo.exceptions import KazooException

from . import assignors
from .errors import ZkConsumerError
from .group import GroupClient
from .offsets import OffsetCommitter
from .partition_info import ChunkQueue, PartitionTopicInfo
from .stream import KafkaStream, clear_streams
from .topic_count import TopicCount, consumers_per_topic, topic_count_from_registration

log = logging.getLogger(__name__)

TopicPartition = Tuple[str, int]

#: Offset of a partition whose position ``auto.offset.reset`` must decide.
INVALID_OFFSET = -1


class RebalanceState(enum.Enum):
    STARTING = "starting"
    REBALANCING = "rebalancing"
    STABLE = "stable"
    RETRYING = "retrying"
    DISCONNECTED = "disconnected"
    STOPPED = "stopped"


@dataclass(frozen=True)
class RebalanceStatus:
    """A snapshot of the rebalancer, for monitoring (``connector.status``)."""

    state: RebalanceState
    owned: Mapping[TopicPartition, str]
    rebalances: int
    failed_attempts: int
    last_error: Optional[str]
    last_duration_s: Optional[float]


class ConsumerRebalanceListener(Protocol):
    """Hooks called by the rebalancer thread (Kafka's ``ConsumerRebalanceListener``)."""

    def before_releasing_partitions(self, partitions: Mapping[str, Set[int]]) -> None:
        """Called after fetchers stopped and offsets were committed, before owners are released."""

    def before_starting_fetchers(self, consumer_id: str, assignment: Mapping[str, Mapping[int, str]]) -> None:
        """Called with the group's whole new assignment (topic → partition → thread id)."""


class FetcherControl(Protocol):
    def start_connections(self, infos: Iterable[PartitionTopicInfo]) -> None: ...

    def stop_connections(self) -> None: ...


@dataclass
class _Signals:
    """What arrived since the rebalancer last looked; guarded by ``Rebalancer._cond``."""

    rebalance: bool = False
    reasons: List[str] = field(default_factory=list)
    session_lost: bool = False
    session_restored: bool = False
    stop: bool = False
    lost: Set[TopicPartition] = field(default_factory=set)


class Rebalancer:
    """Runs rebalances for one member on one thread; see the module docstring.

    ``queue_for(topic, thread_id)`` gives the queue that feeds the stream of
    ``thread_id`` for ``topic``. ``watch_topics(topics)`` is called in each
    attempt *before* those topics' partition maps are read, so a watch the
    caller arms there sees every change the read does not.
    ``read_offsets(partitions)`` reads committed offsets (``None``: none) from
    wherever ``offsets.storage`` keeps them; ZooKeeper's by default.
    """

    def __init__(
        self,
        *,
        group: GroupClient,
        topic_count: TopicCount,
        assignor: assignors.Assignor,
        queue_for: Callable[[str, str], ChunkQueue],
        streams: Iterable[KafkaStream],
        fetchers: FetcherControl,
        committer: OffsetCommitter,
        auto_commit: bool,
        fetch_size: int,
        max_retries: int,
        backoff_ms: int,
        exclude_internal_topics: bool,
        register: Callable[[], None],
        watch_topics: Callable[[Iterable[str]], None],
        on_failure: Callable[[BaseException], None],
        listener: Optional[ConsumerRebalanceListener] = None,
        on_rebalanced: Optional[Callable[[float], None]] = None,
        read_offsets: Optional[Callable[[List[TopicPartition]], Mapping[TopicPartition, Optional[int]]]] = None,
        clock: Callable[[], float] = time.monotonic,
        rng: Optional[random.Random] = None,
    ) -> None:
        self._group = group
        self._read_offsets = read_offsets if read_offsets is not None else group.read_offsets
        self._consumer_id = group.consumer_id
        self._topic_count = topic_count
        self._assignor = assignor
        self._queue_for = queue_for
        self._streams = list(streams)
        self._fetchers = fetchers
        self._committer = committer
        self._auto_commit = auto_commit
        self._fetch_size = fetch_size
        self._max_retries = max(1, max_retries)
        self._backoff_s = backoff_ms / 1000.0
        self._exclude_internal = exclude_internal_topics
        self._register = register
        self._watch_topics = watch_topics
        self._on_failure = on_failure
        self._listener = listener
        self._on_rebalanced = on_rebalanced
        self._clock = clock
        self._rng = rng or random.Random()

        self._cond = threading.Condition()
        self._signals = _Signals()
        self._state = RebalanceState.STARTING
        self._first_done = threading.Event()
        self._thread: Optional[threading.Thread] = None
        # Set by any signal while an attempt waits for owner nodes to be deleted.
        self._wakeup: Optional[threading.Event] = None
        self._needs_register = False
        self._confirm_owners = False  # our member node had vanished: our owner nodes may have gone with it

        # Owned by the rebalancer thread (read elsewhere only via snapshots under _cond).
        self._registry: Dict[TopicPartition, PartitionTopicInfo] = {}
        self._owned: Dict[TopicPartition, str] = {}
        self._fetching = False
        self._rebalances = 0
        self._failed_attempts = 0
        self._last_error: Optional[str] = None
        self._last_duration: Optional[float] = None

    # --------------------------------------------------------------- signals

    def request(self, reason: str) -> None:
        """Ask for a rebalance. Safe from any thread; never blocks on ZooKeeper."""
        with self._cond:
            self._signals.rebalance = True
            self._signals.reasons.append(reason)
            self._notify()

    def session_lost(self) -> None:
        """The ZooKeeper session expired: every owner node of ours is gone."""
        with self._cond:
            self._signals.session_lost = True
            self._notify()

    def session_restored(self) -> None:
        """A new ZooKeeper session is up after a loss: re-register, then rebalance."""
        with self._cond:
            self._signals.session_restored = True
            self._signals.rebalance = True
            self._signals.reasons.append("new ZooKeeper session")
            self._notify()

    def ownership_lost(self, partitions: Iterable[TopicPartition]) -> None:
        """A fenced commit found these partitions owned by someone else: stop delivering them, rebalance."""
        with self._cond:
            self._signals.lost.update(partitions)
            self._signals.rebalance = True
            self._signals.reasons.append("lost ownership of " + ", ".join(f"{t}-{p}" for t, p in sorted(partitions)))
            self._notify()

    def _notify(self) -> None:
        """Wake the thread, wherever it waits; call with ``_cond`` held."""
        self._cond.notify_all()
        if self._wakeup is not None:
            self._wakeup.set()

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the rebalancer thread and ask for the initial rebalance."""
        self._thread = threading.Thread(target=self._run, name=f"zkconsumer-rebalancer-{self._consumer_id}", daemon=True)
        self._thread.start()
        self.request("initial assignment")

    def wait_first_assignment(self, timeout: Optional[float]) -> bool:
        """Wait until the first rebalance succeeded or exhausted ``rebalance.max.retries``."""
        return self._first_done.wait(timeout)

    def stop(self) -> None:
        """Stop the thread (joins it). Fetchers and owner nodes are left to the caller."""
        with self._cond:
            self._signals.stop = True
            self._notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._set_state(RebalanceState.STOPPED)

    def owned_partitions(self) -> List[Tuple[PartitionTopicInfo, str]]:
        """``(partition info, owning thread id)`` of every partition owned now (for commits), a snapshot."""
        with self._cond:
            return [(info, self._owned[tp]) for tp, info in self._registry.items() if tp in self._owned]

    @property
    def state(self) -> RebalanceState:
        with self._cond:
            return self._state

    @property
    def status(self) -> RebalanceStatus:
        with self._cond:
            return RebalanceStatus(
                state=self._state,
                owned=dict(self._owned),
                rebalances=self._rebalances,
                failed_attempts=self._failed_attempts,
                last_error=self._last_error,
                last_duration_s=self._last_duration,
            )

    def _set_state(self, state: RebalanceState) -> None:
        with self._cond:
            self._state = state

    # ------------------------------------------------------------- the thread

    def _run(self) -> None:
        try:
            while True:
                signals = self._take_signals(timeout=None)
                if signals.stop:
                    return
                if not self._apply_session_signals(signals):
                    continue
                if signals.rebalance:
                    self._rebalance_until_done(signals.reasons)
        except BaseException as exc:  # a bug: surface it to the application
            log.exception("rebalancer thread of %s died", self._consumer_id)
            self._on_failure(exc)
        finally:
            self._first_done.set()

    def _apply_session_signals(self, signals: _Signals) -> bool:
        """Act on lost partitions and session loss/restoration; ``False`` while the session is still lost."""
        if signals.lost:
            with self._cond:  # no longer ours: the next attempt must not count them as owned
                for tp in signals.lost:
                    self._owned.pop(tp, None)
        if signals.session_lost:
            self._drop_everything("ZooKeeper session lost")
            self._set_state(RebalanceState.DISCONNECTED)
        if signals.session_restored:
            self._needs_register = True
        return not (signals.session_lost and not signals.session_restored)

    def _take_signals(self, timeout: Optional[float]) -> _Signals:
        """Wait up to ``timeout`` for any signal and take all that arrived (coalescing)."""
        with self._cond:
            s = self._signals
            if not (s.rebalance or s.session_lost or s.session_restored or s.stop):
                self._cond.wait(timeout)
            taken, self._signals = self._signals, _Signals(stop=self._signals.stop)
            return taken

    def _pending_locked(self) -> bool:
        """Has a new event arrived that makes the current attempt's view stale? Call under ``_cond``."""
        s = self._signals
        return s.rebalance or s.session_lost or s.stop

    def _rebalance_until_done(self, reasons: List[str]) -> None:
        failures = 0
        while True:
            self._set_state(RebalanceState.REBALANCING)
            started = self._clock()
            log.debug("%s rebalancing (%s)", self._consumer_id, "; ".join(dict.fromkeys(reasons)) or "retry")
            try:
                done = self._attempt()
                error: Optional[str] = None if done else "could not claim every assigned partition"
            except (KazooException, ZkConsumerError) as exc:
                done, error = False, f"{type(exc).__name__}: {exc}"
                log.info("%s rebalance attempt failed: %s", self._consumer_id, error)
            duration = self._clock() - started
            with self._cond:
                self._last_duration = duration
                if done:
                    self._rebalances += 1
                    self._failed_attempts = 0
                    self._last_error = None
                    self._state = RebalanceState.STABLE
                else:
                    failures += 1
                    self._failed_attempts = failures
                    self._last_error = error
                    self._state = RebalanceState.RETRYING
            if done:
                log.info("%s owns %d partitions after %.3fs", self._consumer_id, len(self._owned), duration)
                if self._on_rebalanced is not None:
                    self._on_rebalanced(duration)
                self._first_done.set()
                return
            if failures >= self._max_retries:
                self._first_done.set()  # do not hold create_message_streams hostage
                log.warning(
                    "%s can't rebalance after %d attempts (%s); partitions stay unowned by it, still retrying",
                    self._consumer_id, failures, error,
                )
            signals = self._take_signals(timeout=self._jittered_backoff(failures))
            if signals.stop or not self._apply_session_signals(signals):
                return  # stop is kept pending for _run; a lost session waits for restoration
            reasons = signals.reasons

    def _jittered_backoff(self, failures: int) -> float:
        """``rebalance.backoff.ms`` ± 50%, growing to at most 4× after the retries run out."""
        factor = min(4.0, 2.0 ** max(0, failures - self._max_retries))
        return self._backoff_s * factor * (0.5 + self._rng.random())

    # ---------------------------------------------------------- one attempt

    def _attempt(self) -> bool:
        members = self._group.members()
        if self._needs_register or self._consumer_id not in members:
            # A new session, or our node vanished (deleted by hand, a session race).
            self._register()
            self._needs_register = False
            self._confirm_owners = True
            members = self._group.members()
        need_topics = any(reg.pattern != "static" for reg in members.values())
        all_topics = self._group.all_topics() if need_topics else []

        counts: List[TopicCount] = []
        for consumer_id, registration in members.items():
            try:
                counts.append(topic_count_from_registration(consumer_id, registration, self._exclude_internal))
            except ZkConsumerError as exc:
                log.warning("ignoring member %s: %s", consumer_id, exc)
        consumers_for_topic = consumers_per_topic(counts, all_topics)
        my_topics = list(self._topic_count.consumer_thread_ids(all_topics))
        self._watch_topics(my_topics)  # armed before the read it guards: a later change fires it
        partitions = self._group.partitions_for_topics(my_topics)
        assignment = self._assignor(consumers_for_topic, partitions)
        mine = assignors.owned_by(assignment, self._consumer_id)

        if mine == self._owned and self._fetching and (not self._confirm_owners or self._reclaimed(mine)):
            self._confirm_owners = False
            log.debug("%s: assignment unchanged, nothing to do", self._consumer_id)
            return True
        self._confirm_owners = False  # the full path below claims every assigned partition
        log.info("%s rebalancing: %d partitions assigned to it, %d owned", self._consumer_id, len(mine), len(self._owned))
        self._pause()
        return self._take_ownership(mine, assignment)

    def _reclaimed(self, mine: Mapping[TopicPartition, str]) -> bool:
        """Confirm our owner nodes after our member node had vanished; ``False`` if one is now someone else's.

        A deleted member node usually went with the whole group (``rmr
        /consumers/<g>``): claiming re-creates owner nodes deleted with it and
        confirms those that are still ours, without pausing delivery. If a
        claim raises, the attempt fails and the next one confirms again.
        """
        return all(self._group.claim(tp[0], tp[1], mine[tp]) is None for tp in sorted(mine))

    def _pause(self) -> None:
        """Stop fetching and handing out messages, then commit what was handed out."""
        if self._fetching:
            self._fetchers.stop_connections()
            self._fetching = False
        clear_streams(self._streams)
        if self._auto_commit and self._registry:
            fenced = self._committer.commit(self.owned_partitions())
            with self._cond:  # taken over behind our back: not ours to retain
                for tp in fenced:
                    self._owned.pop(tp, None)
        if self._listener is not None and self._registry:
            by_topic: Dict[str, Set[int]] = {}
            for topic, partition in self._registry:
                by_topic.setdefault(topic, set()).add(partition)
            self._listener.before_releasing_partitions(by_topic)


    def _take_ownership(self, mine: Mapping[TopicPartition, str], assignment: Mapping[TopicPartition, str]) -> bool:
        """Release what moves away, claim what is new, start fetching; ``False`` if claims still conflict.

        On failure, partitions newly claimed in this attempt are released again,
        but the retained ones keep being fetched: one partition stuck with a slow
        member does not stall the rest.
        """
        for tp in sorted(set(self._owned) - set(mine)):
            self._group.release(tp[0], tp[1], self._owned[tp])
            self._forget(tp)

        retained = {tp for tp in mine if tp in self._owned}
        claimed: List[TopicPartition] = []
        conflicts: Dict[TopicPartition, str] = {}
        for tp in sorted(mine):
            # For a retained partition this confirms the node is still ours (and relabels it
            # if its thread changed): one taken behind our back is not silently kept.
            holder = self._group.claim(tp[0], tp[1], mine[tp])
            if holder is None:
                claimed.append(tp)
            else:
                conflicts[tp] = holder
                if tp in retained:
                    retained.discard(tp)
                    self._forget(tp)
        if conflicts:
            claimed.extend(self._wait_and_claim(conflicts, mine))
        if conflicts:
            log.info("%s: partitions still owned by others: %s", self._consumer_id,
                     ", ".join(f"{t}-{p} ({h})" for (t, p), h in sorted(conflicts.items())))
            for tp in claimed:
                if tp not in retained:
                    self._group.release(tp[0], tp[1], mine[tp])
            self._install({tp: mine[tp] for tp in retained if tp not in conflicts}, retained, {})
            return False

        committed = self._read_offsets([tp for tp in mine if tp not in retained])
        if self._listener is not None:
            by_topic: Dict[str, Dict[int, str]] = {}
            for (topic, partition), thread_id in assignment.items():
                by_topic.setdefault(topic, {})[partition] = thread_id
            self._listener.before_starting_fetchers(self._consumer_id, by_topic)
        self._install(mine, retained, committed)
        return True

    def _install(
        self,
        owned: Mapping[TopicPartition, str],
        retained: Set[TopicPartition],
        committed: Mapping[TopicPartition, Optional[int]],
    ) -> None:
        """Make ``owned`` the registry and start fetching it.

        Retained partitions continue from the offset already handed out; the
        others start from their committed offset (``INVALID_OFFSET`` if none:
        the fetcher applies ``auto.offset.reset``).
        """
        registry: Dict[TopicPartition, PartitionTopicInfo] = {}
        for tp, thread_id in owned.items():
            if tp in retained:
                offset = self._registry[tp].consumed_offset
            else:
                found = committed.get(tp)
                offset = INVALID_OFFSET if found is None else found
                if found is not None:
                    self._committer.checkpoint(tp[0], tp[1], found)
            registry[tp] = PartitionTopicInfo(tp[0], tp[1], self._queue_for(tp[0], thread_id), offset, self._fetch_size)
        with self._cond:
            self._registry = registry
            self._owned = dict(owned)
        if registry:
            self._fetchers.start_connections(registry.values())
            self._fetching = True

    def _wait_and_claim(self, conflicts: Dict[TopicPartition, str], mine: Mapping[TopicPartition, str]) -> List[TopicPartition]:
        """Retry conflicting claims as their owner nodes are deleted, until the backoff runs out.

        Removes each partition it manages to claim from ``conflicts`` and returns them.
        A new rebalance event ends the wait at once (the view is stale).
        """
        claimed: List[TopicPartition] = []
        deadline = self._clock() + self._backoff_s
        while conflicts:
            wakeup = threading.Event()
            with self._cond:
                if self._pending_locked():
                    break
                self._wakeup = wakeup
            try:
                for tp, holder in list(conflicts.items()):
                    if assignors.owned_by({tp: holder}, self._consumer_id):
                        # Our own node from an earlier, expired session (ZOOKEEPER-1740).
                        self._group.release_stale(tp[0], tp[1], holder)
                    self._group.watch_deletion(tp[0], tp[1], wakeup)
                remaining = deadline - self._clock()
                if remaining <= 0:
                    break
                wakeup.wait(remaining)
            finally:
                with self._cond:
                    self._wakeup = None
            for tp in sorted(conflicts):
                holder = self._group.claim(tp[0], tp[1], mine[tp])
                if holder is None:
                    claimed.append(tp)
                    del conflicts[tp]
                else:
                    conflicts[tp] = holder
        return claimed

    def _forget(self, tp: TopicPartition) -> None:
        with self._cond:
            self._owned.pop(tp, None)
            self._registry.pop(tp, None)

    def _drop_everything(self, why: str) -> None:
        """Stop fetching and forget ownership without touching ZooKeeper (the session is gone)."""
        log.warning("%s: %s; stopping delivery until the group is rejoined", self._consumer_id, why)
        if self._fetching:
            self._fetchers.stop_connections()
            self._fetching = False
        clear_streams(self._streams)
        with self._cond:
            self._registry = {}
            self._owned = {}
