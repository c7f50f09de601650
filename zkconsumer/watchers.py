"""ZooKeeper watches that turn group and topic changes into rebalance requests.

Every callback here runs on kazoo's event thread and only calls ``signal(reason)``
(which must itself return at once, as :meth:`Rebalancer.request` does): no
ZooKeeper call, no lock held for long, nothing that could stall kazoo.

* member changes: the children of ``/consumers/<g>/ids``;
* partition-count changes: the data of ``/brokers/topics/<t>`` for every topic
  this member subscribes (including a topic being created later);
* wildcard subscriptions: the children of ``/brokers/topics``, signalling only
  when the set of *matching* topics changed.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Dict, Iterable, List, Optional, Set

from kazoo.client import KazooClient
from kazoo.protocol.states import WatchedEvent, ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from . import zkformat

log = logging.getLogger(__name__)


class GroupWatcher:
    """Owns the watches of one member; :meth:`stop` makes every callback a no-op and ends it."""

    def __init__(
        self,
        client: KazooClient,
        paths: zkformat.GroupPaths,
        signal: Callable[[str], None],
        topic_allowed: Optional[Callable[[str], bool]] = None,
    ) -> None:
        self._client = client
        self._paths = paths
        self._signal = signal
        self._topic_allowed = topic_allowed
        self._lock = threading.Lock()
        self._stopped = False
        self._topic_watches: Dict[str, DataWatch] = {}
        self._matching: Optional[Set[str]] = None
        self._watches: List[object] = []

    def start(self) -> None:
        """Watch the group's members and, for a wildcard subscription, the topic list."""
        self._watches.append(ChildrenWatch(self._client, self._paths.ids, self._on_members))
        if self._topic_allowed is not None:
            self._watches.append(ChildrenWatch(self._client, zkformat.BROKER_TOPICS_PATH, self._on_topics))

    def watch_topics(self, topics: Iterable[str]) -> None:
        """Also watch the partition maps of ``topics`` (idempotent; adds only new ones)."""
        for topic in topics:
            with self._lock:
                if self._stopped or topic in self._topic_watches:
                    continue
                self._topic_watches[topic] = DataWatch(self._client, zkformat.topic_path(topic), self._topic_callback(topic))

    def stop(self) -> None:
        with self._lock:
            self._stopped = True

    # Callbacks: kazoo's thread. Returning False ends a kazoo watch recipe.

    def _on_members(self, children: List[str]) -> bool:
        if self._stopped:
            return False
        self._signal(f"group members changed ({len(children)} registered)")
        return True

    def _on_topics(self, children: List[str]) -> bool:
        if self._stopped:
            return False
        assert self._topic_allowed is not None
        matching = {t for t in children if self._topic_allowed(t)}
        with self._lock:
            previous, self._matching = self._matching, matching
        if previous is not None and matching != previous:
            added = sorted(matching - previous)
            self._signal(f"matching topics changed (new: {', '.join(added) or 'none'})")
        return True

    def _topic_callback(self, topic: str) -> Callable[..., bool]:
        def on_change(data: Optional[bytes], stat: Optional[ZnodeStat], event: Optional[WatchedEvent] = None) -> bool:
            if self._stopped:
                return False
            if event is not None:  # None: the initial read, not a change
                self._signal(f"partitions of topic {topic} changed")
            return True

        return on_change
