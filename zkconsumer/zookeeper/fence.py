"""Session fences: the session a write was decided under, carried by the write itself.

A fenced write of a member (an offset while it owns the partition, the release or
relabel of an owner node it holds) is decided on a read made under one ZooKeeper
session, then sent. Versions alone cannot tell two sessions apart: after an expiry
a peer (or this member's next session) re-creates the same owner node at version 0,
and a thread descheduled across kazoo's reconnect sends its write on the new
session, where the version still matches.

So each session of a member creates one *fence node*, an ephemeral sequential node
``/consumers/<group>/fences/<consumerId>-<n>``, and every fenced multi-operation
starts with a ``check`` of the fence node of the session it was decided under.
ZooKeeper deletes a session's ephemeral nodes in the same transaction that closes
the session, ahead of anything a later session sends, so such a multi is applied
only while that session lives, wherever and whenever it is sent.

The fence node is named by ZooKeeper (a sequence number), and which session it
belongs to is read back from the server (its ``ephemeralOwner``), never assumed:
a create sent late, on another session than the caller believed, can only ever
make a fence for the session that really sent it.

Kafka's consumer and tools read only ``ids``, ``owners`` and ``offsets`` of a
group, so they ignore these nodes; ``kafka-consumer-groups --delete`` and
zkconsumer's ``groups delete`` remove them with the group.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional

from . import zkformat
from .zkcalls import BoundedZooKeeper

__all__ = ["SessionFences"]

#: How many sessions' fence paths are remembered (a member holds one session at a time; the
#: older ones are kept only so that a node left by one can still be deleted exactly).
KEEP_SESSIONS = 16


class SessionFences:
    """The fence node of each session this member created one in; see the module docstring.

    Thread-safe. Calls that send requests (:meth:`establish`) raise kazoo's errors:
    callers run them inside their retry.
    """

    def __init__(self, client: BoundedZooKeeper, paths: zkformat.GroupPaths, consumer_id: str,
                 acl: Optional[List[Any]] = None) -> None:
        self._client = client
        self._prefix = paths.fence_prefix(consumer_id)
        self._acl = acl
        self._lock = threading.Lock()
        self._by_session: Dict[int, str] = {}  # session id -> its fence node, as the server reported

    def path(self, session: Optional[int]) -> Optional[str]:
        """The fence node of ``session`` if one is known (no request)."""
        if session is None:
            return None
        with self._lock:
            return self._by_session.get(session)

    def establish(self) -> Optional[int]:
        """Create a fence node for the session the client is on and learn whose it is.

        Two requests: the create, then a read of the node's owner. Returns the
        session the node belongs to (``None``: the node was gone by the read, its
        session with it). Repeat-safe: a retried create leaves a second node of the
        same session, removed with it; the first one known stays in use.
        """
        created = self._client.create(self._prefix, b"", acl=self._acl, ephemeral=True, sequence=True,
                                      makepath=True)
        stat = self._client.exists(created)
        if stat is None or not stat.ephemeralOwner:
            return None
        session = int(stat.ephemeralOwner)
        with self._lock:
            self._by_session.setdefault(session, created)
            while len(self._by_session) > KEEP_SESSIONS:
                del self._by_session[next(iter(self._by_session))]  # the earliest established: long gone
        return session

    def ensure(self, session: Optional[int]) -> Optional[str]:
        """The fence node of ``session``, creating one if ``session`` is the client's current one.

        ``None`` when ``session`` is ``None`` or not the session the client is
        on (then nothing decided under it may be written any more). Raises
        kazoo's errors (a lost connection: retry).
        """
        known = self.path(session)
        if known is not None or session is None or session != self._client.session_id:
            return known
        self.establish()
        return self.path(session)

    def discard(self, session: int, path: str) -> None:
        """Forget ``path`` as the fence of ``session`` (it was found deleted while the session lives);
        the next :meth:`ensure` makes another."""
        with self._lock:
            if self._by_session.get(session) == path:
                del self._by_session[session]
