"""The migration node: a group's intent to move between ZooKeeper and coordinator membership.

``/consumers/<group>/migration`` (persistent) holds
``{"version":1,"to":"kafka"|"zookeeper","requested_at":<ms>}``, written by
``zkconsumer groups migrate --execute`` (:mod:`zkconsumer.cli.migrate`). Every zkconsumer member
watches it (:class:`~zkconsumer.consumer.switching.SwitchingMembership`) and moves itself to the
membership it names; a member that starts while it exists joins that membership whatever its
``group.membership`` says. The node stays once the group has moved: it is the record of which
membership the group is on (Kafka's consumer and tools read only ``ids``, ``owners`` and
``offsets`` of a group, and ignore it; ``groups delete`` removes it with the group).

Which registrations are zkconsumer's: every zkconsumer session creates a fence node
``/consumers/<group>/fences/<consumer id>-<n>`` (:mod:`.fence`) before its registration, and
Kafka's Scala consumer never does. :func:`foreign_members` names the registered members whose
session holds no fence node: Kafka's own ZooKeeper consumers (or a zkconsumer release older
than the fences), which would not follow the migration node.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from . import zkformat
from .watchers import PathWatch, Value

__all__ = ["MEMBERSHIPS", "Intent", "decode_intent", "encode_intent", "foreign_members", "member_fences", "migration_path",
           "read_intent", "watch_intent", "write_intent"]

log = logging.getLogger(__name__)

#: The memberships a group may be moved to (``group.membership`` values).
MEMBERSHIPS = ("kafka", "zookeeper")


@dataclass(frozen=True)
class Intent:
    """What the migration node says: the membership the group moves to, and when that was asked."""

    to: str
    requested_at_ms: int


def migration_path(group: str) -> str:
    """``/consumers/<group>/migration``

    >>> migration_path("g1")
    '/consumers/g1/migration'
    """
    return f"{zkformat.GroupPaths(group).root}/migration"


def encode_intent(to: str, requested_at_ms: int) -> bytes:
    """The node's bytes.

    >>> encode_intent("kafka", 5)
    b'{"version":1,"to":"kafka","requested_at":5}'
    """
    if to not in MEMBERSHIPS:
        raise ValueError(f"to must be one of {', '.join(MEMBERSHIPS)}, got {to!r}")
    return json.dumps({"version": 1, "to": to, "requested_at": int(requested_at_ms)}, separators=(",", ":")).encode()


def decode_intent(data: Optional[bytes]) -> Optional[Intent]:
    """The intent in ``data``; ``None`` for no node, and (logged) for bytes that do not name a membership.

    >>> decode_intent(b'{"version":1,"to":"zookeeper","requested_at":7}')
    Intent(to='zookeeper', requested_at_ms=7)
    >>> decode_intent(b'junk') is None
    True
    """
    if data is None:
        return None
    try:
        obj = json.loads(data.decode("utf-8"))
        to = obj["to"]
        at = int(obj.get("requested_at", 0))
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warning("ignoring an unreadable migration node: %r", data[:200])
        return None
    if to not in MEMBERSHIPS:
        log.warning("ignoring a migration node naming an unknown membership: %r", data[:200])
        return None
    return Intent(to, at)


def read_intent(client: Any, group: str) -> Optional[Intent]:
    """The group's migration intent (``None``: no node). Raises kazoo's errors (callers retry)."""
    try:
        data, _ = client.get(migration_path(group))
    except NoNodeError:
        return None
    return decode_intent(data)


def write_intent(client: Any, group: str, to: str, acl: Optional[List[Any]] = None) -> Intent:
    """Create or overwrite the group's migration node; returns what was written."""
    now = int(time.time() * 1000)
    data = encode_intent(to, now)
    path = migration_path(group)
    try:
        client.create(path, data, acl=acl, makepath=True)
    except NodeExistsError:
        client.set(path, data)
    return Intent(to, now)


def watch_intent(client: KazooClient, group: str, changed: Callable[[], None]) -> PathWatch:
    """Call ``changed()`` once at once (on the calling thread), then on kazoo's threads whenever the node
    is created, changed or deleted (:class:`~.watchers.PathWatch`: armed before this returns, so a read
    of the node made after it misses no change; armed again after a reconnection, where a change made
    meanwhile calls it, and after a new session, which calls it whatever the node holds).
    ``changed`` must only signal. Returns the watch: :meth:`~.watchers.PathWatch.stop` it.

    Never blocks kazoo: kazoo's own ``DataWatch`` recipe re-reads the node on kazoo's callback thread
    with a synchronous ``get`` retried without limit; while ZooKeeper is unreachable that thread waits
    for good, and kazoo's ``atexit`` handler (``SequentialThreadingHandler.stop``, which joins it without
    a timeout) then hangs the exit of a process that never closed its client.
    """
    watch = PathWatch(client, migration_path(group), children=False, describe=_intent_changed,
                      signal=lambda _reason: changed(), name=f"migration node of group {group}")
    watch.start()
    changed()
    return watch


def _intent_changed(previous: Value, current: Value) -> Optional[str]:
    if current is None:
        return "migration node deleted"
    return "migration node created" if previous is None else "migration node changed"


def member_fences(client: Any, group: str) -> Dict[str, List[str]]:
    """Each registered member of ``group`` (consumer id) with the fence nodes its registration's session holds
    (see the module docstring): an empty list for a session without one (Kafka's own consumers). A fence node
    exists exactly while its session lives, so a member that deregistered can still be told alive (switching,
    or switched) from gone (stopped, or killed and its session expired). Raises kazoo's errors."""
    paths = zkformat.GroupPaths(group)
    try:
        ids = client.get_children(paths.ids)
    except NoNodeError:
        return {}
    by_session: Dict[int, List[str]] = {}
    try:
        fences = client.get_children(paths.fences)
    except NoNodeError:
        fences = []
    for name in sorted(fences):
        stat = client.exists(f"{paths.fences}/{name}")
        if stat is not None and stat.ephemeralOwner:
            by_session.setdefault(int(stat.ephemeralOwner), []).append(f"{paths.fences}/{name}")
    held: Dict[str, List[str]] = {}
    for consumer_id in sorted(ids):
        stat = client.exists(paths.member(consumer_id))
        if stat is not None:
            held[consumer_id] = by_session.get(int(stat.ephemeralOwner), [])
    return held


def foreign_members(client: Any, group: str) -> List[str]:
    """Registered members of ``group`` whose ZooKeeper session holds no zkconsumer fence node:
    Kafka's own ZooKeeper consumers (see the module docstring). Raises kazoo's errors."""
    return [consumer_id for consumer_id, fences in member_fences(client, group).items() if not fences]
