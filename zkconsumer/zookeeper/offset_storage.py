"""Offsets in ZooKeeper (``/consumers/<g>/offsets/<t>/<p>``), as Kafka 0.8's consumer keeps them.

The ZooKeeper :class:`~zkconsumer.commits.OffsetStorage` (``offsets.storage=zookeeper``, and
the second store of ``dual.commit.enabled``): reads and writes through a
:class:`~zkconsumer.zookeeper.group.GroupClient`, fenced by the owner nodes under ZooKeeper
membership.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from kazoo.exceptions import KazooException

from ..commits import NO_GENERATION, CommitEntry, CommitOutcome, Generation
from ..errors import OffsetStorageError, ZkConsumerError, ZooKeeperUnavailableError
from ..structs import TopicPartition
from .group import GroupClient
from .offset_nodes import MAX_COMMIT_BATCH

__all__ = ["ZooKeeperOffsetStorage"]


class ZooKeeperOffsetStorage:
    """Offsets in ``/consumers/<g>/offsets`` through :class:`~zkconsumer.zookeeper.group.GroupClient`.

    ``fenced=True`` (ZooKeeper membership): a partition is written only while
    this session holds its owner node with the entry's thread id
    (:meth:`GroupClient.commit_offset_if_owner`). ``fenced=False`` (coordinator
    membership, dual commit): written as is, after Kafka accepted the same
    offset under the member's generation.
    """

    name = "zookeeper"
    rewrites_unchanged = False

    def __init__(self, group: GroupClient, *, fenced: bool = True) -> None:
        self._group = group
        self._fenced = fenced

    def read(self, partitions: Iterable[TopicPartition]) -> Dict[TopicPartition, Optional[int]]:
        return self._group.read_offsets(list(partitions))

    def write(self, entries: Sequence[CommitEntry], generation: Generation = NO_GENERATION) -> CommitOutcome:
        """Write each changed entry; one partition's refused write does not stop the others.

        Fenced, the changed entries are first written in multi-operations of up
        to :data:`MAX_COMMIT_BATCH` partitions
        (:meth:`GroupClient.commit_offsets_if_owner`: one request for a whole
        commit in the steady state); the entries of one that writes nothing (a
        partition fenced, refused, ZooKeeper away) are each written on their own
        as below.

        A write the server refuses (``NoAuthError`` on an offset node protected by
        another client's ACL, ...) is an *error* for that partition, never
        fencing: the partition stays owned and its offset is tried again at the
        next commit. ZooKeeper being unreachable ends the commit (the other
        writes would fail the same way).
        """
        outcome = CommitOutcome()
        # The session the entries were handed out under (kept while the connection is only
        # SUSPENDED): a write sent on a later session is fenced (GroupClient.commit_offset_if_owner;
        # found by the simulator, tests/sim). None: no session now, so none of ours holds anything.
        session = self._group.session_id
        if self._fenced and session is None:
            outcome.fenced.extend(e.tp for e in entries if e.changed)
            outcome.committed.extend(e.tp for e in entries if not e.changed)
            return outcome
        written: Set[TopicPartition] = set()  # by a multi-operation of up to MAX_COMMIT_BATCH partitions
        changed = [e for e in entries if e.changed]
        for start in range(0, len(changed) if self._fenced else 0, MAX_COMMIT_BATCH):
            batch = changed[start:start + MAX_COMMIT_BATCH]
            if self._group.commit_offsets_if_owner([(e.topic, e.partition, e.offset) for e in batch], session):
                written.update(e.tp for e in batch)
        refused: List[Tuple[TopicPartition, BaseException]] = []
        for entry in entries:
            if not entry.changed or entry.tp in written:
                outcome.committed.append(entry.tp)  # already there (KAFKA-987), or in a multi: no write
                continue
            try:
                if not self._fenced:
                    self._group.commit_offset(entry.topic, entry.partition, entry.offset)
                elif not self._group.commit_offset_if_owner(entry.topic, entry.partition, entry.offset, entry.owner,
                                                            session):
                    outcome.fenced.append(entry.tp)
                    continue
            except ZooKeeperUnavailableError as exc:
                outcome.error = exc
                break
            except (ZkConsumerError, KazooException) as exc:
                refused.append((entry.tp, exc))
                continue
            outcome.committed.append(entry.tp)
        if refused and outcome.error is None:
            outcome.error = OffsetStorageError(
                "ZooKeeper refused the offsets of " + ", ".join(
                    f"{t}-{p} ({type(exc).__name__}: {exc})" for (t, p), exc in refused)
                + "; they stay owned and are written again at the next commit",
                retriable=all(getattr(exc, "retriable", False) for _, exc in refused), fenced=outcome.fenced)
        return outcome

    def out_of_sync(self) -> Set[TopicPartition]:
        return set()

    def close(self) -> None:
        pass
