"""The LeaderFinder thread (Kafka's LeaderFinderThread): finds the leader of partitions without a fetcher.

It sleeps while every partition has a fetcher. When some do not, it asks the
live brokers (tried in random order until one answers) for Metadata of their
topics and lets its fetcher manager give every partition that has a leader to
its fetcher thread, then waits ``refresh.leader.backoff.ms`` before its next pass.

What it needs from the manager that owns it is handed in at construction as a
:class:`LeaderFinderHost` (callables and values), so this module knows nothing of
:mod:`zkconsumer.fetch.manager`: the manager imports the finder, never the reverse.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Set

from ..errors import BrokerError
from ..structs import Broker, TopicPartition
from ..threads import ShutdownableThread
from ..wire.connection import BrokerConnection
from ..wire.protocol import MetadataResponse

__all__ = ["LeaderFinder", "LeaderFinderHost"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaderFinderHost:
    """What a :class:`LeaderFinder` needs from the fetcher manager that owns it.

    Each callable gets the finder (a :class:`ShutdownableThread`) where it may
    block, and must return soon once ``finder.stopping``:

    * ``wait_for_leaderless(finder)``: block until some partition lacks a leader;
      those partitions (an empty set when stopping).
    * ``assign_leaders(metadata, finder)``: give every leaderless partition that has
      a live leader in ``metadata`` to its fetcher thread (nothing once stopping).
    * ``stop_idle_fetchers()``: stop and join fetchers left without partitions.
    * ``backoff(finder)``: wait ``refresh.leader.backoff.ms`` (less when stopping).
    * ``report(exc)``: an unexpected exception of the finder, for the application.
    * ``brokers()``: the live brokers (may raise: retried after the backoff).
    * ``connect(host, port)``: a new connection to a broker (closed by the finder).
    * ``wake()``: wake ``wait_for_leaderless`` (called by ``request_stop``; never blocks long).
    * ``backoff_ms``: ``refresh.leader.backoff.ms``, for the log lines.
    """

    wait_for_leaderless: Callable[[ShutdownableThread], Set[TopicPartition]]
    assign_leaders: Callable[[MetadataResponse, ShutdownableThread], None]
    stop_idle_fetchers: Callable[[], None]
    backoff: Callable[[ShutdownableThread], None]
    report: Callable[[BaseException], None]
    brokers: Callable[[], Sequence["Broker"]]
    connect: Callable[[str, int], BrokerConnection]
    wake: Callable[[], None]
    backoff_ms: int


class LeaderFinder(ShutdownableThread):
    """Finds leaders for partitions without a fetcher (Kafka's LeaderFinderThread).

    :meth:`request_stop` wakes its wait and aborts a metadata request in flight;
    an unexpected exception is logged and, unless stopping, passed to ``host.report``.
    """

    def __init__(self, host: LeaderFinderHost, name: str) -> None:
        super().__init__(name)
        self._host = host
        self._conn: Optional[BrokerConnection] = None
        self._failures = 0  # consecutive failed passes

    def request_stop(self) -> None:
        super().request_stop()
        self._host.wake()
        conn = self._conn
        if conn is not None:
            conn.abort()

    def run(self) -> None:
        host = self._host
        try:
            while not self.stopping:
                wanted = host.wait_for_leaderless(self)
                if not wanted:
                    break
                metadata = self._lookup(sorted({topic for topic, _ in wanted}))
                if metadata is not None and not self.stopping:
                    host.assign_leaders(metadata, self)
                host.stop_idle_fetchers()
                host.backoff(self)
        except BaseException as exc:  # noqa: BLE001 - reported, never swallowed
            log.exception("%s died", self.name)
            if not self.stopping:
                host.report(exc)

    def _lookup(self, topics: List[str]) -> Optional[MetadataResponse]:
        """Metadata for ``topics`` from the first live broker that answers; ``None`` if none did."""
        try:
            brokers = list(self._host.brokers())
        except Exception as exc:  # noqa: BLE001 - the registry (ZooKeeper) may be briefly unavailable
            self._failed(f"cannot list live brokers: {exc!r}")
            return None
        random.shuffle(brokers)
        failures = []
        for broker in brokers:
            self._conn = conn = self._host.connect(broker.host, broker.port)
            if self.stopping:  # checked after publishing conn, so request_stop cannot miss it
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
        if not self.stopping:
            self._failed(f"no broker answered a metadata request for {topics}: "
                         f"{'; '.join(failures) or 'no live brokers'}")
        return None

    def _failed(self, message: str) -> None:
        """Log a failed pass: a warning for the first of a series, debug for the retries."""
        self._failures += 1
        log.log(logging.WARNING if self._failures == 1 else logging.DEBUG, "%s: %s (retrying every %d ms)",
                self.name, message, self._host.backoff_ms)
