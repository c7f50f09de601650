"""``snapshot_group``: a group's description plus when each offset was last written.

The lag exporter (:mod:`zkconsumer.monitoring.lag`) needs, besides what
``describe`` reads (offset, log end, lag and owner per partition, as
``kafka.tools.ConsumerOffsetChecker`` prints them), the time of each commit:
the modification time (``mtime``) of ``/consumers/<g>/offsets/<t>/<p>``, which
ZooKeeper sets on every write, whether Kafka's Scala consumer or zkconsumer
made it. Read-only. Offsets read from Kafka (``store``) have no such time: the
snapshot then carries none, and the monitor times their changes by its polls.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from ..structs import TopicPartition
from ..zookeeper import zkformat
from .describe import GroupDescription, describe_group
from .log_offsets import LogOffsets
from .reads import Progress
from .stores import CoordinatorOffsets

__all__ = ["GroupSnapshot", "snapshot_group", "commit_times"]


@dataclass(frozen=True)
class GroupSnapshot:
    """``description`` as :func:`describe_group` returns it; ``commit_times_ms`` the mtime (ms since
    the epoch) of each partition's offset node (partitions without one are absent); ``taken_at_ms``
    when the snapshot started."""

    description: GroupDescription
    commit_times_ms: Dict[TopicPartition, int]
    taken_at_ms: int


def commit_times(zk: KazooClient, group: str, partitions: Sequence[TopicPartition],
                 window: int = 256) -> Dict[TopicPartition, int]:
    """mtime (ms) of the offset node of each of ``partitions`` that has one, read pipelined.

    Connection errors propagate (kazoo's ``ConnectionLoss``/``SessionExpiredError``); nothing is written.
    """
    paths = zkformat.GroupPaths(group)
    result: Dict[TopicPartition, int] = {}
    for start in range(0, len(partitions), window):
        batch = [(tp, zk.exists_async(paths.offset(*tp))) for tp in partitions[start:start + window]]
        for tp, pending in batch:
            try:
                stat = pending.get()
            except NoNodeError:
                stat = None
            if stat is not None:
                result[tp] = int(stat.mtime)
    return result


def snapshot_group(zk: KazooClient, group: str, log_offsets: LogOffsets, progress: Optional[Progress] = None,
                   clock: Callable[[], float] = time.time, store: str = "zookeeper",
                   kafka: Optional[CoordinatorOffsets] = None) -> GroupSnapshot:
    """Describe ``group`` (raising as :func:`describe_group` does, offsets from ``store``) and read
    its commit times (only for offsets read from ZooKeeper alone)."""
    taken = int(clock() * 1000)
    description = describe_group(zk, group, log_offsets, progress, store, kafka)
    committed = [(p.topic, p.partition) for p in description.partitions
                 if p.offset is not None and description.offsets_storage == "zookeeper"]
    return GroupSnapshot(description, commit_times(zk, group, committed), taken)
