"""Every ZooKeeper read and write a group member makes, and nothing else.

:class:`GroupClient` owns ``/consumers/<group>/...`` for one member: its registration and the
member list here, and, by composition, the owner nodes
(:class:`~zkconsumer.zookeeper.owner_nodes.OwnerNodes`), the offset nodes
(:class:`~zkconsumer.zookeeper.offset_nodes.OffsetNodes`) and the cluster's topics and brokers
(:class:`~zkconsumer.zookeeper.cluster_reads.ClusterReads`), each handed the member's one
:class:`~zkconsumer.zookeeper.group_session.GroupSession` (client, paths, consumer id, retry,
session bookkeeping), as kazoo's recipes take the client. Every write is
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
import random
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat

from ..errors import ConsumerIdInUseError, MalformedZnodeError, ZooKeeperUnavailableError
from ..structs import Broker, TopicPartition
from . import zkformat
from .cluster_reads import ClusterReads
from .fence import SessionFences
from .group_session import GroupSession
from .offset_nodes import OffsetNodes
from .owner_nodes import OwnerNodes
from .zkcalls import BoundedZooKeeper

__all__ = ["GroupClient"]

log = logging.getLogger(__name__)


class GroupClient:
    """ZooKeeper operations of one member (``consumer_id``) of one consumer group.

    ``retry_timeout_s``, ``acl``, ``sleep``, ``clock`` and ``rng``: see
    :class:`~zkconsumer.zookeeper.group_session.GroupSession` (``self.session``). ``id_wait_s``
    is how long :meth:`register` waits for a member node held by a foreign session to go away
    (default: ``retry_timeout_s`` + 2 s). The owner-node, offset-node and cluster reads are
    those of ``self.owner_nodes``, ``self.offset_nodes`` and ``self.cluster``, offered here too.
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
        rng: Optional[random.Random] = None,
    ) -> None:
        self.session = GroupSession(client, group, consumer_id, retry_timeout_s=retry_timeout_s, acl=acl,
                                    sleep=sleep, clock=clock, rng=rng)
        self.owner_nodes = OwnerNodes(self.session)
        self.offset_nodes = OffsetNodes(self.session)
        self.cluster = ClusterReads(self.session)
        self._id_wait_s = retry_timeout_s + 2.0 if id_wait_s is None else id_wait_s
        # members(): registrations read, and the cversion of the ids node they were read at.
        self._member_cache: Dict[str, Optional[zkformat.Registration]] = {}
        self._ids_cversion: Optional[int] = None
        #: Where members() may take the member list from instead of reading it: the member ids and the
        #: ids node's stat, or None when that source cannot vouch for them now (GroupWatcher.member_list).
        self.member_list: Optional[Callable[[], Optional[Tuple[List[str], ZnodeStat]]]] = None

    # ----------------------------------------------------------------- the session

    @property
    def client(self) -> BoundedZooKeeper:
        """The session's client (``client.raw`` is the KazooClient)."""
        return self.session.client

    @property
    def group(self) -> str:
        return self.session.group

    @property
    def consumer_id(self) -> str:
        return self.session.consumer_id

    @property
    def paths(self) -> zkformat.GroupPaths:
        return self.session.paths

    @property
    def fences(self) -> SessionFences:
        """The fence node of each of our sessions (see the ``fence`` module)."""
        return self.session.fences

    @property
    def session_id(self) -> Optional[int]:
        """See :attr:`~zkconsumer.zookeeper.group_session.GroupSession.session_id`."""
        return self.session.session_id

    def note_session(self) -> None:
        """Record the current session as ours (call on every new session; cheap, never blocks)."""
        self.session.note_session()

    def connection_lost(self) -> None:
        """The connection dropped: every watch-kept cache is stale (see :meth:`GroupSession.connection_lost
        <zkconsumer.zookeeper.group_session.GroupSession.connection_lost>`). Never blocks."""
        self.session.connection_lost()

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
        path = self.session.paths.member(self.session.consumer_id)
        foreign: List[int] = []

        def step() -> bool:
            """One try; ``False`` when a node must go first (try again)."""
            foreign.clear()
            self.fences.ensure(self.session.session_id)  # once per session: before any node of ours is made
            try:
                self.session.create_ephemeral(path, registration)
                return True
            except NodeExistsError:
                pass
            try:
                data, stat = self.session.client.get(path)
            except NoNodeError:
                return False  # an earlier session's node just expired
            if self.session.ours(stat):
                return data == registration or self.session.fenced_set(stat.ephemeralOwner, path, registration, stat.version)
            if not self.session.was_ours(stat):
                foreign.append(stat.ephemeralOwner)
                return False
            log.info("replacing %s left by an earlier session 0x%x", path, stat.ephemeralOwner)
            self.session.delete_of_session(path, stat)
            return False

        try:
            started = self.session.clock()
            changes = 0
            warned = False
            while not self.session.retry(step):
                if not foreign:
                    changes += 1
                    if changes >= 5:
                        raise ZooKeeperUnavailableError(
                            f"registering {path}: the node kept changing under us; gave up after {changes} tries")
                    continue
                waited = self.session.clock() - started
                if waited >= self._id_wait_s:
                    raise ConsumerIdInUseError(self.session.consumer_id, path, foreign[0], waited)
                if not warned:
                    warned = True
                    log.warning("%s is held by ZooKeeper session 0x%x, not ours: another process with the same "
                                "consumer.id, or one that just died; waiting up to %.1fs for it to go",
                                path, foreign[0], self._id_wait_s)
                if cancelled is not None:
                    if cancelled.wait(0.2):
                        raise ZooKeeperUnavailableError(f"registering {path}: cancelled")
                else:
                    self.session.sleep(0.2)
        finally:
            self._member_cache.pop(self.session.consumer_id, None)  # our node may have been re-created or rewritten

    def deregister(self) -> None:
        """Delete our member node if it is ours (repeat-safe)."""
        self.session.delete_if_ours(self.session.paths.member(self.session.consumer_id), expected=None)

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
        session = self.session
        listed = None if fresh or self.member_list is None else self.member_list()
        try:
            ids, stat = listed or session.retry(lambda: session.client.get_children(session.paths.ids, include_data=True))
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
        read = dict(zip(new, session.pipelined("reading", [(p, session.get_async(p)) for p in map(session.paths.member, new)])))
        members: Dict[str, zkformat.Registration] = {}
        for consumer_id in sorted(current):
            if consumer_id in self._member_cache:
                cached = self._member_cache[consumer_id]
                if cached is not None:
                    members[consumer_id] = cached
                continue
            path = self.session.paths.member(consumer_id)
            outcome = read[consumer_id]
            if isinstance(outcome, Exception) and not isinstance(outcome, NoNodeError):
                try:
                    outcome = session.retry(functools.partial(session.client.get, path))  # no clean answer: again, retried
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


    # ------------------------------------------------- the collaborators' operations

    @property
    def topic_data(self) -> Optional[Callable[[str], Optional[bytes]]]:
        """See :attr:`~zkconsumer.zookeeper.cluster_reads.ClusterReads.topic_data`."""
        return self.cluster.topic_data

    @topic_data.setter
    def topic_data(self, source: Optional[Callable[[str], Optional[bytes]]]) -> None:
        self.cluster.topic_data = source

    def all_topics(self) -> List[str]:
        """See :meth:`~zkconsumer.zookeeper.cluster_reads.ClusterReads.all_topics`."""
        return self.cluster.all_topics()

    def partitions_for_topics(self, topics: Iterable[str]) -> Dict[str, List[int]]:
        """See :meth:`~zkconsumer.zookeeper.cluster_reads.ClusterReads.partitions_for_topics`."""
        return self.cluster.partitions_for_topics(topics)

    def brokers(self, protocol: str = "PLAINTEXT") -> List[Broker]:
        """See :meth:`~zkconsumer.zookeeper.cluster_reads.ClusterReads.brokers`."""
        return self.cluster.brokers(protocol)

    def claim(self, topic: str, partition: int, thread_id: str,
              watch: Optional[Callable[[object], None]] = None) -> Optional[str]:
        """See :meth:`~zkconsumer.zookeeper.owner_nodes.OwnerNodes.claim`."""
        return self.owner_nodes.claim(topic, partition, thread_id, watch)

    def claim_many(self, claims: Sequence[Tuple[str, int, str, Optional[Callable[[object], None]]]],
                   look_first: bool = False, cancelled: Optional[Callable[[], bool]] = None) -> List[Optional[str]]:
        """See :meth:`~zkconsumer.zookeeper.owner_nodes.OwnerNodes.claim_many`."""
        return self.owner_nodes.claim_many(claims, look_first, cancelled)

    def release_many(self, partitions: Sequence[Tuple[str, int]]) -> None:
        """See :meth:`~zkconsumer.zookeeper.owner_nodes.OwnerNodes.release_many`."""
        self.owner_nodes.release_many(partitions)

    def release(self, topic: str, partition: int, thread_id: Optional[str] = None) -> None:
        """See :meth:`~zkconsumer.zookeeper.owner_nodes.OwnerNodes.release`."""
        self.owner_nodes.release(topic, partition, thread_id)

    def relabel(self, topic: str, partition: int, thread_id: str) -> bool:
        """See :meth:`~zkconsumer.zookeeper.owner_nodes.OwnerNodes.relabel`."""
        return self.owner_nodes.relabel(topic, partition, thread_id)

    def relabel_many(self, relabels: Sequence[Tuple[str, int, str]]) -> List[bool]:
        """See :meth:`~zkconsumer.zookeeper.owner_nodes.OwnerNodes.relabel_many`."""
        return self.owner_nodes.relabel_many(relabels)

    def confirm_held_many(self, partitions: Sequence[Tuple[str, int]]) -> List[bool]:
        """See :meth:`~zkconsumer.zookeeper.owner_nodes.OwnerNodes.confirm_held_many`."""
        return self.owner_nodes.confirm_held_many(partitions)

    def release_stale(self, topic: str, partition: int, thread_id: str) -> None:
        """See :meth:`~zkconsumer.zookeeper.owner_nodes.OwnerNodes.release_stale`."""
        self.owner_nodes.release_stale(topic, partition, thread_id)

    def watch_deletion(self, topic: str, partition: int, deleted: threading.Event) -> bool:
        """See :meth:`~zkconsumer.zookeeper.owner_nodes.OwnerNodes.watch_deletion`."""
        return self.owner_nodes.watch_deletion(topic, partition, deleted)

    def owners(self, topic: str) -> Dict[int, str]:
        """See :meth:`~zkconsumer.zookeeper.owner_nodes.OwnerNodes.owners`."""
        return self.owner_nodes.owners(topic)

    def holds(self, topic: str, partition: int) -> bool:
        """See :meth:`~zkconsumer.zookeeper.owner_nodes.OwnerNodes.holds`."""
        return self.owner_nodes.holds(topic, partition)

    def confirm_held(self, topic: str, partition: int) -> bool:
        """See :meth:`~zkconsumer.zookeeper.owner_nodes.OwnerNodes.confirm_held`."""
        return self.owner_nodes.confirm_held(topic, partition)

    def owns(self, topic: str, partition: int, thread_id: str) -> bool:
        """See :meth:`~zkconsumer.zookeeper.owner_nodes.OwnerNodes.owns`."""
        return self.owner_nodes.owns(topic, partition, thread_id)

    def read_offset(self, topic: str, partition: int) -> Optional[int]:
        """See :meth:`~zkconsumer.zookeeper.offset_nodes.OffsetNodes.read_offset`."""
        return self.offset_nodes.read_offset(topic, partition)

    def read_offsets(self, partitions: Iterable[TopicPartition]) -> Dict[TopicPartition, Optional[int]]:
        """See :meth:`~zkconsumer.zookeeper.offset_nodes.OffsetNodes.read_offsets`."""
        return self.offset_nodes.read_offsets(partitions)

    def commit_offset(self, topic: str, partition: int, offset: int) -> None:
        """See :meth:`~zkconsumer.zookeeper.offset_nodes.OffsetNodes.commit_offset`."""
        self.offset_nodes.commit_offset(topic, partition, offset)

    def commit_offsets(self, offsets: Mapping[TopicPartition, int]) -> None:
        """See :meth:`~zkconsumer.zookeeper.offset_nodes.OffsetNodes.commit_offsets`."""
        self.offset_nodes.commit_offsets(offsets)

    def commit_offset_if_owner(self, topic: str, partition: int, offset: int, owner: str,
                               session: Optional[int] = None) -> bool:
        """See :meth:`~zkconsumer.zookeeper.offset_nodes.OffsetNodes.commit_offset_if_owner`."""
        return self.offset_nodes.commit_offset_if_owner(topic, partition, offset, owner, session)

    def commit_offsets_if_owner(self, entries: Sequence[Tuple[str, int, int]], session: Optional[int] = None) -> bool:
        """See :meth:`~zkconsumer.zookeeper.offset_nodes.OffsetNodes.commit_offsets_if_owner`."""
        return self.offset_nodes.commit_offsets_if_owner(entries, session)
