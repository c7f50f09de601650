"""``offsets export``, ``import`` and ``reset`` on the store a group's offsets are in (``--offsets-storage``).

ZooKeeper alone is :mod:`.offsets_file` and :mod:`.reset` as they were. With Kafka:

* export reads each group's partitions (:func:`.stores.group_partitions`) from its
  coordinator; with ``both`` it exports the larger of the two offsets (what a
  dual-commit consumer resumes from) and names the partitions where they differ;
* import and reset write Kafka with one OffsetCommit v1 request per group
  (:meth:`.stores.CoordinatorOffsets.commit`), and with ``both`` ZooKeeper first,
  in its one all-or-nothing multi-operation, then Kafka; a Kafka refusal after
  ZooKeeper was written is reported per partition (:class:`KafkaWriteError`), so
  the stores are known to differ and the command can be run again.

``detect`` picks, per group, the store(s) holding its offsets now
(:func:`.stores.read_group_offsets`); a group with offsets in neither is ZooKeeper's.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from kazoo.client import KazooClient

from ..structs import TopicPartition
from ..wire.group_protocol import error_name
from . import atomic, reads
from .copy import live_anywhere
from .errors import AdminError, GroupActiveError
from .offsets_file import OffsetEntry, export_offsets
from .reset import ResetPlan
from .stores import CoordinatorOffsets, GroupOffsets, group_partitions, read_group_offsets

__all__ = ["KafkaWriteError", "export_stored", "detect_store", "commit_kafka", "refuse_if_live_anywhere",
           "reset_writes"]

#: ``coordinator(group)``: the :class:`CoordinatorOffsets` of a group (the caller closes them).
CoordinatorFor = Callable[[str], CoordinatorOffsets]


class KafkaWriteError(AdminError):
    """The coordinator refused some offsets (``failed``: partition -> error name); the others were written."""

    def __init__(self, group: str, failed: Mapping[TopicPartition, str], written_elsewhere: str = "") -> None:
        self.group, self.failed = group, dict(failed)
        listed = ", ".join(f"{t}/{p} ({why})" for (t, p), why in sorted(self.failed.items()))
        super().__init__(f"the coordinator of group {group} refused {len(self.failed)} offset(s): {listed}"
                         f"{written_elsewhere}; the other offsets were written")


def detect_store(zk: KazooClient, group: str, kafka: CoordinatorOffsets,
                 partitions: Optional[Sequence[TopicPartition]] = None) -> str:
    """Where ``group``'s offsets are: ``zookeeper``, ``kafka`` or ``both`` (ZooKeeper if neither has any,
    or if ZooKeeper names no topic of the group and ``partitions`` is not given)."""
    if partitions is None:
        try:
            partitions = group_partitions(zk, group)
        except AdminError:
            return "zookeeper"
    return read_group_offsets(zk, group, list(partitions), "detect", kafka).store


def export_stored(zk: KazooClient, groups: Optional[Sequence[str]], store: str,
                  coordinator: CoordinatorFor) -> Tuple[List[OffsetEntry], List[str]]:
    """Every committed offset of ``groups`` (every group when ``None``) in ``store``, sorted, and
    notes (one line each: where each group's offsets were read, and disagreements with ``both``).

    ``zookeeper`` is :func:`.offsets_file.export_offsets`. Otherwise a group whose topics
    ZooKeeper does not know (no offsets or owners) has nothing to export (noted), and
    :class:`UnknownGroupError` is raised for a named group that does not exist.
    """
    if store == "zookeeper":
        return export_offsets(zk, groups), []
    if groups is None:
        groups = reads.list_groups(zk)
    else:
        for group in groups:
            reads.require_group(zk, group)
    entries: List[OffsetEntry] = []
    notes: List[str] = []
    for group in groups:
        try:
            partitions = group_partitions(zk, group)
        except AdminError as exc:
            notes.append(f"group {group}: nothing exported ({exc})")
            continue
        found = read_group_offsets(zk, group, partitions, store, coordinator(group))
        notes.append(f"group {group}: {found.source_note()}")
        for row in found.disagreements:
            notes.append(f"group {group}: {row.topic}/{row.partition} is {_text(row.zookeeper)} in ZooKeeper and "
                         f"{_text(row.kafka)} in Kafka; exported {_text(row.offset)} (the larger)")
        entries += [OffsetEntry(group, r.topic, r.partition, r.offset) for r in found.rows
                    if r.offset is not None and r.offset >= 0]
    return sorted(entries, key=lambda e: (e.group, e.topic, e.partition)), notes


def refuse_if_live_anywhere(zk: KazooClient, group: str, kafka: CoordinatorOffsets, action: str) -> None:
    """Raise :class:`~.errors.GroupActiveError` if ``group`` has members in ZooKeeper or at its coordinator."""
    live = live_anywhere(zk, group, kafka)
    if live:
        raise GroupActiveError(group, live, action)


def commit_kafka(kafka: CoordinatorOffsets, offsets: Mapping[TopicPartition, int], written_elsewhere: str = "") -> None:
    """Commit ``offsets`` in one request; raise :class:`KafkaWriteError` naming each refused partition."""
    codes = kafka.commit(offsets)
    failed: Dict[TopicPartition, str] = {tp: error_name(code) for tp, code in codes.items() if code != 0}
    if failed:
        raise KafkaWriteError(kafka.group, failed, written_elsewhere)


def reset_writes(plan: ResetPlan, found: GroupOffsets) -> Tuple[List[atomic.OffsetWrite], Dict[TopicPartition, int]]:
    """A reset plan made from ``found`` (Kafka's offsets, or both stores'), as the writes to make:
    ZooKeeper's (``both`` only; each node as planned) and Kafka's, each where the store does not
    already hold the new offset."""
    stored = {r.tp: r for r in found.rows}
    zookeeper: List[atomic.OffsetWrite] = []
    kafka: Dict[TopicPartition, int] = {}
    for row in plan.rows:
        if row.new is None:
            continue
        tp = (row.topic, row.partition)
        now = stored[tp]
        if found.store == "both" and now.zookeeper != row.new:
            zookeeper.append(atomic.OffsetWrite(plan.group, row.topic, row.partition, row.new, now.zookeeper,
                                                plan.versions.get(row.partition)))
        if now.kafka != row.new:
            kafka[tp] = row.new
    return zookeeper, kafka


def _text(offset: Optional[int]) -> str:
    return "none" if offset is None else str(offset)
