"""The rebalancer's public types: its state, its status snapshot, the listener an application
may pass, and what it needs from the fetchers (re-exported by :mod:`zkconsumer.rebalance.rebalancer`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Mapping, Optional, Protocol, Set

from ..errors import ConsumerRebalanceFailedError
from ..fetch.handoff import PartitionTopicInfo
from ..structs import TopicPartition


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
    """Hooks called by the rebalancer thread (Kafka's ``ConsumerRebalanceListener``)."""

    def before_releasing_partitions(self, partitions: Mapping[str, Set[int]]) -> None:
        """Called with the partitions that move, once they stopped being delivered and offsets were committed.

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
