"""The chaos test: a consumer group under member and broker failures, with exact accounting.

One *side* of a run (:class:`ChaosRun`) starts a dedicated :class:`LocalCluster`
(3 brokers, a topic with replication 3), a group of member processes, an
``acks=all`` producer, a ZooKeeper offset monitor and an ownership monitor, then
plays one schedule (:func:`schedule`), as fractions of ``duration_s`` after the
producer starts. Every member reaches ZooKeeper through its own
:class:`~zkconsumer.testing.proxy.ZooKeeperProxy` in this process (its
``zookeeper.connect`` is the proxy's address), so one member alone can be cut
off from ZooKeeper, and its session (seen in the proxied handshake) expired.

Schedules (``ChaosSettings.schedule``; ``scripts/chaos --schedule NAME``):

``default`` (member and broker faults)

====== ================================================================
 10 %   ``kill -9`` a member
 25 %   add a member
 40 %   ``SIGSTOP`` a member for the session timeout + 4 s, then ``SIGCONT``
 65 %   ``SIGKILL`` the broker leading a partition (chosen by the seed)
 85 %   restart that broker
100 %   stop the producer; settle; stop the members; drain; account
====== ================================================================

``zk`` (ZooKeeper faults)

====== ================================================================
  8 %   expire a member's ZooKeeper session (a second client joins the
        session seen through the member's proxy and closes it)
 15 %   partition a member from ZooKeeper (its proxy blackholes) for the
        session timeout + 4 s, then heal
 45 %   ``SIGSTOP`` ZooKeeper for ``zk_pause_s`` (15 s), then ``SIGCONT``
 75 %   ``kill -9`` ZooKeeper; ``zk_down_s`` (10 s) later start it again on
        the same port and data directory
100 %   as above
====== ================================================================

``zk-outage`` (item 10 of "Correct under faults": an application that treats
any commit exception as fatal; members run with ``commit_fatal``, see
:mod:`zkconsumer.testing.chaos_member`; 12 partitions by default)

====== ================================================================
 10 %   ``SIGSTOP`` ZooKeeper for ``zk_pause_s`` (15 s), then ``SIGCONT``
 55 %   ``kill -9`` ZooKeeper, start it again ``zk_down_s`` (10 s) later
100 %   as above
====== ================================================================

Kafka's ConsoleConsumer has no commit-fatal mode: its members always
auto-commit every ``commit_interval_ms`` (the ``commits`` row says which).

The *same* schedule (same seed, so the same victims by index) runs with
zkconsumer members (:mod:`zkconsumer.testing.chaos_member`) and with Kafka's own
Scala consumer (``kafka.tools.ConsoleConsumer``) as members; :func:`run_chaos`
runs both and :func:`format_table` prints them side by side.

Method and definitions
----------------------

*Values.* The producer sends ``chaos-<10-digit sequence>`` (no key), so every
message is self-describing: members record values, and losses and duplicates
are counted by value on both sides (Kafka's ConsoleConsumer prints values only).

*Acknowledged*: values whose produce future succeeded (``acks=all``, replication
3 on 3 brokers, ``min.insync.replicas`` 1, Kafka's default).
``unclean.leader.election.enable=false`` so that a broker kill cannot truncate
acknowledged data: losses are then the consumer's alone. A full scan of the log
at the end checks this (``missing_from_log``: acknowledged values absent from
the log; always reported, and always part of ``lost``).

*Recorded*: a member records a value when its line is in the member's output
file (zkconsumer members flush each line; the JVM's ``System.out`` flushes on
every write). Partial last lines (a ``kill -9`` mid-line) are ignored.

*Final drain*: after the producer stops, the group is given ``settle_timeout_s``
to commit the log end offset of every partition, then every member is stopped
with SIGTERM (a clean shutdown commits its offsets), and a drain reads, with an
independent client (kafka-python, no group), every partition from the group's
**committed offset** (in ZooKeeper) to the log end, recording what it reads.
The drain cannot hide a loss: a message is lost exactly when the group's
committed offset moved past it without any member recording it, and the drain
only reads at and above the committed offsets, so it can only make such a
message reappear if a committed offset went back below it, which the offset
monitor counts as a *regression*. What the drain reads is reported
(``drained``): messages the members left unconsumed, which a healthy group
should not do (each one also means the settle phase failed: ``stalled``).

*Lost* = acknowledged − recorded by any member or the drain.

*Duplicate %* = (total recordings − distinct values recorded) / distinct values
× 100. It includes values the producer itself wrote twice (a retry of a send
whose acknowledgement was lost with a broker); ``consumer_duplicate_pct``
subtracts those: Σ max(0, recordings(v) − copies of v in the log) / distinct.

*Committed-offset regressions*: the :class:`OffsetMonitor` reads
``/consumers/<g>/offsets/<topic>/<p>`` every 100 ms and also through a data watch
per partition (each change notification re-reads the node), orders what it
sees by the node's version, and counts every observed decrease.

*Failed members*: a member process is failed if, not being the one the schedule
``kill -9``'d, it

1. exited before the final stop (a crash or a self-exit), or
2. was alive at the end of the settle phase but not registered in
   ``/consumers/<g>/ids``, or owned (``/consumers/<g>/owners``) a partition whose
   committed offset was still below the log end: it stopped consuming while the
   group still had data, or
3. at the final stop did not exit within ``stop_grace_s`` of SIGTERM, or exited
   with a status other than a clean one (0; 143 for a JVM killed by SIGTERM
   after its shutdown hooks).

The paused member is included: after SIGCONT it must recover.
*Stalled partitions*: partitions whose committed offset was below the log end at
the end of the settle phase, owned or not (an unowned one fails the group
without failing any one member).

*Max stall*: the longest time any partition had acknowledged messages beyond its
committed offset without that offset advancing (commits happen every
``auto.commit.interval.ms``, so ~1 s is the floor); a measure of availability.

*Longest ownerless partition*: the :class:`OwnershipMonitor` reads
``/consumers/<g>/ids`` and ``/consumers/<g>/owners/<topic>`` every 100 ms from
the producer's start to the end of the settle phase; the figure is the longest
continuous interval any partition had no owner node while the group had live
members (a member process alive and not ``kill -9``'d by the schedule). A
sample that cannot be read (ZooKeeper down) changes nothing: an interval open
before an outage continues through it.

*Settled again*: the group is *complete* in a sample when every partition's
owner node names a consumer registered in ``/consumers/<g>/ids``. The figure is
the time from the end of the schedule's last fault to the start of the final
run of complete samples, which must last to the end of the settle phase
(0 if the group was complete throughout); "no" if the group was not complete
at the end.

Example::

    from zkconsumer.testing.chaos import ChaosSettings, run_chaos, format_table
    results = run_chaos(ChaosSettings(duration_s=60), kinds=("zkconsumer", "kafka"))
    print(format_table(results))
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NoNodeError, OperationTimeoutError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat

from zkconsumer.testing import processes
from zkconsumer.testing.chaos_member import spawn_member
from zkconsumer.testing.cluster import LocalCluster
from zkconsumer.testing.errors import LocalClusterError
from zkconsumer.testing.probes import zookeeper_command
from zkconsumer.testing.properties import log4j_properties, render_properties
from zkconsumer.testing.proxy import ZooKeeperProxy, expire_zookeeper_session

KINDS = ("zkconsumer", "kafka")
TOPIC = "chaos"
VALUE_PREFIX = "chaos-"
_VALUE = re.compile(r"chaos-\d{10}")

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


# ---------------------------------------------------------------------------- results


@dataclass
class MemberReport:
    """What happened to one member process."""

    name: str
    lines: int = 0
    killed_by_schedule: bool = False
    paused_by_schedule: bool = False
    partitioned_by_schedule: bool = False
    expired_by_schedule: bool = False
    exit_status: Optional[int] = None
    failed: bool = False
    why: List[str] = field(default_factory=list)


@dataclass
class Regression:
    """A committed offset seen going down."""

    at_s: float
    partition: int
    before: int
    after: int


@dataclass
class SideResult:
    """The figures of one side of a run; see the module docstring for definitions."""

    kind: str
    sent: int = 0
    acknowledged: int = 0
    send_failures: int = 0
    recorded_total: int = 0
    distinct_recorded: int = 0
    lost: int = 0
    missing_from_log: int = 0
    lost_examples: List[str] = field(default_factory=list)
    duplicate_pct: float = 0.0
    consumer_duplicate_pct: float = 0.0
    log_duplicates: int = 0
    drained: int = 0
    regressions: int = 0
    regression_examples: List[Regression] = field(default_factory=list)
    failed_members: int = 0
    stalled_partitions: int = 0
    stalled_detail: Dict[int, str] = field(default_factory=dict)
    max_stall_s: float = 0.0
    settle_s: Optional[float] = None
    longest_ownerless_s: float = 0.0
    longest_ownerless_detail: str = ""
    settled_again: bool = False
    settled_again_s: Optional[float] = None
    commits: str = ""
    offset_writes_seen: int = 0
    offset_writes_total: int = 0
    members: List[MemberReport] = field(default_factory=list)
    events: List[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    run_dir: str = ""

    @property
    def settled_again_text(self) -> str:
        """``yes (2.3 s)`` or ``no``."""
        return f"yes ({self.settled_again_s} s)" if self.settled_again else "no"

    @property
    def offset_writes(self) -> str:
        """``seen/made``: offset node writes the monitor observed, of those made (node versions)."""
        return f"{self.offset_writes_seen}/{self.offset_writes_total}"

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------- members


class Member:
    """One member process of the group under test; ``name`` is its ``consumer.id``.

    ``proxy`` is the member's own way to ZooKeeper (closed by its launcher's ``forget``).
    """

    def __init__(self, name: str, process: "subprocess.Popen[Any]", out_path: Path, log_path: Path,
                 proxy: ZooKeeperProxy) -> None:
        self.name = name
        self.process = process
        self.out_path = out_path
        self.log_path = log_path
        self.proxy = proxy
        self.report = MemberReport(name)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the process itself (a JVM or Python process, not a shell)."""
        if self.alive():
            os.kill(self.process.pid, sig)


class MemberLauncher:
    """Starts and stops the member processes of one kind for one group."""

    kind = ""

    def __init__(self, cluster: LocalCluster, group: str, topic: str, directory: Path,
                 settings: ChaosSettings) -> None:
        self.cluster = cluster
        self.group = group
        self.topic = topic
        self.directory = directory
        self.settings = settings

    def properties(self, name: str) -> Dict[str, str]:
        """The consumer properties every member of both kinds gets (Kafka's defaults otherwise)."""
        return {
            "group.id": self.group,
            "consumer.id": name,
            "auto.commit.enable": "true",
            "auto.commit.interval.ms": str(self.settings.commit_interval_ms),
            "zookeeper.session.timeout.ms": str(self.settings.session_timeout_ms),
            "auto.offset.reset": "smallest",
        }

    def start(self, name: str) -> Member:
        """Start member ``name``, connected to ZooKeeper through a new proxy of its own."""
        proxy = ZooKeeperProxy("127.0.0.1", self.cluster.zk_port, name=f"zk-proxy-{name}").start()
        try:
            return self._start(name, proxy)
        except BaseException:
            proxy.close()
            raise

    def _start(self, name: str, proxy: ZooKeeperProxy) -> Member:
        raise NotImplementedError

    def forget(self, member: Member) -> None:
        """Called once the member's process is gone: closes its proxy (idempotent)."""
        member.proxy.close()


class ZkconsumerLauncher(MemberLauncher):
    """Members running :mod:`zkconsumer.testing.chaos_member` in their own Python process."""

    kind = "zkconsumer"

    def _start(self, name: str, proxy: ZooKeeperProxy) -> Member:
        out, log = self.directory / f"{name}.out", self.directory / f"{name}.log"
        props = self.properties(name)
        process = spawn_member(proxy.address, self.group, self.topic, out, log, self.directory,
                               props, consumer_id=name, commit_fatal=self.settings.fatal_commits,
                               commit_interval_s=self.settings.fatal_commit_interval_s)
        return Member(name, process, out, log, proxy)


class KafkaLauncher(MemberLauncher):
    """Kafka's own ZooKeeper consumer: ``kafka.tools.ConsoleConsumer`` printing values.

    No ``--from-beginning``: ConsoleConsumer refuses it once the group has
    offsets (a member added later would exit), and without it forces
    ``auto.offset.reset=largest``. The engine therefore seeds every partition's
    offset with 0 before any member starts, for both kinds, so no member ever
    depends on ``auto.offset.reset``.
    """

    kind = "kafka"
    JVM_OPTIONS = ("-Xmx192m",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._log4j = self.directory / "log4j-kafka-member.properties"
        quiet = {"kafka.consumer": "INFO", "kafka.consumer.ConsumerFetcherThread": "WARN",
                 "kafka.consumer.ConsumerFetcherManager": "INFO"}
        self._log4j.write_text(render_properties(log4j_properties("WARN", "System.err", quiet)))

    def _start(self, name: str, proxy: ZooKeeperProxy) -> Member:
        out, log = self.directory / f"{name}.out", self.directory / f"{name}.log"
        config = self.directory / f"{name}.properties"
        config.write_text(render_properties(self.properties(name)))
        with open(out, "ab") as out_file, open(log, "ab") as log_file:
            process = self.cluster.start_tool(
                "kafka.tools.ConsoleConsumer", "--zookeeper", proxy.address, "--topic", self.topic,
                "--consumer.config", str(config), "--property", "print.key=false",
                stdout=out_file, stderr=log_file, text=False,
                jvm_options=(*self.JVM_OPTIONS, f"-Dlog4j.configuration=file:{self._log4j}"))
        return Member(name, process, out, log, proxy)

    def forget(self, member: Member) -> None:
        self.cluster.stop_tool(member.process, grace=0)
        super().forget(member)


def read_recordings(path: Path) -> Tuple[Counter, int]:
    """Count the values recorded in a member's output file; also the malformed complete lines.

    A line is ``<value>`` or ``<partition> <offset> <value>``; its last field is
    the value. A last line without ``\\n`` (cut by ``kill -9``) is ignored.
    """
    counts: Counter = Counter()
    malformed = 0
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return counts, 0
    end = data.rfind(b"\n")
    for raw in data[:end + 1].decode("latin-1").splitlines():
        fields = raw.split()
        if fields and _VALUE.fullmatch(fields[-1]):
            counts[fields[-1]] += 1
        elif raw.strip():
            malformed += 1
    return counts, malformed


# ---------------------------------------------------------------------------- producer


class AckedProducer:
    """Sends ``chaos-<n>`` values with ``acks=all`` at a steady rate; records the acknowledged ones.

    ``acked`` maps value → (partition, offset). Keyless sends: kafka-python
    picks a random partition among those with a leader, so a partition whose
    leader is down is skipped rather than piled up.
    """

    def __init__(self, bootstrap_servers: str, topic: str, rate: float) -> None:
        from kafka import KafkaProducer  # imported lazily, as LocalCluster.produce does

        self.topic = topic
        self.acked: Dict[str, Tuple[int, int]] = {}
        self.sent = 0
        self.failures: Counter = Counter()
        self._ends: Dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._interval = 1.0 / rate
        self._producer = KafkaProducer(
            bootstrap_servers=bootstrap_servers, api_version=(0, 9), acks="all", retries=1_000_000,
            retry_backoff_ms=200, max_in_flight_requests_per_connection=1, request_timeout_ms=15000,
            delivery_timeout_ms=120_000, max_block_ms=60_000, linger_ms=5, enable_idempotence=False)
        self._thread = threading.Thread(target=self._run, name="chaos-producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            value = value_of(self.sent)
            self.sent += 1
            future = self._producer.send(self.topic, value.encode("ascii"))
            future.add_callback(lambda md, v=value: self._ack(v, md.partition, md.offset))
            future.add_errback(lambda exc: self._fail(exc))
            next_at += self._interval
            delay = next_at - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            elif delay < -1.0:  # fell behind (send blocked): do not burst to catch up
                next_at = time.monotonic()

    def _ack(self, value: str, partition: int, offset: int) -> None:
        with self._lock:
            self.acked[value] = (partition, offset)
            if offset + 1 > self._ends.get(partition, 0):
                self._ends[partition] = offset + 1

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            self.failures[type(exc).__name__] += 1

    def acked_end(self, partition: int) -> int:
        """One past the highest acknowledged offset of ``partition`` (0 if none)."""
        with self._lock:
            return self._ends.get(partition, 0)

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def stop(self, flush_timeout: float = 150.0) -> None:
        """Stop sending, wait for every outstanding send to be acknowledged or fail, close."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(70)
        try:
            self._producer.flush(timeout=flush_timeout)
        finally:
            self._producer.close(timeout=10)


# ---------------------------------------------------------------------------- offsets


class OffsetMonitor:
    """Watches a group's committed offsets for one topic: regressions and stalls.

    Observations come from a 100 ms poll and from a data watch per partition;
    both carry the node's version, and only versions newer than the last one
    seen count, so the two sources never reorder each other. ``pending_end(p)``
    says how far partition ``p`` has data (the producer's acknowledged end) for
    the stall measure.
    """

    def __init__(self, client: KazooClient, group: str, topic: str, partitions: int,
                 pending_end: Callable[[int], int], interval_s: float = 0.1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._paths = {p: f"/consumers/{group}/offsets/{topic}/{p}" for p in range(partitions)}
        self._pending_end = pending_end
        self._interval = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._started_at = clock()
        self._values: Dict[int, int] = {}
        self._versions: Dict[int, int] = {}
        self._first_version: Dict[int, int] = {}
        self._last_change: Dict[int, float] = {}
        self._pending_since: Dict[int, Optional[float]] = {}
        self.seen_writes = 0
        self.malformed = 0
        self.regressions: List[Regression] = []
        self.max_stall: Dict[int, float] = {p: 0.0 for p in range(partitions)}
        self._thread = threading.Thread(target=self._run, name="chaos-offset-monitor", daemon=True)

    def start(self) -> None:
        self._started_at = self._clock()
        for partition, path in self._paths.items():
            self._client.DataWatch(path, self._watcher(partition))
        self._thread.start()

    def _watcher(self, partition: int) -> Callable[[Optional[bytes], Optional[ZnodeStat]], Optional[bool]]:
        def on_change(data: Optional[bytes], stat: Optional[ZnodeStat]) -> Optional[bool]:
            if self._stopped.is_set():
                return False
            self._observe(partition, data, stat)
            return None
        return on_change

    def _observe(self, partition: int, data: Optional[bytes], stat: Optional[ZnodeStat]) -> None:
        if data is None or stat is None:
            return
        with self._lock:
            last = self._versions.get(partition)
            if last is not None and stat.version <= last:
                return
            self._versions[partition] = stat.version
            self._first_version.setdefault(partition, stat.version)
            self.seen_writes += 1
            try:
                value = int(data.decode("ascii"))
            except ValueError:
                self.malformed += 1
                return
            before = self._values.get(partition)
            if before is not None and value < before:
                self.regressions.append(Regression(round(self._clock() - self._started_at, 2), partition,
                                                   before, value))
            if before is None or value != before:
                self._values[partition] = value
                self._last_change[partition] = self._clock()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            for partition, path in self._paths.items():
                try:
                    data, stat = self._client.get(path)
                except NoNodeError:
                    continue
                except Exception:  # a connection hiccup: the next tick reads again
                    break
                self._observe(partition, data, stat)
            self._track_stalls()

    def _track_stalls(self) -> None:
        now = self._clock()
        for partition in self._paths:
            end = self._pending_end(partition)
            with self._lock:
                committed = self._values.get(partition, 0)
                since = self._pending_since.get(partition)
                if committed >= end:
                    self._pending_since[partition] = None
                    continue
                if since is None:
                    since = self._pending_since[partition] = now
                stalled_from = max(since, self._last_change.get(partition, since))
                self.max_stall[partition] = max(self.max_stall[partition], now - stalled_from)

    def committed(self) -> Dict[int, int]:
        """The latest committed offset seen per partition."""
        with self._lock:
            return dict(self._values)

    def writes(self) -> Tuple[int, int]:
        """(writes observed, writes made) since monitoring began, from node versions."""
        with self._lock:
            total = sum(self._versions[p] - self._first_version[p] + 1 for p in self._versions)
            return self.seen_writes, total

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(5)


def _zookeeper_serving(port: int) -> bool:
    """Whether the ZooKeeper server on 127.0.0.1:``port`` answers ``srvr``."""
    try:
        return "Mode: " in zookeeper_command("127.0.0.1", port, "srvr", timeout=1.0)
    except OSError:
        return False


def read_committed(client: KazooClient, group: str, topic: str, partitions: int) -> Dict[int, Optional[int]]:
    """The committed offsets in ZooKeeper right now (None where there is none)."""
    result: Dict[int, Optional[int]] = {}
    for p in range(partitions):
        try:
            result[p] = int(client.get(f"/consumers/{group}/offsets/{topic}/{p}")[0].decode("ascii"))
        except (NoNodeError, ValueError):
            result[p] = None
    return result


class OwnershipMonitor:
    """Samples a group's registrations and partition owners: ownerless intervals, and when it settled.

    Every ``interval_s`` it reads ``/consumers/<g>/ids`` and the owner nodes of
    ``topic`` (each read bounded by ``read_timeout_s``; a sample that cannot be
    read is skipped and changes nothing) and feeds them to :meth:`record`,
    which holds all the logic (definitions in the module docstring).
    ``has_live_members`` says whether the group has live member processes;
    :meth:`fault_ended` marks the end of a fault of the schedule.
    """

    def __init__(self, client: KazooClient, group: str, topic: str, partitions: int,
                 has_live_members: Callable[[], bool], interval_s: float = 0.1, read_timeout_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._ids_path = f"/consumers/{group}/ids"
        self._owners_path = f"/consumers/{group}/owners/{topic}"
        self._partitions = partitions
        self._has_live_members = has_live_members
        self._interval = interval_s
        self._read_timeout = read_timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._started_at = clock()
        self._ownerless_since: Dict[int, Optional[float]] = {p: None for p in range(partitions)}
        self._longest = 0.0
        self._longest_detail = ""
        self._complete_since: Optional[float] = None
        self._last_fault_end: Optional[float] = None
        self.samples = 0
        self.skipped = 0
        self._owners_cache: Optional[Tuple[int, Dict[int, str]]] = None
        self._thread = threading.Thread(target=self._run, name="chaos-ownership-monitor", daemon=True)

    def start(self) -> None:
        self._started_at = self._clock()
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(5 + 3 * self._read_timeout)

    def fault_ended(self) -> None:
        """A fault of the schedule has just ended (settling is measured from the last one)."""
        with self._lock:
            self._last_fault_end = self._clock()

    def _run(self) -> None:
        next_at = self._clock()
        while True:
            next_at = max(next_at + self._interval, self._clock())
            if self._stopped.wait(max(0.0, next_at - self._clock())):
                return
            sample = self._read()
            if sample is None:
                with self._lock:
                    self.skipped += 1
                continue
            self.record(self._clock(), sample[0], sample[1], self._has_live_members())

    def _read(self) -> Optional[Tuple[List[str], Dict[int, str]]]:
        """(registered member ids, partition -> owner) now, or None if ZooKeeper did not answer in time."""
        client, timeout = self._client, self._read_timeout
        try:
            ids_reply = client.get_children_async(self._ids_path)
            owned_reply = client.get_children_async(self._owners_path, include_data=True)
            try:
                registered = list(ids_reply.get(timeout=timeout))
            except NoNodeError:
                registered = []
            try:
                children, stat = owned_reply.get(timeout=timeout)
            except NoNodeError:
                children, stat = [], None
            # the owner nodes are only read again when a child was created or deleted since the
            # last read (the parent's cversion changed): a node's value never changes in place
            if stat is not None and self._owners_cache is not None and stat.cversion == self._owners_cache[0]:
                return registered, dict(self._owners_cache[1])
            replies = {int(c): client.get_async(f"{self._owners_path}/{c}") for c in children if c.isdigit()}
            owners: Dict[int, str] = {}
            for partition, reply in replies.items():
                try:
                    owners[partition] = reply.get(timeout=timeout)[0].decode("utf-8", "replace")
                except NoNodeError:  # released between the two reads: ownerless now
                    continue
            complete_read = len(owners) == len(replies)
            self._owners_cache = (stat.cversion, dict(owners)) if stat is not None and complete_read else None
            return registered, owners
        except ZK_UNAVAILABLE:
            return None
        except Exception:  # anything else unexpected from the client: skip the sample too
            return None

    def record(self, now: float, registered: Sequence[str], owners: Mapping[int, str], live: bool) -> None:
        """Account one sample taken at ``now``.

        >>> m = OwnershipMonitor(None, "g", "t", 2, lambda: True, clock=lambda: 0.0)  # type: ignore[arg-type]
        >>> m.record(1.0, ["g_a"], {0: "g_a-0", 1: "g_a-0"}, True)
        >>> m.record(2.0, ["g_a"], {0: "g_a-0"}, True)
        >>> m.record(4.5, ["g_a"], {0: "g_a-0"}, True)
        >>> m.record(5.0, ["g_a"], {0: "g_a-0", 1: "g_a-0"}, True)
        >>> m.longest_ownerless()
        (2.5, 'partition 1 from 2.0s to 4.5s')
        >>> m.settled_again()
        5.0
        """
        with self._lock:
            self.samples += 1
            for partition in range(self._partitions):
                if partition in owners or not live:
                    self._ownerless_since[partition] = None
                    continue
                since = self._ownerless_since[partition]
                if since is None:
                    since = self._ownerless_since[partition] = now
                if now - since > self._longest:
                    self._longest = now - since
                    self._longest_detail = (f"partition {partition} from {since - self._started_at:.1f}s "
                                            f"to {now - self._started_at:.1f}s")
            complete = len(owners) == self._partitions and all(
                any(owner.startswith(member + "-") for member in registered) for owner in owners.values())
            if not complete:
                self._complete_since = None
            elif self._complete_since is None:
                self._complete_since = now

    def longest_ownerless(self) -> Tuple[float, str]:
        """(seconds, which partition when) of the longest ownerless interval seen."""
        with self._lock:
            return round(self._longest, 1), self._longest_detail

    def settled_again(self) -> Optional[float]:
        """Seconds from the last fault's end to the final complete run of samples; None if not complete now."""
        with self._lock:
            if self._complete_since is None:
                return None
            reference = self._last_fault_end if self._last_fault_end is not None else self._started_at
            return round(max(0.0, self._complete_since - reference), 1)


# ---------------------------------------------------------------------------- the log


class LogReader:
    """Reads partitions of the topic by offset range with kafka-python, independent of any group."""

    def __init__(self, bootstrap_servers: str, topic: str, partitions: int) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self._tps = {p: TopicPartition(topic, p) for p in range(partitions)}
        self._consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, api_version=(0, 9), group_id=None,
                                       enable_auto_commit=False, auto_offset_reset="earliest",
                                       fetch_max_wait_ms=100, max_partition_fetch_bytes=1 << 20)

    def end_offsets(self) -> Dict[int, int]:
        ends = self._consumer.end_offsets(list(self._tps.values()))
        return {p: int(ends[tp]) for p, tp in self._tps.items()}

    def read(self, ranges: Mapping[int, Tuple[int, int]], timeout: float = 120.0) -> Dict[int, List[Tuple[int, str]]]:
        """``(offset, value)`` of every message in ``[start, end)`` of each partition.

        Raises ChaosError if a range cannot be read completely within ``timeout``.
        """
        wanted = {p: r for p, r in ranges.items() if r[0] < r[1]}
        result: Dict[int, List[Tuple[int, str]]] = {p: [] for p in ranges}
        if not wanted:
            return result
        self._consumer.assign([self._tps[p] for p in wanted])
        for p, (start, _end) in wanted.items():
            self._consumer.seek(self._tps[p], start)
        remaining = dict(wanted)
        deadline = time.monotonic() + timeout
        while remaining:
            if time.monotonic() > deadline:
                raise ChaosError(f"could not read the log within {timeout:.0f}s; still missing {remaining}")
            for tp, records in self._consumer.poll(timeout_ms=500).items():
                _start, end = wanted[tp.partition]
                for record in records:
                    if record.offset < end:
                        value = record.value.decode("latin-1") if record.value is not None else "null"
                        result[tp.partition].append((record.offset, value))
            for p in list(remaining):
                if self._consumer.position(self._tps[p]) >= remaining[p][1]:
                    del remaining[p]
        self._consumer.assign([])
        return result

    def close(self) -> None:
        self._consumer.close()


# ---------------------------------------------------------------------------- one side


class ChaosRun:
    """One side of a chaos run: members of ``kind`` under the schedule; see the module docstring.

    ``run()`` returns the :class:`SideResult`; every process it started is gone
    when it returns or raises. Member outputs and logs stay in ``directory``.
    """

    def __init__(self, kind: str, settings: ChaosSettings, directory: Path,
                 say: Callable[[str], None] = lambda line: None, keep_cluster_dir: bool = False) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        settings.validate()
        self.kind = kind
        self.settings = settings
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.group = f"chaos-{kind}"
        self._say = say
        self._keep_cluster_dir = keep_cluster_dir
        self._rng = random.Random(settings.seed)
        self._t0: Optional[float] = None
        self._members: List[Member] = []
        self._next_index = 1
        self._killed_broker: Optional[int] = None
        self._ownership: Optional[OwnershipMonitor] = None
        self.result = SideResult(kind, run_dir=str(directory))
        if kind == "zkconsumer" and settings.fatal_commits:
            self.result.commits = f"app, {settings.fatal_commit_interval_s:g}s, fatal"
        else:
            self.result.commits = f"auto, {settings.commit_interval_ms / 1000:g}s"

    # -------------------------------------------------------------- helpers

    def _elapsed(self) -> float:
        return 0.0 if self._t0 is None else time.monotonic() - self._t0

    def _event(self, text: str) -> None:
        line = f"[{self.kind} {self._elapsed():6.1f}s] {text}"
        self.result.events.append(line)
        self._say(line)

    def _start_member(self, launcher: MemberLauncher) -> Member:
        prefix = "zk" if self.kind == "zkconsumer" else "kafka"
        member = launcher.start(f"{prefix}-m{self._next_index}")
        self._next_index += 1
        self._members.append(member)
        return member

    def _live_members(self) -> List[Member]:
        return [m for m in self._members if m.alive() and not m.report.killed_by_schedule]

    def _has_live_members(self) -> bool:
        return any(m.alive() and not m.report.killed_by_schedule for m in list(self._members))

    def _fault_ended(self) -> None:
        if self._ownership is not None:
            self._ownership.fault_ended()

    def _zk_retry(self, what: str, call: Callable[[], Any], timeout: float = 90.0) -> Any:
        """``call()``, retried while ZooKeeper is unavailable (paused, restarting); ChaosError after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return call()
            except ZK_UNAVAILABLE as exc:
                if time.monotonic() > deadline:
                    raise ChaosError(f"ZooKeeper unavailable for {timeout:.0f}s while {what}: {exc!r}") from exc
                time.sleep(0.5)

    def _check_early_exits(self) -> None:
        for member in self._members:
            r = member.report
            if r.killed_by_schedule or r.exit_status is not None or member.alive():
                continue
            r.exit_status = member.process.returncode
            r.failed = True
            r.why.append(f"exited on its own with status {r.exit_status} at {self._elapsed():.1f}s")
            self._event(f"member {member.name} exited on its own (status {r.exit_status})")

    # -------------------------------------------------------------- the run

    def run(self) -> SideResult:
        started = time.monotonic()
        s = self.settings
        cluster = LocalCluster(brokers=3, partitions=s.partitions, broker_config=BROKER_CONFIG,
                               keep_work_dir=self._keep_cluster_dir)
        producer: Optional[AckedProducer] = None
        monitor: Optional[OffsetMonitor] = None
        launcher: Optional[MemberLauncher] = None
        try:
            self._say(f"[{self.kind}] starting ZooKeeper and 3 brokers ({s.schedule} schedule, "
                      f"commits {self.result.commits})")
            cluster.start()
            if self._keep_cluster_dir:
                self._say(f"[{self.kind}] cluster logs (kept): {cluster.log_dir}")
            cluster.create_topic(TOPIC, partitions=s.partitions, replication=3)
            # the engine's own session outlives every ZooKeeper pause of the schedules (ZooKeeper's
            # maximum, 60 s), so its monitors resume at once instead of opening a new session
            zk = cluster.kazoo_client(timeout=60.0)
            for p in range(s.partitions):  # see KafkaLauncher: the group starts at offset 0, for both kinds
                zk.create(f"/consumers/{self.group}/offsets/{TOPIC}/{p}", b"0", makepath=True)
            launcher = (ZkconsumerLauncher if self.kind == "zkconsumer" else KafkaLauncher)(
                cluster, self.group, TOPIC, self.directory, s)
            producer = AckedProducer(cluster.bootstrap_servers, TOPIC, s.messages_per_second)
            monitor = OffsetMonitor(zk, self.group, TOPIC, s.partitions, producer.acked_end)
            monitor.start()
            for _ in range(s.members):
                self._start_member(launcher)
            self._wait_group_ready(zk, s.join_timeout_s)
            self._say(f"[{self.kind}] {s.members} members own every partition; producing for {s.duration_s:.0f}s")
            self._ownership = OwnershipMonitor(zk, self.group, TOPIC, s.partitions, self._has_live_members)
            producer.start()
            self._t0 = time.monotonic()
            self._ownership.start()
            self._play(cluster, launcher, producer)
            self._sleep_until(s.duration_s)
            self._event(f"stopping the producer ({producer.sent} sent)")
            producer.stop()
            self._event(f"producer stopped: {producer.acked_count()} acknowledged, "
                        f"{sum(producer.failures.values())} failed")
            if self._killed_broker is not None and not cluster.is_running(self._killed_broker):
                self._restart_broker(cluster)
            reader = LogReader(cluster.bootstrap_servers, TOPIC, s.partitions)
            try:
                ends = reader.end_offsets()
                self._settle(zk, ends)
                self._ownership.stop()
                self._stop_members(launcher)
                drained = self._drain(zk, reader, ends)
                scan = reader.read({p: (0, ends[p]) for p in range(s.partitions)})
            finally:
                reader.close()
            monitor.stop()
            self._account(producer, monitor, drained, scan)
        finally:
            if self._ownership is not None:
                self._ownership.stop()
            if monitor is not None:
                monitor.stop()
            if cluster.zookeeper_running():
                try:
                    cluster.resume_zookeeper()  # in case a failure interrupted a pause
                except LocalClusterError:
                    pass
            if producer is not None:
                try:
                    producer.stop(flush_timeout=5)
                except Exception:
                    pass
            alive = [m.process for m in self._members if m.process.poll() is None]
            processes.kill_all(alive)
            if launcher is not None:
                for member in self._members:
                    launcher.forget(member)
            cluster.stop()
            self.result.elapsed_s = round(time.monotonic() - started, 1)
        return self.result

    def _wait_group_ready(self, zk: KazooClient, timeout: float) -> None:
        """Until every live member is registered and every partition is owned by a live member."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_early_exits()
            ids = {f"{self.group}_{m.name}" for m in self._live_members()}
            owners = self._owners(zk)
            registered = set(self._children(zk, f"/consumers/{self.group}/ids"))
            if ids and ids <= registered and len(owners) == self.settings.partitions and all(
                    any(o.startswith(i + "-") for i in ids) for o in owners.values()):
                return
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {m.log_path}\n{processes.tail(str(m.log_path), 15)}" for m in self._members)
                raise ChaosError(f"the {self.kind} group did not form within {timeout:.0f}s "
                                 f"(registered {sorted(registered)}, owners {owners})\n{logs}")
            time.sleep(0.2)

    @staticmethod
    def _children(zk: KazooClient, path: str) -> List[str]:
        try:
            return list(zk.get_children(path))
        except NoNodeError:
            return []

    def _owners(self, zk: KazooClient) -> Dict[int, str]:
        base = f"/consumers/{self.group}/owners/{TOPIC}"
        found: Dict[int, str] = {}
        for child in self._children(zk, base):
            try:
                found[int(child)] = zk.get(f"{base}/{child}")[0].decode("utf-8")
            except NoNodeError:
                continue
        return found

    def _sleep_until(self, at_s: float) -> None:
        while True:
            self._check_early_exits()
            remaining = at_s - self._elapsed()
            if remaining <= 0:
                return
            time.sleep(min(remaining, 0.5))

    def _play(self, cluster: LocalCluster, launcher: MemberLauncher, producer: AckedProducer) -> None:
        for event in schedule(self.settings):
            self._sleep_until(event.at_s)
            late = self._elapsed() - event.at_s
            if late > 1.0:
                self._event(f"(running {event.action} {late:.1f}s late)")
            if event.action == "kill_member":
                victim = self._pick_member()
                victim.signal(signal.SIGKILL)
                victim.process.wait()
                victim.report.killed_by_schedule = True
                victim.report.exit_status = victim.process.returncode
                self._event(f"kill -9 member {victim.name} (pid {victim.pid}); acked so far {producer.acked_count()}")
            elif event.action == "add_member":
                member = self._start_member(launcher)
                self._event(f"added member {member.name} (pid {member.pid})")
            elif event.action == "pause_member":
                victim = self._pick_member()
                victim.report.paused_by_schedule = True
                victim.signal(signal.SIGSTOP)
                self._event(f"SIGSTOP member {victim.name} (pid {victim.pid}) for {self.settings.pause_s:.0f}s")
                self._sleep_until(event.at_s + self.settings.pause_s)
                victim.signal(signal.SIGCONT)
                self._event(f"SIGCONT member {victim.name}")
            elif event.action == "expire_member":
                self._expire_member(cluster)
            elif event.action == "partition_member":
                victim = self._pick_member()
                victim.report.partitioned_by_schedule = True
                victim.proxy.cut("blackhole")
                self._event(f"partitioned member {victim.name} from ZooKeeper for {self.settings.pause_s:.0f}s "
                            f"(its proxy {victim.proxy.address} blackholes)")
                self._sleep_until(event.at_s + self.settings.pause_s)
                victim.proxy.heal()
                self._event(f"healed the partition of member {victim.name}")
            elif event.action == "pause_zookeeper":
                cluster.pause_zookeeper()
                self._event(f"SIGSTOP ZooKeeper for {self.settings.zk_pause_s:.0f}s")
                self._sleep_until(event.at_s + self.settings.zk_pause_s)
                cluster.resume_zookeeper()
                self._event("SIGCONT ZooKeeper")
            elif event.action == "restart_zookeeper":
                cluster.kill_zookeeper()
                self._event(f"kill -9 ZooKeeper; restarting it in {self.settings.zk_down_s:.0f}s")
                self._sleep_until(event.at_s + self.settings.zk_down_s)
                self._start_zookeeper(cluster)
                continue  # _start_zookeeper marked the fault's end: when ZooKeeper served again
            elif event.action == "kill_leader_broker":
                partition = self._rng.randrange(self.settings.partitions)
                broker = cluster.leader(TOPIC, partition)
                if broker < 0:
                    self._event(f"partition {partition} has no leader; no broker killed")
                    continue
                cluster.kill_broker(broker)
                self._killed_broker = broker
                self._event(f"SIGKILL broker {broker} (leader of partition {partition})")
            elif event.action == "restart_broker":
                self._restart_broker(cluster)
            self._fault_ended()

    def _start_zookeeper(self, cluster: LocalCluster) -> None:
        """Start ZooKeeper again; the fault ends when it serves (``srvr`` answers), which is
        earlier than ``start_zookeeper()`` returns (that also waits for the cluster's own client)."""
        errors: List[BaseException] = []

        def start() -> None:
            try:
                cluster.start_zookeeper()
            except BaseException as exc:  # re-raised below, in the engine's thread
                errors.append(exc)

        starter = threading.Thread(target=start, name="chaos-zookeeper-start", daemon=True)
        starter.start()
        while starter.is_alive() and not _zookeeper_serving(cluster.zk_port):
            starter.join(0.1)
        if not errors:
            self._event("ZooKeeper serving again (same port and data directory)")
            self._fault_ended()
        starter.join(180.0)
        if errors:
            raise errors[0]
        if starter.is_alive():
            raise ChaosError("LocalCluster.start_zookeeper() did not return within 180 s")

    def _expire_member(self, cluster: LocalCluster) -> None:
        """Expire the ZooKeeper session(s) a member holds, as seen through its proxy."""
        victim = self._pick_member()
        victim.report.expired_by_schedule = True
        sessions = victim.proxy.sessions()
        if not sessions:
            self._event(f"member {victim.name} has no ZooKeeper session open; none expired")
            return
        for session_id, password in sessions:
            expire_zookeeper_session(cluster.zk_connect, (session_id, password))
            self._event(f"expired session 0x{session_id:x} of member {victim.name}")

    def _pick_member(self) -> Member:
        """A live member chosen by the seeded generator among the live ones, by name order."""
        candidates = sorted(self._live_members(), key=lambda m: m.name)
        if not candidates:
            raise ChaosError("no live member left to pick")
        return candidates[self._rng.randrange(len(candidates))]

    def _restart_broker(self, cluster: LocalCluster) -> None:
        broker = self._killed_broker
        if broker is None or cluster.is_running(broker):
            return
        self._event(f"restarting broker {broker}")
        cluster.start_broker(broker)
        self._event(f"broker {broker} registered again")

    def _settle(self, zk: KazooClient, ends: Mapping[int, int]) -> None:
        """Give the group ``settle_timeout_s`` to commit every log end; then judge stalls and members."""
        s = self.settings
        settle_start = time.monotonic()
        deadline = settle_start + s.settle_timeout_s
        read = lambda: read_committed(zk, self.group, TOPIC, s.partitions)  # noqa: E731
        committed = self._zk_retry("reading committed offsets", read)
        while any((committed[p] or 0) < ends[p] for p in ends) and time.monotonic() < deadline:
            self._check_early_exits()
            time.sleep(0.2)
            committed = self._zk_retry("reading committed offsets", read)
        behind = {p: ends[p] - (committed[p] or 0) for p in ends if (committed[p] or 0) < ends[p]}
        if not behind:
            self.result.settle_s = round(time.monotonic() - settle_start, 1)
            self._event(f"group caught up: every committed offset at the log end ({sum(ends.values())} messages)")
        else:
            self._event(f"group did NOT catch up within {s.settle_timeout_s:.0f}s; behind: {behind}")
        self._check_early_exits()
        owners = self._zk_retry("reading owners", lambda: self._owners(zk))
        registered = set(self._zk_retry("reading members", lambda: self._children(zk, f"/consumers/{self.group}/ids")))
        for member in self._live_members():
            if f"{self.group}_{member.name}" not in registered:
                member.report.failed = True
                member.report.why.append("alive but not registered in the group at the end of the settle phase")
        for partition, lag in sorted(behind.items()):
            owner = owners.get(partition)
            holder = next((m for m in self._members if owner and owner.startswith(f"{self.group}_{m.name}-")), None)
            self.result.stalled_detail[partition] = f"{lag} behind, owner {owner or 'none'}"
            if holder is not None and not holder.report.killed_by_schedule:
                holder.report.failed = True
                holder.report.why.append(f"owned partition {partition} but left it {lag} messages behind")
        self.result.stalled_partitions = len(behind)

    def _stop_members(self, launcher: MemberLauncher) -> None:
        live = self._live_members()
        self._event(f"stopping {len(live)} members with SIGTERM")
        processes.terminate_all([m.process for m in live], self.settings.stop_grace_s)
        for member in live:
            r = member.report
            r.exit_status = member.process.returncode
            if r.exit_status not in CLEAN_EXIT[self.kind]:
                r.failed = True
                r.why.append(f"unclean stop: exit status {r.exit_status}"
                             + (" (needed SIGKILL)" if r.exit_status == -signal.SIGKILL else ""))
            launcher.forget(member)

    def _drain(self, zk: KazooClient, reader: LogReader, ends: Mapping[int, int]) -> List[str]:
        """Read every partition from the group's committed offset to the log end (see the docstring)."""
        committed = self._zk_retry("reading committed offsets",
                                   lambda: read_committed(zk, self.group, TOPIC, self.settings.partitions))
        ranges = {p: (committed[p] or 0, ends[p]) for p in ends}
        found = reader.read(ranges)
        values = [v for p in sorted(found) for _o, v in found[p]]
        self._event(f"drain from the committed offsets read {len(values)} messages")
        return values

    def _account(self, producer: AckedProducer, monitor: OffsetMonitor, drained: List[str],
                 scan: Mapping[int, List[Tuple[int, str]]]) -> None:
        r = self.result
        recordings = []
        for member in self._members:
            counts, malformed = read_recordings(member.out_path)
            member.report.lines = sum(counts.values())
            if malformed:
                member.report.why.append(f"{malformed} malformed output lines")
            recordings.append(counts)
            r.members.append(member.report)
        t = tally(producer.acked, recordings, drained, [v for entries in scan.values() for _o, v in entries])
        r.sent = producer.sent
        r.send_failures = sum(producer.failures.values())
        r.acknowledged = t.acknowledged
        r.recorded_total = t.recorded_total
        r.distinct_recorded = t.distinct_recorded
        r.lost = len(t.lost)
        r.missing_from_log = t.missing_from_log
        r.lost_examples = [f"{v} at (partition, offset) {producer.acked[v]}" for v in t.lost[:10]]
        r.duplicate_pct = t.duplicate_pct
        r.consumer_duplicate_pct = t.consumer_duplicate_pct
        r.log_duplicates = t.log_duplicates
        r.drained = len(drained)
        r.regressions = len(monitor.regressions)
        r.regression_examples = monitor.regressions[:10]
        r.failed_members = sum(1 for m in r.members if m.failed)
        r.max_stall_s = round(max(monitor.max_stall.values(), default=0.0), 1)
        if self._ownership is not None:
            r.longest_ownerless_s, r.longest_ownerless_detail = self._ownership.longest_ownerless()
            r.settled_again_s = self._ownership.settled_again()
            r.settled_again = r.settled_again_s is not None
        r.offset_writes_seen, r.offset_writes_total = monitor.writes()
        if self._ownership is not None:
            self._event(f"ownership monitor: {self._ownership.samples} samples, "
                        f"{self._ownership.skipped} unreadable (ZooKeeper unavailable)")


@dataclass(frozen=True)
class Tally:
    """Loss and duplicate figures of a run; see :func:`tally`."""

    acknowledged: int
    recorded_total: int
    distinct_recorded: int
    lost: List[str]
    missing_from_log: int
    duplicate_pct: float
    consumer_duplicate_pct: float
    log_duplicates: int


def tally(acked: Iterable[str], recordings: Iterable[Mapping[str, int]], drained: Iterable[str],
          log_values: Iterable[str]) -> Tally:
    """Count losses and duplicates by value (definitions in the module docstring).

    ``acked``: acknowledged values; ``recordings``: value → times recorded, one
    mapping per member; ``drained``: values the final drain read (each a
    recording); ``log_values``: every value in the log (a value twice in the log
    was written twice by the producer).

    A message the group skipped stays lost whatever the drain reads, since the
    drain starts at the committed offsets, past it:

    >>> t = tally(acked=["a", "b", "c", "d"], recordings=[{"a": 1, "b": 1}, {"b": 1}],
    ...           drained=["d"], log_values=["a", "b", "c", "d"])
    >>> t.lost, t.missing_from_log, t.duplicate_pct
    (['c'], 0, 33.333)

    A value the producer wrote twice, read twice, is not a consumer duplicate:

    >>> t = tally(["a"], [{"a": 2}], [], ["a", "a"])
    >>> t.duplicate_pct, t.consumer_duplicate_pct, t.log_duplicates
    (100.0, 0.0, 1)
    """
    acked_set = set(acked)
    recorded: Counter = Counter()
    for counts in recordings:
        recorded.update(counts)
    recorded.update(drained)
    in_log: Counter = Counter(log_values)
    total, distinct = sum(recorded.values()), len(recorded)
    excess = sum(max(0, n - max(1, in_log.get(v, 0))) for v, n in recorded.items())
    return Tally(
        acknowledged=len(acked_set),
        recorded_total=total,
        distinct_recorded=distinct,
        lost=sorted(acked_set - set(recorded)),
        missing_from_log=len(acked_set - set(in_log)),
        duplicate_pct=round(100.0 * (total - distinct) / max(1, distinct), 3),
        consumer_duplicate_pct=round(100.0 * excess / max(1, distinct), 3),
        log_duplicates=sum(n - 1 for n in in_log.values() if n > 1),
    )


# ---------------------------------------------------------------------------- both sides


def run_chaos(settings: ChaosSettings, kinds: Sequence[str] = KINDS, directory: Optional[Path] = None,
              say: Callable[[str], None] = lambda line: None,
              keep_cluster_dir: bool = False) -> Dict[str, SideResult]:
    """Run the schedule once per kind (sequentially, a fresh cluster each); results by kind.

    Member outputs and logs go to ``directory/<kind>/`` (a new temporary
    directory if None; the caller removes it). ``keep_cluster_dir`` keeps each
    cluster's directory (broker and ZooKeeper logs) too.
    """
    settings.validate()
    base = directory or Path(tempfile.mkdtemp(prefix="zkconsumer-chaos-"))
    return {kind: ChaosRun(kind, settings, base / kind, say, keep_cluster_dir).run() for kind in kinds}


def verdict(results: Mapping[str, SideResult]) -> Tuple[bool, List[str]]:
    """Does zkconsumer pass? 0 lost, 0 regressions, 0 failed members, 0 stalled partitions, the
    group settled again, and (when Kafka's side ran) a duplicate % at or below Kafka's.
    Returns (passed, reasons)."""
    zk = results.get("zkconsumer")
    if zk is None:
        return True, ["zkconsumer side not run"]
    problems = []
    for name in ("lost", "regressions", "failed_members", "stalled_partitions"):
        if getattr(zk, name):
            problems.append(f"zkconsumer {name} = {getattr(zk, name)}")
    if not zk.settled_again:
        problems.append("zkconsumer group did not settle again after the last fault")
    kafka = results.get("kafka")
    if kafka is not None and zk.duplicate_pct > kafka.duplicate_pct:
        problems.append(f"zkconsumer duplicate % {zk.duplicate_pct} > Kafka's {kafka.duplicate_pct}")
    return not problems, problems


ROWS: Tuple[Tuple[str, str], ...] = (
    ("commits", "commits"),
    ("sent", "sent"),
    ("acknowledged", "acknowledged"),
    ("send_failures", "send failures"),
    ("recorded_total", "recorded (all deliveries)"),
    ("distinct_recorded", "distinct values recorded"),
    ("lost", "LOST"),
    ("missing_from_log", "  of which missing from the log"),
    ("duplicate_pct", "duplicate %"),
    ("consumer_duplicate_pct", "  minus producer-retry copies %"),
    ("log_duplicates", "producer-retry copies in the log"),
    ("regressions", "COMMITTED-OFFSET REGRESSIONS"),
    ("offset_writes", "  offset writes observed/made"),
    ("failed_members", "FAILED MEMBERS"),
    ("stalled_partitions", "stalled partitions after settle"),
    ("drained", "left for the final drain"),
    ("max_stall_s", "max partition stall (s)"),
    ("longest_ownerless_s", "LONGEST OWNERLESS PARTITION (s)"),
    ("settled_again_text", "SETTLED AGAIN after last fault"),
    ("settle_s", "catch-up after producer stop (s)"),
    ("elapsed_s", "side wall time (s)"),
)


def _member_summary(member: MemberReport) -> str:
    """``zk-m1 kill -9 (212 lines)`` / ``zk-m4 paused exit 0 (549 lines)``."""
    fate = []
    if member.killed_by_schedule:
        fate.append("kill -9")
    if member.paused_by_schedule:
        fate.append("paused")
    if member.partitioned_by_schedule:
        fate.append("partitioned")
    if member.expired_by_schedule:
        fate.append("expired")
    if not member.killed_by_schedule:
        fate.append("still running" if member.exit_status is None else f"exit {member.exit_status}")
    if member.failed:
        fate.append("FAILED")
    return f"{member.name} {' '.join(fate)} ({member.lines} lines)"


def format_table(results: Mapping[str, SideResult]) -> str:
    """The figures of each side, side by side, then what went wrong where."""
    kinds = [k for k in KINDS if k in results]
    width = max(len(label) for _, label in ROWS) + 2
    lines = [f"{'':{width}}" + "".join(f"{k:>18}" for k in kinds)]
    for attr, label in ROWS:
        cells = []
        for k in kinds:
            value = getattr(results[k], attr)
            cells.append(f"{'-' if value is None else value:>18}")
        lines.append(f"{label:{width}}" + "".join(cells))
    for k in kinds:
        r = results[k]
        if r.longest_ownerless_detail:
            lines.append(f"{k} longest ownerless: {r.longest_ownerless_detail}")
        lines.append(f"{k} members: " + ", ".join(_member_summary(m) for m in r.members))
        for member in r.members:
            if member.failed or member.why:
                lines.append(f"{k} member {member.name}: " + "; ".join(member.why))
        for partition, detail in sorted(r.stalled_detail.items()):
            lines.append(f"{k} stalled partition {partition}: {detail}")
        for reg in r.regression_examples:
            lines.append(f"{k} regression at {reg.at_s}s: partition {reg.partition} {reg.before} -> {reg.after}")
        for example in r.lost_examples:
            lines.append(f"{k} lost {example}")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``scripts/chaos``: run the schedule for zkconsumer and Kafka's consumer; print the table and JSON.

    Exit status 0 if zkconsumer passes (:func:`verdict`), 1 if not, 2 if the run
    itself failed.
    """
    parser = argparse.ArgumentParser(prog="scripts/chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of producing under faults")
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="default",
                        help="default: member and broker faults; zk: member session expiry, member partition "
                             "from ZooKeeper, ZooKeeper SIGSTOP, ZooKeeper kill -9 and restart; zk-outage: "
                             "ZooKeeper SIGSTOP then kill -9 and restart, commit-fatal members, 12 partitions")
    parser.add_argument("--commit-fatal", action="store_true",
                        help="zkconsumer members commit every 0.5 s themselves and die on any commit exception "
                             "(always on with --schedule zk-outage)")
    parser.add_argument("--zk-pause", type=float, default=15.0, help="seconds ZooKeeper stays SIGSTOPped")
    parser.add_argument("--zk-down", type=float, default=10.0, help="seconds ZooKeeper stays dead before its restart")
    parser.add_argument("--members", type=int, default=3, help="initial members of the group")
    parser.add_argument("--partitions", type=int, help="partitions of the topic (6; 12 with --schedule zk-outage)")
    parser.add_argument("--messages-per-second", type=float, default=100.0)
    parser.add_argument("--seed", type=int, default=1, help="chooses the victims (same on both sides)")
    parser.add_argument("--only", choices=KINDS, help="run one side only")
    parser.add_argument("--keep", action="store_true", help="keep member outputs and logs (kept anyway on failure) and the clusters' logs")
    args = parser.parse_args(argv)
    partitions = args.partitions if args.partitions is not None else (12 if args.schedule == "zk-outage" else 6)
    settings = ChaosSettings(duration_s=args.duration, members=args.members, partitions=partitions,
                             messages_per_second=args.messages_per_second, seed=args.seed, schedule=args.schedule,
                             zk_pause_s=args.zk_pause, zk_down_s=args.zk_down, commit_fatal=args.commit_fatal)
    try:
        settings.validate()
    except ValueError as exc:
        parser.error(str(exc))
    directory = Path(tempfile.mkdtemp(prefix="zkconsumer-chaos-"))
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # the engine's clients ride out the faults on purpose
    kinds = [args.only] if args.only else list(KINDS)
    try:
        results = run_chaos(settings, kinds, directory, say, keep_cluster_dir=args.keep)
    except (ChaosError, LocalClusterError) as exc:
        print(f"chaos run failed: {exc}\nmember outputs and logs: {directory}", file=sys.stderr)
        return 2
    passed, problems = verdict(results)
    print(format_table(results))
    print("verdict: " + ("PASS" if passed else "FAIL: " + "; ".join(problems)))
    keep = args.keep or not passed
    if keep:
        print(f"member outputs and logs: {directory}")
    else:
        shutil.rmtree(directory, ignore_errors=True)
    summary = {"settings": {**asdict(settings), "fatal_commits": settings.fatal_commits},
               "passed": passed, "problems": problems,
               **{k: {key: value for key, value in r.as_dict().items() if key != "events"}
                  for k, r in results.items()}}
    print(json.dumps(summary, sort_keys=True))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
