"""Committing consumed offsets to ZooKeeper, skipping values that did not change.

Kafka's consumer rewrote every offset on every auto-commit until KAFKA-987; at
one commit per partition per interval that is most of a large group's ZooKeeper
write load. :class:`OffsetCommitter` remembers the last value known to be in
ZooKeeper for each partition (read at claim time or written by us) and writes
only partitions whose consumed offset moved.

Commits are *fenced*: a partition is written only while this member still owns
it in ZooKeeper under its current session (see
:meth:`GroupClient.commit_offset_if_owner`), so a member that was frozen past
its session timeout, or lost a partition some other way, never overwrites the
new owner's offsets.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Dict, Iterable, List, Tuple

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

    def commit(self, owned: Iterable[Tuple[PartitionTopicInfo, str]]) -> List[TopicPartition]:
        """Commit the consumed offset of each ``(partition info, owning thread id)`` that moved.

        Returns the partitions that were *fenced*: no longer owned by that
        thread id under this session, so not written. Partitions whose position
        is not yet known (negative offset: ``auto.offset.reset`` pending) are
        skipped.
        """
        written = 0
        fenced: List[TopicPartition] = []
        with self._lock:
            for info, owner in owned:
                tp = (info.topic, info.partition)
                offset = info.consumed_offset
                if offset < 0 or self._checkpoints.get(tp) == offset:
                    continue
                if self._group.commit_offset_if_owner(info.topic, info.partition, offset, owner):
                    self._checkpoints[tp] = offset
                    written += 1
                else:
                    fenced.append(tp)
        if written:
            log.debug("committed %d offsets for group %s", written, self._group.group)
        if fenced:
            log.warning(
                "not committing %s for group %s: no longer owned by this member under its current session",
                ", ".join(f"{t}-{p}" for t, p in fenced), self._group.group,
            )
        return fenced


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
