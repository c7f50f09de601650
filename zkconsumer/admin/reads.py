"""ZooKeeper reading helpers shared by the admin operations.

Also :func:`list_groups` and :func:`live_members`, public and re-exported by
:mod:`zkconsumer.admin`, and the type aliases :data:`TopicPartition` and :data:`Progress`.
"""

from __future__ import annotations

import datetime
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from ..zookeeper import zkformat
from ..zookeeper.group import GroupClient
from .errors import AdminError, GroupActiveError, UnknownGroupError

#: ``progress(done, total)``, called as long operations advance.
Progress = Callable[[int, int], None]

#: Consumer id used for the :class:`GroupClient` of admin operations (never registered).
ADMIN_CLIENT_ID = "zkconsumer-admin"


def children(zk: KazooClient, path: str) -> List[str]:
    """Children of ``path``, sorted; empty if the node does not exist."""
    try:
        return sorted(zk.retry(zk.get_children, path))
    except NoNodeError:
        return []


def get(zk: KazooClient, path: str) -> Optional[Tuple[bytes, Any]]:
    """``(data, stat)`` of ``path``, or ``None`` if it does not exist."""
    try:
        got: Tuple[bytes, Any] = zk.retry(zk.get, path)
    except NoNodeError:
        return None
    return got


def get_many(zk: KazooClient, paths: Sequence[str], progress: Optional[Progress] = None,
             window: int = 256) -> Dict[str, Optional[bytes]]:
    """The data of every node in ``paths`` (``None`` for a missing one), pipelined.

    Up to ``window`` requests are in flight at once, so reading thousands of
    nodes costs a few round trips rather than one each. Connection errors
    propagate (kazoo's ``ConnectionLoss``/``SessionExpiredError``).
    """
    result: Dict[str, Optional[bytes]] = {}
    for start in range(0, len(paths), window):
        batch = [(path, zk.get_async(path)) for path in paths[start:start + window]]
        for path, pending in batch:
            try:
                result[path] = pending.get()[0]
            except NoNodeError:
                result[path] = None
        if progress is not None:
            progress(min(start + window, len(paths)), len(paths))
    return result


def partition_ids(names: Iterable[str]) -> List[int]:
    """The partition numbers among child node names (others ignored), sorted as integers."""
    return sorted(int(n) for n in names if n.isdigit())


def require_group(zk: KazooClient, group: str) -> zkformat.GroupPaths:
    try:
        paths = zkformat.GroupPaths(group)
    except ValueError as exc:
        raise AdminError(f"invalid group name {group!r}: {exc}") from None
    if zk.retry(zk.exists, paths.root) is None:
        raise UnknownGroupError(group)
    return paths


def group_client(zk: KazooClient, group: str) -> GroupClient:
    return GroupClient(zk, group, ADMIN_CLIENT_ID)


def list_groups(zk: KazooClient) -> List[str]:
    """Every consumer group: the children of ``/consumers``, sorted (empty if none)."""
    return children(zk, zkformat.CONSUMERS_PATH)


def live_members(zk: KazooClient, group: str) -> List[str]:
    """Consumer ids registered under ``/consumers/<group>/ids`` right now, sorted."""
    return children(zk, zkformat.GroupPaths(group).ids)


def refuse_if_live(zk: KazooClient, group: str, action: str) -> None:
    members = live_members(zk, group)
    if members:
        raise GroupActiveError(group, members, action)


def iso_from_ms(ms: int) -> str:
    """Milliseconds since the epoch as ISO 8601 UTC with milliseconds, e.g. ``2024-01-02T03:04:05.678Z``."""
    moment = datetime.datetime.fromtimestamp(ms / 1000.0, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
