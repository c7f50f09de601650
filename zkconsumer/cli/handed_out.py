"""Taking back a message the connector handed out that ``consume`` could not write.

The connector commits what its streams *handed out* (``PartitionTopicInfo.consumed_offset``,
advanced as a message leaves the iterator), and it has no public way to commit other
positions. ``consume`` runs with ``auto.commit.enable=false`` (nothing commits behind its
back) and commits only from its own loop, at points where everything handed out was
written: then the handed-out positions *are* the written ones. The one exception is the
message whose write failed (the reader closed the pipe) or was abandoned (Ctrl-C while
the pipe was full): :func:`take_back` moves its partition's position back to that
message, so the final commit leaves it to be consumed again.

This reaches into the membership for the partition's ``PartitionTopicInfo``: the
connector offers no hook for it (a public ``commit_offsets(offsets)`` or a stream's
"not consumed after all" would replace this module). When the position cannot be found
or is not where the message left it, :func:`take_back` says so and the caller commits
nothing more (the committed offsets then stay behind what was written: consumed again,
never lost).
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, List, Tuple

log = logging.getLogger(__name__)

__all__ = ["take_back"]


def _positions(connector: Any) -> Iterable[Any]:
    """The ``PartitionTopicInfo`` of every partition the connector would commit now; raises
    ``LookupError`` when its membership keeps them where this does not know to look."""
    membership = connector.membership
    rebalancer = getattr(membership, "_rebalancer", None)  # ZooKeeper membership
    if rebalancer is not None:
        owned: List[Tuple[Any, str]] = rebalancer.owned_partitions()
        return [info for info, _ in owned]
    delivery = getattr(membership, "_delivery", None)  # the brokers' coordinator
    if delivery is not None:
        _, delivered, _ = delivery.to_commit()
        return [info for info, _ in delivered]
    if not membership.joined():
        return []
    raise LookupError(f"no handed-out positions in {type(membership).__name__}")


def take_back(connector: Any, topic: str, partition: int, offset: int) -> bool:
    """Make the next commit of ``topic``/``partition`` write ``offset``: the message at ``offset``,
    the last one handed out of that partition, was not written. Call from the thread that
    iterates (nothing is handed out meanwhile), before the commit.

    ``True`` when the position was moved back, or when the partition is not among those the
    connector commits (it went to another member: nothing of it will be committed here).
    ``False`` when the position is not where that message left it or cannot be found: the
    caller must then not commit (a commit would count the message as consumed).
    """
    try:
        infos = list(_positions(connector))
    except (AttributeError, LookupError) as exc:
        log.warning("cannot find the position of %s-%d to take back offset %d: %s", topic, partition, offset, exc)
        return False
    for info in infos:
        if (info.topic, info.partition) != (topic, partition):
            continue
        if info.consumed_offset != offset + 1:
            log.warning("%s-%d: position %s, not %d after the message at %d; not committing",
                        topic, partition, info.consumed_offset, offset + 1, offset)
            return False
        info.consumed_offset = offset
        return True
    return True
