"""Owner nodes (``/consumers/<group>/owners/<topic>/<partition>``) of one group member:
claim, release, relabel between our own streams, wait for a peer's release, and read.

:class:`OwnerNodes` is a base class of :class:`~zkconsumer.zookeeper.group.GroupClient`,
which provides the plumbing it uses (``client``, ``paths``, ``consumer_id``, the retry and
the session bookkeeping); every write is a repeat-safe step run through that retry, and
what leaves is a :class:`~zkconsumer.errors.ZkConsumerError` (see the ``group`` module).
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, TypeVar

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency
from kazoo.protocol.states import ZnodeStat

from ..errors import MalformedZnodeError, OperationCancelledError
from . import zkformat
from .fence import SessionFences
from .zkcalls import BoundedZooKeeper

log = logging.getLogger("zkconsumer.zookeeper.group")

T = TypeVar("T")

#: What a multi-operation answers for an operation that did not fail itself but was not applied
#: because another one of the same multi failed.
NOT_APPLIED = (RolledBackError, RuntimeInconsistency)

#: :meth:`OwnerNodes.claim_many` lists a topic's owner nodes first only for this many claims in it or more
#: (the listing costs one request; it saves one for each node it finds still held).
LIST_FROM = 2


class OwnerNodes:
    """The owner-node operations of :class:`~zkconsumer.zookeeper.group.GroupClient`."""

    # Provided by GroupClient.
    client: BoundedZooKeeper
    paths: zkformat.GroupPaths
    consumer_id: str
    _retry_timeout_s: float
    _acl: Optional[List[Any]]
    _parents_seen: Set[str]  # owners/<topic> nodes ensured (_ensure_parents)
    #: Owner nodes known held by this session under one of our thread ids, from a read (or our
    #: own create) that set a data watch: path -> (session, set once the node changed, version).
    _confirmed_nodes: Dict[str, Tuple[Optional[int], threading.Event, int]]
    #: The fence node of each of our sessions (see the ``fence`` module).
    fences: SessionFences

    @property
    def session_id(self) -> Optional[int]:
        raise NotImplementedError

    def _retry(self, step: Callable[[], T]) -> T:
        raise NotImplementedError

    def _until_done(self, step: Callable[[], bool], what: str, attempts: int = 5) -> None:
        raise NotImplementedError

    def _ours(self, stat: ZnodeStat) -> bool:
        raise NotImplementedError

    def _was_ours(self, stat: ZnodeStat) -> bool:
        raise NotImplementedError

    def _create_ephemeral(self, path: str, data: bytes) -> None:
        raise NotImplementedError

    def _note_session(self) -> Optional[int]:
        raise NotImplementedError

    def _sync_after_reconnection(self) -> None:
        raise NotImplementedError

    def _pipelined(self, what: str, calls: Sequence[Tuple[str, Callable[[], Any]]]) -> List[Any]:
        raise NotImplementedError

    def _create_ephemeral_async(self, path: str, data: bytes) -> Callable[[], Any]:
        """A ``send`` for :meth:`_pipelined`: :meth:`_create_ephemeral` without waiting, and without
        creating missing parents (``NoNodeError``): see :meth:`_ensure_parents`."""
        return functools.partial(self.client.raw.create_async, path, data, acl=self._acl, ephemeral=True)

    def _ensure_parents(self, paths: Iterable[str]) -> None:
        """Make sure the parents of ``paths`` exist, each checked once per client (a cache).

        Pipelined creates must not each find a missing parent and create it
        (dozens of requests where one does); a parent deleted since it was
        cached makes those creates fail with ``NoNodeError``, and the caller's
        one-node path creates it again.
        """
        for parent in sorted({path.rsplit("/", 1)[0] for path in paths} - self._parents_seen):
            self._retry(functools.partial(self.client.ensure_path, parent, acl=self._acl))
            self._parents_seen.add(parent)

    def _get_async(self, path: str, watch: Optional[Callable[[object], None]] = None) -> Callable[[], Any]:
        """A ``send`` for :meth:`_pipelined`: read ``path`` (setting ``watch`` if given)."""
        return functools.partial(self.client.raw.get_async, path, watch=watch)

    # ------------------------------------------------------------ fenced writes

    def _fenced_multi(self, session: Optional[int], build: Callable[[Any], None]) -> Optional[List[Any]]:
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

    def _fenced_single(self, session: Optional[int], build: Callable[[Any], None]) -> bool:
        """:meth:`_fenced_multi` of one operation expecting a version: ``True`` if applied;
        ``False`` if fenced, or the node is gone or at another version; other refusals raise."""
        results = self._fenced_multi(session, build)
        if results is None or isinstance(results[0], (NoNodeError, BadVersionError)):
            return False
        if isinstance(results[0], Exception):
            raise results[0]
        return True

    def _fenced_set(self, session: Optional[int], path: str, data: bytes, version: int) -> bool:
        """Set ``path`` at ``version`` while ``session`` lives (see :meth:`_fenced_single`)."""
        return self._fenced_single(session, lambda t: t.set_data(path, data, version))

    def _fenced_delete(self, session: Optional[int], path: str, version: int) -> bool:
        """Delete ``path`` at ``version`` while ``session`` lives (see :meth:`_fenced_single`)."""
        return self._fenced_single(session, lambda t: t.delete(path, version=version))

    def _delete_of_session(self, path: str, stat: ZnodeStat) -> None:
        """Delete the node read with ``stat`` while its session (an earlier one of ours) lives.

        With that session's fence node known, only that very node can be deleted:
        once its session is gone, so is the fence, and a node re-created at the
        same version by another session is safe. A session whose fence is not
        known (none was made) falls back to a delete at the version read.
        """
        owner = int(stat.ephemeralOwner)
        if self.fences.path(owner) is not None:
            self._fenced_delete(owner, path, stat.version)
            return
        try:
            self.client.delete(path, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass

    def claim(self, topic: str, partition: int, thread_id: str,
              watch: Optional[Callable[[object], None]] = None) -> Optional[str]:
        """Make ``thread_id`` the owner of the partition.

        Returns ``None`` on success, or the current owner's thread id when another
        member (or an earlier session of ours) holds the node. Repeat-safe: a node
        already ours is relabelled to ``thread_id`` if needed.

        ``watch``: when the node exists, the read that finds its holder also sets
        this data watch (it fires when the node is changed or deleted), so waiting
        for a holder to let go costs no extra request. It runs on kazoo's thread
        and must only signal.
        """
        path = self.paths.owner(topic, partition)
        data = zkformat.encode_owner(thread_id)
        holder: List[Optional[str]] = [None]

        def step() -> bool:
            """One try; ``False`` when the node vanished between create and read (try again)."""
            holder[0] = None
            try:
                self._create_ephemeral(path, data)
                return True
            except NodeExistsError:
                pass
            try:
                current, stat = self.client.get(path, watch=watch) if watch is not None else self.client.get(path)
            except NoNodeError:
                return False
            if not self._ours(stat):
                holder[0] = current.decode("utf-8", "replace")
            elif current != data and not self._fenced_set(stat.ephemeralOwner, path, data, stat.version):
                return False  # changed or gone since the read, or our session with it: look again
            return True

        self._until_done(step, f"claiming {path}")
        return holder[0]

    def claim_many(self, claims: Sequence[Tuple[str, int, str, Optional[Callable[[object], None]]]],
                   look_first: bool = False, cancelled: Optional[Callable[[], bool]] = None) -> List[Optional[str]]:
        """:meth:`claim` of each ``(topic, partition, thread_id, watch)``, pipelined; the holders in order.

        The same outcome as calling :meth:`claim` for each in turn, in about two
        round trips for the lot instead of one or two per partition: every
        create is sent at once, then one read (setting ``watch``) of every node
        that already existed. A partition whose answer was anything else (a
        node of ours under another thread id to relabel, a node gone between
        create and read, a parent deleted, a lost connection, a refusal) goes through
        :meth:`claim` on its own, which retries and raises as it does.

        ``look_first``: first list the owner nodes of each topic with at least
        :data:`LIST_FROM` claims (one request per topic), and read, instead of
        creating, the nodes listed: a node a peer has not released yet then
        costs its read, not a create that fails and then the read. Worth it
        when claims are expected to meet peers still releasing (a rebalance's
        first claims); not after a watch reported the node deleted.

        ``cancelled``: asked before each one-by-one :meth:`claim`; once it answers ``True``
        (the caller is stopping), :class:`~zkconsumer.errors.OperationCancelledError` is raised
        instead of going on (each such claim is retried and may take up to ``retry_timeout_s``
        several times over: the pipelined part is bounded as a whole, the fallback only per claim).
        The nodes created so far stay created: the caller settles them (its ``claim`` outcomes
        are unknown to it, as after any error raised here).
        """
        paths = [self.paths.owner(topic, partition) for topic, partition, _, _ in claims]
        datas = [zkformat.encode_owner(thread_id) for _, _, thread_id, _ in claims]
        self._ensure_parents(paths)
        listed = self._listed_owner_nodes([topic for topic, _, _, _ in claims]) if look_first else set()
        first = self._pipelined("claiming", [
            (path, self._get_async(path, claim[3]) if path in listed else self._create_ephemeral_async(path, data))
            for path, data, claim in zip(paths, datas, claims)])
        read: Dict[int, Any] = {i: outcome for i, outcome in enumerate(first) if paths[i] in listed}
        created = {i: outcome for i, outcome in enumerate(first) if paths[i] not in listed}
        existing = [i for i, outcome in created.items() if isinstance(outcome, NodeExistsError)]
        again = [i for i, outcome in created.items()
                 if isinstance(outcome, Exception) and not isinstance(outcome, NodeExistsError)]
        read.update(zip(existing, self._pipelined(
            "reading", [(paths[i], self._get_async(paths[i], claims[i][3])) for i in existing])))
        holders: List[Optional[str]] = [None] * len(claims)
        for i, outcome in read.items():  # NoNodeError (released since it was listed) goes to claim() too
            if isinstance(outcome, Exception) or (self._ours(outcome[1]) and outcome[0] != datas[i]):
                again.append(i)
            elif not self._ours(outcome[1]):
                holders[i] = outcome[0].decode("utf-8", "replace")
        for i in sorted(again):
            if cancelled is not None and cancelled():
                raise OperationCancelledError(f"claiming {paths[i]} and the rest one by one: cancelled")
            topic, partition, thread_id, watch = claims[i]
            holders[i] = self.claim(topic, partition, thread_id, watch=watch)
        return holders

    def _listed_owner_nodes(self, topics: Sequence[str]) -> Set[str]:
        """Paths of the owner nodes that exist now, in each topic of ``topics`` named at least
        :data:`LIST_FROM` times (listed together, not retried: a listing without a clean
        answer lists nothing, and those claims are created as usual)."""
        wanted = sorted(topic for topic in set(topics) if topics.count(topic) >= LIST_FROM)
        bases = [self.paths.owners_topic(topic) for topic in wanted]
        listed: Set[str] = set()
        for base, outcome in zip(bases, self._pipelined(
                "listing", [(base, functools.partial(self.client.raw.get_children_async, base)) for base in bases])):
            if not isinstance(outcome, Exception):
                listed.update(f"{base}/{child}" for child in outcome)
        return listed

    def release_many(self, partitions: Sequence[Tuple[str, int]]) -> None:
        """:meth:`release` of each partition: every node read at once, ours deleted in one multi-operation.

        Two requests for the lot where :meth:`release` takes two per node, and
        no read of a node known held (:meth:`_held_version`). The multi deletes
        each node at the version read or known, so it deletes nothing if any of
        them changed meanwhile; then, as for any read without a clean answer,
        each goes through :meth:`release` on its own (repeat-safe). A version
        known without a read carries the fenced commit's residual window (a
        foreign tool deleting our live node and a peer re-creating it before our
        watch reports it), no wider than a read's.
        """
        paths = [self.paths.owner(topic, partition) for topic, partition in partitions]
        session = self.session_id  # the versions known and read are this session's
        known = [self._held_version(path) for path in paths]
        unknown = [i for i, version in enumerate(known) if version is None]
        read = self._pipelined("reading", [(paths[i], self._get_async(paths[i])) for i in unknown])
        again = [i for i, outcome in zip(unknown, read) if isinstance(outcome, Exception)
                 and not isinstance(outcome, NoNodeError)]
        ours = [(i, outcome[1].version) for i, outcome in zip(unknown, read)
                if not isinstance(outcome, Exception) and self._ours(outcome[1])]
        ours += [(i, version) for i, version in enumerate(known) if version is not None]
        if ours and self.session_id != session:
            # A new session since the versions were learnt: a node of ours is gone with the old
            # one, and a peer's re-created node has the same version. Decided one by one (a read each).
            again.extend(i for i, _ in ours)
            ours = []
        if ours:
            def deletes(transaction: Any) -> None:
                for i, version in ours:
                    transaction.delete(paths[i], version=version)

            try:
                with self.client.deadline(self._retry_timeout_s):
                    results = self._fenced_multi(session, deletes)
                deleted = results is not None and not any(isinstance(result, Exception) for result in results)
            except Exception:  # no clean answer (connection lost, refused...): one by one, as release() would
                deleted = False
            if not deleted:
                again.extend(i for i, _ in ours)
        try:
            for i in sorted(again):
                self.release(*partitions[i])
        finally:
            # Deleted (or maybe deleted) by us: our own data watch reports it only later, on kazoo's
            # callback thread, and a peer's re-created node has the version known. A commit after
            # this must read the node (see OffsetCommitter.no_commit_in_flight).
            for path in paths:
                self._forget_held(path)

    def release(self, topic: str, partition: int, thread_id: Optional[str] = None) -> None:
        """Delete the owner node if this session holds it (repeat-safe).

        Unlike Kafka's consumer, never deletes a node another member has already
        claimed: that would make two members own one partition. (So the node is
        read first: a version remembered from our own write would not tell our
        node from one another member created after a tool deleted ours.)
        """
        expected = None if thread_id is None else zkformat.encode_owner(thread_id)
        self._delete_if_ours(self.paths.owner(topic, partition), expected)

    def relabel(self, topic: str, partition: int, thread_id: str) -> bool:
        """Give an owner node this session holds under one of our thread ids to ``thread_id``.

        Two requests (a read, a write conditional on the version read), where
        :meth:`claim` would first try a create. ``False`` (nothing written) when
        the node is missing or not ours; then :meth:`claim` decides.
        """
        path = self.paths.owner(topic, partition)
        data = zkformat.encode_owner(thread_id)

        def step() -> bool:
            try:
                current, stat = self.client.get(path)
            except NoNodeError:
                return False
            if not (self._ours(stat) and self._our_thread(current)):
                return False
            return current == data or self._fenced_set(stat.ephemeralOwner, path, data, stat.version)

        return self._retry(step)

    def relabel_many(self, relabels: Sequence[Tuple[str, int, str]]) -> List[bool]:
        """:meth:`relabel` of each ``(topic, partition, thread_id)``, pipelined; whether each was relabelled.

        The nodes whose version is known held (:meth:`_held_version`) are not
        read; the others are read together; then every write goes at once,
        each conditional on its version. A node missing, not ours, or changed
        before its write is ``False`` (then :meth:`claim` decides, as after
        :meth:`relabel`); any answer that is not clean goes through
        :meth:`relabel` on its own, which retries.
        """
        paths = [self.paths.owner(topic, partition) for topic, partition, _ in relabels]
        datas = [zkformat.encode_owner(thread_id) for _, _, thread_id in relabels]
        session = self.session_id  # the versions known and read are this session's
        versions: List[Optional[int]] = [self._held_version(path) for path in paths]
        unknown = [i for i, version in enumerate(versions) if version is None]
        done: List[Optional[bool]] = [None] * len(relabels)
        for i, outcome in zip(unknown, self._pipelined("reading", [(paths[i], self._get_async(paths[i]))
                                                                   for i in unknown])):
            if isinstance(outcome, NoNodeError) or (not isinstance(outcome, Exception) and not (
                    self._ours(outcome[1]) and self._our_thread(outcome[0]))):
                done[i] = False
            elif not isinstance(outcome, Exception):
                versions[i] = outcome[1].version
                done[i] = True if outcome[0] == datas[i] else None
        writes = [i for i in range(len(relabels)) if done[i] is None and versions[i] is not None]
        if writes and self.session_id == session:  # else the versions of the old session could match a peer's node
            def sets(transaction: Any) -> None:
                for i in writes:
                    transaction.set_data(paths[i], datas[i], version=versions[i])

            try:
                with self.client.deadline(self._retry_timeout_s):
                    results = self._fenced_multi(session, sets)
            except Exception:  # no clean answer: one by one (relabel() retries)
                results = None
            for i, outcome in zip(writes, results or []):
                if isinstance(outcome, (NoNodeError, BadVersionError)):
                    done[i] = False
                elif not isinstance(outcome, Exception):
                    done[i] = True
        return [self.relabel(*relabels[i]) if outcome is None else outcome for i, outcome in enumerate(done)]

    def confirm_held_many(self, partitions: Sequence[Tuple[str, int]]) -> List[bool]:
        """:meth:`confirm_held` of each partition, the reads it needs sent together."""
        paths = [self.paths.owner(topic, partition) for topic, partition in partitions]
        held: List[Optional[bool]] = [True if self._held_version(path) is not None else None for path in paths]
        unknown = [i for i, known in enumerate(held) if known is None]
        watches = {i: self._held_watch(paths[i]) for i in unknown}
        for i, outcome in zip(unknown, self._pipelined("reading", [(paths[i], self._get_async(paths[i], watches[i][1]))
                                                                   for i in unknown])):
            if isinstance(outcome, NoNodeError):
                held[i] = False
            elif not isinstance(outcome, Exception):
                held[i] = self._ours(outcome[1]) and self._our_thread(outcome[0])
                if held[i]:
                    self._remember_held(paths[i], outcome[1], watches[i][0])
        return [self.confirm_held(*partitions[i]) if known is None else known for i, known in enumerate(held)]

    def release_stale(self, topic: str, partition: int, thread_id: str) -> None:
        """Delete an owner node holding ``thread_id`` under an earlier session of this client.

        Such a node was created by an earlier, expired session of ours and would
        otherwise block our claim until ZooKeeper gets round to removing it. A
        node of a session this client never had (another process with the same
        consumer id) is left alone.
        """
        path = self.paths.owner(topic, partition)
        expected = zkformat.encode_owner(thread_id)

        def step() -> None:
            try:
                data, stat = self.client.get(path)
            except NoNodeError:
                return
            if data == expected and not self._ours(stat) and self._was_ours(stat):
                log.info("deleting %s left by an earlier session 0x%x", path, stat.ephemeralOwner)
                self._delete_of_session(path, stat)

        self._retry(step)

    def _delete_if_ours(self, path: str, expected: Optional[bytes]) -> None:
        def step() -> None:
            try:
                data, stat = self.client.get(path)
            except NoNodeError:
                return
            if not self._ours(stat) or (expected is not None and data != expected):
                return
            self._fenced_delete(stat.ephemeralOwner, path, stat.version)

        try:
            self._retry(step)
        finally:
            self._forget_held(path)  # as in release_many: a peer's re-created node has the version known

    def watch_deletion(self, topic: str, partition: int, deleted: threading.Event) -> bool:
        """Set ``deleted`` once the partition's owner node is gone; ``False`` if it already is.

        The watch callback only sets the event: it never blocks kazoo's thread.
        """

        def on_event(_event: object) -> None:
            deleted.set()

        path = self.paths.owner(topic, partition)
        stat = self._retry(lambda: self.client.exists(path, watch=on_event))
        if stat is None:
            deleted.set()
            return False
        return True

    def owners(self, topic: str) -> Dict[int, str]:
        """Current owners of a topic's partitions: partition → thread id."""
        base = self.paths.owners_topic(topic)
        try:
            children = self._retry(lambda: self.client.get_children(base))
        except NoNodeError:
            return {}
        result: Dict[int, str] = {}
        for child in children:
            try:
                data, _ = self._retry(functools.partial(self.client.get, f"{base}/{child}"))
                result[int(child)] = zkformat.decode_owner(f"{base}/{child}", data)
            except (NoNodeError, ValueError, MalformedZnodeError):
                continue
        return result

    def _our_thread(self, data: bytes) -> bool:
        """Whether an owner node's content names one of this member's thread ids (``<consumer id>-<n>``)."""
        return data.decode("utf-8", "replace").startswith(self.consumer_id + "-")

    def holds(self, topic: str, partition: int) -> bool:
        """Whether this session holds the partition's owner node, under any of our thread ids (a read only).

        Ownership belongs to the member, not to one of its streams: a node the
        rebalancer relabelled from one of our thread ids to another is still
        ours. This is the test for "was this partition taken from us?".
        """
        path = self.paths.owner(topic, partition)
        try:
            data, stat = self._retry(lambda: self.client.get(path))
        except NoNodeError:
            return False
        return self._ours(stat) and self._our_thread(data)

    def confirm_held(self, topic: str, partition: int) -> bool:
        """:meth:`holds`, re-reading only nodes that changed since this session last found them ours.

        The read that finds the node ours also sets a data watch on it; while
        that watch has not fired (the node was neither changed nor deleted, by
        anyone, ourselves included) and the session is the same, the answer is
        ``True`` without a request. So a rebalance re-reads none of the owner
        nodes a member keeps, yet a node deleted or taken over behind its back
        is still found out by the next attempt (as with a fresh read). The
        watch callback runs on kazoo's thread and only sets an event. One entry
        per owner node ever confirmed (bounded by the subscribed partitions).
        """
        path = self.paths.owner(topic, partition)
        if self._held_version(path) is not None:
            return True
        changed, on_change = self._held_watch(path)
        try:
            data, stat = self._retry(functools.partial(self.client.get, path, watch=on_change))
        except NoNodeError:
            return False
        held = self._ours(stat) and self._our_thread(data)
        if held:
            self._remember_held(path, stat, changed)
        return held

    def _held_version(self, path: str) -> Optional[int]:
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

    def _held_watch(self, path: str) -> Tuple[threading.Event, Callable[[object], None]]:
        """Forget what is known of ``path``; a fresh event and the watch callback that sets it
        (for the request that will find the node held: :meth:`_remember_held`)."""
        self._confirmed_nodes.pop(path, None)
        changed = threading.Event()

        def on_change(_event: object) -> None:  # kazoo's thread: only signals
            changed.set()

        return changed, on_change

    def _remember_held(self, path: str, stat: ZnodeStat, changed: threading.Event) -> None:
        """Record ``path`` as held by this session at ``stat.version``, until ``changed`` is set.

        One entry per owner node ever held (bounded by the subscribed partitions)."""
        self._confirmed_nodes[path] = (stat.ephemeralOwner, changed, stat.version)

    def _forget_held(self, path: str) -> None:
        """What is known of ``path`` proved wrong (a fenced write failed its version check)."""
        self._confirmed_nodes.pop(path, None)

    def owns(self, topic: str, partition: int, thread_id: str) -> bool:
        """Whether this member holds the partition's owner node under this session (a read only).

        ``thread_id`` is the thread the caller believes owns it; a node that
        names another of *our* thread ids (relabelled by a rebalance since the
        caller looked) still counts: the member owns the partition.

        The check made before committing to Kafka under ZooKeeper membership:
        a Kafka write cannot join a ZooKeeper transaction, so unlike
        :meth:`commit_offset_if_owner` this leaves a window of one round trip.
        """
        return self.holds(topic, partition)
