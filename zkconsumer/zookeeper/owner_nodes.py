"""Owner nodes (``/consumers/<group>/owners/<topic>/<partition>``) of one group member:
claim, release, relabel between our own streams, wait for a peer's release, and read.

:class:`OwnerNodes` takes the member's :class:`~zkconsumer.zookeeper.group_session.GroupSession`
(the client, the paths, the consumer id, the retry and the session bookkeeping), as kazoo's
recipes take the client; :class:`~zkconsumer.zookeeper.group.GroupClient` offers its operations.
Every write is a repeat-safe step run through the session's retry, and what leaves is a
:class:`~zkconsumer.errors.ZkConsumerError` (see the ``group`` module).
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, TypeVar

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ..errors import MalformedZnodeError, OperationCancelledError
from . import zkformat
from .group_session import GroupSession

log = logging.getLogger("zkconsumer.zookeeper.group")

T = TypeVar("T")

#: :meth:`OwnerNodes.claim_many` lists a topic's owner nodes first only for this many claims in it or more
#: (the listing costs one request; it saves one for each node it finds still held).
LIST_FROM = 2


class OwnerNodes:
    """The owner-node operations of one member, on its :class:`~zkconsumer.zookeeper.group_session.GroupSession`."""

    def __init__(self, session: GroupSession) -> None:
        self._session = session

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
        path = self._session.paths.owner(topic, partition)
        data = zkformat.encode_owner(thread_id)
        holder: List[Optional[str]] = [None]

        def step() -> bool:
            """One try; ``False`` when the node vanished between create and read (try again)."""
            holder[0] = None
            try:
                self._session.create_ephemeral(path, data)
                return True
            except NodeExistsError:
                pass
            try:
                client = self._session.client
                current, stat = client.get(path, watch=watch) if watch is not None else client.get(path)
            except NoNodeError:
                return False
            if not self._session.ours(stat):
                holder[0] = current.decode("utf-8", "replace")
            elif current != data and not self._session.fenced_set(stat.ephemeralOwner, path, data, stat.version):
                return False  # changed or gone since the read, or our session with it: look again
            return True

        self._session.until_done(step, f"claiming {path}")
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
        paths = [self._session.paths.owner(topic, partition) for topic, partition, _, _ in claims]
        datas = [zkformat.encode_owner(thread_id) for _, _, thread_id, _ in claims]
        self._session.ensure_parents(paths)
        listed = self._listed_owner_nodes([topic for topic, _, _, _ in claims]) if look_first else set()
        session = self._session
        first = session.pipelined("claiming", [
            (path, session.get_async(path, claim[3]) if path in listed else session.create_ephemeral_async(path, data))
            for path, data, claim in zip(paths, datas, claims)])
        read: Dict[int, Any] = {i: outcome for i, outcome in enumerate(first) if paths[i] in listed}
        created = {i: outcome for i, outcome in enumerate(first) if paths[i] not in listed}
        existing = [i for i, outcome in created.items() if isinstance(outcome, NodeExistsError)]
        again = [i for i, outcome in created.items()
                 if isinstance(outcome, Exception) and not isinstance(outcome, NodeExistsError)]
        read.update(zip(existing, self._session.pipelined(
            "reading", [(paths[i], self._session.get_async(paths[i], claims[i][3])) for i in existing])))
        holders: List[Optional[str]] = [None] * len(claims)
        for i, outcome in read.items():  # NoNodeError (released since it was listed) goes to claim() too
            if isinstance(outcome, Exception) or (self._session.ours(outcome[1]) and outcome[0] != datas[i]):
                again.append(i)
            elif not self._session.ours(outcome[1]):
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
        bases = [self._session.paths.owners_topic(topic) for topic in wanted]
        listed: Set[str] = set()
        for base, outcome in zip(bases, self._session.pipelined(
                "listing", [(base, functools.partial(self._session.client.raw.get_children_async, base)) for base in bases])):
            if not isinstance(outcome, Exception):
                listed.update(f"{base}/{child}" for child in outcome)
        return listed

    def release_many(self, partitions: Sequence[Tuple[str, int]]) -> None:
        """:meth:`release` of each partition: every node read at once, ours deleted in one multi-operation.

        Two requests for the lot where :meth:`release` takes two per node, and
        no read of a node known held (:meth:`~.group_session.GroupSession.held_version`). The multi deletes
        each node at the version read or known, so it deletes nothing if any of
        them changed meanwhile; then, as for any read without a clean answer,
        each goes through :meth:`release` on its own (repeat-safe). A version
        known without a read carries the fenced commit's residual window (a
        foreign tool deleting our live node and a peer re-creating it before our
        watch reports it), no wider than a read's.
        """
        paths = [self._session.paths.owner(topic, partition) for topic, partition in partitions]
        session = self._session.session_id  # the versions known and read are this session's
        known = [self._session.held_version(path) for path in paths]
        unknown = [i for i, version in enumerate(known) if version is None]
        read = self._session.pipelined("reading", [(paths[i], self._session.get_async(paths[i])) for i in unknown])
        again = [i for i, outcome in zip(unknown, read) if isinstance(outcome, Exception)
                 and not isinstance(outcome, NoNodeError)]
        ours = [(i, outcome[1].version) for i, outcome in zip(unknown, read)
                if not isinstance(outcome, Exception) and self._session.ours(outcome[1])]
        ours += [(i, version) for i, version in enumerate(known) if version is not None]
        if ours and self._session.session_id != session:
            # A new session since the versions were learnt: a node of ours is gone with the old
            # one, and a peer's re-created node has the same version. Decided one by one (a read each).
            again.extend(i for i, _ in ours)
            ours = []
        if ours:
            def deletes(transaction: Any) -> None:
                for i, version in ours:
                    transaction.delete(paths[i], version=version)

            try:
                with self._session.client.deadline(self._session.retry_timeout_s):
                    results = self._session.fenced_multi(session, deletes)
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
                self._session.forget_held(path)

    def release(self, topic: str, partition: int, thread_id: Optional[str] = None) -> None:
        """Delete the owner node if this session holds it (repeat-safe).

        Unlike Kafka's consumer, never deletes a node another member has already
        claimed: that would make two members own one partition. (So the node is
        read first: a version remembered from our own write would not tell our
        node from one another member created after a tool deleted ours.)
        """
        expected = None if thread_id is None else zkformat.encode_owner(thread_id)
        self._session.delete_if_ours(self._session.paths.owner(topic, partition), expected)

    def relabel(self, topic: str, partition: int, thread_id: str) -> bool:
        """Give an owner node this session holds under one of our thread ids to ``thread_id``.

        Two requests (a read, a write conditional on the version read), where
        :meth:`claim` would first try a create. ``False`` (nothing written) when
        the node is missing or not ours; then :meth:`claim` decides.
        """
        path = self._session.paths.owner(topic, partition)
        data = zkformat.encode_owner(thread_id)

        def step() -> bool:
            try:
                current, stat = self._session.client.get(path)
            except NoNodeError:
                return False
            if not (self._session.ours(stat) and self._session.our_thread(current)):
                return False
            return current == data or self._session.fenced_set(stat.ephemeralOwner, path, data, stat.version)

        return self._session.retry(step)

    def relabel_many(self, relabels: Sequence[Tuple[str, int, str]]) -> List[bool]:
        """:meth:`relabel` of each ``(topic, partition, thread_id)``, pipelined; whether each was relabelled.

        The nodes whose version is known held (:meth:`~.group_session.GroupSession.held_version`) are not
        read; the others are read together; then every write goes at once,
        each conditional on its version. A node missing, not ours, or changed
        before its write is ``False`` (then :meth:`claim` decides, as after
        :meth:`relabel`); any answer that is not clean goes through
        :meth:`relabel` on its own, which retries.
        """
        paths = [self._session.paths.owner(topic, partition) for topic, partition, _ in relabels]
        datas = [zkformat.encode_owner(thread_id) for _, _, thread_id in relabels]
        session = self._session.session_id  # the versions known and read are this session's
        versions: List[Optional[int]] = [self._session.held_version(path) for path in paths]
        unknown = [i for i, version in enumerate(versions) if version is None]
        done: List[Optional[bool]] = [None] * len(relabels)
        for i, outcome in zip(unknown, self._session.pipelined("reading", [(paths[i], self._session.get_async(paths[i]))
                                                                   for i in unknown])):
            if isinstance(outcome, NoNodeError) or (not isinstance(outcome, Exception) and not (
                    self._session.ours(outcome[1]) and self._session.our_thread(outcome[0]))):
                done[i] = False
            elif not isinstance(outcome, Exception):
                versions[i] = outcome[1].version
                done[i] = True if outcome[0] == datas[i] else None
        writes = [i for i in range(len(relabels)) if done[i] is None and versions[i] is not None]
        if writes and self._session.session_id == session:  # else the versions of the old session could match a peer's node
            def sets(transaction: Any) -> None:
                for i in writes:
                    transaction.set_data(paths[i], datas[i], version=versions[i])

            try:
                with self._session.client.deadline(self._session.retry_timeout_s):
                    results = self._session.fenced_multi(session, sets)
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
        paths = [self._session.paths.owner(topic, partition) for topic, partition in partitions]
        held: List[Optional[bool]] = [True if self._session.held_version(path) is not None else None for path in paths]
        unknown = [i for i, known in enumerate(held) if known is None]
        watches = {i: self._session.held_watch(paths[i]) for i in unknown}
        reads = [(paths[i], self._session.get_async(paths[i], watches[i][1])) for i in unknown]
        for i, outcome in zip(unknown, self._session.pipelined("reading", reads)):
            if isinstance(outcome, NoNodeError):
                held[i] = False
            elif not isinstance(outcome, Exception):
                held[i] = self._session.ours(outcome[1]) and self._session.our_thread(outcome[0])
                if held[i]:
                    self._session.remember_held(paths[i], outcome[1], watches[i][0])
        return [self.confirm_held(*partitions[i]) if known is None else known for i, known in enumerate(held)]

    def release_stale(self, topic: str, partition: int, thread_id: str) -> None:
        """Delete an owner node holding ``thread_id`` under an earlier session of this client.

        Such a node was created by an earlier, expired session of ours and would
        otherwise block our claim until ZooKeeper gets round to removing it. A
        node of a session this client never had (another process with the same
        consumer id) is left alone.
        """
        path = self._session.paths.owner(topic, partition)
        expected = zkformat.encode_owner(thread_id)

        def step() -> None:
            try:
                data, stat = self._session.client.get(path)
            except NoNodeError:
                return
            if data == expected and not self._session.ours(stat) and self._session.was_ours(stat):
                log.info("deleting %s left by an earlier session 0x%x", path, stat.ephemeralOwner)
                self._session.delete_of_session(path, stat)

        self._session.retry(step)

    def watch_deletion(self, topic: str, partition: int, deleted: threading.Event) -> bool:
        """Set ``deleted`` once the partition's owner node is gone; ``False`` if it already is.

        The watch callback only sets the event: it never blocks kazoo's thread.
        """

        def on_event(_event: object) -> None:
            deleted.set()

        path = self._session.paths.owner(topic, partition)
        stat = self._session.retry(lambda: self._session.client.exists(path, watch=on_event))
        if stat is None:
            deleted.set()
            return False
        return True

    def owners(self, topic: str) -> Dict[int, str]:
        """Current owners of a topic's partitions: partition → thread id."""
        base = self._session.paths.owners_topic(topic)
        try:
            children = self._session.retry(lambda: self._session.client.get_children(base))
        except NoNodeError:
            return {}
        result: Dict[int, str] = {}
        for child in children:
            try:
                data, _ = self._session.retry(functools.partial(self._session.client.get, f"{base}/{child}"))
                result[int(child)] = zkformat.decode_owner(f"{base}/{child}", data)
            except (NoNodeError, ValueError, MalformedZnodeError):
                continue
        return result

    def holds(self, topic: str, partition: int) -> bool:
        """Whether this session holds the partition's owner node, under any of our thread ids (a read only).

        Ownership belongs to the member, not to one of its streams: a node the
        rebalancer relabelled from one of our thread ids to another is still
        ours. This is the test for "was this partition taken from us?".
        """
        path = self._session.paths.owner(topic, partition)
        try:
            data, stat = self._session.retry(lambda: self._session.client.get(path))
        except NoNodeError:
            return False
        return self._session.ours(stat) and self._session.our_thread(data)

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
        path = self._session.paths.owner(topic, partition)
        if self._session.held_version(path) is not None:
            return True
        changed, on_change = self._session.held_watch(path)
        try:
            data, stat = self._session.retry(functools.partial(self._session.client.get, path, watch=on_change))
        except NoNodeError:
            return False
        held = self._session.ours(stat) and self._session.our_thread(data)
        if held:
            self._session.remember_held(path, stat, changed)
        return held

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
