"""Membership of a broker-managed group: join, sync, heartbeat, rejoin.

Two threads per member, each with its own connection to the coordinator:

* the **membership thread** (``zkconsumer-coordinator-<consumer id>``) runs the
  state machine below: JoinGroup, the leader's plan, SyncGroup, installing the
  assignment (:meth:`Delivery.assign`), then waiting for a reason to rejoin,
  revoking (:meth:`Delivery.revoke`) and joining again;
* the **heartbeat thread** (``zkconsumer-heartbeat-<consumer id>``) sends a
  Heartbeat every ``heartbeat.interval.ms`` from the moment SyncGroup answered
  until the next revoke, so a slow offset fetch or commit never costs the
  session (Kafka 0.9's consumer heartbeats from ``poll()`` only; KIP-62 moved
  it to a thread in 0.10.1). Its verdicts only *signal* the membership thread.

States (reported as :class:`~zkconsumer.consumer.membership.RebalanceState`)::

    STARTING ─▶ REBALANCING ─JoinGroup─▶ (leader: plan) ─SyncGroup─▶ install ─▶ STABLE
                  ▲    │ failure                                          │
                  │    ▼                                                  │ rejoin signal (below)
                  │  RETRYING: backoff rebalance.backoff.ms ±50%,         │
                  │  growing to 4x after rebalance.max.retries; never     │
                  │  gives up, reports last_error                         │
                  └────────────────────── revoke ◀────────────────────────┘
    any ─stop()─▶ STOPPED;  then leave(): LeaveGroup, the others rebalance at once

Rejoin signals, and whether the revoke may still commit (the generation is
valid while the group prepares to rebalance, not after it moved on):

===================================================  ======  ==========================
signal                                               commit  member id
===================================================  ======  ==========================
Heartbeat REBALANCE_IN_PROGRESS                      yes     kept
leader: subscribed topics or partition counts moved  yes     kept
Heartbeat ILLEGAL_GENERATION                         no      kept
Heartbeat UNKNOWN_MEMBER_ID                          no      forgotten (join as new)
no Heartbeat answered for ``session.timeout.ms``     no      kept (the coordinator says)
a commit fenced by the coordinator                   no      kept
===================================================  ======  ==========================

JoinGroup/SyncGroup outcomes: UNKNOWN_MEMBER_ID forgets the member id and
REBALANCE_IN_PROGRESS/ILLEGAL_GENERATION on SyncGroup rejoin at once;
coordinator errors (moved, not available, loading, connection lost) look the
coordinator up again after the backoff; INCONSISTENT_GROUP_PROTOCOL,
INVALID_SESSION_TIMEOUT, INVALID_GROUP_ID and GROUP_AUTHORIZATION_FAILED are
configuration problems, reported through ``on_failure`` (every stream and
commit then raises them) and end the thread. ``precondition()`` runs before
every JoinGroup; a reason it returns counts as a failed attempt (the connector
uses it to wait until no ZooKeeper-membership member of the group is left).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional, Protocol, Sequence, Tuple, TypeVar, Union

from kazoo.exceptions import KazooException

from ..commits import Generation
from ..consumer.membership import RebalanceState, RebalanceStatus
from ..errors import ConfigurationError, ZkConsumerError
from ..structs import TopicPartition
from ..threads import ShutdownableThread
from ..wire.broker_errors import error_for_code
from ..wire.group_protocol import (
    COORDINATOR_MOVED_CODES,
    GROUP_AUTHORIZATION_FAILED,
    GROUP_LOAD_IN_PROGRESS,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT,
    NO_ERROR,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER,
    UNKNOWN_MEMBER_ID,
    GroupMember,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
    error_name,
)
from ..wire.protocol import Request
from .consumer_protocol import PROTOCOL_TYPE

__all__ = ["JoinSyncLoop", "JoinSyncListener", "Planner"]

log = logging.getLogger(__name__)

R = TypeVar("R")

#: The leader's planner: ``(protocol, members) -> ([(member id, assignment bytes)], still_valid)``;
#: ``still_valid()`` tells whether the inputs the plan was made from are unchanged.
Planner = Callable[[str, Sequence[GroupMember]], Tuple[List[Tuple[str, bytes]], Callable[[], bool]]]
#: This member's share from its SyncGroup bytes: ``(assignment bytes, member id) -> partition -> thread id``;
#: raises a ZkConsumerError for bytes it cannot read.
ShareOf = Callable[[bytes, str], Mapping[TopicPartition, str]]


class Channel(Protocol):
    """What the membership needs of a :class:`~zkconsumer.offsets.channel.CoordinatorChannel`."""

    def send(self, request: Request[R]) -> R: ...

    def invalidate(self, reason: str = "") -> None: ...

    def interrupt(self) -> None: ...

    def close(self) -> None: ...


class JoinSyncListener(Protocol):
    """Installs and revokes assignments (:class:`~zkconsumer.coordinator.delivery.Delivery`)."""

    def assign(self, generation: Generation, share: Mapping[TopicPartition, str]) -> None: ...

    def revoke(self, commit: bool) -> None: ...


@dataclass(frozen=True)
class _Rejoin:
    reason: str
    commit: bool
    forget_member: bool = False


class _Retry(Exception):
    """One join attempt did not end with an assignment; ``at_once`` skips the backoff."""

    def __init__(self, reason: str, at_once: bool = False) -> None:
        super().__init__(reason)
        self.at_once = at_once


_FATAL_JOIN_CODES = {
    INCONSISTENT_GROUP_PROTOCOL: ("partition.assignment.strategy",
                                  "the group's live members support no assignment strategy in common with this "
                                  "member's, or use another protocol type (INCONSISTENT_GROUP_PROTOCOL): give every "
                                  "member a common partition.assignment.strategy (range or roundrobin); Kafka's "
                                  "consumers, kafka-python and confluent-kafka may share the group"),
    INVALID_SESSION_TIMEOUT: ("session.timeout.ms",
                              "the coordinator refused it (INVALID_SESSION_TIMEOUT): it must lie within the brokers' "
                              "group.min.session.timeout.ms and group.max.session.timeout.ms (6000..30000 by default)"),
    INVALID_GROUP_ID: ("group.id", "the coordinator refused it (INVALID_GROUP_ID)"),
}


class JoinSyncLoop:
    """One member of a broker-managed group; see the module docstring.

    ``join_channel`` carries JoinGroup/SyncGroup (its socket timeout must
    exceed the session timeout: the coordinator holds a JoinGroup until the
    group has rejoined); ``heartbeat_channel`` carries Heartbeat and LeaveGroup.
    ``plan`` runs when this member is elected leader; ``share_of`` reads this
    member's share from the SyncGroup answer. ``metadata`` is the JoinGroup
    metadata, or a function giving it before each JoinGroup (a pattern
    subscription lists the topics it matches then). ``on_rebalanced(seconds)``
    is called after each installed assignment.
    """

    def __init__(
        self,
        *,
        group_id: str,
        name: str,
        protocol: str,
        metadata: Union[bytes, Callable[[], bytes]],
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        join_channel: Channel,
        heartbeat_channel: Channel,
        plan: Planner,
        share_of: ShareOf,
        listener: JoinSyncListener,
        precondition: Callable[[], Optional[str]] = lambda: None,
        max_retries: int = 4,
        backoff_ms: int = 2000,
        on_failure: Callable[[BaseException], None] = lambda exc: None,
        on_rebalanced: Optional[Callable[[float], None]] = None,
        clock: Callable[[], float] = time.monotonic,
        rng: Optional[random.Random] = None,
    ) -> None:
        self.group_id = group_id
        self._name = name
        self._protocol = protocol
        self._metadata = metadata
        self._session_ms = session_timeout_ms
        self._session_s = session_timeout_ms / 1000.0
        self._interval_s = heartbeat_interval_ms / 1000.0
        self._join_channel = join_channel
        self._heartbeat_channel = heartbeat_channel
        self._plan = plan
        self._share_of = share_of
        self._listener = listener
        self._precondition = precondition
        self._max_retries = max(1, max_retries)
        self._backoff_s = backoff_ms / 1000.0
        self._on_failure = on_failure
        self._on_rebalanced = on_rebalanced
        self._clock = clock
        self._rng = rng or random.Random()

        self._cond = threading.Condition()
        self._stop = False
        self._rejoin: Optional[_Rejoin] = None
        self._member_id = UNKNOWN_MEMBER_ID
        self._generation: Optional[Generation] = None  # heartbeats go out while set
        self._leader = False
        self._still_valid: Optional[Callable[[], bool]] = None
        self._next_heartbeat = 0.0
        self._last_heartbeat_ok = 0.0
        self._first_done = threading.Event()
        self._threads: List[ShutdownableThread] = []

        self._state = RebalanceState.STARTING
        self._rebalances = 0
        self._failed_attempts = 0
        self._last_error: Optional[str] = None
        self._last_duration: Optional[float] = None

    # ------------------------------------------------------------------ public

    def start(self) -> None:
        """Start the membership and heartbeat threads (the first JoinGroup goes out at once)."""
        self._threads = [
            ShutdownableThread(f"zkconsumer-coordinator-{self._name}", self._guarded(self._run)),
            ShutdownableThread(f"zkconsumer-heartbeat-{self._name}", self._guarded(self._heartbeats)),
        ]
        for thread in self._threads:
            thread.start()

    def wait_first_assignment(self, timeout: Optional[float]) -> bool:
        """Wait until the first assignment is installed, ``rebalance.max.retries`` attempts failed, or the end."""
        return self._first_done.wait(timeout)

    def request_rejoin(self, reason: str, generation: Optional[Generation], commit: bool,
                       forget_member: bool = False) -> None:
        """Ask for a revoke and a rejoin; ignored if ``generation`` is given and no longer current.

        Safe from any thread; never blocks on the network.
        """
        with self._cond:
            if self._stop or (generation is not None and generation != self._generation):
                return
            previous = self._rejoin
            if previous is None:
                self._rejoin = _Rejoin(reason, commit, forget_member)
            else:  # "the generation is over" wins over "may still commit"
                self._rejoin = _Rejoin(previous.reason, previous.commit and commit,
                                       previous.forget_member or forget_member)
            self._cond.notify_all()

    def stop(self) -> None:
        """Stop both threads and join them; a JoinGroup the broker is holding is interrupted.

        Does not leave the group (commit first, then :meth:`leave`).
        """
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._join_channel.interrupt()
        self._heartbeat_channel.interrupt()
        for thread in self._threads:
            thread.stop()  # joined (not when called from that thread); both bodies watch the flag set above
        with self._cond:
            self._state = RebalanceState.STOPPED
            self._generation = None

    def leave(self) -> None:
        """Send LeaveGroup (best effort) and close the connections. Call after :meth:`stop`."""
        member_id = self._member_id
        try:
            if member_id:
                code = self._heartbeat_channel.send(LeaveGroupRequest(self.group_id, member_id)).error_code
                if code:
                    log.info("%s: LeaveGroup answered %s", self._name, error_name(code))
                else:
                    log.info("%s: left group %s", self._name, self.group_id)
        except ZkConsumerError as exc:
            log.info("%s: could not leave group %s (it will expire after session.timeout.ms): %s",
                     self._name, self.group_id, exc)
        finally:
            self._join_channel.close()
            self._heartbeat_channel.close()

    @property
    def member_id(self) -> Optional[str]:
        """The id the coordinator gave this member (``None`` before the first JoinGroup answered)."""
        return self._member_id or None

    @property
    def generation(self) -> Optional[Generation]:
        """The generation whose assignment is installed (or being installed), else ``None``."""
        with self._cond:
            return self._generation

    @property
    def is_leader(self) -> bool:
        with self._cond:
            return self._leader and self._generation is not None

    def status(self, owned: Mapping[TopicPartition, str]) -> RebalanceStatus:
        """A snapshot in the ZooKeeper rebalancer's terms, with ``owned`` as given."""
        with self._cond:
            return RebalanceStatus(self._state, dict(owned), self._rebalances, self._failed_attempts,
                                   self._last_error, self._last_duration)

    # ------------------------------------------------------------------ membership thread

    def _guarded(self, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # a bug or a fatal error: surface it
                if not isinstance(exc, ConfigurationError):
                    log.exception("%s: %s died", self._name, threading.current_thread().name)
                with self._cond:
                    self._last_error = f"{type(exc).__name__}: {exc}"
                self._on_failure(exc)
            finally:
                self._first_done.set()
        return run

    def _run(self) -> None:
        failures = 0
        while not self._stopping():
            started = self._clock()
            self._set_state(RebalanceState.REBALANCING)
            try:
                generation, share = self._join_and_sync()
            except _Retry as retry:
                if self._stopping():
                    return
                failures += 1
                self._failed(failures, str(retry))
                if not retry.at_once:
                    self._pause(self._jittered_backoff(failures))
                continue
            failures = 0
            if not self._install(generation, share, started):
                if self._stopping():
                    return
            rejoin = self._wait_for_rejoin()
            if rejoin is None:
                return
            log.info("%s: rejoining group %s: %s", self._name, self.group_id, rejoin.reason)
            self._listener.revoke(commit=rejoin.commit)
            if rejoin.forget_member:
                self._member_id = UNKNOWN_MEMBER_ID

    def _join_and_sync(self) -> Tuple[Generation, Mapping[TopicPartition, str]]:
        """One JoinGroup (+ plan) + SyncGroup; raises :class:`_Retry` if it did not produce an assignment."""
        self._check_precondition()
        try:
            metadata = self._metadata() if callable(self._metadata) else self._metadata
        except (ZkConsumerError, KazooException) as exc:
            raise _Retry(f"reading the topics this member subscribes to: {exc}") from exc
        join = self._request(self._join_channel, JoinGroupRequest(
            self.group_id, self._session_ms, self._member_id, PROTOCOL_TYPE, ((self._protocol, metadata),)))
        self._check_join_code(join.error_code)
        self._member_id = join.member_id
        generation = Generation(join.generation_id, join.member_id)
        assignments: List[Tuple[str, bytes]] = []
        still_valid: Optional[Callable[[], bool]] = None
        if join.is_leader:
            try:
                assignments, still_valid = self._plan(join.group_protocol, join.members)
            except (ZkConsumerError, KazooException) as exc:
                raise _Retry(f"leader could not plan generation {join.generation_id}: {exc}") from exc
            log.info("%s: leader of group %s generation %d (%d members, protocol %s)", self._name, self.group_id,
                     join.generation_id, len(join.members), join.group_protocol)
        sync = self._request(self._join_channel, SyncGroupRequest(
            self.group_id, generation.generation_id, generation.member_id, assignments))
        code = sync.error_code
        if code == UNKNOWN_MEMBER:
            self._member_id = UNKNOWN_MEMBER_ID
            raise _Retry("SyncGroup: UNKNOWN_MEMBER_ID; joining as a new member", at_once=True)
        if code in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION):
            raise _Retry(f"SyncGroup: {error_name(code)}; the group is rebalancing again", at_once=True)
        if code:
            self._coordinator_error(self._join_channel, code)
            raise _Retry(f"SyncGroup: {error_name(code)}")
        try:
            share = self._share_of(sync.assignment, generation.member_id)
        except ZkConsumerError as exc:
            raise _Retry(str(exc)) from exc
        # Asked again now that the coordinator lists us: a ZooKeeper member asks the coordinator after it
        # registered, so of two members passing their checks at the same moment, at least one sees the other
        # (found by the simulator: switch schedule seed 16850). Nothing is installed; heartbeats do not start,
        # so the coordinator drops this member after the session timeout unless it rejoins first.
        self._check_precondition()
        now = self._clock()
        with self._cond:
            self._generation = generation
            self._leader = join.is_leader
            self._still_valid = still_valid
            self._last_heartbeat_ok = now
            self._next_heartbeat = now + self._interval_s
            self._cond.notify_all()
        return generation, share

    def _check_precondition(self) -> None:
        """Raise :class:`_Retry` with the precondition's reason to wait (or its error)."""
        try:
            waiting = self._precondition()
        except (ZkConsumerError, KazooException) as exc:
            raise _Retry(f"checking that the group may be joined: {exc}") from exc
        if waiting:
            raise _Retry(waiting)

    def _request(self, channel: Channel, request: Request[R]) -> R:
        try:
            return channel.send(request)
        except ZkConsumerError as exc:  # a broker, or ZooKeeper listing the brokers
            raise _Retry(f"{type(request).__name__[:-len('Request')]}: {exc}") from exc

    def _check_join_code(self, code: int) -> None:
        if code == NO_ERROR:
            return
        if code == UNKNOWN_MEMBER:
            self._member_id = UNKNOWN_MEMBER_ID
            raise _Retry("JoinGroup: UNKNOWN_MEMBER_ID; joining as a new member", at_once=True)
        if code in _FATAL_JOIN_CODES:
            prop, message = _FATAL_JOIN_CODES[code]
            raise ConfigurationError(prop, f"group {self.group_id}: {message}")
        if code == GROUP_AUTHORIZATION_FAILED:
            raise error_for_code(code, f"joining group {self.group_id}")
        self._coordinator_error(self._join_channel, code)
        raise _Retry(f"JoinGroup: {error_name(code)}")

    def _coordinator_error(self, channel: Channel, code: int) -> None:
        if code in COORDINATOR_MOVED_CODES:
            channel.invalidate(error_name(code))

    def _install(self, generation: Generation, share: Mapping[TopicPartition, str], started: float) -> bool:
        """Install ``share``, retrying while reading offsets fails; ``False`` if a rejoin or stop came first."""
        failures = 0
        while True:
            try:
                self._listener.assign(generation, share)
                break
            except (ZkConsumerError, KazooException) as exc:
                failures += 1
                self._failed(failures, f"installing generation {generation.generation_id}: {exc}")
                if self._pause(self._jittered_backoff(failures)):
                    return False
        duration = self._clock() - started
        with self._cond:
            self._state = RebalanceState.STABLE
            self._rebalances += 1
            self._failed_attempts = 0
            self._last_error = None
            self._last_duration = duration
        log.info("%s: generation %d of group %s installed after %.3fs (%d partitions)", self._name,
                 generation.generation_id, self.group_id, duration, len(share))
        if self._on_rebalanced is not None:
            self._on_rebalanced(duration)
        self._first_done.set()
        return True

    def _wait_for_rejoin(self) -> Optional[_Rejoin]:
        """Block until a rejoin signal (taken, heartbeats stopped) or stop (``None``).

        A leader checks every heartbeat interval whether its plan's inputs changed.
        """
        next_check = self._clock() + self._interval_s
        while True:
            with self._cond:
                if self._stop:
                    return None
                if self._rejoin is not None:
                    rejoin, self._rejoin = self._rejoin, None
                    self._generation = None
                    self._state = RebalanceState.REBALANCING
                    return rejoin
                still_valid = self._still_valid if self._leader else None
                self._cond.wait(None if still_valid is None else max(0.0, next_check - self._clock()))
            if still_valid is not None and self._clock() >= next_check:
                next_check = self._clock() + self._interval_s
                try:
                    changed = not still_valid()
                except (ZkConsumerError, KazooException) as exc:
                    log.debug("%s: could not check the subscribed topics: %s", self._name, exc)
                    changed = False
                if changed:
                    self.request_rejoin("the subscribed topics or their partitions changed", None, commit=True)

    # ------------------------------------------------------------------ heartbeat thread

    def _heartbeats(self) -> None:
        while True:
            with self._cond:
                while not self._stop and (self._generation is None or self._clock() < self._next_heartbeat):
                    timeout = None if self._generation is None else self._next_heartbeat - self._clock()
                    self._cond.wait(timeout)
                if self._stop:
                    return
                generation = self._generation
            assert generation is not None
            self._beat(generation)

    def _beat(self, generation: Generation) -> None:
        code: Optional[int]
        try:
            code = self._heartbeat_channel.send(
                HeartbeatRequest(self.group_id, generation.generation_id, generation.member_id)).error_code
            failure = error_name(code)
        except ZkConsumerError as exc:
            code, failure = None, str(exc)
        now = self._clock()
        with self._cond:
            if code == NO_ERROR:
                self._last_heartbeat_ok = now
            silent_for = now - self._last_heartbeat_ok
            self._next_heartbeat = now + self._interval_s
        if code == NO_ERROR:
            return
        if code == REBALANCE_IN_PROGRESS:
            self.request_rejoin("the coordinator is rebalancing the group", generation, commit=True)
        elif code == ILLEGAL_GENERATION:
            self.request_rejoin(f"generation {generation.generation_id} is over (ILLEGAL_GENERATION)", generation,
                                commit=False)
        elif code == UNKNOWN_MEMBER:
            self.request_rejoin(f"the coordinator no longer knows member {generation.member_id} (UNKNOWN_MEMBER_ID)",
                                generation, commit=False, forget_member=True)
        else:
            if code is None or code in COORDINATOR_MOVED_CODES:
                self._heartbeat_channel.invalidate(failure)
            if code not in (None, GROUP_LOAD_IN_PROGRESS) and code not in COORDINATOR_MOVED_CODES:
                log.warning("%s: heartbeat answered %s", self._name, failure)
            if silent_for >= self._session_s:
                self.request_rejoin(f"no heartbeat answered for session.timeout.ms ({self._session_ms} ms; last: "
                                    f"{failure}): the coordinator has presumably removed this member",
                                    generation, commit=False)
            else:
                log.info("%s: heartbeat failed (%s); retrying", self._name, failure)

    # ------------------------------------------------------------------ helpers

    def _stopping(self) -> bool:
        with self._cond:
            return self._stop

    def _set_state(self, state: RebalanceState) -> None:
        with self._cond:
            self._state = state

    def _failed(self, failures: int, error: str) -> None:
        log.log(logging.WARNING if failures == self._max_retries else logging.INFO,
                "%s: group %s: attempt %d failed: %s", self._name, self.group_id, failures, error)
        with self._cond:
            self._state = RebalanceState.RETRYING
            self._failed_attempts = failures
            self._last_error = error
        if failures >= self._max_retries:
            self._first_done.set()  # do not hold create_message_streams hostage; keep trying

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds`` unless stopped or asked to rejoin; ``True`` if either happened."""
        deadline = self._clock() + seconds
        with self._cond:
            while not (self._stop or self._rejoin is not None):
                remaining = deadline - self._clock()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def _jittered_backoff(self, failures: int) -> float:
        """``rebalance.backoff.ms`` ± 50%, growing to at most 4x after the retries run out."""
        factor = min(4.0, 2.0 ** max(0, failures - self._max_retries))
        return self._backoff_s * factor * (0.5 + self._rng.random())
