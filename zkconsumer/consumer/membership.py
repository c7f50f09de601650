"""Group membership as the connector sees it, whoever keeps it.

What the application sees: :class:`RebalanceState`, :class:`RebalanceStatus` (``connector.status``)
and the :class:`ConsumerRebalanceListener` it may pass. What the connector plugs in: a
:class:`Membership` (ZooKeeper's in :mod:`zkconsumer.rebalance`, the brokers' coordinator's in
:mod:`zkconsumer.coordinator`), built from a :class:`ConnectorParts`: the parts of the connector it may
use. And what a membership drives of the fetchers: :class:`FetcherControl`.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Dict, Iterable, List, Mapping, Optional, Protocol, Set, Tuple

from kazoo.client import KazooClient

from ..config import ConsumerConfig
from ..errors import ConsumerRebalanceFailedError
from ..fetch.handoff import ChunkQueue, PartitionTopicInfo
from ..fetch.manager import FetcherManager
from ..metrics.consumer import ConsumerMetrics
from ..offsets.committer import OffsetCommitter
from ..structs import TopicPartition
from ..zookeeper.group import GroupClient
from ..zookeeper.heartbeat import SessionHeartbeat
from .stream import FailureSignal, KafkaStream
from .topic_count import TopicCount

__all__ = ["ConsumerRebalanceListener", "FetcherControl", "ConnectorParts", "Membership", "QueueFor", "RebalanceState",
           "RebalanceStatus", "TopicAllowed"]

#: ``queue_for(topic, thread id)``: the queue of the stream that consumes ``topic`` as ``thread id``.
QueueFor = Callable[[str, str], ChunkQueue]
#: ``topic_allowed(topic)`` for a wildcard subscription (``None`` for a static one).
TopicAllowed = Optional[Callable[[str], bool]]


class RebalanceState(enum.Enum):
    STARTING = "starting"
    REBALANCING = "rebalancing"
    STABLE = "stable"
    RETRYING = "retrying"
    DISCONNECTED = "disconnected"
    STOPPED = "stopped"


@dataclass(frozen=True)
class RebalanceStatus:
    """A snapshot of the rebalancer, for monitoring (``connector.status``).

    ``gave_up`` is true once ``rebalance.max.retries`` attempts in a row failed
    (where Kafka's consumer throws ``ConsumerRebalanceFailedException``);
    ``error`` then holds that :class:`~zkconsumer.errors.ConsumerRebalanceFailedError`
    (naming the last failure). The member keeps retrying on a longer backoff
    and both are cleared by the next successful rebalance. ``heartbeat`` names the
    ZooKeeper heartbeat that runs (``kafka/native``, ``kafka/kazoo`` or ``quiet/native``;
    ``None`` where the status does not come from a connector).
    """

    state: RebalanceState
    owned: Mapping[TopicPartition, str]
    rebalances: int
    failed_attempts: int
    last_error: Optional[str]
    last_duration_s: Optional[float]
    gave_up: bool = False
    error: Optional[ConsumerRebalanceFailedError] = None
    heartbeat: Optional[str] = None

    def as_metrics(self) -> Dict[str, Any]:
        """The JSON-ready ``rebalance`` section of ``metrics_snapshot()``.

        >>> RebalanceStatus(RebalanceState.STABLE, {}, 1, 0, None, 0.1).as_metrics()["state"]
        'stable'
        """
        return {
            "state": self.state.value,
            "failed_attempts": self.failed_attempts,
            "last_error": self.last_error,
            "gave_up": self.gave_up,
            "error": None if self.error is None else f"{type(self.error).__name__}: {self.error}",
        }


class ConsumerRebalanceListener(Protocol):
    """Hooks called by the rebalancer thread (Kafka's ``ConsumerRebalanceListener``).

    Two optional methods, called if the listener has them (``partitions`` as ``{topic: {partition, ...}}``):

    * ``partitions_lost(partitions)``: partitions taken from this member *without* a hand-over
      (Kafka's ``onPartitionsLost``): its ZooKeeper session expired, a commit found another member
      holding them, or the coordinator ended its generation. They already stopped being
      delivered; what was handed out since the last commit was not committed and the new owner
      delivers it again. ``before_releasing_partitions`` is never called for them.
    * ``paused_partitions_moved(partitions)``: called after ``before_starting_fetchers`` with the
      partitions the application had paused (``connector.pause``) that are no longer this
      member's, and so no longer paused.
    """

    def before_releasing_partitions(self, partitions: Mapping[str, Set[int]]) -> None:
        """Called with the partitions that move (handed over in order), once they stopped being delivered
        and offsets were committed.

        Called before their owner nodes are released. Partitions this member
        keeps are not included (they keep flowing); unlike Kafka's consumer,
        which releases everything at every rebalance.
        """

    def before_starting_fetchers(self, consumer_id: str, assignment: Mapping[str, Mapping[int, str]]) -> None:
        """Called with the group's whole new assignment (topic → partition → thread id)."""


class FetcherControl(Protocol):
    def start_connections(self, infos: Iterable[PartitionTopicInfo]) -> None: ...

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None: ...

    def stop_connections(self) -> None: ...


@dataclass(frozen=True)
class ConnectorParts:
    """The parts of a connector its :class:`Membership` may use; built once by the connector.

    ``guard()`` is a context manager that holds the connector's state lock and raises
    :class:`~zkconsumer.errors.ConsumerShutdownError` if ``shutdown()`` began: a membership starts
    each thread inside it, so shutdown sees (and stops) everything started and nothing starts
    after it. ``closing`` is set when ``shutdown()`` begins; ``join_done`` is clear while a join
    that ``shutdown()`` must wait for (bounded) is in progress. ``on_failure`` makes every
    iterator and commit raise a background failure.
    """

    config: ConsumerConfig
    consumer_id: str
    zk: KazooClient
    heartbeat: Optional[SessionHeartbeat]
    group: GroupClient
    streams: List[KafkaStream]
    fetchers: FetcherManager
    committer: OffsetCommitter
    listener: ConsumerRebalanceListener
    metrics: ConsumerMetrics
    failure: FailureSignal
    closing: threading.Event
    join_done: threading.Event
    guard: Callable[[], ContextManager[None]]
    on_failure: Callable[[BaseException], None]
    session_timeout_s: Callable[[], float]
    heartbeat_mode: Callable[[], Optional[str]]
    #: The member's part in live group-wide seeks (``consumer/seeking.py``; ZooKeeper membership only).
    seeks: Optional[Any] = None


class Membership(Protocol):
    """Who decides which member consumes what: the connector's one pluggable part.

    Every method but :meth:`on_zk_state` and :meth:`deliverable` runs on the application's
    thread or the connector's shutdown and commit threads; those two run on kazoo's and the
    fetchers' threads and only read or signal.
    """

    @property
    def kind(self) -> str:
        """``group.membership``: ``zookeeper`` or ``kafka``."""

    def status(self) -> Optional[RebalanceStatus]:
        """State, owned partitions (by stream thread id), rebalances, last error (``None`` before joining)."""

    def join(self, count: TopicCount, queue_for: QueueFor, topic_allowed: TopicAllowed) -> None:
        """Join the group with ``count``'s subscription; return once the first assignment is in place.

        Raises :class:`~zkconsumer.errors.ConsumerShutdownError` if ``shutdown()`` ended the join.
        """

    def positions(self) -> Dict[TopicPartition, int]:
        """What :meth:`commit` would commit now: each owned partition's offset after the last message
        handed out (partitions whose position is not known yet are left out)."""

    def commit(self, offsets: Optional[Mapping[TopicPartition, int]] = None) -> List[TopicPartition]:
        """One commit attempt of what was handed out, or of ``offsets`` (partition -> next offset to
        consume) for the partitions among them this member owns; raises a
        :class:`~zkconsumer.errors.ZkConsumerError`. Returns the partitions not written because this
        member does not own them (of ``offsets``, or found taken over during the commit)."""

    def stop(self) -> None:
        """Stop (and join, bounded) whatever could change ownership or restart fetchers."""

    def joined(self) -> bool:
        """Whether the member joined (so there is something to commit at shutdown)."""

    def leave(self) -> None:
        """Leave the group at shutdown, after the final commit."""

    def uncommitted(self) -> List[Tuple[str, int, int]]:
        """``(topic, partition, consumed offset)`` handed out but not known to be committed."""

    def on_zk_state(self, state: str) -> None:
        """kazoo's connection thread (a ``KazooState``): signal only, never block."""

    def deliverable(self) -> bool:
        """Whether fetchers may queue data now (a fetcher thread asks before each chunk)."""

    def describe(self) -> str:
        """What ``repr(connector)`` shows of the membership (``membership=kafka, member=...``)."""
