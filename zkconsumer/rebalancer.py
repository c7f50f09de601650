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

import enum
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Protocol, Set, Tuple

from kazoo.exceptions import KazooException

from . import assignors
from .errors import ConsumerRebalanceFailedError, UnsupportedPatternError, ZkConsumerError
from .zookeeper.group import GroupClient
from .offsets import OffsetCommitter
from .fetch.partition_info import ChunkQueue, PartitionTopicInfo
from .stream import KafkaStream, clear_streams, revoke_partitions
from .topic_count import TopicCount, consumers_per_topic, topic_count_from_registration

log = logging.getLogger(__name__)

TopicPartition = Tuple[str, int]

#: Offset of a partition whose position ``auto.offset.reset`` must decide.
INVALID_OFFSET = -1

#: The shortest wait between attempts and on a conflicting claim, whatever
#: ``rebalance.backoff.ms`` says (0 would spin on ZooKeeper at full CPU).
MIN_BACKOFF_S = 0.1

#: Attempts in a row that may be skipped because a new event arrived before they acted;
#: then one acts anyway, so a member never waits forever on a group that never calms down.
MAX_EARLY_SUPERSEDES = 5

#: Before acting on an event, wait until no other came for this long (a burst of joins is
#: one rebalance), but never longer than :data:`QUIET_MAX_S` in all.
QUIET_S = 0.1
QUIET_MAX_S = 1.0


class RebalanceState(enum.Enum):
    STARTING = "starting"
    REBALANCING = "rebalancing"
    STABLE = "stable"
    RETRYING = "retrying"
    DISCONNECTED = "disconnected"
    STOPPED = "stopped"


@dataclass(frozen=True)
class RebalanceStatus:
    """A snapshot of the rebalancer, for monitoring (``connector.status``).

    ``gave_up`` is true once ``rebalance.max.retries`` attempts in a row failed
    (where Kafka's consumer throws ``ConsumerRebalanceFailedException``);
    ``error`` then holds that :class:`~zkconsumer.errors.ConsumerRebalanceFailedError`
    (naming the last failure). The member keeps retrying on a longer backoff
    and both are cleared by the next successful rebalance.
    """

    state: RebalanceState
    owned: Mapping[TopicPartition, str]
    rebalances: int
    failed_attempts: int
    last_error: Optional[str]
    last_duration_s: Optional[float]
    gave_up: bool = False
    error: Optional[ConsumerRebalanceFailedError] = None

    def as_metrics(self) -> Dict[str, Any]:
        """The JSON-ready ``rebalance`` section of ``metrics_snapshot()``.

        >>> RebalanceStatus(RebalanceState.STABLE, {}, 1, 0, None, 0.1).as_metrics()["state"]
        'stable'
        """
        return {
            "state": self.state.value,
            "failed_attempts": self.failed_attempts,
            "last_error": self.last_error,
            "gave_up": self.gave_up,
            "error": None if self.error is None else f"{type(self.error).__name__}: {self.error}",
        }


class ConsumerRebalanceListener(Protocol):
    """Hooks called by the rebalancer thread (Kafka's ``ConsumerRebalanceListener``)."""

    def before_releasing_partitions(self, partitions: Mapping[str, Set[int]]) -> None:
        """Called with the partitions that move, once they stopped being delivered and offsets were committed.

        Called before their owner nodes are released. Partitions this member
        keeps are not included (they keep flowing); unlike Kafka's consumer,
        which releases everything at every rebalance.
        """

    def before_starting_fetchers(self, consumer_id: str, assignment: Mapping[str, Mapping[int, str]]) -> None:
        """Called with the group's whole new assignment (topic → partition → thread id)."""


class FetcherControl(Protocol):
    def start_connections(self, infos: Iterable[PartitionTopicInfo]) -> None: ...

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None: ...

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


class _Flag:
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
        on_attempt_failed: Optional[Callable[[], None]] = None,
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
        self._backoff_s = max(MIN_BACKOFF_S, backoff_ms / 1000.0)
        self._exclude_internal = exclude_internal_topics
        self._register = register
        self._watch_topics = watch_topics
        self._on_failure = on_failure
        self._listener = listener
        self._on_rebalanced = on_rebalanced
        self._on_attempt_failed = on_attempt_failed  # called on this thread after each failed attempt (metrics)
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
        # Owner nodes this session may hold (a superset of _owned): released when not assigned to us.
        self._nodes: Dict[TopicPartition, str] = {}
        # Consumed offsets of partitions moving between our own streams, to resume from.
        self._carried: Dict[TopicPartition, int] = {}
        self._fetching = False
        self._rebalances = 0
        self._failed_attempts = 0
        self._last_error: Optional[str] = None
        self._last_duration: Optional[float] = None
        self._gave_up: Optional[ConsumerRebalanceFailedError] = None
        self._refused_patterns: Set[Tuple[str, str]] = set()
        self._early_supersedes = 0  # attempts in a row skipped because a new event came before acting

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
                gave_up=self._gave_up is not None,
                error=self._gave_up,
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
                    self._rebalance_until_done(signals.reasons + self._settle_burst())
        except BaseException as exc:  # a bug: surface it to the application
            log.exception("rebalancer thread of %s died", self._consumer_id)
            self._on_failure(exc)
        finally:
            self._first_done.set()

    def _apply_session_signals(self, signals: _Signals) -> bool:
        """Act on lost partitions and session loss/restoration; ``False`` while the session is still lost."""
        if signals.lost and not signals.session_lost:
            really_lost = self._really_lost(signals.lost)
            with self._cond:  # no longer ours: the next attempt must not count them as owned
                for tp in really_lost:
                    self._owned.pop(tp, None)
        if signals.session_lost:
            self._drop_everything("ZooKeeper session lost")
            self._set_state(RebalanceState.DISCONNECTED)
        if signals.session_restored:
            self._needs_register = True
        return not (signals.session_lost and not signals.session_restored)

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

    def _settle_burst(self) -> List[str]:
        """Let a burst of events finish: wait until none came for :data:`QUIET_S`, at most :data:`QUIET_MAX_S`.

        Members starting together register one after another, a few tens of ms
        apart; acting on each would move most partitions once per member (the
        Range assignment reshuffles), where waiting a moment moves them once.
        Returns the reasons of the rebalance requests taken meanwhile. A stop or
        a session signal ends the wait and stays pending.
        """
        reasons: List[str] = []
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
                self._cond.wait(min(QUIET_S, remaining))
                if not self._signals.rebalance and len(reasons) == before:
                    break  # quiet for QUIET_S
        return reasons

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
                outcome = self._attempt()
                if outcome is None:  # superseded by a new event while waiting for a peer: not a failure
                    signals = self._take_signals(timeout=0)
                    if signals.stop or not self._apply_session_signals(signals):
                        return
                    reasons = signals.reasons
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
            if not done and failures + 1 >= self._max_retries:
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
                log.info("%s owns %d partitions after %.3fs", self._consumer_id, len(self._owned), duration)
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
        """``rebalance.backoff.ms`` (at least :data:`MIN_BACKOFF_S`) ± 50%, growing to 4× after the retries run out."""
        factor = min(4.0, 2.0 ** max(0, failures - self._max_retries))
        return self._backoff_s * factor * (0.5 + self._rng.random())

    # ---------------------------------------------------------- one attempt

    def _attempt(self) -> Optional[bool]:
        """One attempt: ``True`` done, ``False`` failed, ``None`` superseded by a new event (not a failure)."""
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
            except UnsupportedPatternError as exc:
                raise self._refuse_pattern(consumer_id, exc) from exc
            except ZkConsumerError as exc:
                log.warning("ignoring member %s: %s", consumer_id, exc)
        consumers_for_topic = consumers_per_topic(counts, all_topics)
        my_topics = list(self._topic_count.consumer_thread_ids(all_topics))
        self._watch_topics(my_topics)  # armed before the read it guards: a later change fires it
        partitions = self._group.partitions_for_topics(my_topics)
        assignment = self._assignor(consumers_for_topic, partitions)
        mine = assignors.owned_by(assignment, self._consumer_id)
        with self._cond:
            stale = self._pending_locked() and self._early_supersedes < MAX_EARLY_SUPERSEDES
        if stale and mine != self._owned:
            # A new event arrived while this view was read: act on the next one instead (no
            # request spent on a stale view; a burst of joins costs one move, not one per join).
            self._early_supersedes += 1
            return None
        self._early_supersedes = 0

        if (mine == self._owned and self._fetching and set(self._nodes) == set(mine)
                and (not self._confirm_owners or self._reclaimed(mine))):
            self._confirm_owners = False
            log.debug("%s: assignment unchanged, nothing to do", self._consumer_id)
            return True
        self._confirm_owners = False  # the full path below claims every assigned partition
        log.info("%s rebalancing: %d partitions assigned to it, %d owned", self._consumer_id, len(mine), len(self._owned))
        self._pause(mine)
        return self._take_ownership(mine, assignment)

    def _reclaimed(self, mine: Mapping[TopicPartition, str]) -> bool:
        """Confirm our owner nodes after our member node had vanished; ``False`` if one is now someone else's.

        A deleted member node usually went with the whole group (``rmr
        /consumers/<g>``): claiming re-creates owner nodes deleted with it and
        confirms those that are still ours, without pausing delivery. If a
        claim raises, the attempt fails and the next one confirms again.
        """
        return all(self._group.claim(tp[0], tp[1], mine[tp]) is None for tp in sorted(mine))

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

    def _pause(self, mine: Mapping[TopicPartition, str]) -> None:
        """Stop delivering the partitions that move, then commit what was handed out.

        A partition moves when it is not assigned to us any more, goes to
        another of our streams, or was found taken from us. Retained partitions
        keep fetching, with their queued chunks. A failed commit is logged and
        the rebalance goes on: unwritten offsets stay pending for the next commit.
        """
        with self._cond:
            moving = [tp for tp in self._registry if mine.get(tp) is None or mine.get(tp) != self._owned.get(tp)]
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
                with self._cond:
                    for tp in lost:
                        self._owned.pop(tp, None)
        moved = {tp: info for tp, info in self._registry.items() if info.revoked}
        for tp, info in moved.items():
            if tp in mine and tp in self._owned and info.consumed_offset >= 0:
                self._carried[tp] = info.consumed_offset  # to another stream of ours: resume where it was
        if self._listener is not None and moved:
            by_topic: Dict[str, Set[int]] = {}
            for topic, partition in moved:
                by_topic.setdefault(topic, set()).add(partition)
            self._listener.before_releasing_partitions(by_topic)
        with self._cond:
            for tp in moved:
                self._registry.pop(tp, None)
                self._owned.pop(tp, None)
            self._fetching = bool(self._registry)

    def _revoke(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching ``tps`` and drop their chunks (queued or being iterated); others flow on."""
        with self._cond:
            infos = [self._registry[tp] for tp in tps if tp in self._registry and not self._registry[tp].revoked]
        if not infos:
            return
        self._fetchers.remove_partitions([(i.topic, i.partition) for i in infos])
        revoke_partitions(self._streams, infos)

    def _take_ownership(self, mine: Mapping[TopicPartition, str],
                        assignment: Mapping[TopicPartition, str]) -> Optional[bool]:
        """Release what moves away, claim what is new, start fetching; ``False`` if claims still conflict.

        ``None`` (*superseded*, not a failure): a new event arrived while waiting
        for a peer to release; what was claimed is installed (it is ours in this
        view) and the caller looks again at once, without backing off.

        ZooKeeper requests: a retained partition costs one read (is the node
        still ours?), one moving between our own streams a read and a
        conditional write (:meth:`GroupClient.relabel`), a released one a read
        and a conditional delete, a new one one create; a conflicting one also
        the read that finds its holder (which sets the watch the wait uses) and
        one create per change of that node.

        On failure, and whatever raises, partitions newly claimed in this
        attempt are released again (or, if ZooKeeper refuses that too, kept in
        the books and released by the next attempt); retained ones keep being
        fetched: one partition stuck with a slow member does not stall the rest.
        """
        for tp in sorted(set(self._nodes) - set(mine)):
            self._group.release(tp[0], tp[1])
            self._drop_node(tp)

        retained = {tp for tp in mine if tp in self._registry and self._owned.get(tp) == mine[tp]}
        claimed: List[TopicPartition] = []  # newly confirmed ours in this attempt, not yet installed
        wakeup = threading.Event()  # a watched conflicting node changed (or, while waiting, a new event)
        flags: Dict[TopicPartition, _Flag] = {}  # conflicting nodes whose holder's read set a watch
        try:
            conflicts: Dict[TopicPartition, str] = {}
            for tp in sorted(mine):
                if tp in retained and self._group.holds(tp[0], tp[1]):
                    continue  # one read confirms it is still ours: one taken behind our back is not kept
                if tp in self._nodes and tp not in retained and self._group.relabel(tp[0], tp[1], mine[tp]):
                    holder: Optional[str] = None  # moved between our own streams: relabelled
                else:
                    flags[tp] = _Flag(wakeup)
                    holder = self._group.claim(tp[0], tp[1], mine[tp], watch=flags[tp].on_event)
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
            superseded = bool(conflicts) and self._wait_and_claim(conflicts, mine, claimed, wakeup, flags)
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
        for tp in claimed:
            try:
                self._group.release(tp[0], tp[1])
            except (KazooException, ZkConsumerError) as exc:
                log.warning("%s: could not release %s-%d after a failed attempt (%s); the next attempt will",
                            self._consumer_id, tp[0], tp[1], exc)
                continue
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
        with self._cond:
            self._registry.update(infos)
            self._owned.update(claimed)
            self._fetching = bool(self._registry)

    def _wait_and_claim(self, conflicts: Dict[TopicPartition, str], mine: Mapping[TopicPartition, str],
                        claimed: List[TopicPartition], wakeup: threading.Event,
                        flags: Dict[TopicPartition, "_Flag"]) -> bool:
        """Retry conflicting claims as their owner nodes are deleted; ``True`` if a new event ended the wait.

        Moves each partition it manages to claim from ``conflicts`` to
        ``claimed`` at once (so a later failure still releases it). A peer
        still releasing is waited for, not failed on: the wait lasts up to
        ``rebalance.backoff.ms`` × ``rebalance.max.retries`` (the time Kafka's
        consumer spends retrying before it gives up; at least
        :data:`MIN_BACKOFF_S`). A new rebalance event ends the wait at once
        (the view is stale) and the method returns ``True``.
        """
        deadline = self._clock() + self._backoff_s * self._max_retries
        # ``flags``: a watch per conflicting node (set by the claim's read), set once it changed;
        # ``wakeup``: any of them changed, or a new event arrived.
        stale_checked: Set[TopicPartition] = set()
        with self._cond:
            self._wakeup = wakeup
        try:
            while conflicts:
                wakeup.clear()
                with self._cond:
                    if self._pending_locked():
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
                        flags[tp] = _Flag(wakeup)
                        self._group.watch_deletion(tp[0], tp[1], flags[tp])  # type: ignore[arg-type]
                changed = [tp for tp in sorted(conflicts) if flags[tp].is_set()]
                if not changed:
                    remaining = deadline - self._clock()
                    if remaining <= 0:
                        break
                    wakeup.wait(remaining)
                    continue
                for tp in changed:
                    flags[tp] = _Flag(wakeup)  # armed again by this claim's read if still held
                    still_held_by = self._group.claim(tp[0], tp[1], mine[tp], watch=flags[tp].on_event)
                    if still_held_by is None:
                        del flags[tp]
                        self._nodes[tp] = mine[tp]
                        claimed.append(tp)
                        del conflicts[tp]
                    else:
                        conflicts[tp] = still_held_by
        finally:
            with self._cond:
                self._wakeup = None
        return False

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
            for info in self._registry.values():
                info.revoked = True
            self._registry = {}
            self._owned = {}
        self._nodes.clear()  # the server deletes a lost session's ephemerals
        self._carried.clear()
