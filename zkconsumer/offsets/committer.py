"""Committing consumed offsets, skipping values that did not change.

Kafka's consumer rewrote every offset on every auto-commit until KAFKA-987; at
one commit per partition per interval that is most of a large group's ZooKeeper
write load. :class:`OffsetCommitter` remembers the last value known to be
stored for each partition (read at claim time or written by us) and writes to
ZooKeeper only partitions whose consumed offset moved, plus those whose stores
were found disagreeing (:meth:`~zkconsumer.commits.OffsetStorage.out_of_sync`).
Kafka is sent every offset at every commit, as Kafka's consumer does, because a
0.9 broker expires offsets ``offsets.retention.minutes`` after their last commit.

Where offsets are written is an :class:`~zkconsumer.commits.OffsetStorage`
(ZooKeeper by default; Kafka, or both, per ``offsets.storage`` and
``dual.commit.enabled``). Commits are *fenced*: a partition is written only while
this member still owns it, in ZooKeeper under its current session (see
``GroupClient.commit_offset_if_owner``) or, for a broker-managed group, in
the coordinator's current generation, so a member that was frozen past its
session timeout, or lost a partition some other way, never overwrites the new
owner's offsets.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Protocol, Tuple

from ..commits import NO_GENERATION, CommitEntry, Generation, OffsetStorage
from ..errors import ConfigurationError, OffsetStorageError, ZooKeeperUnavailableError
from ..fetch.handoff import PartitionTopicInfo
from ..structs import TopicPartition
from ..threads import THREADS, Runtime, ShutdownableThread

log = logging.getLogger(__name__)


class _Deadlines(Protocol):
    def remaining(self) -> Optional[float]: ...


class CommitScope(Protocol):
    """What the committer needs of the group: its id (for logs) and the caller's deadline.

    ``client.remaining()``: seconds left of the calling thread's deadline (``None``: none), so
    that waiting for the commit lock never outlasts it. A ``GroupClient`` is one.
    """

    @property
    def group(self) -> str: ...

    @property
    def client(self) -> _Deadlines: ...


class OffsetCommitter:
    """Writes ``PartitionTopicInfo.consumed_offset`` values to the group's offset storage.

    ``storage`` is where the offsets go (the connector builds it from the configuration:
    ``zkconsumer.consumer.offset_stores.make_offset_storage``).

    Thread-safe: the auto-commit thread, the rebalancer and the application may
    commit concurrently; commits are serialised so an older value never
    overwrites a newer one written by a concurrent commit.
    """

    def __init__(self, group: CommitScope, storage: OffsetStorage, runtime: Runtime = THREADS) -> None:
        self._group = group
        self._storage = storage
        self._lock = runtime.lock()  # held across the write: a simulation's runtime must know it
        self._books = runtime.lock()  # guards _checkpoints only, never held across a write
        self._checkpoints: Dict[TopicPartition, int] = {}

    @property
    def storage(self) -> OffsetStorage:
        return self._storage

    def read_offsets(self, partitions: Iterable[TopicPartition]) -> Dict[TopicPartition, Optional[int]]:
        """The committed offsets of ``partitions`` from the storage (``None``: none); raises on failure.

        Never while a commit of this member is in flight (they take turns): a
        partition claimed again while an earlier commit of it was still being
        written would otherwise start from the offset before that write, and its
        next commit would move the offset back over it.
        """
        with self._lock:
            return self._storage.read(partitions)

    @contextmanager
    def no_commit_in_flight(self) -> Iterator[None]:
        """No commit of this member is under way inside the ``with`` block (commits wait for its end).

        For releasing owner nodes: a fenced commit checks the version of the
        owner node it read (or knows) under this session, and a node we delete
        and a peer re-creates has that same version 0 while our session lives,
        so a commit decided before our release and sent after the peer's claim
        would pass its check and write over the new owner's offset (found by the
        simulator, seed 1044265: an application commit waiting for the lock
        while the rebalancer released the partition). The release made here
        waits for a commit in flight to be answered; a commit after it finds the
        node gone or another's (the release forgets what it knew of the node).
        """
        with self._lock:
            yield

    def checkpoint(self, topic: str, partition: int, offset: int) -> None:
        """Record that the storage already holds ``offset`` for the partition."""
        with self._lock, self._books:
            self._checkpoints[(topic, partition)] = offset

    def forget(self, topic: str, partition: int) -> None:
        """Record that the storage holds no known offset for the partition (none was found there).

        The next commit of the partition then writes whatever its offset is,
        even a value equal to one this member stored during an earlier ownership.
        """
        with self._lock, self._books:
            self._checkpoints.pop((topic, partition), None)

    def committed(self) -> Dict[TopicPartition, int]:
        """The last offsets known to be stored (a copy); never waits for a commit in flight."""
        with self._books:
            return dict(self._checkpoints)

    def commit(self, owned: Iterable[Tuple[PartitionTopicInfo, str]],
               generation: Generation = NO_GENERATION,
               offsets: Optional[Mapping[TopicPartition, int]] = None) -> List[TopicPartition]:
        """Commit the consumed offset of each ``(partition info, owning thread id)``.

        ``offsets``: commit these instead (partition -> next offset to consume),
        only for the partitions of ``owned`` among them; the others are left alone.

        Offsets that did not move since the last commit are not written to
        ZooKeeper; they are re-sent to Kafka (see the module docstring).

        ``generation`` is the broker-managed group's generation the partitions
        were assigned in (:data:`~zkconsumer.commits.NO_GENERATION` under
        ZooKeeper membership).

        Returns the partitions that were *fenced*: no longer owned by that
        thread id under this session (or in that generation), so not written.
        Partitions whose position is not yet known (negative offset:
        ``auto.offset.reset`` pending) are skipped. Raises
        :class:`~zkconsumer.errors.OffsetStorageError` (its ``fenced``
        set as above) if some offsets could not be written; those written are
        remembered all the same. A storage error with nothing fenced (e.g.
        :class:`~zkconsumer.errors.ZooKeeperUnavailableError`) is raised as it is.

        Commits of one member take turns. Under a ZooKeeper deadline of the calling thread
        (:meth:`BoundedZooKeeper.deadline`, as shutdown's final commit runs) the wait for a commit
        of another thread ends at that deadline: :class:`~zkconsumer.errors.ZooKeeperUnavailableError`
        (retriable), nothing written.
        """
        # A commit of another thread (the application's, auto-commit's, the rebalancer's) may hold the
        # lock for as long as its own steps take, each bounded, many in a row. A caller with a
        # ZooKeeper deadline (shutdown's final commit) waits for it no longer than that deadline
        # (found by the simulator, seed 3063038: shutdown() waited 17 s behind an application commit).
        remaining = self._group.client.remaining()
        if not self._lock.acquire(timeout=-1 if remaining is None else max(0.0, remaining)):
            raise ZooKeeperUnavailableError("another offset commit of this member was still waiting for ZooKeeper "
                                            "at the caller's deadline")
        try:  # positions read under the lock: a commit waiting for it must not write an older one
            positions = [((info.topic, info.partition), info.commit_position if offsets is None
                          else offsets.get((info.topic, info.partition), -1), owner) for info, owner in owned]
            resync = self._storage.out_of_sync()
            entries = [
                CommitEntry(tp[0], tp[1], offset, owner,
                            changed=self._checkpoints.get(tp) != offset or tp in resync)
                for tp, offset, owner in positions
                if offset >= 0
            ]
            if not self._storage.rewrites_unchanged:
                entries = [e for e in entries if e.changed]
            if not entries:
                return []
            outcome = self._storage.write(entries, generation)
            offsets = {e.tp: e.offset for e in entries}
            with self._books:
                for tp in outcome.committed:
                    self._checkpoints[tp] = offsets[tp]
        finally:
            self._lock.release()
        if outcome.committed:
            log.debug("committed %d offsets for group %s to %s", len(outcome.committed), self._group.group,
                      self._storage.name)
        if outcome.fenced:
            log.warning(
                "not committing %s for group %s: no longer owned by this member (session or generation)",
                ", ".join(f"{t}-{p}" for t, p in outcome.fenced), self._group.group,
            )
        error = outcome.error
        if error is not None:
            if outcome.fenced and not isinstance(error, OffsetStorageError):
                raise OffsetStorageError(
                    f"committing offsets of group {self._group.group} to {self._storage.name} failed: {error}",
                    retriable=error.retriable, fenced=outcome.fenced,
                ) from error
            raise error
        return outcome.fenced

    def close(self) -> None:
        """Release the storage's connections (after the last commit)."""
        self._storage.close()


class AutoCommitter:
    """A thread that calls ``commit()`` every ``interval_ms`` until :meth:`stop`.

    A failed commit is logged and retried at the next tick (the offsets are
    still held in memory; nothing is lost by waiting).
    """

    def __init__(self, commit: Callable[[], object], interval_ms: int, name: str) -> None:
        self._commit = commit
        self._interval = interval_ms / 1000.0
        self._thread = ShutdownableThread(name, self._run)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: Optional[float] = None) -> bool:
        """Stop and join the thread (at most ``timeout`` s; idempotent); ``True`` once it has ended."""
        return self._thread.stop(timeout)

    def _run(self) -> None:
        while not self._thread.wait(self._interval):
            try:
                self._commit()
            except Exception as exc:  # keep going: the next tick tries again
                log.warning("auto-commit failed, will retry in %.1fs: %r", self._interval, exc)


def checked_offsets(offsets: Mapping[TopicPartition, int]) -> Dict[TopicPartition, int]:
    """``offsets`` as ``{(topic, partition): offset}``; :class:`ConfigurationError` naming the first
    entry that is not a ``(str, int)`` partition with a whole, non-negative offset (nothing is written)."""
    checked: Dict[TopicPartition, int] = {}
    for key, offset in dict(offsets).items():
        ok_key = isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str) and key[0] \
            and isinstance(key[1], int) and not isinstance(key[1], bool) and key[1] >= 0
        if not ok_key:
            raise ConfigurationError("offsets", f"{key!r} is not a (topic, partition) pair; nothing was committed")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ConfigurationError("offsets", f"the offset of {key[0]}-{key[1]} must be a whole number >= 0 (the "
                                     f"next offset to consume), not {offset!r}; nothing was committed")
        checked[(key[0], key[1])] = offset
    return checked
