"""Every ZooKeeper read and write a group member makes, and nothing else.

:class:`GroupClient` owns ``/consumers/<group>/...`` for one member. Every write is
a *repeat-safe* step (running it twice has the effect of running it once) run
through a retry that survives ZooKeeper connection loss within the session, so a
retry after a reply was lost never fails or double-applies:

* claiming an owner node that already holds our thread id under our session is
  a success; releasing one that is already gone is a success;
* registering a member node that already exists under our session is a success;
  one left behind by an *earlier* session of this client (the node outlives its
  session briefly; see ZOOKEEPER-1740) is replaced rather than waited on
  forever. One held by a session this client never had belongs to another
  process given the same ``consumer.id``: it is waited on for one session
  timeout (a crashed process's session expires by then), then registration
  fails with :class:`~zkconsumer.errors.ConsumerIdInUseError` instead of the
  two processes deleting each other's nodes;
* offsets are written with ``set``/``create``, which are idempotent.

Nodes written by other clients are read defensively: a malformed member
registration or topic node is logged (naming the node) and skipped.

Errors: every kazoo call waits at most until the operation's deadline
(:class:`~zkconsumer.zookeeper.zkcalls.BoundedZooKeeper`), so no operation blocks while
ZooKeeper is away. What leaves this module is a
:class:`~zkconsumer.errors.ZkConsumerError`, never a kazoo exception:
connection loss, a timeout, an expired session or a closed client become
:class:`~zkconsumer.errors.ZooKeeperUnavailableError` (retriable), a denied
operation :class:`~zkconsumer.errors.ZooKeeperAccessError` (not retriable).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, TypeVar, cast

import tenacity
from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.protocol.states import ZnodeStat
from tenacity.stop import stop_base

from ..errors import (
    ConsumerIdInUseError,
    MalformedZnodeError,
    ZooKeeperAccessError,
    ZooKeeperSessionExpiredError,
    ZooKeeperUnavailableError,
)
from . import zkformat
from .fence import SessionFences
from .offset_nodes import OffsetNodes
from .zkcalls import BoundedZooKeeper

log = logging.getLogger(__name__)

T = TypeVar("T")
#: Errors after which the same ZooKeeper call may succeed within the same session.
_TRANSIENT = (ConnectionLoss, OperationTimeoutError)
#: Errors after which it cannot on this session/client: reported at once (still retriable later).
_GONE = (SessionExpiredError, ConnectionClosedError)


class _PastDeadline(stop_base):
    """Stops retrying once the calling thread's deadline (set with ``client.deadline``) has passed."""

    def __init__(self, client: BoundedZooKeeper) -> None:
        self._client = client

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        remaining = self._client.remaining()
        return remaining is not None and remaining <= 0.01


class GroupClient(OffsetNodes):
    """ZooKeeper operations of one member (``consumer_id``) of one consumer group.

    ``retry_timeout_s`` bounds how long one operation (one :meth:`_retry`)
    waits, its kazoo calls included, retrying transient connection errors (it
    should not exceed the session timeout: past it, the session is gone
    anyway). ``client`` is used through :class:`~zkconsumer.zookeeper.zkcalls.BoundedZooKeeper`
    (``self.client``; ``self.client.raw`` is the KazooClient). ``sleep`` is
    injectable for tests, and so is ``clock`` (what deadlines and waits are
    measured on). ``id_wait_s`` is how long :meth:`register` waits for a
    member node held by a foreign session to go away (default: ``retry_timeout_s`` + 2 s).
    """

    def __init__(
        self,
        client: KazooClient,
        group: str,
        consumer_id: str,
        *,
        retry_timeout_s: float = 6.0,
        acl: Optional[List[Any]] = None,
        sleep: Callable[[float], None] = time.sleep,
        id_wait_s: Optional[float] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        raw = client.raw if isinstance(client, BoundedZooKeeper) else client
        self._clock = clock
        self.client = BoundedZooKeeper(raw, retry_timeout_s, clock)
        self.group = group
        self.consumer_id = consumer_id
        self.paths = zkformat.GroupPaths(group)
        self._acl = acl
        self._retry_timeout_s = retry_timeout_s
        self._id_wait_s = retry_timeout_s + 2.0 if id_wait_s is None else id_wait_s
        self._sleep = sleep
        #: Every session id this client was seen to hold: nodes of these are ours (or were).
        self._sessions: Set[int] = set()
        self._sessions_lock = threading.Lock()
        # members(): registrations read, and the cversion of the ids node they were read at.
        self._member_cache: Dict[str, Optional[zkformat.Registration]] = {}
        self._ids_cversion: Optional[int] = None
        #: Where members() may take the member list from instead of reading it: the member ids and the
        #: ids node's stat, or None when that source cannot vouch for them now (GroupWatcher.member_list).
        self.member_list: Optional[Callable[[], Optional[Tuple[List[str], ZnodeStat]]]] = None
        #: Where partitions_for_topics() may take a topic's partition map from instead of its own cache:
        #: the map, or None when that source cannot vouch for it now (GroupWatcher.topic_data).
        self.topic_data: Optional[Callable[[str], Optional[bytes]]] = None
        self._broker_cache: Dict[str, bytes] = {}  # brokers(): node data by broker id, as members()
        self._broker_cversion: Optional[int] = None
        self._broker_lock = threading.Lock()
        self._offset_nodes: Set[str] = set()  # offset nodes seen to exist (they are never deleted by members)
        self._offset_parents: Set[str] = set()  # offsets/<topic> nodes ensured
        self._parents_seen: Set[str] = set()  # owners/<topic> nodes ensured (_ensure_parents)
        self._topic_lock = threading.Lock()
        self._connection_epoch = 0  # connection losses seen (connection_lost): a watch read before one is gone
        self._synced_epoch = 0  # the epoch of the last sync answered (_sync_after_reconnection)
        self._topic_cache: Dict[str, Tuple[bytes, threading.Event, Optional[Tuple[int, int]]]] = {}
        self._brokers_fresh: Optional[threading.Event] = None  # the watch of the last read; set once stale
        self._brokers_session: Optional[Tuple[int, int]] = None
        self._confirmed_nodes = {}  # OwnerNodes.confirm_held()
        self.fences = SessionFences(self.client, self.paths, consumer_id, acl)

    # ----------------------------------------------------------------- plumbing

    def _retry(self, step: Callable[[], T]) -> T:
        """Run a repeat-safe ``step``, retrying transient connection errors with jitter.

        Takes at most ``retry_timeout_s`` in all (every kazoo call of the step
        is bounded by the same deadline). Raises only ZkConsumerErrors:
        :class:`ZooKeeperUnavailableError` when ZooKeeper did not answer in time,
        the session expired or the client was closed; :class:`ZooKeeperAccessError`
        when an operation was denied.
        """
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(_TRANSIENT),
            wait=tenacity.wait_random_exponential(multiplier=0.05, max=1.0),
            stop=tenacity.stop_any(tenacity.stop_after_delay(self._retry_timeout_s), _PastDeadline(self.client)),
            sleep=self._sleep,
            reraise=True,
        )
        self._note_session()

        def synced_step() -> T:
            self._sync_after_reconnection()
            return step()
        try:
            with self.client.deadline(self._retry_timeout_s):
                return retrying(synced_step)
        except _TRANSIENT as exc:
            raise ZooKeeperUnavailableError(f"ZooKeeper did not answer within {self._retry_timeout_s}s: {exc!r}") from exc
        except SessionExpiredError as exc:
            raise ZooKeeperSessionExpiredError("the ZooKeeper session expired; a new one is being opened") from exc
        except ConnectionClosedError as exc:
            raise ZooKeeperUnavailableError("the ZooKeeper client was closed") from exc
        except (NoAuthError, AuthFailedError) as exc:  # normally mapped with its path by BoundedZooKeeper
            raise ZooKeeperAccessError(f"/consumers/{self.group}", "an operation", type(exc).__name__) from exc
        finally:
            self._note_session()

    def _pipelined(self, what: str, calls: Sequence[Tuple[str, Callable[[], Any]]]) -> List[Any]:
        """Send every request of ``calls`` (``(path, send)``; ``send()`` returns kazoo's async
        result), then wait for them all: per call, its result or the exception it raised.

        About one round trip for the lot (ZooKeeper answers a session's requests in order). No
        retry: the caller sends what did not get a clean answer again through its one-node path,
        which retries (what leaves the caller is still only a ``ZkConsumerError``). Bounded by
        ``retry_timeout_s`` in all; past the thread's deadline nothing more is sent.
        """
        if not calls:
            return []
        self._note_session()
        try:
            with self.client.deadline(self._retry_timeout_s):
                try:
                    self._sync_after_reconnection()  # the reads below must see every write of ours
                except Exception as exc:  # noqa: BLE001 - each call gets it, as the caller expects
                    return [exc] * len(calls)
                sent: List[Tuple[str, Any]] = []
                for path, send in calls:
                    try:
                        self.client.check_deadline(what, path)  # as BoundedZooKeeper._send
                    except Exception as exc:  # noqa: BLE001 - returned for this call and the rest
                        return self.client.gather(what, sent) + [exc] * (len(calls) - len(sent))
                    sent.append((path, send()))
                return self.client.gather(what, sent)
        finally:
            self._note_session()

    @property
    def session_id(self) -> Optional[int]:
        """The ZooKeeper session this member holds, also while the connection is SUSPENDED
        (:attr:`BoundedZooKeeper.session_id`); ``None`` before the first session and between a
        lost session and the next."""
        return self.client.session_id

    def _note_session(self) -> Optional[int]:
        """Remember the current session id as one of ours; returns it."""
        session = self.session_id
        if session:
            with self._sessions_lock:
                self._sessions.add(session)
        return session

    def note_session(self) -> None:
        """Record the current session as ours (call on every new session; cheap, never blocks)."""
        self._note_session()

    def connection_lost(self) -> None:
        """The connection dropped (SUSPENDED or LOST): every read cache kept valid by a watch is stale.

        Call from the state listener (kazoo's connection thread; never blocks). kazoo
        drops every watch on a connection loss and tells each callback with an
        event of type NONE, but on its callback thread, which may run after the
        client has reconnected on the same session and a rebalance has read a
        cache whose watch no longer exists.
        """
        self._connection_epoch += 1  # one writer (kazoo's connection thread); readers compare

    def _sync_after_reconnection(self) -> None:
        """Once after each connection loss, before a read: ``sync``, so the read sees every write of ours.

        A write whose answer the loss swallowed may have been applied; ZooKeeper lets the client
        reconnect to any server that has seen the last zxid the client *received*, so that server
        may not have the write yet, and a read there shows the node as it was before it (ZooKeeper's
        Programmer's Guide: reads are served from the server's own state; ``sync`` brings it up to
        the leader). A release whose delete was applied and unanswered would otherwise read our own
        deleted node there, find it ours, and delete a peer's node re-created since at the same
        version 0 (found by the simulator, seed 3003786). The answer to the sync carries the
        leader's zxid, so every later server of this session has our write too.
        """
        epoch = self._connection_epoch
        if epoch != self._synced_epoch:
            self.client.sync("/")
            self._synced_epoch = epoch

    def _connection(self) -> Optional[Tuple[int, int]]:
        """What a watch-kept cache entry is valid for: this session, and no connection loss since
        (``None`` without a session)."""
        session = self.session_id
        return None if session is None else (session, self._connection_epoch)

    def _was_ours(self, stat: ZnodeStat) -> bool:
        """Whether the node's ephemeral owner is a session this client holds or held."""
        with self._sessions_lock:
            return stat.ephemeralOwner in self._sessions

    def _ours(self, stat: ZnodeStat) -> bool:
        return bool(stat.ephemeralOwner == self.session_id)

    def _create_ephemeral(self, path: str, data: bytes) -> None:
        self.client.create(path, data, acl=self._acl, ephemeral=True, makepath=True)

    # ------------------------------------------------------------- registration

    def register(self, registration: bytes, cancelled: Optional[threading.Event] = None) -> None:
        """Create ``/consumers/<g>/ids/<consumer_id>`` holding ``registration`` (ephemeral).

        Repeat-safe. A node of the same id left by an earlier session of this
        client is deleted and recreated under this session (ZOOKEEPER-1740). A
        node held by a session this client never had is another process using
        the same consumer id, or one that just died: it is waited on (polling)
        for ``id_wait_s``; if still there, :class:`ConsumerIdInUseError` is
        raised and nothing is changed. ``cancelled`` ends that wait early
        (raising :class:`ZooKeeperUnavailableError`).
        """
        path = self.paths.member(self.consumer_id)
        foreign: List[int] = []

        def step() -> bool:
            """One try; ``False`` when a node must go first (try again)."""
            foreign.clear()
            self.fences.ensure(self.session_id)  # once per session: before any node of ours is made
            try:
                self._create_ephemeral(path, registration)
                return True
            except NodeExistsError:
                pass
            try:
                data, stat = self.client.get(path)
            except NoNodeError:
                return False  # an earlier session's node just expired
            if self._ours(stat):
                return data == registration or self._fenced_set(stat.ephemeralOwner, path, registration, stat.version)
            if not self._was_ours(stat):
                foreign.append(stat.ephemeralOwner)
                return False
            log.info("replacing %s left by an earlier session 0x%x", path, stat.ephemeralOwner)
            self._delete_of_session(path, stat)
            return False

        try:
            started = self._clock()
            changes = 0
            warned = False
            while not self._retry(step):
                if not foreign:
                    changes += 1
                    if changes >= 5:
                        raise ZooKeeperUnavailableError(
                            f"registering {path}: the node kept changing under us; gave up after {changes} tries")
                    continue
                waited = self._clock() - started
                if waited >= self._id_wait_s:
                    raise ConsumerIdInUseError(self.consumer_id, path, foreign[0], waited)
                if not warned:
                    warned = True
                    log.warning("%s is held by ZooKeeper session 0x%x, not ours: another process with the same "
                                "consumer.id, or one that just died; waiting up to %.1fs for it to go",
                                path, foreign[0], self._id_wait_s)
                if cancelled is not None:
                    if cancelled.wait(0.2):
                        raise ZooKeeperUnavailableError(f"registering {path}: cancelled")
                else:
                    self._sleep(0.2)
        finally:
            self._member_cache.pop(self.consumer_id, None)  # our node may have been re-created or rewritten

    def _until_done(self, step: Callable[[], bool], what: str, attempts: int = 5) -> None:
        """Run ``step`` (through the retry) until it reports done, a bounded number of times."""
        for _ in range(attempts):
            if self._retry(step):
                return
        raise ZooKeeperUnavailableError(f"{what}: the node kept changing under us; gave up after {attempts} tries")

    def deregister(self) -> None:
        """Delete our member node if it is ours (repeat-safe)."""
        self._delete_if_ours(self.paths.member(self.consumer_id), expected=None)

    def members(self, fresh: bool = False) -> Dict[str, zkformat.Registration]:
        """All registered members and their registrations.

        The member list comes from :attr:`member_list` when it can vouch for it
        (the watch of the ids node read it and has not fired since), else from
        a read; ``fresh``: always read (after a write of our own to the ids
        node, whose watch event may not have arrived yet).

        Members whose node vanishes while being read are left out (they are
        leaving; a watch event follows). Malformed nodes are logged and left out.

        Cached by the ids node's ``cversion`` (ZooKeeper adds one per child
        created or deleted): when it grew by exactly the number of ids that
        appeared plus those that vanished since the last call, every other
        member node is the very node read before, and only new ones are read
        (one ``get_children`` plus one ``get`` per new member, instead of one
        per member). Otherwise (a node deleted and re-created in between) every
        node is read again. Registrations are written once per session (Kafka's
        consumer and this one; :meth:`register` only rewrites our own node, and
        drops it from the cache), so a node's data does not change under the
        same node.
        """
        listed = None if fresh or self.member_list is None else self.member_list()
        try:
            ids, stat = listed or self._retry(lambda: self.client.get_children(self.paths.ids, include_data=True))
        except NoNodeError:
            self._member_cache, self._ids_cversion = {}, None
            return {}
        current = set(ids)
        known = set(self._member_cache)
        changes = len(current - known) + len(known - current)
        if self._ids_cversion is None or stat.cversion - self._ids_cversion != changes:
            self._member_cache = {}
        else:
            self._member_cache = {k: v for k, v in self._member_cache.items() if k in current}
        self._ids_cversion = stat.cversion
        new = [c for c in sorted(current) if c not in self._member_cache]
        read = dict(zip(new, self._pipelined("reading", [(p, self._get_async(p)) for p in map(self.paths.member, new)])))
        members: Dict[str, zkformat.Registration] = {}
        for consumer_id in sorted(current):
            if consumer_id in self._member_cache:
                cached = self._member_cache[consumer_id]
                if cached is not None:
                    members[consumer_id] = cached
                continue
            path = self.paths.member(consumer_id)
            outcome = read[consumer_id]
            if isinstance(outcome, Exception) and not isinstance(outcome, NoNodeError):
                try:
                    outcome = self._retry(functools.partial(self.client.get, path))  # no clean answer: again, retried
                except NoNodeError as gone:
                    outcome = gone
            if isinstance(outcome, NoNodeError):
                continue  # leaving: not cached, the cversion will not match next time
            data = outcome[0]
            try:
                registration: Optional[zkformat.Registration] = zkformat.decode_registration(path, data)
            except MalformedZnodeError as exc:
                log.warning("ignoring group member with an unreadable registration: %s", exc)
                registration = None
            self._member_cache[consumer_id] = registration
            if registration is not None:
                members[consumer_id] = registration
        return members

    # ------------------------------------------------------------------ topics

    def all_topics(self) -> List[str]:
        """Every topic under ``/brokers/topics`` (empty if the cluster has none yet)."""
        try:
            return sorted(self._retry(lambda: self.client.get_children(zkformat.BROKER_TOPICS_PATH)))
        except NoNodeError:
            return []

    def partitions_for_topics(self, topics: Iterable[str]) -> Dict[str, List[int]]:
        """Sorted partition ids of each topic that exists; missing or malformed topics are left out.

        A topic's map comes from :attr:`topic_data` when it can vouch for it (the
        member's own watch of the node read it and has not fired since:
        :meth:`~zkconsumer.zookeeper.watchers.GroupWatcher.topic_data`). Otherwise
        the node is read with a data watch and answered from that read until the
        watch fires or the session changes: no request while nothing changed.
        That cache alone would not do for a rebalance that a watch of the same
        node signalled: kazoo runs both watches' callbacks on its callback thread
        in no set order, and the rebalance could read the cache before its
        callback marked it stale, then never be signalled again (found by the
        simulator). The watch's own snapshot is kept before its signal is sent.
        """
        result: Dict[str, List[int]] = {}
        source = self.topic_data
        for topic in sorted(set(topics)):
            path = zkformat.topic_path(topic)
            data = source(topic) if source is not None else None
            if data is None:
                data = self._watched_get(path)
            if data is None:
                continue
            try:
                result[topic] = sorted(zkformat.decode_topic_partitions(path, data))
            except MalformedZnodeError as exc:
                log.warning("ignoring topic with an unreadable partition map: %s", exc)
        return result

    def _watched_get(self, path: str) -> Optional[bytes]:
        """The node's data (``None``: no such node), from a cache kept valid by a data watch."""
        with self._topic_lock:
            cached = self._topic_cache.get(path)
            connection = self._connection()
            if cached is not None and not cached[1].is_set() and cached[2] == connection and connection is not None:
                return cached[0]
            changed = threading.Event()

            def on_change(_event: object) -> None:
                changed.set()

            try:
                data, _ = self._retry(lambda: self.client.get(path, watch=on_change))
            except NoNodeError:
                self._topic_cache.pop(path, None)  # no watch is set on a missing node: read again next time
                return None
            self._topic_cache[path] = (data, changed, connection)
            return cast(Optional[bytes], data)

    def brokers(self, protocol: str = "PLAINTEXT") -> List[zkformat.Broker]:
        """Live brokers from ``/brokers/ids``; malformed nodes are logged and left out.

        Cached (a broker writes its node once per session): the read of the
        children arms a watch, and while that watch has not fired and the
        session is the same, calls are answered without any request (the
        leader finder asks on every pass while a broker is down). Otherwise one
        ``get_children`` plus one ``get`` per broker that (re)appeared, as
        :meth:`members`. Thread-safe (leader finders of several generations may call it).
        """
        with self._broker_lock:
            if self._brokers_fresh is not None and self._brokers_fresh.is_set() is False \
                    and self._brokers_session == self._connection() and self._brokers_session is not None:
                return self._decode_brokers(sorted(self._broker_cache), protocol)
            return self._read_brokers(protocol)

    def _read_brokers(self, protocol: str) -> List[zkformat.Broker]:
        changed = threading.Event()  # set by the watch: the cache is stale

        def on_change(_event: object) -> None:
            changed.set()

        session = self._connection()  # read before the request: a loss while it is out makes it stale
        try:
            ids, stat = self._retry(lambda: self.client.get_children(zkformat.BROKER_IDS_PATH, watch=on_change,
                                                                     include_data=True))
        except NoNodeError:
            self._broker_cache, self._broker_cversion, self._brokers_fresh = {}, None, None
            return []
        current = set(ids)
        known = set(self._broker_cache)
        changes = len(current - known) + len(known - current)
        if self._broker_cversion is None or stat.cversion - self._broker_cversion != changes:
            self._broker_cache = {}
        else:
            self._broker_cache = {k: v for k, v in self._broker_cache.items() if k in current}
        self._broker_cversion = stat.cversion
        for broker_id in sorted(current):
            path = f"{zkformat.BROKER_IDS_PATH}/{broker_id}"
            if broker_id not in self._broker_cache:
                try:
                    data, _ = self._retry(functools.partial(self.client.get, path))
                except NoNodeError:
                    changed.set()  # listed but gone: read again next time
                    continue
                self._broker_cache[broker_id] = data
        self._brokers_fresh, self._brokers_session = changed, session
        return self._decode_brokers(sorted(self._broker_cache), protocol)

    def _decode_brokers(self, ids: List[str], protocol: str) -> List[zkformat.Broker]:
        brokers = []
        for broker_id in ids:
            path = f"{zkformat.BROKER_IDS_PATH}/{broker_id}"
            try:
                brokers.append(zkformat.decode_broker(path, self._broker_cache[broker_id], protocol))
            except MalformedZnodeError as exc:
                log.warning("ignoring broker with an unreadable registration: %s", exc)
        return brokers
