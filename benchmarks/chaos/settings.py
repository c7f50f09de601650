"""Chaos run settings: the schedules, :class:`ChaosSettings` and the planned events."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from typing import Any, List, Mapping, Tuple

from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

KINDS = ("zkconsumer", "kafka")
TOPIC = "chaos"
VALUE_PREFIX = "chaos-"
VALUE_PATTERN = re.compile(r"chaos-\d{10}")

#: Exit statuses of a member stopped with SIGTERM that count as a clean stop.
CLEAN_EXIT = {"zkconsumer": {0}, "kafka": {0, 143, -signal.SIGTERM}}

#: Broker settings of a chaos cluster: no unclean elections (a broker kill must
#: not truncate acknowledged data), and a follower that died leaves the ISR in 4 s
#: so ``acks=all`` producers resume quickly.
BROKER_CONFIG: Mapping[str, Any] = {
    "unclean.leader.election.enable": False,
    "replica.lag.time.max.ms": 4000,
}

#: The schedules, as (action, fraction of the duration after the producer starts).
SCHEDULES: Mapping[str, Tuple[Tuple[str, float], ...]] = {
    "default": (
        ("kill_member", 0.10),
        ("add_member", 0.25),
        ("pause_member", 0.40),
        ("kill_leader_broker", 0.65),
        ("restart_broker", 0.85),
    ),
    "zk": (
        ("expire_member", 0.08),
        ("partition_member", 0.15),
        ("pause_zookeeper", 0.45),
        ("restart_zookeeper", 0.75),
    ),
    "zk-outage": (
        ("pause_zookeeper", 0.10),
        ("restart_zookeeper", 0.55),
    ),
}
#: The default schedule (member and broker faults).
SCHEDULE = SCHEDULES["default"]

#: ZooKeeper errors the engine's own reads ride out (ZooKeeper paused, restarting).
ZK_UNAVAILABLE = (ConnectionLoss, SessionExpiredError, OperationTimeoutError, KazooTimeoutError)


class ChaosError(Exception):
    """The chaos run itself could not proceed (the cluster or the group never got ready)."""


def value_of(sequence: int) -> str:
    """The value of the ``sequence``-th produced message.

    >>> value_of(42)
    'chaos-0000000042'
    """
    return f"{VALUE_PREFIX}{sequence:010d}"


@dataclass(frozen=True)
class ChaosSettings:
    """What one run does; both sides of a comparison use the same settings.

    ``pause_extra_s``: the member SIGSTOP (and the member partition) lasts
    ``zookeeper.session.timeout.ms`` plus this. ``schedule``: a key of
    :data:`SCHEDULES`. ``zk_pause_s``: how long ZooKeeper stays SIGSTOPped;
    ``zk_down_s``: how long it stays dead before its restart. ``commit_fatal``:
    zkconsumer members commit every ``fatal_commit_interval_s`` themselves and
    die on any commit or iteration exception (forced on by ``zk-outage``).
    """

    duration_s: float = 120.0
    members: int = 3
    partitions: int = 6
    messages_per_second: float = 100.0
    seed: int = 1
    session_timeout_ms: int = 6000
    commit_interval_ms: int = 1000
    pause_extra_s: float = 4.0
    settle_timeout_s: float = 60.0
    stop_grace_s: float = 20.0
    join_timeout_s: float = 120.0
    schedule: str = "default"
    zk_pause_s: float = 15.0
    zk_down_s: float = 10.0
    commit_fatal: bool = False
    fatal_commit_interval_s: float = 0.5

    @property
    def pause_s(self) -> float:
        """How long the paused (or partitioned) member stays stopped (cut off)."""
        return self.session_timeout_ms / 1000.0 + self.pause_extra_s

    @property
    def fatal_commits(self) -> bool:
        """Whether zkconsumer members run in the commit-fatal mode."""
        return self.commit_fatal or self.schedule == "zk-outage"

    def event_duration(self, action: str) -> float:
        """Seconds an action of the schedule lasts (0 for instant ones; a restart counts 2 s to start)."""
        return {"pause_member": self.pause_s, "partition_member": self.pause_s,
                "pause_zookeeper": self.zk_pause_s, "restart_zookeeper": self.zk_down_s + 2.0}.get(action, 0.0)

    def validate(self) -> None:
        """Raise ValueError unless the schedule fits: events must not overlap or outlast the duration."""
        if self.schedule not in SCHEDULES:
            raise ValueError(f"--schedule must be one of {sorted(SCHEDULES)}")
        actions = [a for a, _ in SCHEDULES[self.schedule]]
        needed = 2 if {"kill_member", "expire_member"} & set(actions) else 1
        if self.members < needed:
            raise ValueError(f"--members must be >= {needed} for the {self.schedule} schedule")
        if self.partitions < 1:
            raise ValueError("--partitions must be >= 1")
        if self.messages_per_second <= 0:
            raise ValueError("--messages-per-second must be > 0")
        if self.zk_pause_s < 0 or self.zk_down_s < 0:
            raise ValueError("ZooKeeper pause and downtime must be >= 0")
        events = SCHEDULES[self.schedule]
        for index, (action, fraction) in enumerate(events):
            length = self.event_duration(action)
            if not length:
                continue
            next_fraction = events[index + 1][1] if index + 1 < len(events) else 1.0
            if (next_fraction - fraction) * self.duration_s < length + 1:
                minimum = (length + 1) / (next_fraction - fraction)
                what = "the broker kill" if next_fraction < 1.0 and events[index + 1][0] == "kill_leader_broker" \
                    else ("the next event" if next_fraction < 1.0 else "the end")
                raise ValueError(f"--duration must be >= {minimum:.0f} s so the {length:.0f} s {action} "
                                 f"ends before {what}")


@dataclass(frozen=True)
class ScheduledEvent:
    """One fault of the schedule, ``at_s`` seconds after the producer started."""

    at_s: float
    action: str


def schedule(settings: ChaosSettings) -> List[ScheduledEvent]:
    """The events of a run, in order.

    >>> [(e.action, e.at_s) for e in schedule(ChaosSettings(duration_s=100))][:2]
    [('kill_member', 10.0), ('add_member', 25.0)]
    >>> [(e.action, e.at_s) for e in schedule(ChaosSettings(duration_s=60, schedule="zk-outage"))]
    [('pause_zookeeper', 6.0), ('restart_zookeeper', 33.0)]
    """
    return [ScheduledEvent(round(fraction * settings.duration_s, 3), action)
            for action, fraction in SCHEDULES[settings.schedule]]
