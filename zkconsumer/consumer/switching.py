"""``SwitchingMembership``: a member that moves itself between ZooKeeper and coordinator membership.

The connector's membership (:class:`~.membership.Membership`) is this wrapper around the one that
runs now (``connector.membership`` shows that one). It follows the group's migration node
(:mod:`zkconsumer.zookeeper.migration`, written by ``zkconsumer groups migrate``):

* at :meth:`join`: if the node names a membership, the member joins that one whatever its
  ``group.membership`` says (and logs so);
* while running: a watch on the node (signal only, on kazoo's thread) wakes the switch thread
  (``zkconsumer-switch-<consumer id>``), which re-reads the node then and after every
  reconnection (the watch re-arms itself: :func:`~zkconsumer.zookeeper.migration.watch_intent`;
  it never blocks kazoo's threads); only without a watch does it poll, every :data:`POLL_S`
  seconds. When the node names the other membership, the switch thread hands over in this order:
  the running membership stops (no more rebalances or rejoins); the fetchers stop and every
  queued chunk is dropped (nothing fetched before is handed out afterwards); what was handed out
  is committed (``auto.commit.enable``: under ZooKeeper membership fenced by the owner nodes,
  under the coordinator by the generation); the listener's ``before_releasing_partitions`` runs;
  then a ZooKeeper member deletes its owner nodes and its registration, a coordinator member sends
  LeaveGroup. Then the other membership joins with the same streams: the application's iterators
  never change.

One authority assigns at a time, by two barriers (see the documentation's page *Migration from Kafka's consumer*):

* **to the coordinator**: a coordinator member sends no JoinGroup while any member is
  registered under ``/consumers/<group>/ids`` (its existing precondition). A ZooKeeper member
  deregisters only after it stopped delivering, committed and released its owner nodes. So no
  coordinator member delivers before every ZooKeeper member stopped, and every ZooKeeper
  member's final commit (OffsetCommit, generation -1) reaches the coordinator while the
  coordinator group does not exist yet, the only time it accepts one.
* **back to ZooKeeper**: a member joining ZooKeeper membership while the node says ``zookeeper``
  registers only once the coordinator lists no member of the group (DescribeGroups); a
  coordinator member leaves only after it stopped delivering and committed.

A member whose offsets configuration cannot follow (``offsets.storage`` other than ``kafka``, or
``dual.commit.enabled``: its storage is fenced for one membership only) does not switch: it logs
an error and stays, so the barrier holds the others until it is restarted with
``offsets.storage=kafka``, ``dual.commit.enabled=false``; at :meth:`join` it raises
:class:`~zkconsumer.errors.ConfigurationError` instead.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Dict, List, Mapping, Optional, Set, Tuple

from kazoo.exceptions import KazooException, NoNodeError

from ..errors import ConfigurationError, ConsumerShutdownError, ZkConsumerError, ZooKeeperUnavailableError
from ..structs import TopicPartition
from ..zookeeper import migration
from ..zookeeper.watchers import PathWatch
from .membership import ConnectorParts, Membership, QueueFor, RebalanceStatus, TopicAllowed
from .stream import clear_streams
from .topic_count import TopicCount

__all__ = ["POLL_S", "SwitchingMembership", "registration_refused"]

log = logging.getLogger(__name__)

#: How often the switch thread reads the migration node without a watch event.
POLL_S = 5.0


def registration_refused(member: ConnectorParts,
                         coordinator_members: Optional[Callable[[], List[str]]] = None) -> Optional[str]:
    """Why a ZooKeeper member must not register (again) now: the migration node says ``kafka``, or it says
    ``zookeeper`` (a rollback) while the coordinator (``coordinator_members()``, when given) lists a member.

    A ZooKeeper member whose session expired during a switch would otherwise register again
    after coordinator members joined (they checked ``/ids`` only before joining); one whose session
    expired while it was cut off, and that comes back once a rollback began, would register while
    coordinator members still deliver (found by the simulator: switch schedule seed 8101). Raises
    kazoo's errors, and what ``coordinator_members`` raises when the coordinator cannot tell (the
    registration attempt fails and is retried).
    """
    intent = migration.read_intent(member.group.client, member.config.group_id)
    if intent is not None and intent.to == "kafka":
        return (f"group {member.config.group_id} is migrating to coordinator membership "
                f"({migration.migration_path(member.config.group_id)})")
    if intent is not None and coordinator_members is not None:
        left = coordinator_members()
        if left:
            return (f"group {member.config.group_id} is moving back to ZooKeeper membership and the coordinator "
                    f"still lists {len(left)} member(s): {', '.join(left[:3])}")
    return None


class SwitchingMembership:
    """The connector's membership: the running one (:attr:`current`), switched as the migration node says.

    ``make(kind)`` builds a membership of ``kind`` (``zookeeper`` or ``kafka``) from the same
    :class:`~.membership.ConnectorParts`. ``coordinator_members()`` lists the group's members at the
    coordinator (DescribeGroups; raises when it cannot tell). See the module docstring.
    """

    def __init__(self, member: ConnectorParts, make: Callable[[str], Membership],
                 coordinator_members: Callable[[], List[str]]) -> None:
        self._member = member
        self._make = make
        self._coordinator_members = coordinator_members
        self._lock = threading.Lock()  # _current, _stopping
        self._commit_lock = threading.Lock()  # commits wait while a hand-over commits and releases
        self._current: Membership = make(member.config.group_membership)
        self._stopping = False
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._watch: Optional[PathWatch] = None
        self._joined_with: Optional[Tuple[TopicCount, QueueFor, TopicAllowed]] = None
        self.switches = 0  #: hand-overs completed (for tests and metrics)

    @property
    def current(self) -> Membership:
        """The membership that runs now."""
        with self._lock:
            return self._current

    @property
    def kind(self) -> str:
        """``group.membership`` of the membership that runs now."""
        return self.current.kind

    # ------------------------------------------------------------------ Membership, delegated

    def status(self) -> Optional[RebalanceStatus]:
        return self.current.status()

    def positions(self) -> Dict[TopicPartition, int]:
        return self.current.positions()

    def commit(self, offsets: Optional[Mapping[TopicPartition, int]] = None) -> List[TopicPartition]:
        with self._commit_lock:
            return self.current.commit(offsets)

    def joined(self) -> bool:
        return self.current.joined()

    def leave(self) -> None:
        self.current.leave()

    def uncommitted(self) -> List[Tuple[str, int, int]]:
        return self.current.uncommitted()

    def on_zk_state(self, state: str) -> None:
        self.current.on_zk_state(state)
        if state == "CONNECTED":
            self._wake.set()  # re-read the node: a change while disconnected has no event of its own

    def deliverable(self) -> bool:
        # Every fetch round asks, twice: no lock (reading one reference is atomic; the lock orders writers).
        return self._current.deliverable()

    def describe(self) -> str:
        return self.current.describe()

    # ------------------------------------------------------------------ joining

    def _read_intent(self) -> Optional[migration.Intent]:
        """The migration node, read for a join: kazoo's errors leave as :class:`ConsumerShutdownError`
        once ``shutdown()`` began, else as :class:`ZooKeeperUnavailableError` (nothing joined yet)."""
        try:
            return migration.read_intent(self._member.group.client, self._member.config.group_id)
        except KazooException as exc:
            if self._member.closing.is_set():
                raise ConsumerShutdownError(f"{self._member.consumer_id}: shut down while joining") from exc
            raise ZooKeeperUnavailableError(f"reading {migration.migration_path(self._member.config.group_id)}: "
                                            f"{exc!r}") from exc

    def join(self, count: TopicCount, queue_for: QueueFor, topic_allowed: TopicAllowed) -> None:
        """Join the membership the migration node names (else the configured one); then follow the node."""
        cfg = self._member.config
        intent = self._read_intent()
        if intent is not None and intent.to != self.current.kind:
            self._check_can_follow(intent.to, raise_error=True)
            log.info("%s: group %s is migrating to %s membership (%s): joining through it, whatever "
                     "group.membership=%s says", self._member.consumer_id, cfg.group_id, intent.to,
                     migration.migration_path(cfg.group_id), cfg.group_membership)
            with self._lock:
                self._current = self._make(intent.to)
        self._joined_with = (count, queue_for, topic_allowed)
        if intent is not None and intent.to == "zookeeper" and not self._wait_coordinator_empty():
            self._check_can_follow("kafka", raise_error=True)  # the rollback was reversed meanwhile
            with self._lock:
                self._current = self._make("kafka")
        try:
            self.current.join(count, queue_for, topic_allowed)
        except (ConsumerShutdownError, ConfigurationError):
            raise
        except ZkConsumerError:
            # The node may have been written since it was read (registration refused): follow it.
            now = self._read_intent()
            if now is None or now.to == self.current.kind:
                raise
            self._check_can_follow(now.to, raise_error=True)
            self._abandon(self.current)
            with self._lock:
                self._current = self._make(now.to)
            self._join_retrying(now.to)
        # The watch first (armed before the thread's first read): its first call, at once, is that read's wake-up.
        watch = migration.watch_intent(self._member.zk, cfg.group_id, self._wake.set)
        with self._lock:
            self._watch = watch
            stopping = self._stopping
        if stopping and watch is not None:  # stop() ran meanwhile and saw no watch
            watch.stop()
        with self._member.guard():
            self._thread = threading.Thread(target=self._run, name=f"zkconsumer-switch-{self._member.consumer_id}",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the switch thread (bounded) and whatever membership runs."""
        with self._lock:
            self._stopping = True
            current, watch = self._current, self._watch
        if watch is not None:
            watch.stop()
        self._wake.set()
        current.stop()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(5.0, 2 * self._member.session_timeout_s()))
            if thread.is_alive():
                log.error("%s: the switch thread did not stop", self._member.consumer_id)
        latest = self.current
        if latest is not current:
            latest.stop()

    # ------------------------------------------------------------------ the switch thread

    def _stopped(self) -> bool:
        with self._lock:
            return self._stopping or self._member.closing.is_set()

    def _run(self) -> None:
        failed_to = ""
        while not self._stopped():
            # With the watch set (it is armed again after a reconnection or a new session, and
            # on_zk_state wakes us at every CONNECTED), an idle member sends nothing
            # here: a read every POLL_S would cost a quiet-heartbeat member a request each time.
            self._wake.wait(POLL_S if self._watch is None else None)
            self._wake.clear()
            if self._stopped():
                return
            try:
                intent = migration.read_intent(self._member.group.client, self._member.config.group_id)
            except (KazooException, ZkConsumerError) as exc:
                log.debug("%s: could not read the migration node: %s", self._member.consumer_id, exc)
                continue
            if intent is None or intent.to == self.current.kind:
                continue
            if not self._check_can_follow(intent.to, raise_error=False, quiet=failed_to == intent.to):
                failed_to = intent.to  # said once per intent, not at every poll
                continue
            try:
                self._switch(intent.to)
            except ConsumerShutdownError:
                return
            except BaseException as exc:  # noqa: BLE001 - a bug: surface it on every iterator
                log.exception("%s: switching to %s membership failed", self._member.consumer_id, intent.to)
                self._member.on_failure(exc)
                return

    def _check_can_follow(self, to: str, *, raise_error: bool, quiet: bool = False) -> bool:
        cfg = self._member.config
        if cfg.offsets_storage == "kafka" and not cfg.dual_commit_enabled:
            return True
        why = (f"group {cfg.group_id} is migrating to {to} membership ({migration.migration_path(cfg.group_id)}), "
               "which needs offsets.storage=kafka and dual.commit.enabled=false (steps 1 and 2 of the documentation's "
               "migration page); "
               f"this member has offsets.storage={cfg.offsets_storage}, dual.commit.enabled="
               f"{str(cfg.dual_commit_enabled).lower()}")
        if raise_error:
            raise ConfigurationError("group.membership", why)
        if not quiet:
            log.error("%s: NOT switching: %s. Restart it with those settings; the group waits for it",
                      self._member.consumer_id, why)
        return False

    def _switch(self, to: str) -> None:
        """Hand over from the running membership to ``to`` (see the module docstring)."""
        member, old = self._member, self.current
        assert self._joined_with is not None
        log.info("%s: switching from %s to %s membership", member.consumer_id, old.kind, to)
        with self._commit_lock:
            old.stop()
            member.fetchers.stop_connections()
            clear_streams(member.streams)
            held = sorted(old.positions())
            if member.config.auto_commit_enable:
                self._final_commit(old)
            if held:
                by_topic: Dict[str, Set[int]] = {}
                for topic, partition in held:
                    by_topic.setdefault(topic, set()).add(partition)
                member.listener.before_releasing_partitions(by_topic)
            if old.kind == "zookeeper":
                self._leave_zookeeper()
            else:
                old.leave()
            with self._lock:
                if self._stopping:
                    raise ConsumerShutdownError("shutdown() during a membership switch")
                self._current = self._make(to)
        self._join_retrying(to)
        self.switches += 1
        log.info("%s: now a member through %s membership", member.consumer_id, to)

    def _join_retrying(self, to: str) -> None:
        """Join ``to`` with the streams joined with first; a join that fails (ZooKeeper or the brokers
        away, a registration refused) is stopped and tried again with a new membership after
        ``rebalance.backoff.ms``, of the membership the migration node names then: a switch reversed
        while this one waited (at the rollback barrier, or refused registration because the node says
        ``kafka`` again) is followed, not waited out forever (found by the simulator's switch schedules)."""
        assert self._joined_with is not None
        member = self._member
        while True:
            if to == "zookeeper" and not self._wait_coordinator_empty():
                to = "kafka"
                with self._lock:
                    if self._stopping:
                        raise ConsumerShutdownError("shutdown() during a membership switch")
                    self._current = self._make(to)
            joining = self.current
            try:
                joining.join(*self._joined_with)
                return
            except (ConsumerShutdownError, ConfigurationError):
                raise
            except (ZkConsumerError, KazooException) as exc:
                log.warning("%s: joining %s membership failed (%s); trying again", member.consumer_id, to, exc)
                self._abandon(joining)
            if member.closing.wait(member.config.rebalance_backoff_ms / 1000.0) or self._stopped():
                raise ConsumerShutdownError("shutdown() during a membership switch")
            to = self._still_intended(to)
            with self._lock:
                if self._stopping:
                    raise ConsumerShutdownError("shutdown() during a membership switch")
                self._current = self._make(to)

    def _abandon(self, failed: Membership) -> None:
        """Stop a membership whose join failed. A ZooKeeper one's registration (and any owner node) of this
        session is deleted: a registration whose answer came too late is there all the same, and left it would
        hold every coordinator member at the barrier for good (found by the simulator: switch schedule seed 104)."""
        failed.stop()
        if failed.kind == "zookeeper":
            self._leave_zookeeper()

    def _final_commit(self, old: Membership) -> None:
        """Commit what was handed out under the stopped membership, retried for a bounded time."""
        member = self._member
        attempts = max(1, member.config.offsets_commit_max_retries + 1)
        for attempt in range(attempts):
            try:
                old.commit()
                return
            except ZkConsumerError as exc:
                if attempt + 1 == attempts or self._stopped():
                    log.warning("%s: final commit before switching failed (%s): the next owner consumes from the "
                                "last committed offset", member.consumer_id, exc)
                    return
                member.closing.wait(member.config.offsets_channel_backoff_ms / 1000.0)

    def _leave_zookeeper(self) -> None:
        """Delete every owner node and the registration of this member's session, retrying while
        ZooKeeper is away (nothing is delivered meanwhile; coordinator members wait for the registration)."""
        member = self._member
        while True:
            try:
                self._delete_our_nodes()
                return
            except (ZkConsumerError, KazooException) as exc:
                log.warning("%s: could not release owner nodes and registration (%s); trying again",
                            member.consumer_id, exc)
            if member.closing.wait(member.config.rebalance_backoff_ms / 1000.0) or self._stopped():
                raise ConsumerShutdownError("shutdown() during a membership switch")

    def _delete_our_nodes(self) -> None:
        group = self._member.group
        group.member_list = None  # the stopped watches can no longer vouch for what they read
        group.topic_data = None
        client = group.client
        session = group.session_id
        base = f"{group.paths.root}/owners"
        ours: List[Tuple[str, int]] = []
        try:
            topics = client.get_children(base)
        except NoNodeError:
            topics = []
        for topic in topics:
            try:
                names = client.get_children(f"{base}/{topic}")
            except NoNodeError:
                continue
            for name in names:
                stat = client.exists(f"{base}/{topic}/{name}")
                if stat is not None and session is not None and stat.ephemeralOwner == session:
                    ours.append((topic, int(name)))
        if ours:
            group.release_many(ours)
        group.deregister()

    def _still_intended(self, to: str) -> str:
        """The membership to join now: what the migration node names if this member can follow it, else ``to``
        (also when the node cannot be read)."""
        try:
            intent = migration.read_intent(self._member.group.client, self._member.config.group_id)
        except (KazooException, ZkConsumerError):
            return to
        if intent is None or intent.to == to or not self._check_can_follow(intent.to, raise_error=False, quiet=True):
            return to
        log.info("%s: group %s is migrating to %s membership again: joining it instead of %s",
                 self._member.consumer_id, self._member.config.group_id, intent.to, to)
        return intent.to

    def _wait_coordinator_empty(self) -> bool:
        """Block until the coordinator lists no member of the group (rollback barrier): ``True``; ``False``
        as soon as the migration node says ``kafka`` again (the caller joins the coordinator instead).
        Raises :class:`ConsumerShutdownError` at shutdown."""
        member = self._member
        backoff = member.config.rebalance_backoff_ms / 1000.0
        said = ""
        while True:
            try:
                if self._still_intended("zookeeper") == "kafka":
                    return False
                left = self._coordinator_members()
                why = f"{len(left)} member(s) still at the coordinator: {', '.join(left[:3])}" if left else ""
            except (ZkConsumerError, KazooException) as exc:
                why = f"cannot ask the coordinator: {exc}"
            if not why:
                return True
            if why != said:
                said = why
                log.info("%s: waiting before joining ZooKeeper membership: %s", member.consumer_id, why)
            if member.closing.wait(backoff) or self._stopped():
                raise ConsumerShutdownError("shutdown() while waiting for the coordinator's members to leave")
