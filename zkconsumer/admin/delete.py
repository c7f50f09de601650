"""Deleting a group, or one topic's offsets and owners from it
(``kafka-consumer-groups --delete``)."""

from __future__ import annotations

from typing import List, Optional

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, NotEmptyError

from . import reads
from .errors import AdminError

__all__ = ["delete_group"]


def delete_group(zk: KazooClient, group: str, topic: Optional[str] = None) -> List[str]:
    """Delete ``/consumers/<group>``, or with ``topic`` only its offsets and owners of that topic.

    Returns the paths deleted (empty when there was nothing for ``topic``).
    Raises :class:`UnknownGroupError` if the group does not exist and
    :class:`GroupActiveError` (nothing deleted) while it has live members.
    """
    paths = reads.require_group(zk, group)
    reads.refuse_if_live(zk, group, f"delete topic {topic!r} from the group" if topic else "delete the group")
    if topic is None:
        targets = [paths.root]
    else:
        try:
            targets = [paths.offsets_topic(topic), paths.owners_topic(topic)]
        except ValueError as exc:
            raise AdminError(f"invalid topic name {topic!r}: {exc}") from None
    deleted = []
    for path in targets:
        if zk.retry(zk.exists, path) is None:
            continue
        _delete_tree(zk, path)
        deleted.append(path)
    return deleted


def _delete_tree(zk: KazooClient, path: str, attempts: int = 5) -> None:
    """Delete ``path`` and everything under it; children appearing meanwhile are retried."""
    for _ in range(attempts):
        try:
            zk.retry(zk.delete, path, recursive=True)
            return
        except NoNodeError:
            return
        except NotEmptyError:
            continue
    raise AdminError(f"could not delete {path}: nodes kept being created under it")
