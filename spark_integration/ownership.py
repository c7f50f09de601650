"""One streaming query per group: the query holds the owner nodes of the partitions it reads.

Two streaming queries on the same ``group.id`` would each write their own
position to ``/consumers/<group>/offsets``, overwriting each other unnoticed.
So the source takes the partitions it reads the way a group member does: it
creates the ephemeral owner node ``/consumers/<group>/owners/<topic>/<partition>``
holding its own thread id (``zkconsumer-spark-query_<host>-<ms>-<uuid8>-0``),
and writes each offset only while it holds that node, checking and writing in
one ZooKeeper multi-operation (:meth:`zkconsumer.zookeeper.group.GroupClient.commit_offset_if_owner`).

* A second query on the group finds the nodes taken and fails with
  :class:`GroupInUseError`, naming the group, a partition and its holder.
  So does a query started while consumers of that group run with ZooKeeper
  membership, and such a consumer cannot claim the query's partitions (its
  rebalance fails until the query stops): both would otherwise commit the
  same partitions. Kafka's tools (ConsumerOffsetChecker) show the query as
  the owner.
* A driver that crashes leaves its nodes until its ZooKeeper session expires
  (``zookeeper.session.timeout.ms``); a query that finds nodes taken waits that
  long (plus a margin: 9.5 s in all for the default 6 s) for them to vanish
  before it gives up, so restarting a crashed query just works. The session is the query's own: it is opened
  lazily in the process that plans the micro-batches and closed by
  :meth:`QueryOwnership.close` (the reader's ``stop()``), which frees the nodes
  at once.
* If the query's own session expires (the driver was cut off from ZooKeeper),
  its nodes vanish; the next write finds it no longer holds the partition,
  takes it again if nobody else did, and otherwise fails with
  :class:`GroupInUseError` without writing: a query that lost the group never
  overwrites the new holder's offsets.

With ``offsets.storage=kafka`` the query still holds the owner nodes (they
fence it against other queries and ZooKeeper-membership consumers), and writes
through the connector's storage (:func:`~zkconsumer.consumer.offset_stores.make_offset_storage`,
fenced by these owner nodes): each partition is checked held before one
OffsetCommit v1 (generation -1) carries the batch to Kafka, and with
``dual.commit.enabled`` ZooKeeper then gets, fenced as above, what Kafka
accepted. While coordinator members hold the group, Kafka refuses such a commit
and :meth:`QueryOwnership.commit` raises the connector's
:class:`~zkconsumer.errors.OffsetStorageError` naming that cause.

Partitions are claimed in sorted order and a claim stops at the first one held
by someone else, so two queries starting together do not each end up holding
half of the group.
"""

from __future__ import annotations

import functools
import logging
import socket
import time
import uuid
from typing import Callable, Dict, Iterable, Mapping, Optional, Set, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, SessionExpiredError

from zkconsumer import ConsumerConfig, ZkConsumerError, ZooKeeperUnavailableError
from zkconsumer.commits import CommitEntry, OffsetStorage
from zkconsumer.consumer.offset_stores import make_offset_storage
from zkconsumer.errors import ZooKeeperSessionExpiredError
from zkconsumer.structs import TopicPartition
from zkconsumer.zookeeper.acl import zookeeper_acls
from zkconsumer.zookeeper.group import GroupClient

from .group_view import open_zookeeper

__all__ = ["GroupInUseError", "QueryOwnership", "query_thread_id"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How long past ``zookeeper.session.timeout.ms`` a claim waits for a crashed holder's nodes:
#: ZooKeeper expires sessions in buckets of its tick (2 s by default), and the crashed driver's
#: last heartbeat may predate the crash by a third of the timeout.
EXPIRY_MARGIN_S = 2.0
EXPIRY_MARGIN_FRACTION = 0.25
#: Pause between claim attempts while a partition is held by someone else.
CLAIM_RETRY_S = 0.25


class GroupInUseError(ZkConsumerError):
    """Another streaming query (or a consumer) of the same group holds partitions this query reads.

    ``group``; ``holders``: partition -> the holder's thread id. Not retriable
    as is: stop the other query or consumer, or give this query its own
    ``group.id``.
    """

    retriable = False

    def __init__(self, group: str, holders: Mapping[TopicPartition, str], waited_s: float) -> None:
        self.group = group
        self.holders = dict(holders)
        shown = ", ".join(f"{t}/{p} by {holder}" for (t, p), holder in sorted(self.holders.items())[:3])
        super().__init__(
            f"group {group} is in use by another streaming query or consumer: {shown} (owner nodes under "
            f"/consumers/{group}/owners). Waited {waited_s:.0f}s for the nodes of a crashed driver to expire "
            f"with its ZooKeeper session. Two queries on one group.id would overwrite each other's offsets: stop "
            f"the other one, or give this query its own group.id"
        )


def query_thread_id() -> str:
    """A fresh owner id in Kafka's thread-id form ``<consumer id>-<n>``, unique per query run."""
    host = socket.gethostname().split(".")[0] or "localhost"
    return f"zkconsumer-spark-query_{host}-{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}-0"


class QueryOwnership:
    """The owner nodes a streaming query holds, and its fenced offset writes; see the module docstring.

    Opens its ZooKeeper session on first use (``connect(config)``, by default
    :func:`~spark_integration.group_view.open_zookeeper`). ``wait_s`` bounds how
    long a claim waits for a partition held by someone else (default:
    1.25 x ``zookeeper.session.timeout.ms`` + 2 s: 9.5 s for Kafka's default 6 s). Not thread-safe: Spark calls the
    reader from one thread. ``sleep``/``clock`` are injectable for tests.
    """

    def __init__(
        self,
        config: ConsumerConfig,
        *,
        connect: Callable[[ConsumerConfig], KazooClient] = open_zookeeper,
        wait_s: Optional[float] = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.thread_id = query_thread_id()
        self._connect = connect
        if wait_s is None:
            session_s = config.zookeeper_session_timeout_ms / 1000.0
            wait_s = session_s * (1 + EXPIRY_MARGIN_FRACTION) + EXPIRY_MARGIN_S
        self._wait_s = wait_s
        self._sleep = sleep
        self._clock = clock
        self._zk: Optional[KazooClient] = None
        self._group: Optional[GroupClient] = None
        self._storage: Optional[OffsetStorage] = None
        self._held: Set[TopicPartition] = set()

    @property
    def held(self) -> Set[TopicPartition]:
        """The partitions this query holds, as far as it knows (a copy)."""
        return set(self._held)

    def _client(self) -> GroupClient:
        if self._group is None:
            cfg = self.config
            self._zk = self._connect(cfg)
            self._group = GroupClient(self._zk, cfg.group_id, self.thread_id.rsplit("-", 1)[0],
                                      retry_timeout_s=cfg.zookeeper_session_timeout_ms / 1000.0,
                                      acl=zookeeper_acls(cfg))
        return self._group

    def _call(self, step: Callable[[], T]) -> T:
        """Run a GroupClient step; across a session expiry, wait for kazoo's new session and run it again.

        A call cut short by the expiry wrote nothing (the session's requests
        stop with it); past ``zookeeper.session.timeout.ms`` without a new
        session, :class:`~zkconsumer.ZooKeeperUnavailableError`.
        """
        deadline = self._clock() + self.config.zookeeper_session_timeout_ms / 1000.0
        while True:
            try:
                return step()
            except (SessionExpiredError, ZooKeeperSessionExpiredError) as exc:
                if self._clock() >= deadline:
                    raise ZooKeeperUnavailableError(
                        f"group {self.config.group_id}: the query's ZooKeeper session expired and no new one was "
                        f"established within zookeeper.session.timeout.ms") from exc
                self._sleep(CLAIM_RETRY_S)

    def hold(self, partitions: Iterable[TopicPartition]) -> None:
        """Take the owner node of every partition in ``partitions`` not held yet.

        Waits up to ``wait_s`` for nodes held by someone else to vanish, then
        raises :class:`GroupInUseError` (after releasing what this call took).
        ZooKeeper errors (:class:`~zkconsumer.ZooKeeperUnavailableError`) propagate
        the same way: nothing taken by this call is kept.
        """
        wanted = sorted(set(partitions) - self._held)
        if not wanted:
            return
        group = self._client()
        taken = []
        deadline = self._clock() + self._wait_s
        try:
            for tp in wanted:
                logged = False
                while True:
                    holder = self._call(functools.partial(group.claim, tp[0], tp[1], self.thread_id))
                    if holder is None:
                        taken.append(tp)
                        break
                    stale = holder == self.thread_id  # our own node from an expired session (ZOOKEEPER-1740)
                    if stale:
                        self._call(functools.partial(group.release_stale, tp[0], tp[1], self.thread_id))
                    if self._clock() >= deadline:
                        raise GroupInUseError(self.config.group_id, {tp: holder}, self._wait_s)
                    if not stale:
                        if not logged:
                            log.info("group %s: %s/%d is held by %s; waiting up to %.0fs for it to be released "
                                     "or to expire", self.config.group_id, tp[0], tp[1], holder, self._wait_s)
                            logged = True
                        self._sleep(CLAIM_RETRY_S)
        except BaseException:
            for tp in taken:
                self._release_quietly(tp)
            raise
        self._held.update(taken)

    def keep_only(self, partitions: Iterable[TopicPartition]) -> None:
        """Release every held partition not in ``partitions`` (gone from the query's offsets)."""
        keep = set(partitions)
        for tp in sorted(self._held - keep):
            group = self._client()
            self._call(functools.partial(group.release, tp[0], tp[1], self.thread_id))
            self._held.discard(tp)

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Write each offset as the group's next offset to consume, only while holding its partition.

        A partition found no longer held (the session expired, or the node was
        deleted) is taken again (waiting as :meth:`hold` does) and written;
        :class:`GroupInUseError` if someone else holds it, with nothing written
        for it or for the partitions after it.
        """
        group = self._client()
        for (topic, partition), offset in sorted(offsets.items()):
            if offset < 0:
                raise ValueError(f"cannot commit negative offset {offset} for {topic}/{partition}")
        if self.config.offsets_storage != "zookeeper":
            self._commit_to_storage(group, offsets)
            return
        for (topic, partition), offset in sorted(offsets.items()):
            if self._write_if_held(group, topic, partition, offset):
                continue
            log.warning("group %s: this query no longer holds %s/%d (its ZooKeeper session expired, or the owner "
                        "node was deleted); taking it again before writing offset %d", self.config.group_id, topic,
                        partition, offset)
            self._held.discard((topic, partition))
            self.hold([(topic, partition)])
            if not self._write_if_held(group, topic, partition, offset):
                holders: Dict[TopicPartition, str] = {(topic, partition): group.owners(topic).get(partition, "?")}
                raise GroupInUseError(self.config.group_id, holders, 0.0)

    def _commit_to_storage(self, group: GroupClient, offsets: Mapping[TopicPartition, int]) -> None:
        """``offsets.storage=kafka``: write through the connector's storage, fenced by our owner nodes.

        Partitions found not held are taken again (as :meth:`commit` does) and
        written once more; the storage's error (Kafka refused or unreachable) is raised.
        """
        if self._storage is None:
            self._storage = make_offset_storage(self.config, group, owner_fenced=True)
        storage = self._storage
        pending = dict(offsets)
        for retake in (True, False):
            entries = [CommitEntry(t, p, o, self.thread_id) for (t, p), o in sorted(pending.items())]
            outcome = self._call(functools.partial(storage.write, entries))
            if outcome.error is not None:
                raise outcome.error
            fenced = sorted(set(outcome.fenced))
            if not fenced:
                return
            if not retake:
                topic, partition = fenced[0]
                raise GroupInUseError(self.config.group_id,
                                      {fenced[0]: group.owners(topic).get(partition, "?")}, 0.0)
            log.warning("group %s: this query no longer holds %s; taking them again before writing their offsets",
                        self.config.group_id, ", ".join(f"{t}/{p}" for t, p in fenced))
            self._held.difference_update(fenced)
            self.hold(fenced)
            pending = {tp: offsets[tp] for tp in fenced}

    def _write_if_held(self, group: GroupClient, topic: str, partition: int, offset: int) -> bool:
        """The fenced write; ``False`` (nothing written) if not held, or the session expired under it."""
        try:
            return group.commit_offset_if_owner(topic, partition, offset, self.thread_id)
        except (SessionExpiredError, ZooKeeperSessionExpiredError):
            return False  # the session (and every owner node of it) is gone: take the partition again

    def close(self) -> None:
        """Close the session: ZooKeeper deletes every owner node at once (idempotent)."""
        if self._storage is not None:
            self._storage.close()
            self._storage = None
        if self._zk is not None:
            try:
                self._zk.stop()
                self._zk.close()
            finally:
                self._zk = None
                self._group = None
                self._held.clear()

    def _release_quietly(self, tp: TopicPartition) -> None:
        try:
            self._client().release(tp[0], tp[1], self.thread_id)
        except (ZkConsumerError, KazooException) as exc:  # the node goes with the session anyway
            log.info("could not release %s/%d: %s", tp[0], tp[1], exc)

    def __getstate__(self) -> None:
        raise TypeError("QueryOwnership holds a ZooKeeper session and is driver-only")
