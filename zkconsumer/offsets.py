"""Committing consumed offsets to ZooKeeper, skipping values that did not change.

Kafka's consumer rewrote every offset on every auto-commit until KAFKA-987; at
one commit per partition per interval that is most of a large group's ZooKeeper
write load. :class:`OffsetCommitter` remembers the last value known to be in
ZooKeeper for each partition (read at claim time or written by us) and writes
only partitions whose consumed offset moved.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Dict, Iterable, Tuple

from .group import GroupClient
from .partition_info import PartitionTopicInfo

log = logging.getLogger(__name__)

TopicPartition = Tuple[str, int]


class OffsetCommitter:
    """Writes ``PartitionTopicInfo.consumed_offset`` values to the group's offset nodes.

    Thread-safe: the auto-commit thread, the rebalancer and the application may
    commit concurrently; commits are serialised so an older value never
    overwrites a newer one written by a concurrent commit.
    """

    def __init__(self, group: GroupClient) -> None:
        self._group = group
        self._lock = threading.Lock()
        self._checkpoints: Dict[TopicPartition, int] = {}

    def checkpoint(self, topic: str, partition: int, offset: int) -> None:
        """Record that ZooKeeper already holds ``offset`` for the partition."""
        with self._lock:
            self._checkpoints[(topic, partition)] = offset

    def committed(self) -> Dict[TopicPartition, int]:
        """The last offsets known to be in ZooKeeper (a copy)."""
        with self._lock:
            return dict(self._checkpoints)

    def commit(self, infos: Iterable[PartitionTopicInfo]) -> int:
        """Commit each partition's consumed offset if it changed; return how many were written.

        Partitions whose position is not yet known (negative offset: waiting for
        ``auto.offset.reset`` to resolve it) are skipped.
        """
        written = 0
        with self._lock:
            for info in infos:
                tp = (info.topic, info.partition)
                offset = info.consumed_offset
                if offset < 0 or self._checkpoints.get(tp) == offset:
                    continue
                self._group.commit_offset(info.topic, info.partition, offset)
                self._checkpoints[tp] = offset
                written += 1
        if written:
            log.debug("committed %d offsets for group %s", written, self._group.group)
        return written


class AutoCommitter:
    """A thread that calls ``commit()`` every ``interval_ms`` until :meth:`stop`.

    A failed commit is logged and retried at the next tick (the offsets are
    still held in memory; nothing is lost by waiting).
    """

    def __init__(self, commit: Callable[[], object], interval_ms: int, name: str) -> None:
        self._commit = commit
        self._interval = interval_ms / 1000.0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop and join the thread (idempotent)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                self._commit()
            except Exception as exc:  # keep going: the next tick tries again
                log.warning("auto-commit failed, will retry in %.1fs: %s", self._interval, exc)
