"""One member's ZooKeeper session as its group's node operations see it: the client, the group's
paths, the consumer id, the retry, and what the session knows about itself.

:class:`GroupSession` is handed to the collaborators of
:class:`~zkconsumer.zookeeper.group.GroupClient` (:class:`~zkconsumer.zookeeper.owner_nodes.OwnerNodes`,
:class:`~zkconsumer.zookeeper.offset_nodes.OffsetNodes`,
:class:`~zkconsumer.zookeeper.cluster_reads.ClusterReads`), as kazoo's recipes take the client.
It holds:

* the retry (:meth:`GroupSession.retry`) every repeat-safe step runs through, bounded by
  ``retry_timeout_s`` and the calling thread's deadline, and :meth:`GroupSession.pipelined` for
  requests sent together; what leaves either is a :class:`~zkconsumer.errors.ZkConsumerError`
  (see the ``group`` module);
* the session bookkeeping: every session id this client held (nodes of those are ours, or
  were), connection losses (a watch-kept cache read before one is stale) and the ``sync``
  owed after each;
* fenced writes: one multi-operation that checks the session's fence node (the ``fence``
  module) before its operations, so nothing decided under a session is written after it;
* what this session is known to hold without a request: owner nodes a read (or our own
  create) found ours and whose data watch has not fired since.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, TypeVar

import tenacity
from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.protocol.states import ZnodeStat
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from ..errors import ZooKeeperAccessError, ZooKeeperSessionExpiredError, ZooKeeperUnavailableError
from . import zkformat
from .fence import SessionFences
from .zkcalls import BoundedZooKeeper

__all__ = ["NOT_APPLIED", "GroupSession"]

log = logging.getLogger("zkconsumer.zookeeper.group")

T = TypeVar("T")
#: Errors after which the same ZooKeeper call may succeed within the same session.
_TRANSIENT = (ConnectionLoss, OperationTimeoutError)
#: What a multi-operation answers for an operation that did not fail itself but was not applied
#: because another one of the same multi failed.
NOT_APPLIED = (RolledBackError, RuntimeInconsistency)


class _PastDeadline(stop_base):
    """Stops retrying once the calling thread's deadline (set with ``client.deadline``) has passed."""

    def __init__(self, client: BoundedZooKeeper) -> None:
        self._client = client

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        remaining = self._client.remaining()
        return remaining is not None and remaining <= 0.01


class _JitteredBackoff(wait_base):
    """tenacity's ``wait_random_exponential`` (a draw in [0, min(max_s, multiplier_s * 2**(attempt - 1))]),
    drawn from ``rng`` rather than the process's global generator: any thread of the process may draw
    from that one, so a run given a seeded ``rng`` (the simulator's) waits exactly as it did before."""

    def __init__(self, rng: random.Random, multiplier_s: float, max_s: float) -> None:
        self._rng = rng
        self._multiplier_s = multiplier_s
        self._max_s = max_s

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        attempt = max(1, retry_state.attempt_number)
        high = self._max_s if attempt > 64 else min(self._max_s, self._multiplier_s * 2 ** (attempt - 1))
        return self._rng.uniform(0, high)


class GroupSession:
    """The session of member ``consumer_id`` of ``group``, shared by the group's node operations.

    ``retry_timeout_s`` bounds how long one operation (one :meth:`retry`) waits, its kazoo
    calls included, retrying transient connection errors (it should not exceed the session
    timeout: past it, the session is gone anyway). ``client`` is used through
    :class:`~zkconsumer.zookeeper.zkcalls.BoundedZooKeeper` (``self.client``; ``self.client.raw``
    is the KazooClient). ``sleep``, ``clock`` (what deadlines and waits are measured on) and ``rng``
    (the retries' jitter; default: a generator of this session's own) are injectable for tests.
    ``acl``: the ACL of every node this member creates.
    """

    def __init__(self, client: KazooClient, group: str, consumer_id: str, *, retry_timeout_s: float = 6.0,
                 acl: Optional[List[Any]] = None, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, rng: Optional[random.Random] = None) -> None:
        raw = client.raw if isinstance(client, BoundedZooKeeper) else client
        self.clock = clock
        self.sleep = sleep
        self._rng = rng or random.Random()
        self.client = BoundedZooKeeper(raw, retry_timeout_s, clock)
        self.group = group
        self.consumer_id = consumer_id
        self.paths = zkformat.GroupPaths(group)
        self.acl = acl
        self.retry_timeout_s = retry_timeout_s
        #: Every session id this client was seen to hold: nodes of these are ours (or were).
        self._sessions: Set[int] = set()
        self._sessions_lock = threading.Lock()
        self._connection_epoch = 0  # connection losses seen (connection_lost): a watch read before one is gone
        self._synced_epoch = 0  # the epoch of the last sync answered (sync_after_reconnection)
        self._parents_seen: Set[str] = set()  # owners/<topic> nodes ensured (ensure_parents)
        #: Owner nodes known held by this session under one of our thread ids, from a read (or our
        #: own create) that set a data watch: path -> (session, set once the node changed, version).
        self._confirmed_nodes: Dict[str, Tuple[Optional[int], threading.Event, int]] = {}
        #: The fence node of each of our sessions (see the ``fence`` module).
        self.fences = SessionFences(self.client, self.paths, consumer_id, acl)

    def retry(self, step: Callable[[], T]) -> T:
        """Run a repeat-safe ``step``, retrying transient connection errors with jitter.

        Takes at most ``retry_timeout_s`` in all (every kazoo call of the step
        is bounded by the same deadline). Raises only ZkConsumerErrors:
        :class:`ZooKeeperUnavailableError` when ZooKeeper did not answer in time,
        the session expired or the client was closed; :class:`ZooKeeperAccessError`
        when an operation was denied.
        """
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(_TRANSIENT),
            wait=_JitteredBackoff(self._rng, multiplier_s=0.05, max_s=1.0),
            stop=tenacity.stop_any(tenacity.stop_after_delay(self.retry_timeout_s), _PastDeadline(self.client)),
            sleep=self.sleep,
            reraise=True,
        )
        self.note_session()

        def synced_step() -> T:
            self.sync_after_reconnection()
            return step()
        try:
            with self.client.deadline(self.retry_timeout_s):
                return retrying(synced_step)
        except _TRANSIENT as exc:
            raise ZooKeeperUnavailableError(f"ZooKeeper did not answer within {self.retry_timeout_s}s: {exc!r}") from exc
        except SessionExpiredError as exc:
            raise ZooKeeperSessionExpiredError("the ZooKeeper session expired; a new one is being opened") from exc
        except ConnectionClosedError as exc:
            raise ZooKeeperUnavailableError("the ZooKeeper client was closed") from exc
        except (NoAuthError, AuthFailedError) as exc:  # normally mapped with its path by BoundedZooKeeper
            raise ZooKeeperAccessError(f"/consumers/{self.group}", "an operation", type(exc).__name__) from exc
        finally:
            self.note_session()

    def pipelined(self, what: str, calls: Sequence[Tuple[str, Callable[[], Any]]]) -> List[Any]:
        """Send every request of ``calls`` (``(path, send)``; ``send()`` returns kazoo's async
        result), then wait for them all: per call, its result or the exception it raised.

        About one round trip for the lot (ZooKeeper answers a session's requests in order). No
        retry: the caller sends what did not get a clean answer again through its one-node path,
        which retries (what leaves the caller is still only a ``ZkConsumerError``). Bounded by
        ``retry_timeout_s`` in all; past the thread's deadline nothing more is sent.
        """
        if not calls:
            return []
        self.note_session()
        try:
            with self.client.deadline(self.retry_timeout_s):
                try:
                    self.sync_after_reconnection()  # the reads below must see every write of ours
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
            self.note_session()

    @property
    def session_id(self) -> Optional[int]:
        """The ZooKeeper session this member holds, also while the connection is SUSPENDED
        (:attr:`BoundedZooKeeper.session_id`); ``None`` before the first session and between a
        lost session and the next."""
        return self.client.session_id

    def note_session(self) -> Optional[int]:
        """Remember the current session id as one of ours; returns it."""
        session = self.session_id
        if session:
            with self._sessions_lock:
                self._sessions.add(session)
        return session

    def connection_lost(self) -> None:
        """The connection dropped (SUSPENDED or LOST): every read cache kept valid by a watch is stale.

        Call from the state listener (kazoo's connection thread; never blocks). kazoo
        drops every watch on a connection loss and tells each callback with an
        event of type NONE, but on its callback thread, which may run after the
        client has reconnected on the same session and a rebalance has read a
        cache whose watch no longer exists.
        """
        self._connection_epoch += 1  # one writer (kazoo's connection thread); readers compare

    def sync_after_reconnection(self) -> None:
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

    def connection(self) -> Optional[Tuple[int, int]]:
        """What a watch-kept cache entry is valid for: this session, and no connection loss since
        (``None`` without a session)."""
        session = self.session_id
        return None if session is None else (session, self._connection_epoch)

    def was_ours(self, stat: ZnodeStat) -> bool:
        """Whether the node's ephemeral owner is a session this client holds or held."""
        with self._sessions_lock:
            return stat.ephemeralOwner in self._sessions

    def ours(self, stat: ZnodeStat) -> bool:
        return bool(stat.ephemeralOwner == self.session_id)

    def create_ephemeral(self, path: str, data: bytes) -> None:
        self.client.create(path, data, acl=self.acl, ephemeral=True, makepath=True)

    def until_done(self, step: Callable[[], bool], what: str, attempts: int = 5) -> None:
        """Run ``step`` (through the retry) until it reports done, a bounded number of times."""
        for _ in range(attempts):
            if self.retry(step):
                return
        raise ZooKeeperUnavailableError(f"{what}: the node kept changing under us; gave up after {attempts} tries")

    def create_ephemeral_async(self, path: str, data: bytes) -> Callable[[], Any]:
        """A ``send`` for :meth:`pipelined`: :meth:`create_ephemeral` without waiting, and without
        creating missing parents (``NoNodeError``): see :meth:`ensure_parents`."""
        return functools.partial(self.client.raw.create_async, path, data, acl=self.acl, ephemeral=True)

    def ensure_parents(self, paths: Iterable[str]) -> None:
        """Make sure the parents of ``paths`` exist, each checked once per client (a cache).

        Pipelined creates must not each find a missing parent and create it
        (dozens of requests where one does); a parent deleted since it was
        cached makes those creates fail with ``NoNodeError``, and the caller's
        one-node path creates it again.
        """
        for parent in sorted({path.rsplit("/", 1)[0] for path in paths} - self._parents_seen):
            self.retry(functools.partial(self.client.ensure_path, parent, acl=self.acl))
            self._parents_seen.add(parent)

    def get_async(self, path: str, watch: Optional[Callable[[object], None]] = None) -> Callable[[], Any]:
        """A ``send`` for :meth:`pipelined`: read ``path`` (setting ``watch`` if given)."""
        return functools.partial(self.client.raw.get_async, path, watch=watch)

    def fenced_multi(self, session: Optional[int], build: Callable[[Any], None]) -> Optional[List[Any]]:
        """One multi-operation, applied only while ``session`` lives: a ``check`` of its fence
        node, then the operations ``build(transaction)`` adds.

        Returns the results of ``build``'s operations (exceptions as values; all
        of them :data:`NOT_APPLIED` or an error when any failed), or ``None``
        when ``session`` is gone or is not the client's session (nothing was
        written, and nothing decided under ``session`` may be). ``session`` is
        the session the write was decided under (the one that read the nodes it
        names), not whichever the client is on when the request leaves: a
        request sent after a reconnect to a new session fails its check.
        Raises kazoo's errors (a lost connection: the caller's retry decides).

        A fence node found gone while the client is still on ``session`` was
        deleted by someone else (a tool deleting the group under its live
        members): the request was answered on that session, so it lives. A new
        fence node is made for it and the operations are tried once more.
        """
        for _ in range(2):
            fence = self.fences.ensure(session)
            if fence is None:
                return None
            transaction = self.client.transaction()
            transaction.check(fence, -1)
            build(transaction)
            results = transaction.commit()
            if not isinstance(results[0], Exception) or isinstance(results[0], NOT_APPLIED):
                return list(results[1:])
            if session is None or self.client.session_id != session:
                return None  # the fence node is gone: so is the session
            log.warning("the fence node %s of the live session 0x%x was deleted by another client; making another",
                        fence, session)
            self.fences.discard(session, fence)
        return None

    def fenced_single(self, session: Optional[int], build: Callable[[Any], None]) -> bool:
        """:meth:`fenced_multi` of one operation expecting a version: ``True`` if applied;
        ``False`` if fenced, or the node is gone or at another version; other refusals raise."""
        results = self.fenced_multi(session, build)
        if results is None or isinstance(results[0], (NoNodeError, BadVersionError)):
            return False
        if isinstance(results[0], Exception):
            raise results[0]
        return True

    def fenced_set(self, session: Optional[int], path: str, data: bytes, version: int) -> bool:
        """Set ``path`` at ``version`` while ``session`` lives (see :meth:`fenced_single`)."""
        return self.fenced_single(session, lambda t: t.set_data(path, data, version))

    def fenced_delete(self, session: Optional[int], path: str, version: int) -> bool:
        """Delete ``path`` at ``version`` while ``session`` lives (see :meth:`fenced_single`)."""
        return self.fenced_single(session, lambda t: t.delete(path, version=version))

    def delete_of_session(self, path: str, stat: ZnodeStat) -> None:
        """Delete the node read with ``stat`` while its session (an earlier one of ours) lives.

        With that session's fence node known, only that very node can be deleted:
        once its session is gone, so is the fence, and a node re-created at the
        same version by another session is safe. A session whose fence is not
        known (none was made) falls back to a delete at the version read.
        """
        owner = int(stat.ephemeralOwner)
        if self.fences.path(owner) is not None:
            self.fenced_delete(owner, path, stat.version)
            return
        try:
            self.client.delete(path, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass

    def delete_if_ours(self, path: str, expected: Optional[bytes]) -> None:
        def step() -> None:
            try:
                data, stat = self.client.get(path)
            except NoNodeError:
                return
            if not self.ours(stat) or (expected is not None and data != expected):
                return
            self.fenced_delete(stat.ephemeralOwner, path, stat.version)

        try:
            self.retry(step)
        finally:
            self.forget_held(path)  # as in release_many: a peer's re-created node has the version known

    def our_thread(self, data: bytes) -> bool:
        """Whether an owner node's content names one of this member's thread ids (``<consumer id>-<n>``)."""
        return data.decode("utf-8", "replace").startswith(self.consumer_id + "-")

    def held_version(self, path: str) -> Optional[int]:
        """The version of owner node ``path`` if it is known, without a request, to be held by this
        session under one of our thread ids; else ``None``.

        Known: a read (or our own create) found it so and set a data watch that
        has not fired since (nobody, ourselves included, changed or deleted it),
        on the session we have now.
        """
        entry = self._confirmed_nodes.get(path)
        session = self.session_id
        if entry is not None and session is not None and entry[0] == session and not entry[1].is_set():
            return entry[2]
        return None

    def held_watch(self, path: str) -> Tuple[threading.Event, Callable[[object], None]]:
        """Forget what is known of ``path``; a fresh event and the watch callback that sets it
        (for the request that will find the node held: :meth:`remember_held`)."""
        self._confirmed_nodes.pop(path, None)
        changed = threading.Event()

        def on_change(_event: object) -> None:  # kazoo's thread: only signals
            changed.set()

        return changed, on_change

    def remember_held(self, path: str, stat: ZnodeStat, changed: threading.Event) -> None:
        """Record ``path`` as held by this session at ``stat.version``, until ``changed`` is set.

        One entry per owner node ever held (bounded by the subscribed partitions)."""
        self._confirmed_nodes[path] = (stat.ephemeralOwner, changed, stat.version)

    def forget_held(self, path: str) -> None:
        """What is known of ``path`` proved wrong (a fenced write failed its version check)."""
        self._confirmed_nodes.pop(path, None)
