"""The LeaderFinder thread (Kafka's LeaderFinderThread): finds the leader of partitions without a fetcher.

It sleeps while every partition has a fetcher. When some do not, it asks the
live brokers (tried in random order until one answers) for Metadata of their
topics and lets its :class:`~zkconsumer.fetch.manager.FetcherManager` give
every partition that has a leader to its fetcher thread, then waits
``refresh.leader.backoff.ms`` before its next pass.
"""

from __future__ import annotations

import logging
import random
import threading
from typing import TYPE_CHECKING, List, Optional

from ..errors import BrokerError
from ..wire.connection import BrokerConnection
from ..wire.protocol import MetadataResponse

if TYPE_CHECKING:  # pragma: no cover
    from .manager import FetcherManager

__all__ = ["LeaderFinder"]

log = logging.getLogger(__name__)


class LeaderFinder(threading.Thread):
    """Finds leaders for partitions without a fetcher (Kafka's LeaderFinderThread)."""

    def __init__(self, manager: "FetcherManager", name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._manager = manager
        self.stop_event = threading.Event()
        self._conn: Optional[BrokerConnection] = None
        self._failures = 0  # consecutive failed passes

    def request_stop(self) -> None:
        self.stop_event.set()
        self._manager._wake()
        conn = self._conn
        if conn is not None:
            conn.abort()

    def run(self) -> None:
        manager = self._manager
        try:
            while not self.stop_event.is_set():
                wanted = manager._wait_for_leaderless(self.stop_event)
                if not wanted:
                    break
                metadata = self._lookup(sorted({topic for topic, _ in wanted}))
                if metadata is not None and not self.stop_event.is_set():
                    manager._assign_leaders(metadata, self.stop_event)
                manager._shutdown_idle_fetchers()
                manager._backoff(self.stop_event)
        except BaseException as exc:  # noqa: BLE001 - reported, never swallowed
            log.exception("%s died", self.name)
            if not self.stop_event.is_set():
                manager._report(exc)

    def _lookup(self, topics: List[str]) -> Optional[MetadataResponse]:
        """Metadata for ``topics`` from the first live broker that answers; ``None`` if none did."""
        try:
            brokers = list(self._manager._brokers())
        except Exception as exc:  # noqa: BLE001 - the registry (ZooKeeper) may be briefly unavailable
            self._failed(f"cannot list live brokers: {exc!r}")
            return None
        random.shuffle(brokers)
        failures = []
        for broker in brokers:
            self._conn = conn = self._manager._connect(broker.host, broker.port)
            if self.stop_event.is_set():  # checked after publishing conn, so request_stop cannot miss it
                self._conn = None
                return None
            try:
                metadata = conn.metadata(topics)
                if self._failures:
                    log.info("%s: metadata available again", self.name)
                self._failures = 0
                return metadata
            except BrokerError as exc:
                failures.append(f"{broker.id}@{broker.host}:{broker.port}: {exc}")
            finally:
                self._conn = None
                conn.close()
        if not self.stop_event.is_set():
            self._failed(f"no broker answered a metadata request for {topics}: "
                         f"{'; '.join(failures) or 'no live brokers'}")
        return None

    def _failed(self, message: str) -> None:
        """Log a failed pass: a warning for the first of a series, debug for the retries."""
        self._failures += 1
        log.log(logging.WARNING if self._failures == 1 else logging.DEBUG, "%s: %s (retrying every %d ms)",
                self.name, message, self._manager._config.refresh_leader_backoff_ms)
