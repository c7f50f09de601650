"""Rebalance latency benchmark: how fast does a group settle when a member joins?

``scripts/bench-rebalance [--joins N] [--partitions P] [--only zkconsumer|kafka]``

On one :class:`ProjectCluster` (1 broker) and a topic with ``P`` partitions (12), for each
kind of member (zkconsumer: :mod:`benchmarks.chaos.member` in its own Python
process; kafka: Kafka's ``kafka.tools.ConsoleConsumer`` JVM), both with the Range
assignment, ``rebalance.backoff.ms=2000`` and ``zookeeper.session.timeout.ms=6000``:

1. start 2 members in a fresh group and wait until the group is settled;
2. ``N`` times: start a third member and measure; once settled, keep it ``--hold`` s (1)
   so that it has finished starting, then stop it (SIGTERM: Kafka's shutdown hook, or
   zkconsumer's ``connector.shutdown()``) and wait until the 2 others settle again
   (``leave_settle_ms`` in the JSON: from the SIGTERM to settled, process exit included).

Definitions
-----------

*Settled*: the owner znodes ``/consumers/<g>/owners/<topic>/<p>`` equal Kafka's Range
assignment computed independently here over every thread id registered in
``/consumers/<g>/ids`` (and every member registered is one we started and is alive).

*Join latency*: from the joining member's registration node creation (``ctime`` of
``/consumers/<g>/ids/<id>``, ZooKeeper's clock in ms) to the wall-clock time
(``time.time()``; ZooKeeper runs on this machine, so the clocks are the same) of the
first poll that saw the owners settled. A poller reads every owner node every 10 ms
(one ``get_children`` plus parallel ``get`` calls) from before the member is started.

*Orphan time*: within [ctime, settled], the total time during which at least one
partition had no owner node, summed over poll intervals (a poll that saw a partition
ownerless counts until the next poll): resolution is one poll interval, ~10-20 ms.

A join that does not settle within ``--join-timeout`` (30 s) is reported as failed
(``timeouts``) and excluded from the latency statistics.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from benchmarks.chaos.member import spawn_member
from harness.assignment import expected_range
from harness.cluster import ProjectCluster
from harness.cluster.tools import log4j_properties
from zkconsumer.testing import processes
from zkconsumer.testing.errors import LocalClusterError
from zkconsumer.testing.properties import render_properties

KINDS = ("zkconsumer", "kafka")
POLL_S = 0.010
BACKOFF_MS = 2000
SESSION_TIMEOUT_MS = 6000


class BenchError(Exception):
    """The benchmark itself could not run (a member died, the group never settled)."""


# ---------------------------------------------------------------------------- assignment

# ---------------------------------------------------------------------------- members

class Member:
    def __init__(self, kind: str, name: str, process: "subprocess.Popen[Any]", log_path: Path) -> None:
        self.kind = kind
        self.name = name
        self.process = process
        self.log_path = log_path

    def alive(self) -> bool:
        return self.process.poll() is None


class Launcher:
    kind = ""

    def __init__(self, cluster: ProjectCluster, group: str, topic: str, directory: Path) -> None:
        self.cluster = cluster
        self.group = group
        self.topic = topic
        self.directory = directory
        self._counter = 0

    def properties(self) -> Dict[str, str]:
        return {
            "group.id": self.group,
            "rebalance.backoff.ms": str(BACKOFF_MS),
            "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "partition.assignment.strategy": "range",
            "auto.commit.enable": "true",
            "auto.commit.interval.ms": "1000",
        }

    def next_name(self) -> str:
        self._counter += 1
        return f"{self.kind}-m{self._counter}"

    def start(self) -> Member:
        raise NotImplementedError

    def stop(self, member: Member, grace: float = 20.0) -> None:
        """SIGTERM (clean shutdown), SIGKILL after ``grace`` s; reaps the process."""
        processes.terminate_all([member.process], grace)


class ZkconsumerLauncher(Launcher):
    kind = "zkconsumer"

    def start(self) -> Member:
        name = self.next_name()
        out, log = self.directory / f"{name}.out", self.directory / f"{name}.log"
        process = spawn_member(self.cluster.zk_connect, self.group, self.topic, out, log, self.directory,
                               self.properties())
        return Member(self.kind, name, process, log)


class KafkaLauncher(Launcher):
    kind = "kafka"
    JVM_OPTIONS = ("-Xmx192m",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._log4j = self.directory / "log4j-kafka-member.properties"
        quiet = {"kafka.consumer": "INFO", "kafka.consumer.ConsumerFetcherThread": "WARN"}
        self._log4j.write_text(render_properties(log4j_properties("WARN", "System.err", quiet)))

    def start(self) -> Member:
        name = self.next_name()
        config = self.directory / f"{name}.properties"
        config.write_text(render_properties(self.properties()))
        log = self.directory / f"{name}.log"
        with open(log, "ab") as log_file:
            process = self.cluster.start_tool(
                "kafka.tools.ConsoleConsumer", "--zookeeper", self.cluster.zk_connect, "--topic", self.topic,
                "--consumer.config", str(config), stdout=subprocess.DEVNULL, stderr=log_file, text=False,
                jvm_options=(*self.JVM_OPTIONS, f"-Dlog4j.configuration=file:{self._log4j}"))
        return Member(self.kind, name, process, log)

    def stop(self, member: Member, grace: float = 20.0) -> None:
        self.cluster.stop_tool(member.process, grace=grace)


# ---------------------------------------------------------------------------- observing the group

@dataclass
class Snapshot:
    at: float                      # time.time() when the read completed
    members: Dict[str, Tuple[int, List[str]]]   # id -> (ctime ms, thread ids)
    owners: Dict[int, str]


class GroupReader:
    def __init__(self, zk: KazooClient, group: str, topic: str, partitions: int) -> None:
        self.zk = zk
        self.group = group
        self.topic = topic
        self.partitions = partitions
        self._registrations: Dict[str, Tuple[int, List[str]]] = {}

    def _members(self) -> Dict[str, Tuple[int, List[str]]]:
        path = f"/consumers/{self.group}/ids"
        try:
            ids = self.zk.get_children(path)
        except NoNodeError:
            return {}
        result: Dict[str, Tuple[int, List[str]]] = {}
        for member in ids:
            known = self._registrations.get(member)
            if known is None:
                try:
                    data, stat = self.zk.get(f"{path}/{member}")
                except NoNodeError:
                    continue
                subscription = json.loads(data).get("subscription", {})
                n = int(subscription.get(self.topic, 0))
                known = (stat.ctime, [f"{member}-{i}" for i in range(n)])
                self._registrations[member] = known
            result[member] = known
        for gone in set(self._registrations) - set(ids):
            del self._registrations[gone]
        return result

    def _owners(self) -> Dict[int, str]:
        base = f"/consumers/{self.group}/owners/{self.topic}"
        try:
            children = self.zk.get_children(base)
        except NoNodeError:
            return {}
        pending = [(child, self.zk.get_async(f"{base}/{child}")) for child in children]
        result: Dict[int, str] = {}
        for child, async_result in pending:
            try:
                data, _stat = async_result.get(timeout=10)
            except NoNodeError:
                continue
            result[int(child)] = data.decode()
        return result

    def snapshot(self) -> Snapshot:
        members = self._members()
        owners = self._owners()
        return Snapshot(time.time(), members, owners)

    def settled(self, snap: Snapshot, expected_members: Sequence[str]) -> bool:
        if sorted(snap.members) != sorted(expected_members):
            return False
        threads = [t for _ctime, ts in snap.members.values() for t in ts]
        return snap.owners == expected_range(threads, self.partitions)


# ---------------------------------------------------------------------------- one kind

@dataclass
class Join:
    index: int
    latency_ms: Optional[float]
    orphan_ms: float
    max_orphaned_partitions: int
    leave_settle_ms: Optional[float]
    polls: int


@dataclass
class KindResult:
    kind: str
    joins: List[Join] = field(default_factory=list)

    def latencies(self) -> List[float]:
        return [j.latency_ms for j in self.joins if j.latency_ms is not None]

    def summary(self) -> Dict[str, Any]:
        lat = sorted(self.latencies())
        orphan = [j.orphan_ms for j in self.joins if j.latency_ms is not None]
        return {
            "kind": self.kind,
            "joins": len(self.joins),
            "settled_joins": len(lat),
            "timeouts": len(self.joins) - len(lat),
            "median_join_ms": round(statistics.median(lat), 1) if lat else None,
            "p80_join_ms": round(percentile(lat, 80), 1) if lat else None,
            "max_join_ms": round(max(lat), 1) if lat else None,
            "median_orphan_ms": round(statistics.median(orphan), 1) if orphan else None,
            "joins_with_orphans": sum(1 for j in self.joins if j.orphan_ms > 0),
            "join_latencies_ms": [None if j.latency_ms is None else round(j.latency_ms, 1) for j in self.joins],
            "orphan_ms": [round(j.orphan_ms, 1) for j in self.joins],
            "leave_settle_ms": [None if j.leave_settle_ms is None else round(j.leave_settle_ms, 1)
                                for j in self.joins],
        }


def percentile(sorted_values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, math.ceil(pct / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def wait_settled(reader: GroupReader, members: Sequence[Member], expected_count: int, timeout: float,
                 what: str) -> Tuple[Snapshot, float]:
    """Poll until ``expected_count`` members are registered and owners match Range; return the snapshot."""
    deadline = time.monotonic() + timeout
    snap = reader.snapshot()
    while True:
        for m in members:
            if not m.alive():
                raise BenchError(f"{m.name} exited with status {m.process.returncode} while waiting for {what}; "
                                 f"log: {m.log_path}")
        if len(snap.members) == expected_count and reader.settled(snap, list(snap.members)):
            return snap, snap.at
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout}s waiting for {what}: members {sorted(snap.members)}, "
                             f"owners {snap.owners}")
        time.sleep(POLL_S)
        snap = reader.snapshot()


def measure_join(reader: GroupReader, launcher: Launcher, base_ids: Sequence[str], stayers: Sequence[Member],
                 index: int, timeout: float, say: Callable[[str], None]) -> Tuple[Join, Member]:
    """Start a third member; poll every 10 ms until settled; compute latency and orphan time."""
    samples: List[Snapshot] = []
    joiner = launcher.start()
    deadline = time.monotonic() + timeout
    new_id: Optional[str] = None
    settled_at: Optional[float] = None
    while time.monotonic() < deadline:
        started = time.monotonic()
        snap = reader.snapshot()
        samples.append(snap)
        if new_id is None:
            fresh = [m for m in snap.members if m not in base_ids]
            if fresh:
                new_id = fresh[0]
        if new_id is not None and reader.settled(snap, [*base_ids, new_id]):
            settled_at = snap.at
            break
        if not joiner.alive():
            say(f"  join {index}: {joiner.name} exited with status {joiner.process.returncode}; log {joiner.log_path}")
            break
        if any(not m.alive() for m in stayers):
            launcher.stop(joiner, grace=10.0)
            raise BenchError("a base member exited during a join")
        time.sleep(max(0.0, POLL_S - (time.monotonic() - started)))
    ctime_s: Optional[float] = None
    if new_id is not None:
        for snap in samples:
            if new_id in snap.members:
                ctime_s = snap.members[new_id][0] / 1000.0
                break
    latency_ms = None if settled_at is None or ctime_s is None else (settled_at - ctime_s) * 1000.0
    # Orphan time: poll intervals within [ctime, settled] that started with an ownerless partition.
    orphan_s = 0.0
    max_orphaned = 0
    if ctime_s is not None:
        end = settled_at if settled_at is not None else samples[-1].at
        for current, following in zip(samples, samples[1:]):
            missing = reader.partitions - len(current.owners)
            if following.at <= ctime_s or current.at >= end:
                continue
            if missing > 0:
                lo = max(current.at, ctime_s)
                orphan_s += max(0.0, min(following.at, end) - lo)
                max_orphaned = max(max_orphaned, missing)
    join = Join(index, latency_ms, orphan_s * 1000.0, max_orphaned, None, len(samples))
    return join, joiner


def run_kind(cluster: ProjectCluster, kind: str, topic: str, partitions: int, joins: int, directory: Path,
             join_timeout: float, say: Callable[[str], None], hold_s: float = 1.0) -> KindResult:
    group = f"bench-{kind}-{uuid.uuid4().hex[:8]}"
    kind_dir = directory / kind
    kind_dir.mkdir(parents=True, exist_ok=True)
    launcher: Launcher = (ZkconsumerLauncher if kind == "zkconsumer" else KafkaLauncher)(
        cluster, group, topic, kind_dir)
    zk = cluster.kazoo_client()
    reader = GroupReader(zk, group, topic, partitions)
    result = KindResult(kind)
    started: List[Member] = []
    try:
        base = [launcher.start(), launcher.start()]
        started += base
        snap, _ = wait_settled(reader, base, 2, 90.0, f"2 {kind} members to settle")
        base_ids = sorted(snap.members)
        say(f"{kind}: group {group} settled with {base_ids}")
        for i in range(1, joins + 1):
            join, joiner = measure_join(reader, launcher, base_ids, base, i, join_timeout, say)
            started.append(joiner)
            # Let the joiner finish starting before it is stopped: Kafka's ConsoleConsumer installs
            # its shutdown hook only after createMessageStreams returns, so a SIGTERM right after
            # the group settles kills the JVM without connector.shutdown() and its ephemerals stay
            # until the session times out (6 s). Does not affect the join measurement.
            time.sleep(hold_s)
            t_stop = time.time()
            launcher.stop(joiner)
            started.remove(joiner)
            try:
                _snap, at = wait_settled(reader, base, 2, 60.0, f"{kind} group to settle after member left")
                join.leave_settle_ms = (at - t_stop) * 1000.0
            except BenchError:
                result.joins.append(join)
                raise
            result.joins.append(join)
            lat = "TIMEOUT" if join.latency_ms is None else f"{join.latency_ms:.0f} ms"
            say(f"  {kind} join {i}: latency {lat}, orphan {join.orphan_ms:.0f} ms "
                f"(up to {join.max_orphaned_partitions} partitions), {join.polls} polls, "
                f"leave settled in {join.leave_settle_ms:.0f} ms")
    finally:
        for m in started:
            try:
                launcher.stop(m, grace=10.0)
            except Exception:  # keep cleaning up
                pass
    return result


# ---------------------------------------------------------------------------- report

def format_table(results: Sequence[KindResult]) -> str:
    header = ("kind", "joins", "median join", "p80", "max", "median orphan", "joins w/ orphan", "timeouts")
    rows = [header]
    for r in results:
        s = r.summary()
        def ms(v: Optional[float]) -> str:
            return "-" if v is None else f"{v / 1000.0:.3f} s"

        rows.append((r.kind, str(s["joins"]), ms(s["median_join_ms"]), ms(s["p80_join_ms"]), ms(s["max_join_ms"]),
                     ms(s["median_orphan_ms"]), f"{s['joins_with_orphans']}/{s['joins']}", str(s["timeouts"])))
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench-rebalance", description=__doc__.split("\n\n")[0])
    parser.add_argument("--joins", type=int, default=10, help="joins measured per kind")
    parser.add_argument("--partitions", type=int, default=None,
                        help="partitions (12; with --sizes: 256 in all, over two topics)")
    parser.add_argument("--only", choices=KINDS, help="run one kind only")
    parser.add_argument("--join-timeout", type=float, default=30.0, help="seconds a join may take before it fails")
    parser.add_argument("--hold", type=float, default=1.0,
                        help="seconds the joined member stays after the group settled, before SIGTERM")
    parser.add_argument("--keep", action="store_true", help="keep member logs")
    scale = parser.add_argument_group("scale benchmark (benchmarks/rebalance/scale.py)")
    scale.add_argument("--sizes", help="run the scale benchmark with these group sizes, e.g. 8,16,32")
    scale.add_argument("--kinds", default=",".join(KINDS), help="kinds to run (scale benchmark)")
    scale.add_argument("--streams", type=int, default=4, help="streams per topic per member (scale benchmark)")
    scale.add_argument("--stable", type=float, default=3.0, help="seconds owners must stay settled")
    scale.add_argument("--idle", type=float, default=30.0,
                       help="seconds of the idle-rate window (several pings per member: quiet members ping every ~4.3 s)")
    scale.add_argument("--event-timeout", type=float, default=120.0, help="seconds an event may take to settle")
    scale.add_argument("--json", help="write the scale benchmark's JSON here")
    args = parser.parse_args(argv)
    if args.sizes:
        from benchmarks.rebalance.scale import main_scale
        return main_scale(args)
    if args.partitions is None:
        args.partitions = 12
    if args.joins < 1 or args.partitions < 1:
        parser.error("--joins and --partitions must be >= 1")
    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    kinds = [args.only] if args.only else list(KINDS)
    directory = Path(tempfile.mkdtemp(prefix="zkconsumer-rebalance-bench-"))
    results: List[KindResult] = []
    failed = False
    try:
        with ProjectCluster(brokers=1, partitions=args.partitions) as cluster:
            topic = cluster.create_topic("rebalance-bench", partitions=args.partitions)
            for kind in kinds:
                try:
                    results.append(run_kind(cluster, kind, topic, args.partitions, args.joins, directory,
                                            args.join_timeout, say, args.hold))
                except BenchError as exc:
                    failed = True
                    say(f"{kind}: benchmark failed: {exc}")
    except LocalClusterError as exc:
        print(f"rebalance bench failed: {exc}", file=sys.stderr)
        return 2
    print(format_table(results))
    if failed or args.keep:
        print(f"member logs: {directory}")
    else:
        shutil.rmtree(directory, ignore_errors=True)
    print(json.dumps({"settings": {"joins": args.joins, "partitions": args.partitions, "backoff_ms": BACKOFF_MS,
                                   "session_timeout_ms": SESSION_TIMEOUT_MS, "poll_ms": POLL_S * 1000,
                                   "hold_s": args.hold},
                      "failed": failed, "results": {r.kind: r.summary() for r in results}}, sort_keys=True))
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
