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

One rebalance attempt (compare Kafka's ``ZKRebalancerListener.rebalance``); its steps are
decided by the sans-I/O state machine :func:`zkconsumer.rebalance.machine.attempt`, which
yields effects that this thread executes (the view's here, the others in the ownership):

1. read members, their subscriptions and the partitions of the subscribed
   topics (topic watches are armed *before* the partitions are read, so a
   change in between is not missed). A member whose wildcard pattern has no
   Python equivalent (:class:`~zkconsumer.errors.UnsupportedPatternError`)
   fails the attempt here, loudly, before anything is released or claimed:
   an assignment that ignored it would differ from what Kafka's members compute;
2. compute the group's assignment with the configured pure assignor and take
   this member's share. **If it equals what we own and fetch, stop here**: other
   members joining or leaving does not disturb partitions that stay put;
3. *only for the partitions that move* (away, or to another of our streams):
   remove them from the fetchers and drop their queued chunks and the chunk a
   stream is iterating; retained partitions keep fetching and keep their
   prefetched chunks. Then commit consumed offsets (``auto.commit.enable``; a
   failed commit is logged, its offsets are kept for the next commit, and the
   rebalance goes on, as Kafka's consumer does) and call the listener's
   ``before_releasing_partitions`` with the moving partitions;
4. release the owner nodes of partitions that move away (and of any node this
   session still holds from an earlier failed attempt);
5. claim the newly assigned partitions (a retained one is only confirmed by
   one read). A claim that meets another member's node waits on a watch of
   that node and retries as soon as it is deleted: a peer still releasing is
   waited for, bounded by ``rebalance.backoff.ms`` × ``rebalance.max.retries``
   (what Kafka's consumer spends on failed attempts before giving up). A new
   event ends the wait at once: what was claimed is installed and the next
   attempt starts without backoff; that is not a failed attempt. If claims
   still conflict at the bound, the attempt fails and releases what it claimed;
6. read the committed offsets of newly claimed partitions (after claiming, so
   the previous owner's final commit is seen); retained partitions continue from
   the offset already handed to the application;
7. call ``before_starting_fetchers`` and start fetching the new partitions.

Every owner node created in an attempt ends it either owned and fetched, or
released, whatever raises (a malformed offset node, ZooKeeper going away); a
release that itself fails is retried at the start of the next attempt.

After ``rebalance.max.retries`` failed attempts Kafka gives up and leaves
partitions ownerless until the next ZooKeeper event. Here the rebalancer logs
a warning, reports it (:attr:`RebalanceStatus.gave_up` and
:attr:`RebalanceStatus.error`, a
:class:`~zkconsumer.errors.ConsumerRebalanceFailedError`) and keeps retrying
with jittered, longer backoff so a whole group does not retry in lock-step.
Iterators are not failed by it: the member keeps delivering what it holds.
Waits never drop below :data:`MIN_BACKOFF_S`, so ``rebalance.backoff.ms=0``
does not spin.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

from kazoo.exceptions import KazooException

from .. import assignors
from ..consumer.membership import ConsumerRebalanceListener, FetcherControl, RebalanceState, RebalanceStatus
from ..consumer.stream import KafkaStream
from ..consumer.topic_count import TopicCount, consumers_per_topic, topic_count_from_registration
from ..errors import ConsumerRebalanceFailedError, UnsupportedPatternError, ZkConsumerError
from ..fetch.handoff import ChunkQueue, PartitionTopicInfo
from ..offsets.committer import OffsetCommitter
from ..structs import TopicPartition
from ..threads import THREADS, Runtime, Task
from ..zookeeper.group import GroupClient
from . import decisions as decide
from . import effects as fx
from . import machine
from .ownership import OffsetReader, Ownership

log = logging.getLogger(__name__)

__all__ = ["Rebalancer"]

#: The shortest wait between attempts and on a conflicting claim, whatever
#: ``rebalance.backoff.ms`` says (0 would spin on ZooKeeper at full CPU).
MIN_BACKOFF_S = 0.1

#: Attempts in a row that may be skipped because a new event arrived before they acted;
#: then one acts anyway, so a member never waits forever on a group that never calms down.
MAX_EARLY_SUPERSEDES = 5

#: Within a burst (an event less than :data:`CALM_S` after the previous one), wait before
#: acting until no other came for this long (a burst of joins is one rebalance), but never
#: longer than :data:`QUIET_MAX_S` in all. The first event after a calm is acted on at once.
#: 0.25 s, not less: members started together register about 0.1 s apart on two cores, and
#: each pause long enough to act in moves most of the group's partitions once more (at
#: N=32, ``scripts/bench-rebalance``: 0.1 s gave 3,800 to 6,400 requests for a mass start,
#: 0.25 s 3,000 to 3,700, and an earlier settle).
QUIET_S = 0.25
#: The quiet wait of a member's first assignment, shorter: a lone joiner waits it too, and
#: every member of its group keeps waiting for the partitions it takes over.
FIRST_QUIET_S = 0.1
QUIET_MAX_S = 1.0
CALM_S = 1.0

#: How long a live seek whose step failed (ZooKeeper or the offset storage away) waits before its next try.
SEEK_RETRY_S = 1.0


@dataclass
class _Signals:
    """What arrived since the rebalancer last looked; guarded by ``Rebalancer._cond``."""

    rebalance: bool = False
    reasons: List[str] = field(default_factory=list)
    session_lost: bool = False
    session_restored: bool = False
    stop: bool = False
    lost: Set[TopicPartition] = field(default_factory=set)
    seek: bool = False


class Rebalancer:
    """Runs rebalances for one member on one thread; see the module docstring.

    It decides when to rebalance; what an attempt does is decided by :mod:`.machine`, whose
    view effects (members, registration, topics, partitions, the assignor) it executes; its
    :class:`~.ownership.Ownership` (built here, and only used from here) owns the partitions,
    owner nodes and fetcher state and executes the other effects. The rebalancer keeps the
    signals, the state machine and its counters, the :class:`~.effects.AttemptMemory`
    (registration and supersede bookkeeping) and burst bookkeeping, and the condition
    (lent to the :class:`~.ownership.Ownership`) that guards what other threads read of either.

    ``queue_for(topic, thread_id)`` gives the queue that feeds the stream of
    ``thread_id`` for ``topic``. ``watch_topics(topics)`` is called in each
    attempt *before* those topics' partition maps are read, so a watch the
    caller arms there sees every change the read does not.
    ``read_offsets(partitions)`` reads committed offsets (``None``: none) from
    wherever ``offsets.storage`` keeps them; ZooKeeper's by default.
    ``clock``, ``rng`` and ``runtime`` (its thread, condition and events:
    :mod:`zkconsumer.threads`) are what a deterministic simulation replaces.
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
        on_attempt_failed: Optional[Callable[[], None]] = None,
        read_offsets: Optional[OffsetReader] = None,
        on_seek: Optional[Callable[[], bool]] = None,
        clock: Callable[[], float] = time.monotonic,
        rng: Optional[random.Random] = None,
        runtime: Runtime = THREADS,
    ) -> None:
        self._runtime = runtime
        self._group = group
        self._consumer_id = group.consumer_id
        self._topic_count = topic_count
        self._assignor = assignor
        self._max_retries = max(1, max_retries)
        self._backoff_s = max(MIN_BACKOFF_S, backoff_ms / 1000.0)
        self._exclude_internal = exclude_internal_topics
        self._register = register
        self._watch_topics = watch_topics
        self._on_failure = on_failure
        self._on_rebalanced = on_rebalanced
        self._on_attempt_failed = on_attempt_failed  # called on this thread after each failed attempt (metrics)
        self._clock = clock
        self._rng = rng or random.Random()
        self._on_seek = on_seek  # a live seek, applied on this thread (consumer/seeking.py); True: retry later

        self._cond = runtime.condition()
        self._signals = _Signals()
        self._state = RebalanceState.STARTING
        self._first_done = runtime.event()
        self._ended = runtime.event()  # set when the thread's body returns (or dies)
        self._thread: Optional[Task] = None
        self._ownership = Ownership(
            group=group, fetchers=fetchers, streams=streams, queue_for=queue_for, fetch_size=fetch_size,
            committer=committer, auto_commit=auto_commit,
            read_offsets=read_offsets if read_offsets is not None else group.read_offsets, listener=listener,
            claim_backoff_s=self._backoff_s, claim_retries=self._max_retries, clock=clock, runtime=runtime,
            lock=self._cond, new_event=self._pending_locked, session_lost=self._session_lost_locked,
            stopping=self._stopping_locked,
        )
        self._auto_commit = auto_commit
        #: needs_register, confirm_owners (our member node had vanished: our owner nodes may have gone
        #: with it), early_supersedes (attempts in a row skipped because a new event came before acting)
        self._memory = fx.AttemptMemory()
        self._view = self._view_handlers()
        self._rebalances = 0
        self._failed_attempts = 0
        self._last_error: Optional[str] = None
        self._last_duration: Optional[float] = None
        self._gave_up: Optional[ConsumerRebalanceFailedError] = None
        self._refused_patterns: Set[Tuple[str, str]] = set()
        self._last_event_at: Optional[float] = None  # when the rebalancer last took an event (bursts)

    # --------------------------------------------------------------- signals

    def request(self, reason: str) -> None:
        """Ask for a rebalance. Safe from any thread; never blocks on ZooKeeper."""
        with self._cond:
            self._signals.rebalance = True
            self._signals.reasons.append(reason)
            self._notify()

    def seek_requested(self) -> None:
        """A live seek request arrived: apply it between rebalances (``on_seek``). Any thread; never blocks."""
        with self._cond:
            self._signals.seek = True
            self._cond.notify_all()  # not _notify(): a claim wait under way goes on

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
        """A fenced commit found these partitions owned by someone else: stop delivering them, rebalance.

        Checked again on the rebalancer thread against ZooKeeper: a partition
        whose owner node this session still holds (under any of our thread ids:
        a commit racing a relabel) is kept, not dropped.
        """
        partitions = list(partitions)
        with self._cond:
            self._signals.lost.update(partitions)
            self._signals.rebalance = True
            self._signals.reasons.append("lost ownership of " + ", ".join(f"{t}-{p}" for t, p in sorted(partitions)))
            self._notify()

    def _notify(self) -> None:
        """Wake the thread, wherever it waits; call with ``_cond`` held."""
        self._cond.notify_all()
        self._ownership.interrupt()

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the rebalancer thread and ask for the initial rebalance."""
        self._thread = self._runtime.start(self._run, f"zkconsumer-rebalancer-{self._consumer_id}")
        self.request("initial assignment")

    def wait_first_assignment(self, timeout: Optional[float]) -> bool:
        """Wait until the first rebalance succeeded or exhausted ``rebalance.max.retries``."""
        return self._first_done.wait(timeout)

    def stop(self, timeout: Optional[float] = None) -> bool:
        """Stop the thread and wait for it, at most ``timeout`` seconds (``None``: until it ends).

        Returns whether the thread has ended (``True`` also when it never started, or when called
        from the thread itself). Fetchers and owner nodes are left to the caller.

        An attempt under way ends at its next ZooKeeper step (and between the one-by-one claims
        of a claim): it neither claims, releases nor reads further; owner nodes it created and did
        not install stay for the caller's session close to delete (see :class:`.ownership.Ownership`).
        A step already sent waits for its answer at most until its own deadline, which a
        descheduled thread or a hung server may stretch: a caller with a bound of its own (a
        shutdown) passes ``timeout`` and closes the session, which fails that step at once.
        """
        with self._cond:
            self._signals.stop = True
            self._notify()
        ended = True
        if self._thread is not None and not self._thread.is_current():
            self._thread.join(timeout)
            ended = self._ended.is_set()
        self._set_state(RebalanceState.STOPPED)
        return ended

    def owned_partitions(self) -> List[Tuple[PartitionTopicInfo, str]]:
        """``(partition info, owning thread id)`` of every partition owned now (for commits), a snapshot.

        Any thread. Nothing while a session loss is signalled and not yet acted
        on: the lost session's partitions are not ours to commit, even before the
        rebalancer thread has dropped them (a commit then would be checked
        against the *new* session, which may have re-claimed them since).
        """
        return self._ownership.owned_partitions()

    @property
    def state(self) -> RebalanceState:
        with self._cond:
            return self._state

    @property
    def status(self) -> RebalanceStatus:
        with self._cond:
            return RebalanceStatus(
                state=self._state,
                owned=self._ownership.owned_snapshot(),
                rebalances=self._rebalances,
                failed_attempts=self._failed_attempts,
                last_error=self._last_error,
                last_duration_s=self._last_duration,
                gave_up=self._gave_up is not None,
                error=self._gave_up,
            )

    def _set_state(self, state: RebalanceState) -> None:
        with self._cond:
            self._state = state

    # ------------------------------------------------------------- the thread

    def _run(self) -> None:
        try:
            seek_again = False
            while True:
                signals = self._take_signals(timeout=SEEK_RETRY_S if seek_again else None)
                if signals.stop:
                    return
                if not self._apply_session_signals(signals):
                    continue
                if signals.rebalance:
                    quiet = decide.quiet_wait(self._last_event_at, self._clock(), CALM_S, QUIET_S, FIRST_QUIET_S)
                    reasons = signals.reasons + (self._settle_burst(quiet) if quiet is not None else [])
                    self._last_event_at = self._clock()
                    self._rebalance_until_done(reasons)
                if self._on_seek is not None and (signals.seek or signals.rebalance or seek_again):
                    seek_again = self._on_seek()
        except BaseException as exc:  # a bug: surface it to the application
            log.exception("rebalancer thread of %s died", self._consumer_id)
            self._on_failure(exc)
        finally:
            self._first_done.set()
            self._ended.set()

    def _apply_session_signals(self, signals: _Signals) -> bool:
        """Act on lost partitions and session loss/restoration; ``False`` while the session is still lost."""
        if signals.lost and not signals.session_lost:
            self._ownership.ownership_lost(signals.lost)  # the next attempt must not count them as owned
        if signals.session_lost:
            self._ownership.drop_everything("ZooKeeper session lost")
            self._set_state(RebalanceState.DISCONNECTED)
        if signals.session_restored:
            self._memory.needs_register = True
        return not (signals.session_lost and not signals.session_restored)

    def _settle_burst(self, quiet: Optional[float] = None) -> List[str]:
        """Let a burst of events finish: wait until none came for ``quiet`` s (:data:`QUIET_S` if
        ``None``), at most :data:`QUIET_MAX_S`.

        Called for the first assignment and for an event that came less than
        :data:`CALM_S` after the one before (the first event after a calm is
        acted on at once: a lone join, leave or expiry elsewhere in the group
        costs no wait). Members starting together register one
        after another, a few tens of ms apart; acting on each would move most
        partitions once per member (the Range assignment reshuffles), where
        waiting a moment moves them once.
        Returns the reasons of the rebalance requests taken meanwhile. A stop or
        a session signal ends the wait and stays pending.
        """
        reasons: List[str] = []
        quiet = QUIET_S if quiet is None else quiet
        deadline = self._clock() + QUIET_MAX_S
        with self._cond:
            while True:
                s = self._signals
                if s.stop or s.session_lost or s.session_restored or s.lost:
                    break
                if s.rebalance:
                    reasons.extend(s.reasons)
                    s.rebalance, s.reasons = False, []
                remaining = deadline - self._clock()
                if remaining <= 0:
                    break
                before = len(reasons)
                self._cond.wait(min(quiet, remaining))
                if not self._signals.rebalance and len(reasons) == before:
                    break  # quiet for ``quiet`` s
        return reasons

    def _take_signals(self, timeout: Optional[float]) -> _Signals:
        """Wait up to ``timeout`` for any signal and take all that arrived (coalescing)."""
        with self._cond:
            s = self._signals
            if not (s.rebalance or s.session_lost or s.session_restored or s.stop or s.seek):
                self._cond.wait(timeout)
            taken, self._signals = self._signals, _Signals(stop=self._signals.stop)
            return taken

    def _pending_locked(self) -> bool:
        """Has a new event arrived that makes the current attempt's view stale? Call under ``_cond``."""
        s = self._signals
        return s.rebalance or s.session_lost or s.stop

    def _stopping_locked(self) -> bool:
        """Has :meth:`stop` been called? Call under ``_cond``."""
        return self._signals.stop

    def _session_lost_locked(self) -> bool:
        """Is a session loss signalled and not yet acted on? Call under ``_cond``."""
        return self._signals.session_lost

    def _rebalance_until_done(self, reasons: List[str]) -> None:
        failures = 0
        while True:
            self._set_state(RebalanceState.REBALANCING)
            started = self._clock()
            log.debug("%s rebalancing (%s)", self._consumer_id, "; ".join(dict.fromkeys(reasons)) or "retry")
            try:
                outcome = self._attempt()
                if outcome is None:  # superseded by a new event while waiting for a peer: not a failure
                    signals = self._take_signals(timeout=0)
                    if signals.stop or not self._apply_session_signals(signals):
                        return
                    # Events that come while we act are a burst: let it finish before looking again.
                    reasons = signals.reasons + self._settle_burst()
                    self._last_event_at = self._clock()
                    continue
                done = outcome
                error: Optional[str] = None if done else "could not claim every assigned partition"
            except UnsupportedPatternError as exc:
                done, error = False, f"{type(exc).__name__}: {exc}"  # logged at ERROR by _attempt
            except (KazooException, ZkConsumerError) as exc:
                done, error = False, f"{type(exc).__name__}: {exc}"
                log.info("%s rebalance attempt failed: %s", self._consumer_id, error)
            if not done and error == "could not claim every assigned partition":
                log.info("%s rebalance attempt failed: %s", self._consumer_id, error)
            duration = self._clock() - started
            gave_up: Optional[ConsumerRebalanceFailedError] = None
            if decide.gives_up(done, failures, self._max_retries):
                gave_up = ConsumerRebalanceFailedError(
                    f"{self._consumer_id} can't rebalance after {failures + 1} attempts "
                    f"(rebalance.max.retries={self._max_retries}): {error}; still retrying")
            with self._cond:
                self._last_duration = duration
                if done:
                    self._rebalances += 1
                    self._failed_attempts = 0
                    self._last_error = None
                    self._gave_up = None
                    self._state = RebalanceState.STABLE
                else:
                    failures += 1
                    self._failed_attempts = failures
                    self._last_error = error
                    if gave_up is not None:
                        self._gave_up = gave_up
                    self._state = RebalanceState.RETRYING
            if done:
                self._refused_patterns.clear()
                log.info("%s owns %d partitions after %.3fs", self._consumer_id, len(self._ownership.owned), duration)
                if self._on_rebalanced is not None:
                    self._on_rebalanced(duration)
                self._first_done.set()
                return
            if self._on_attempt_failed is not None:
                self._on_attempt_failed()
            if failures == self._max_retries:
                self._first_done.set()  # do not hold create_message_streams hostage
                log.warning("%s; partitions it cannot claim stay unowned by it", gave_up)
            signals = self._take_signals(timeout=self._jittered_backoff(failures))
            if signals.stop or not self._apply_session_signals(signals):
                return  # stop is kept pending for _run; a lost session waits for restoration
            reasons = signals.reasons

    def _jittered_backoff(self, failures: int) -> float:
        """``rebalance.backoff.ms`` ± 50%, growing to 4× after the retries run out, never below :data:`MIN_BACKOFF_S`."""
        return decide.jittered_backoff(self._backoff_s, failures, self._max_retries, self._rng.random(), MIN_BACKOFF_S)

    # ---------------------------------------------------------- one attempt

    def _attempt(self) -> Optional[bool]:
        """One attempt: ``True`` done, ``False`` failed, ``None`` superseded by a new event (not a failure).

        :func:`.machine.attempt` decides; the view's effects (members, topics, partitions, the
        assignment) are executed here, the others by the :class:`~.ownership.Ownership`.
        """
        return self._ownership.run(
            machine.attempt(self._memory, self._consumer_id, MAX_EARLY_SUPERSEDES, self._backoff_s,
                            self._max_retries, self._auto_commit),
            self._view)

    def _view_handlers(self) -> Dict[type, Callable[[Any], Any]]:
        group = self._group
        return {
            fx.ReadMembers: self._read_members,
            fx.Register: lambda e: self._register(),
            fx.ReadTopics: lambda e: group.all_topics(),
            fx.Subscribe: self._subscribe,
            fx.WatchTopics: lambda e: self._watch_topics(list(e.topics)),
            fx.ReadPartitions: lambda e: group.partitions_for_topics(list(e.topics)),
            fx.Assign: self._assign,
            fx.CheckNewEvent: self._check_new_event,
        }

    def _read_members(self, effect: fx.ReadMembers) -> fx.Members:
        members = self._group.members(fresh=True) if effect.fresh else self._group.members()
        return fx.Members(members, {consumer_id: reg.pattern for consumer_id, reg in members.items()})

    def _subscribe(self, effect: fx.Subscribe) -> fx.Subscriptions:
        all_topics = list(effect.all_topics)
        counts: List[TopicCount] = []
        for consumer_id, registration in effect.members.registrations.items():
            try:
                counts.append(topic_count_from_registration(consumer_id, registration, self._exclude_internal))
            except UnsupportedPatternError as exc:
                raise self._refuse_pattern(consumer_id, exc) from exc
            except ZkConsumerError as exc:
                log.warning("ignoring member %s: %s", consumer_id, exc)
        return fx.Subscriptions(consumers_per_topic(counts, all_topics),
                                tuple(self._topic_count.consumer_thread_ids(all_topics)))

    def _assign(self, effect: fx.Assign) -> fx.Share:
        assignment = self._assignor(effect.consumers_for_topic, effect.partitions)
        return fx.Share(assignment, assignors.owned_by(assignment, self._consumer_id))

    def _check_new_event(self, _effect: fx.CheckNewEvent) -> bool:
        with self._cond:
            return self._pending_locked()

    def _refuse_pattern(self, consumer_id: str, exc: UnsupportedPatternError) -> UnsupportedPatternError:
        """Log (at ERROR, once per member and pattern) that ``consumer_id``'s pattern blocks the rebalance."""
        key = (consumer_id, exc.pattern)
        if key not in self._refused_patterns:
            self._refused_patterns.add(key)
            log.error(
                "%s: group member %s subscribes with the Java regular expression %r, which has no Python "
                "equivalent (%s); refusing to compute an assignment that would differ from Kafka's members': "
                "no partition is claimed or released until it leaves or changes its subscription",
                self._consumer_id, consumer_id, exc.pattern, exc,
            )
        return UnsupportedPatternError(exc.pattern, f"used by group member {consumer_id}; rebalance refused ({exc})")
