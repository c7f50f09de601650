"""What a member reads of the cluster itself in ZooKeeper: topics, their partitions, and brokers.

:class:`ClusterReads` takes the member's :class:`~zkconsumer.zookeeper.group_session.GroupSession`;
:class:`~zkconsumer.zookeeper.group.GroupClient` offers its reads. Each read is cached and kept
valid by a watch of the node it read (answered without a request while nothing changed, on the
same session and connection); malformed nodes are logged, naming the node, and left out.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Callable, Dict, Iterable, List, Optional, Tuple, cast

from kazoo.exceptions import NoNodeError

from ..errors import MalformedZnodeError
from ..structs import Broker
from . import zkformat
from .group_session import GroupSession

__all__ = ["ClusterReads"]

log = logging.getLogger("zkconsumer.zookeeper.group")


class ClusterReads:
    """Topics, partition maps and brokers as one member reads them, on its session."""

    def __init__(self, session: GroupSession) -> None:
        self._session = session
        #: Where partitions_for_topics() may take a topic's partition map from instead of its own cache:
        #: the map, or None when that source cannot vouch for it now (GroupWatcher.topic_data).
        self.topic_data: Optional[Callable[[str], Optional[bytes]]] = None
        self._topic_lock = threading.Lock()
        self._topic_cache: Dict[str, Tuple[bytes, threading.Event, Optional[Tuple[int, int]]]] = {}
        self._broker_cache: Dict[str, bytes] = {}  # brokers(): node data by broker id, as members()
        self._broker_cversion: Optional[int] = None
        self._broker_lock = threading.Lock()
        self._brokers_fresh: Optional[threading.Event] = None  # the watch of the last read; set once stale
        self._brokers_session: Optional[Tuple[int, int]] = None

    def all_topics(self) -> List[str]:
        """Every topic under ``/brokers/topics`` (empty if the cluster has none yet)."""
        try:
            return sorted(self._session.retry(lambda: self._session.client.get_children(zkformat.BROKER_TOPICS_PATH)))
        except NoNodeError:
            return []

    def partitions_for_topics(self, topics: Iterable[str]) -> Dict[str, List[int]]:
        """Sorted partition ids of each topic that exists; missing or malformed topics are left out.

        A topic's map comes from :attr:`topic_data` when it can vouch for it (the
        member's own watch of the node read it and has not fired since:
        :meth:`~zkconsumer.zookeeper.watchers.GroupWatcher.topic_data`). Otherwise
        the node is read with a data watch and answered from that read until the
        watch fires or the session changes: no request while nothing changed.
        That cache alone would not do for a rebalance that a watch of the same
        node signalled: kazoo runs both watches' callbacks on its callback thread
        in no set order, and the rebalance could read the cache before its
        callback marked it stale, then never be signalled again (found by the
        simulator). The watch's own snapshot is kept before its signal is sent.
        """
        result: Dict[str, List[int]] = {}
        source = self.topic_data
        for topic in sorted(set(topics)):
            path = zkformat.topic_path(topic)
            data = source(topic) if source is not None else None
            if data is None:
                data = self._watched_get(path)
            if data is None:
                continue
            try:
                result[topic] = sorted(zkformat.decode_topic_partitions(path, data))
            except MalformedZnodeError as exc:
                log.warning("ignoring topic with an unreadable partition map: %s", exc)
        return result

    def _watched_get(self, path: str) -> Optional[bytes]:
        """The node's data (``None``: no such node), from a cache kept valid by a data watch."""
        with self._topic_lock:
            cached = self._topic_cache.get(path)
            connection = self._session.connection()
            if cached is not None and not cached[1].is_set() and cached[2] == connection and connection is not None:
                return cached[0]
            changed = threading.Event()

            def on_change(_event: object) -> None:
                changed.set()

            try:
                data, _ = self._session.retry(lambda: self._session.client.get(path, watch=on_change))
            except NoNodeError:
                self._topic_cache.pop(path, None)  # no watch is set on a missing node: read again next time
                return None
            self._topic_cache[path] = (data, changed, connection)
            return cast(Optional[bytes], data)

    def brokers(self, protocol: str = "PLAINTEXT") -> List[Broker]:
        """Live brokers from ``/brokers/ids``; malformed nodes are logged and left out.

        Cached (a broker writes its node once per session): the read of the
        children arms a watch, and while that watch has not fired and the
        session is the same, calls are answered without any request (the
        leader finder asks on every pass while a broker is down). Otherwise one
        ``get_children`` plus one ``get`` per broker that (re)appeared, as
        :meth:`members`. Thread-safe (leader finders of several generations may call it).
        """
        with self._broker_lock:
            if self._brokers_fresh is not None and self._brokers_fresh.is_set() is False \
                    and self._brokers_session == self._session.connection() and self._brokers_session is not None:
                return self._decode_brokers(sorted(self._broker_cache), protocol)
            return self._read_brokers(protocol)

    def _read_brokers(self, protocol: str) -> List[Broker]:
        changed = threading.Event()  # set by the watch: the cache is stale

        def on_change(_event: object) -> None:
            changed.set()

        session = self._session.connection()  # read before the request: a loss while it is out makes it stale
        try:
            ids, stat = self._session.retry(lambda: self._session.client.get_children(zkformat.BROKER_IDS_PATH, watch=on_change,
                                                                     include_data=True))
        except NoNodeError:
            self._broker_cache, self._broker_cversion, self._brokers_fresh = {}, None, None
            return []
        current = set(ids)
        known = set(self._broker_cache)
        changes = len(current - known) + len(known - current)
        if self._broker_cversion is None or stat.cversion - self._broker_cversion != changes:
            self._broker_cache = {}
        else:
            self._broker_cache = {k: v for k, v in self._broker_cache.items() if k in current}
        self._broker_cversion = stat.cversion
        for broker_id in sorted(current):
            path = f"{zkformat.BROKER_IDS_PATH}/{broker_id}"
            if broker_id not in self._broker_cache:
                try:
                    data, _ = self._session.retry(functools.partial(self._session.client.get, path))
                except NoNodeError:
                    changed.set()  # listed but gone: read again next time
                    continue
                self._broker_cache[broker_id] = data
        self._brokers_fresh, self._brokers_session = changed, session
        return self._decode_brokers(sorted(self._broker_cache), protocol)

    def _decode_brokers(self, ids: List[str], protocol: str) -> List[Broker]:
        brokers = []
        for broker_id in ids:
            path = f"{zkformat.BROKER_IDS_PATH}/{broker_id}"
            try:
                brokers.append(zkformat.decode_broker(path, self._broker_cache[broker_id], protocol))
            except MalformedZnodeError as exc:
                log.warning("ignoring broker with an unreadable registration: %s", exc)
        return brokers
