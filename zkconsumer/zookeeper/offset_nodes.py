"""Offset nodes (``/consumers/<group>/offsets/<topic>/<partition>``) of one group member:
read (one by one or together), written, and written only while this member owns the
partition (fenced), one partition at a time or all of a commit in one multi-operation.

:class:`OffsetNodes` takes the member's :class:`~zkconsumer.zookeeper.group_session.GroupSession`,
as :class:`~zkconsumer.zookeeper.owner_nodes.OwnerNodes` does; every write is a repeat-safe step
run through the session's retry, and what leaves is a :class:`~zkconsumer.errors.ZkConsumerError`
(see the ``group`` module).
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from kazoo.exceptions import NodeExistsError, NoNodeError

from ..structs import TopicPartition
from . import zkformat
from .group_session import NOT_APPLIED, GroupSession

log = logging.getLogger("zkconsumer.zookeeper.group")

#: The most partitions one fenced multi-operation writes (two operations each, and the session's
#: fence check; ZooKeeper
#: refuses a request over its 1 MB jute.maxbuffer, far above this many).
MAX_COMMIT_BATCH = 500


class OffsetNodes:
    """The offset-node operations of one member, on its :class:`~zkconsumer.zookeeper.group_session.GroupSession`."""

    def __init__(self, session: GroupSession) -> None:
        self._session = session
        self._offset_nodes: Set[str] = set()  # offset nodes seen to exist (they are never deleted by members)
        self._offset_parents: Set[str] = set()  # offsets/<topic> nodes ensured

    def read_offset(self, topic: str, partition: int) -> Optional[int]:
        """The committed next-offset-to-consume, or ``None`` if none was committed.

        A malformed offset node raises :class:`MalformedZnodeError` naming it:
        silently resetting would lose or replay data.
        """
        path = self._session.paths.offset(topic, partition)
        try:
            data, _ = self._session.retry(functools.partial(self._session.client.get, path))
        except NoNodeError:
            return None
        self._offset_nodes.add(path)
        return zkformat.decode_offset(path, data)

    def read_offsets(self, partitions: Iterable[TopicPartition]) -> Dict[TopicPartition, Optional[int]]:
        """:meth:`read_offset` of each partition, the reads pipelined (about one round trip in all).

        A read without a clean answer is made again on its own, retried, as
        :meth:`read_offset` does; a malformed node raises as there.
        """
        tps = list(partitions)
        paths = [self._session.paths.offset(*tp) for tp in tps]
        read = self._session.pipelined("reading", [(path, self._session.get_async(path)) for path in paths])
        offsets: Dict[TopicPartition, Optional[int]] = {}
        for tp, path, outcome in zip(tps, paths, read):
            if isinstance(outcome, NoNodeError):
                offsets[tp] = None
            elif isinstance(outcome, Exception):
                offsets[tp] = self.read_offset(*tp)
            else:
                self._offset_nodes.add(path)
                offsets[tp] = zkformat.decode_offset(path, outcome[0])
        return offsets

    def commit_offset(self, topic: str, partition: int, offset: int) -> None:
        """Write ``offset`` as the next offset to consume (idempotent)."""
        path = self._session.paths.offset(topic, partition)
        data = zkformat.encode_offset(offset)

        def step() -> None:
            try:
                self._session.client.set(path, data)
            except NoNodeError:
                try:
                    self._session.client.create(path, data, acl=self._session.acl, makepath=True)
                except NodeExistsError:
                    self._session.client.set(path, data)

        self._session.retry(step)

    def commit_offsets(self, offsets: Mapping[TopicPartition, int]) -> None:
        for (topic, partition), offset in sorted(offsets.items()):
            self.commit_offset(topic, partition, offset)

    def commit_offset_if_owner(self, topic: str, partition: int, offset: int, owner: str,
                               session: Optional[int] = None) -> bool:
        """Write ``offset`` only while this member holds the partition under this session: a fenced commit.

        ``session``: the session the offset was handed out under (the one the
        commit began on; ``None``: the client's session at the call). The write
        is applied only while that session lives: the multi-operation that makes
        it also checks the session's fence node (see the ``fence`` module), so
        a try sent on a later session, even one decided before the reconnect, is
        fenced. A commit that began before a session expiry and is retried
        after the member re-claimed the partition on a new session would
        otherwise write the old incarnation's position over what the new one
        read, and the committed offset would move backwards. A connection that
        is only SUSPENDED keeps its session: a commit retried across the blip
        is not fenced by it.

        The owner node must belong to that session and name one of this
        member's thread ids: ``owner`` is the thread the caller saw, but a node
        relabelled meanwhile to another of our threads (a rebalance that kept the
        partition) is still ours, so a commit racing a relabel is not fenced.
        The check and the write run as one ZooKeeper multi-operation (``check``
        of the owner node's version, ``set``/``create`` of the offset), so a
        partition released or taken over in between is not written. A member
        whose session expired while it was frozen cannot write at all (the
        session is gone), and after reconnecting it sees another session's node.

        Returns ``True`` when written, ``False`` when *fenced* (nothing written:
        the partition is no longer ours). A write the server refuses for another
        reason (``NoAuthError`` on an offset node another client protected with
        an ACL, ...) is not fencing: the kazoo error is raised. Repeat-safe.

        The owner node is read only when its version is not known without a
        request (:meth:`~.group_session.GroupSession.held_version`: an earlier read set a data watch that
        has not fired since); so a steady commit is one request.

        Residual window: another client deleting our node *and* recreating one
        at the same version between the read (or the watch's last word) and the
        multi, while our session lives; only a foreign tool deleting a live
        member's node can start that.
        """
        owner_path = self._session.paths.owner(topic, partition)
        offset_path = self._session.paths.offset(topic, partition)
        data = zkformat.encode_offset(offset)
        outcome: List[bool] = [False]
        began = self._session.session_id if session is None else session

        def step() -> bool:
            """One try; ``False`` when the owner was relabelled or the offset node appeared/vanished (try again)."""
            if began is None or self._session.session_id != began:
                outcome[0] = False  # began on a session that is gone: not ours to write any more
                return True
            version = self._session.held_version(owner_path)  # known held and unchanged: no read
            if version is None:
                changed, on_change = self._session.held_watch(owner_path)
                try:
                    current, stat = self._session.client.get(owner_path, watch=on_change)
                except NoNodeError:
                    outcome[0] = False
                    return True
                if not (stat.ephemeralOwner == began and self._session.our_thread(current)):
                    outcome[0] = False
                    return True
                self._session.remember_held(owner_path, stat, changed)  # the next commit needs no read
                version = stat.version
            # No existence checks: an offset node seen before (read or written) is set, any other
            # is created (members never delete them; we read the offset of every partition we
            # claim). If that guess is wrong, the multi fails with NodeExists/NoNode, nothing is
            # written, and the next try knows better. The topic's offsets node is ensured once.
            exists = offset_path in self._offset_nodes
            parent = self._session.paths.offsets_topic(topic)
            if not exists and parent not in self._offset_parents:
                self._session.client.ensure_path(parent, acl=self._session.acl)
                self._offset_parents.add(parent)

            def ops(transaction: Any) -> None:
                transaction.check(owner_path, version)
                if exists:
                    transaction.set_data(offset_path, data)
                else:
                    transaction.create(offset_path, data, acl=self._session.acl)

            results = self._session.fenced_multi(began, ops)
            if results is None:
                outcome[0] = False  # the session it began on is gone (its fence with it): fenced
                return True
            check, write = results
            if isinstance(check, Exception) and not isinstance(check, NOT_APPLIED):
                self._session.forget_held(owner_path)
                return False  # the owner node changed since we read it (relabelled, or gone): look again
            if isinstance(write, NodeExistsError):
                self._offset_nodes.add(offset_path)
                return False  # the offset node exists: set it on the next try
            if isinstance(write, NoNodeError):
                self._offset_nodes.discard(offset_path)
                self._offset_parents.discard(parent)
                return False  # the offset node (or its parent) vanished: go round again
            if isinstance(write, Exception) and not isinstance(write, NOT_APPLIED):
                raise write  # refused (NoAuth, ...): an error, not a lost ownership
            outcome[0] = True
            return True

        self._session.until_done(step, f"committing {offset_path}")
        if outcome[0]:
            self._offset_nodes.add(offset_path)
        return outcome[0]

    def commit_offsets_if_owner(self, entries: Sequence[Tuple[str, int, int]], session: Optional[int] = None) -> bool:
        """Write every ``(topic, partition, offset)`` in one multi-operation, fenced as
        :meth:`commit_offset_if_owner` fences one; ``True`` if all were written.

        The fast path of a commit: the owner nodes whose version is not known
        (:meth:`~.group_session.GroupSession.held_version`) are read together (setting the watch that makes
        the next commit's reads unnecessary), then one multi checks every owner
        node's version and sets (or creates) every offset node. So a member's
        steady commit is one request however many partitions it owns, where one
        partition at a time takes one or two each.

        ``False`` means nothing was written (a multi-operation is all or
        nothing): a partition not held by this session under one of our thread
        ids, an owner node changed since it was read, an offset node that
        appeared or vanished, the session gone, ZooKeeper not answering or
        refusing. The caller then commits partition by partition with
        :meth:`commit_offset_if_owner`, which tells fenced from refused from
        unreachable. Never raises a ZooKeeper error. At most
        :data:`MAX_COMMIT_BATCH` partitions per call. ``session``: as for
        :meth:`commit_offset_if_owner` (its fence is checked by the same multi).
        """
        began = self._session.session_id if session is None else session
        if not entries or len(entries) > MAX_COMMIT_BATCH or began is None or self._session.session_id != began:
            return False
        owners = [self._session.paths.owner(topic, partition) for topic, partition, _ in entries]
        offsets = [self._session.paths.offset(topic, partition) for topic, partition, _ in entries]
        versions = [self._session.held_version(path) for path in owners]
        unknown = [i for i, version in enumerate(versions) if version is None]
        watches = {i: self._session.held_watch(owners[i]) for i in unknown}
        try:
            read = self._session.pipelined("reading", [(owners[i], self._session.get_async(owners[i], watches[i][1]))
                                               for i in unknown])
            read_versions: Dict[int, int] = {}
            for i, outcome in zip(unknown, read):
                if isinstance(outcome, Exception) or not (outcome[1].ephemeralOwner == began
                                                          and self._session.our_thread(outcome[0])):
                    return False  # fenced, gone or unanswered: decided partition by partition
                self._session.remember_held(owners[i], outcome[1], watches[i][0])
                read_versions[i] = outcome[1].version
            for parent in sorted({self._session.paths.offsets_topic(topic) for topic, _, _ in entries} - self._offset_parents):
                self._session.retry(functools.partial(self._session.client.ensure_path, parent, acl=self._session.acl))
                self._offset_parents.add(parent)

            def ops(transaction: Any) -> None:
                for i, ((_, _, offset), owner, path) in enumerate(zip(entries, owners, offsets)):
                    known = versions[i]
                    transaction.check(owner, read_versions[i] if known is None else known)
                    data = zkformat.encode_offset(offset)
                    if path in self._offset_nodes:
                        transaction.set_data(path, data)
                    else:
                        transaction.create(path, data, acl=self._session.acl)

            # The reads or the parents' creation above may have been retried onto a new session:
            # the versions known belong to the old one, and a node re-created since (by a peer that
            # claimed it) has the same version 0 (found by the simulator, tests/sim). The fence of
            # the session the commit began on, checked by the same multi, refuses that write.
            with self._session.client.deadline(self._session.retry_timeout_s):
                answered = self._session.fenced_multi(began, ops)
        except Exception as exc:  # anything unclear: the one-by-one path decides and reports it
            log.debug("committing %d offsets in one multi-operation failed (%s); one by one", len(entries), exc)
            return False
        if answered is None:
            return False  # the session is gone: the one-by-one path reports every partition fenced
        results = answered
        if any(isinstance(result, Exception) for result in results):
            for owner, path, check, write in zip(owners, offsets, results[0::2], results[1::2]):
                if isinstance(check, Exception) and not isinstance(check, NOT_APPLIED):
                    self._session.forget_held(owner)
                if isinstance(write, NodeExistsError):
                    self._offset_nodes.add(path)
                elif isinstance(write, NoNodeError):
                    self._offset_nodes.discard(path)
            return False
        self._offset_nodes.update(offsets)
        return True
