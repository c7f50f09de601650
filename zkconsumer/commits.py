"""What a commit is, whoever stores it: the generation, the entries, the outcome, the storage interface.

Shared by the storages (Kafka's in :mod:`zkconsumer.offsets.storage`, ZooKeeper's in
:mod:`zkconsumer.zookeeper.offset_storage`), the committer, both memberships and the Spark paths,
so that none of them needs another's module for the vocabulary.

May import: errors, structs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, NamedTuple, Optional, Protocol, Sequence, Set

from .errors import ZkConsumerError
from .structs import TopicPartition

__all__ = ["CommitEntry", "CommitOutcome", "Generation", "NO_GENERATION", "OffsetStorage"]


class Generation(NamedTuple):
    """A broker-managed group's generation as one member sees it (the commit fence).

    :data:`NO_GENERATION` (``-1``, ``""``) stands for a group the coordinator does
    not manage: its membership is in ZooKeeper.
    """

    generation_id: int
    member_id: str

    @property
    def managed(self) -> bool:
        """Whether the broker's group coordinator manages the membership."""
        return self.generation_id >= 0


#: No generation: ZooKeeper membership (Kafka's OffsetCommit v1 default generation -1 and member ``""``).
NO_GENERATION = Generation(-1, "")


@dataclass(frozen=True)
class CommitEntry:
    """One offset to commit and the thread id that owns the partition (ZooKeeper fencing).

    ``changed`` is ``False`` when the store(s) already hold ``offset`` as far as
    the committer knows: ZooKeeper skips it, Kafka re-commits it (retention).
    """

    topic: str
    partition: int
    offset: int
    owner: str
    changed: bool = True

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)


@dataclass
class CommitOutcome:
    """What a :meth:`OffsetStorage.write` did.

    ``committed``: stored. ``fenced``: not written because this member no longer
    owns them (ZooKeeper owner node, or the coordinator's generation). ``error``:
    why the remaining ones were not written (``None`` if every entry is in one of
    the two lists).
    """

    committed: List[TopicPartition] = field(default_factory=list)
    fenced: List[TopicPartition] = field(default_factory=list)
    error: Optional[ZkConsumerError] = None


class OffsetStorage(Protocol):
    """Where a group's committed offsets are read from and written to."""

    #: ``"zookeeper"``, ``"kafka"`` or ``"kafka+zookeeper"``: for logs.
    name: str
    #: Whether unchanged offsets must be written too (Kafka's retention); else they are skipped.
    rewrites_unchanged: bool

    def read(self, partitions: Iterable[TopicPartition]) -> Dict[TopicPartition, Optional[int]]:
        """The committed next-offset-to-consume of each partition, ``None`` if none; raises on failure."""

    def write(self, entries: Sequence[CommitEntry], generation: Generation = NO_GENERATION) -> CommitOutcome:
        """Commit ``entries`` under ``generation``; never raises for a failed commit (see ``error``)."""

    def out_of_sync(self) -> Set[TopicPartition]:
        """Partitions whose stores disagreed at the last read: to be written even if unchanged."""

    def close(self) -> None:
        """Release connections (idempotent); later calls may fail."""
