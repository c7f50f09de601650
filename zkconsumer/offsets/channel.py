"""A connection to a consumer group's coordinator broker, found and re-found on demand.

Kafka 0.8.2's ``ClientUtils.channelToOffsetManager`` in Python, without its
endless loops: :class:`CoordinatorChannel` asks live brokers (in random order)
which broker coordinates the group (GroupCoordinator v0), keeps one connection
to it, and forgets it when the caller reports that it moved.

Contract:

* :meth:`CoordinatorChannel.send` sends one request to the coordinator,
  looking it up first if none is known. A connection failure forgets the
  coordinator and raises :class:`~zkconsumer.errors.BrokerUnavailableError`
  (retriable); a lookup that finds none raises a retriable
  :class:`~zkconsumer.wire.broker_errors.KafkaProtocolError` (code 15,
  GROUP_COORDINATOR_NOT_AVAILABLE, while ``__consumer_offsets`` is created).
* Error codes *inside* a response are the caller's: on
  :data:`~zkconsumer.wire.group_protocol.COORDINATOR_MOVED_CODES` it calls
  :meth:`CoordinatorChannel.invalidate` and retries after its backoff.
* No retries and no sleeping here: callers own their retry policy
  (``offsets.commit.max.retries``/``offsets.channel.backoff.ms`` for offsets,
  the membership's own loop for joins and heartbeats).
* Thread-safe. :meth:`CoordinatorChannel.interrupt` (any thread) makes the
  in-flight request fail at once (the next one reconnects): used at shutdown
  to end a JoinGroup the broker is holding.
"""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, TypeVar

from ..errors import BrokerError, BrokerUnavailableError
from ..fetch.manager import ConnectionFactory
from ..kerberos import broker_authenticator
from ..structs import Broker
from ..wire.broker_errors import error_for_code
from ..wire.connection import BrokerConnection
from ..wire.group_protocol import GROUP_COORDINATOR_NOT_AVAILABLE, GroupCoordinatorRequest
from ..wire.protocol import Request
from ..wire.tls import broker_ssl_context

__all__ = ["Coordinator", "CoordinatorChannel", "connection_factory"]

log = logging.getLogger(__name__)

R = TypeVar("R")


def connection_factory(config: Any, socket_timeout_ms: int) -> ConnectionFactory:
    """Connections as the fetchers make them (``client.id``, receive buffer, TLS, SASL), with their own timeout."""
    ssl_context = broker_ssl_context(config)
    authenticate = broker_authenticator(config)

    def connect(host: str, port: int) -> BrokerConnection:
        return BrokerConnection(host, port, config.client_id, socket_timeout_ms, config.socket_receive_buffer_bytes,
                                ssl_context, authenticate=authenticate)

    return connect


@dataclass(frozen=True)
class Coordinator:
    """The broker coordinating a group."""

    broker_id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"broker {self.broker_id} at {self.host}:{self.port}"


class CoordinatorChannel:
    """Requests to the coordinator of ``group_id``; see the module docstring.

    ``brokers()`` lists live brokers (from ZooKeeper ``/brokers/ids``) to ask
    where the coordinator is; ``lookup_connect`` and ``connect`` build
    connections for the lookup and for the coordinator (they may differ in
    socket timeout: a JoinGroup may legitimately block for a whole session
    timeout).
    """

    def __init__(self, group_id: str, brokers: Callable[[], Sequence[Broker]], connect: ConnectionFactory,
                 lookup_connect: Optional[ConnectionFactory] = None, name: str = "coordinator") -> None:
        self.group_id = group_id
        self.name = name
        self._brokers = brokers
        self._connect = connect
        self._lookup_connect = lookup_connect or connect
        self._lock = threading.Lock()
        self._coordinator: Optional[Coordinator] = None
        self._conn: Optional[BrokerConnection] = None

    @property
    def coordinator(self) -> Optional[Coordinator]:
        """The coordinator last found (``None`` until a request needed it, or after :meth:`invalidate`)."""
        return self._coordinator

    def send(self, request: Request[R]) -> R:
        """Send ``request`` to the coordinator and return its response (see the module docstring)."""
        conn = self._connection()
        try:
            return conn.send(request)
        except BrokerUnavailableError:
            self._forget(conn, "connection failed")
            raise

    def invalidate(self, reason: str = "") -> None:
        """Forget the coordinator: the next :meth:`send` looks it up again."""
        with self._lock:
            conn, previous = self._conn, self._coordinator
            self._conn, self._coordinator = None, None
        self._dropped(conn, previous, reason)

    def interrupt(self) -> None:
        """From any thread: fail the in-flight request now; the next :meth:`send` reconnects."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.abort()

    def close(self) -> None:
        """Close the connection (idempotent); a later :meth:`send` reconnects."""
        with self._lock:
            conn, self._conn, self._coordinator = self._conn, None, None
        if conn is not None:
            conn.close()

    # ------------------------------------------------------------------ internals

    def _connection(self) -> BrokerConnection:
        with self._lock:
            if self._conn is not None:
                return self._conn
            known = self._coordinator
        coordinator = known or self._discover()
        conn = self._connect(coordinator.host, coordinator.port)
        with self._lock:
            if self._conn is None:
                self._conn, self._coordinator = conn, coordinator
                if known is None:
                    log.info("group %s: coordinator is %s (%s channel)", self.group_id, coordinator, self.name)
                return conn
            existing = self._conn  # another thread got there first
        conn.close()
        return existing

    def _forget(self, conn: BrokerConnection, reason: str) -> None:
        """Forget the coordinator if ``conn`` is still the current connection to it."""
        with self._lock:
            if self._conn is not conn:
                return
            previous, self._conn, self._coordinator = self._coordinator, None, None
        self._dropped(conn, previous, reason)

    def _dropped(self, conn: Optional[BrokerConnection], previous: Optional[Coordinator], reason: str) -> None:
        if conn is not None:
            conn.close()
        if previous is not None:
            log.info("group %s: forgetting coordinator %s (%s channel)%s", self.group_id, previous, self.name,
                     f": {reason}" if reason else "")

    def _discover(self) -> Coordinator:
        """Ask live brokers, in random order, for the group's coordinator."""
        brokers: List[Broker] = list(self._brokers())
        random.shuffle(brokers)
        failures: List[str] = []
        for broker in brokers:
            conn = self._lookup_connect(broker.host, broker.port)
            try:
                response = conn.send(GroupCoordinatorRequest(self.group_id))
            except BrokerError as exc:
                failures.append(f"broker {broker.id}: {exc}")
                continue
            finally:
                conn.close()
            if response.error_code == 0 and response.coordinator_id >= 0:
                return Coordinator(response.coordinator_id, response.host, response.port)
            # Brokers share their metadata: another one would answer the same.
            raise error_for_code(response.error_code or GROUP_COORDINATOR_NOT_AVAILABLE,
                                 f"broker {broker.id} knows no coordinator for group {self.group_id} yet")
        detail = "; ".join(failures) or "no live brokers registered in ZooKeeper"
        raise error_for_code(GROUP_COORDINATOR_NOT_AVAILABLE, f"no coordinator found for group {self.group_id}: {detail}")
