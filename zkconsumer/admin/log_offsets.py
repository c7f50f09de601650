"""Where log start/end offsets come from: the :class:`LogOffsets` protocol and
:class:`BrokerOffsets`, which asks each partition's leader."""

from __future__ import annotations

import socket
import ssl
from typing import Callable, Dict, List, Optional, Protocol, Sequence, Tuple

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from ..errors import BrokerError, MalformedZnodeError
from ..structs import Broker, TopicPartition
from ..wire.broker_errors import ERROR_NAMES
from ..wire.connection import BrokerConnection
from ..wire.protocol import NO_LEADER, ListOffsetsRequest
from ..zookeeper import zkformat
from . import reads
from .access import BrokerAccess

__all__ = ["LogOffsets", "TimeOffsets", "BrokerOffsets", "NONE_BEFORE"]

#: What :meth:`LogOffsets.fetch` gives, for a timestamp, a partition whose log has no segment
#: last written at or before it (the broker answered an empty list): every message is newer.
NONE_BEFORE = -1


class LogOffsets(Protocol):
    """Where log start/end offsets come from (a fake in unit tests).

    ``fetch`` returns ``(offsets, problems)``: an offset for every partition it
    could look up, and a one-line reason for every one it could not. ``time`` is
    :data:`~zkconsumer.wire.protocol.EARLIEST_TIME`, :data:`~zkconsumer.wire.protocol.LATEST_TIME`
    or a timestamp in ms since the epoch; for a timestamp, the offset is the brokers'
    offsets-before-time answer (a log-segment boundary: :func:`.times.offsets_for_time`; looking up
    by time needs a :class:`TimeOffsets`).
    """

    def fetch(self, partitions: Sequence[TopicPartition],
              time: int) -> Tuple[Dict[TopicPartition, int], Dict[TopicPartition, str]]:
        ...


class TimeOffsets(Protocol):
    """A :class:`LogOffsets` that also looks offsets up by time (:class:`BrokerOffsets`): ``empty`` is the
    answer for a partition with no segment last written at or before ``time`` (else that is a problem)."""

    def fetch(self, partitions: Sequence[TopicPartition], time: int,
              empty: Optional[int] = None) -> Tuple[Dict[TopicPartition, int], Dict[TopicPartition, str]]:
        ...


class BrokerOffsets:
    """:class:`LogOffsets` from the brokers: one ListOffsets request per partition leader.

    The leader comes from ``/brokers/topics/<t>/partitions/<p>/state`` and its
    address from ``/brokers/ids/<leader>`` (as ConsumerOffsetChecker does).
    Connections are kept per broker until :meth:`close` (also a context manager).
    ``protocol`` picks the broker endpoint; give ``ssl_context`` for ``SSL`` endpoints, ``authenticate``
    (:func:`zkconsumer.kerberos.broker_authenticator`) for ``SASL_*`` ones, or all three as ``access``
    (a :class:`~.access.BrokerAccess`, which then replaces them).
    """

    def __init__(self, zk: KazooClient, *, socket_timeout_ms: int = 10000,
                 client_id: str = "zkconsumer-admin", protocol: str = "PLAINTEXT",
                 ssl_context: Optional[ssl.SSLContext] = None,
                 authenticate: Optional[Callable[[socket.socket, str], None]] = None,
                 access: Optional[BrokerAccess] = None) -> None:
        if access is not None:
            protocol, ssl_context, authenticate = access.protocol, access.ssl_context, access.authenticate
        self._zk = zk
        self._ssl_context = ssl_context
        self._authenticate = authenticate
        self._timeout_ms = socket_timeout_ms
        self._client_id = client_id
        self._protocol = protocol
        self._connections: Dict[int, BrokerConnection] = {}
        self._brokers: Dict[int, Optional[Broker]] = {}

    def __enter__(self) -> "BrokerOffsets":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def leaders(self, partitions: Sequence[TopicPartition]) -> Tuple[Dict[TopicPartition, int], Dict[TopicPartition, str]]:
        """Leader broker id of each partition, and a reason for each partition without a usable one."""
        state_paths = {tp: zkformat.partition_state_path(*tp) for tp in partitions}
        data = reads.get_many(self._zk, list(state_paths.values()))
        leaders: Dict[TopicPartition, int] = {}
        problems: Dict[TopicPartition, str] = {}
        for tp, path in state_paths.items():
            raw = data[path]
            if raw is None:
                problems[tp] = f"no partition state at {path}"
                continue
            try:
                state = zkformat.decode_partition_state(path, raw)
            except MalformedZnodeError as exc:
                problems[tp] = str(exc)
                continue
            if state.leader == NO_LEADER:
                problems[tp] = "the partition has no leader"
            else:
                leaders[tp] = state.leader
        return leaders, problems

    def _broker(self, broker_id: int) -> Optional[Broker]:
        if broker_id not in self._brokers:
            path = zkformat.broker_path(broker_id)
            try:
                data, _ = self._zk.retry(self._zk.get, path)
                self._brokers[broker_id] = zkformat.decode_broker(path, data, self._protocol)
            except (NoNodeError, MalformedZnodeError):
                self._brokers[broker_id] = None
        return self._brokers[broker_id]

    def _connection(self, broker: Broker) -> BrokerConnection:
        if broker.id not in self._connections:
            self._connections[broker.id] = BrokerConnection(
                broker.host, broker.port, self._client_id, self._timeout_ms, 0, self._ssl_context,
                authenticate=self._authenticate)
        return self._connections[broker.id]

    def fetch(self, partitions: Sequence[TopicPartition], time: int,
              empty: Optional[int] = None) -> Tuple[Dict[TopicPartition, int], Dict[TopicPartition, str]]:
        """Offsets before ``time`` (:data:`EARLIEST_TIME`/:data:`LATEST_TIME`, or ms since the epoch) of ``partitions``.

        A broker answers a time before every log segment with no offset: that is a
        problem unless ``empty`` is given, which is then the partition's answer.
        """
        offsets: Dict[TopicPartition, int] = {}
        leaders, problems = self.leaders(partitions)
        by_leader: Dict[int, List[TopicPartition]] = {}
        for tp, leader in leaders.items():
            by_leader.setdefault(leader, []).append(tp)
        for leader, tps in sorted(by_leader.items()):
            broker = self._broker(leader)
            if broker is None:
                for tp in tps:
                    problems[tp] = f"leader broker {leader} is not registered under {zkformat.BROKER_IDS_PATH}"
                continue
            try:
                response = self._connection(broker).send(ListOffsetsRequest(tuple((t, p, time) for t, p in tps)))
            except BrokerError as exc:
                for tp in tps:
                    problems[tp] = str(exc)
                continue
            answered = {(r.topic, r.partition): r for r in response.partitions}
            for tp in tps:
                r = answered.get(tp)
                if r is not None and r.error_code == 0 and not r.offsets and empty is not None:
                    offsets[tp] = empty
                elif r is None or (r.error_code == 0 and not r.offsets):
                    problems[tp] = f"broker {leader} returned no offset"
                elif r.error_code != 0:
                    problems[tp] = f"broker {leader}: {ERROR_NAMES.get(r.error_code, r.error_code)}"
                else:
                    offsets[tp] = r.offsets[0]
        return offsets, problems
