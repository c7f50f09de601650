"""``offsets copy``: a group's committed offsets from ZooKeeper to Kafka, or back.

The step Kafka 0.8.2's migration leaves to dual commit (which needs the group
running): copy the offsets while the group is stopped, then start it with the
other ``offsets.storage``. :func:`plan_copy` reads both stores and never writes;
:func:`apply_copy` writes the plan's changes:

* to ZooKeeper: one multi-operation, each node as read when planned, or none
  (:func:`.atomic.write_offsets`);
* to Kafka: one OffsetCommit v1 request carrying every partition (the coordinator
  appends a group's offsets as one message set to ``__consumer_offsets``); its
  per-partition error codes are reported (:attr:`CopyResult.failed`).

Both refuse while the group has live members, in ZooKeeper (``/consumers/<g>/ids``)
or at the coordinator (DescribeGroups), unless ``force``: a live member would
overwrite the copied offsets at its next commit. Partitions the source has no
offset for are left alone at the destination.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from kazoo.client import KazooClient

from ..structs import TopicPartition
from ..wire.group_protocol import error_name
from . import atomic, reads
from .errors import AdminError, GroupActiveError
from .stores import CoordinatorOffsets, group_partitions

__all__ = ["COPY_STORES", "CopyRow", "CopyPlan", "CopyResult", "plan_copy", "apply_copy", "live_anywhere"]

#: The stores offsets are copied between.
COPY_STORES = ("zookeeper", "kafka")


@dataclass(frozen=True)
class CopyRow:
    """One partition: ``source`` offset (``None``: none, nothing to copy), ``current`` at the
    destination (``None``: none), and the ZooKeeper node version when the destination is ZooKeeper."""

    topic: str
    partition: int
    source: Optional[int]
    current: Optional[int]
    version: Optional[int] = None

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def changes(self) -> bool:
        return self.source is not None and self.source != self.current


@dataclass(frozen=True)
class CopyPlan:
    """What :func:`plan_copy` found; ``live`` lists the group's live members (empty: none)."""

    group: str
    source: str
    destination: str
    rows: List[CopyRow]
    live: List[str] = field(default_factory=list)

    @property
    def changes(self) -> List[CopyRow]:
        return [r for r in self.rows if r.changes]

    def writes(self) -> List[atomic.OffsetWrite]:
        """The ZooKeeper writes of the changes (destination ZooKeeper)."""
        return [atomic.OffsetWrite(self.group, r.topic, r.partition, r.source, r.current, r.version)
                for r in self.changes if r.source is not None]


@dataclass(frozen=True)
class CopyResult:
    """What :func:`apply_copy` wrote (``written``) and, per partition, why it did not (``failed``)."""

    written: List[CopyRow]
    failed: Dict[TopicPartition, str]


def live_anywhere(zk: KazooClient, group: str, kafka: CoordinatorOffsets) -> List[str]:
    """Live members of ``group``: registered in ZooKeeper, then members at the coordinator."""
    members = [f"{m} (ZooKeeper)" for m in reads.live_members(zk, group)]
    return members + [f"{m} (coordinator)" for m in kafka.live_members()]


def plan_copy(zk: KazooClient, group: str, source: str, destination: str, kafka: CoordinatorOffsets,
              topics: Optional[Sequence[str]] = None) -> CopyPlan:
    """Read ``group``'s offsets in ``source`` and ``destination`` (never writes).

    ``topics``: only these (needed for a group ZooKeeper knows nothing of); default the
    topics the group has offsets or owners for in ZooKeeper (:func:`.stores.group_partitions`).
    Raises :class:`AdminError` for a store that is not ``zookeeper``/``kafka`` or the same store twice.
    """
    for store in (source, destination):
        if store not in COPY_STORES:
            raise AdminError(f"cannot copy offsets from or to {store!r}: the stores are {' and '.join(COPY_STORES)}")
    if source == destination:
        raise AdminError(f"nothing to copy: --from and --to are both {source}")
    partitions = group_partitions(zk, group, topics)
    in_kafka = kafka.read(partitions)
    paths = {tp: atomic.OffsetWrite(group, tp[0], tp[1], 0, None, None).path for tp in partitions}
    nodes = atomic.read_nodes(zk, list(paths.values()))
    in_zk = {tp: nodes[path] for tp, path in paths.items()}
    rows: List[CopyRow] = []
    for tp in partitions:
        node = in_zk[tp]
        zk_offset, version = (node[0], node[1]) if node is not None else (None, None)
        if source == "zookeeper":
            rows.append(CopyRow(tp[0], tp[1], zk_offset, in_kafka.get(tp)))
        else:
            rows.append(CopyRow(tp[0], tp[1], in_kafka.get(tp), zk_offset, version))
    return CopyPlan(group, source, destination, rows, live_anywhere(zk, group, kafka))


def apply_copy(zk: KazooClient, plan: CopyPlan, kafka: CoordinatorOffsets, *, force: bool = False) -> CopyResult:
    """Write ``plan``'s changes to its destination (see the module docstring).

    Refuses with :class:`GroupActiveError` while the group has live members (checked
    again now) unless ``force``. To ZooKeeper: all or nothing, each node as planned,
    raising what :func:`.atomic.write_offsets` raises (nothing written; a node a member
    changed since the plan: :class:`~.atomic.OffsetsChangedError`, even with ``force``). To Kafka: one request;
    partitions the coordinator refused are in :attr:`CopyResult.failed` with the error's name.
    """
    if not force:
        live = live_anywhere(zk, plan.group, kafka)
        if live:
            raise GroupActiveError(plan.group, live, f"copy offsets to {plan.destination}")
    changes = plan.changes
    if not changes:
        return CopyResult([], {})
    if plan.destination == "zookeeper":
        atomic.write_offsets(zk, plan.writes())
        return CopyResult(changes, {})
    codes = kafka.commit({r.tp: r.source for r in changes if r.source is not None})
    failed = {tp: error_name(code) for tp, code in codes.items() if code != 0}
    return CopyResult([r for r in changes if r.tp not in failed], failed)

