"""Scale benchmark: big groups through five events, zkconsumer and Kafka's own consumer side by side.

``scripts/bench-rebalance --sizes 8,16[,32] [--kinds zkconsumer,kafka] [--json FILE]``

One :class:`ProjectCluster` (2 brokers) and two topics of ``--partitions`` / 2 partitions
each (256 in all by default; replication 2, so a broker's death moves leaderships, not
data). For each size ``N`` and each kind (zkconsumer: :mod:`benchmarks.chaos.member`
processes; kafka: ``ScaleMember``, a 40-line Java program on Kafka 0.9.0.1's
``kafka.javaapi.consumer`` compiled here, since the ConsoleConsumer has one stream), a fresh
group of members with ``--streams`` (4) streams per topic, Range assignment,
``rebalance.backoff.ms=2000``, ``rebalance.max.retries=4``, ``zookeeper.session.timeout.ms=6000``,
auto-commit every 1 s, goes through:

``start``  N members are started at once (from the first registration's ctime);
``join``   one more member (from its registration's ctime);
``leave``  that member is stopped with SIGTERM (a clean shutdown; from the signal);
``kill``   an original member gets SIGKILL (from its session's expiry: the deletion of its member
           node, seen by a watch; the kill-to-expiry time is in ``note``);
``broker`` broker 1 gets SIGKILL (from the signal; restarted afterwards).

Measured per event (definitions)
--------------------------------

*settle_s*: from the event's start to the moment the owner znodes equal Kafka's Range
assignment over the registered members (computed here, independently) after which they
stay so for ``--stable`` (3) s. The owners are mirrored with ZooKeeper watches (no
polling): an owner node's appearance or change is dated by its ``mtime`` (ZooKeeper's
clock; same machine), a deletion by the arrival of its watch notification. When nothing
had to change (a broker's death), 0.

*failed_attempts*: zkconsumer: log lines ``rebalance attempt failed``; Kafka: log lines
``Rebalancing attempt failed`` (log4j INFO for ``kafka.consumer``); ``gave_up``: lines
``can't rebalance after`` (both), counted in every member's log over the event.

*max_ownerless_s* / *ownerless_partition_s*: the longest time one partition had no owner
node, and the sum over partitions, within [event start, settled]. *moved* partitions
(owner differs before/after) and *kept* ones are reported apart (``kept_ownerless_s``).

*zk_requests*: requests the event caused, from the server's counters: ``srvr``'s
``Received`` over [start, settled + stable], minus the packets of the sessions that are
not group members (brokers, this benchmark's observer; per ``cons``), minus the members'
idle rate times that duration. ``idle_rps``: the members' packets per second (pings
included) over a quiet ``--idle`` (30) s window after ``start``.

*rss_mb*: each member's resident memory (``VmRSS``) at the end, max and mean.

Settling has a timeout (``--event-timeout``, 120 s): an event that does not settle is
reported with ``settle_s = null`` and the benchmark goes on.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from benchmarks.rebalance.members import (
    BACKOFF_MS,
    MAX_RETRIES,
    SESSION_TIMEOUT_MS,
    KafkaLauncher,
    Launcher,
    Member,
    ZkconsumerLauncher,
)
from benchmarks.rebalance.observe import (
    FOUR_LETTER_PACKETS,
    TP,
    Change,
    Counters,
    GroupMirror,
    member_packets,
    read_counters,
)
from harness.cluster import ProjectCluster
from zkconsumer.testing import processes

__all__ = ["BACKOFF_MS", "MAX_RETRIES", "SESSION_TIMEOUT_MS", "FOUR_LETTER_PACKETS", "Change", "Counters",
           "EventResult", "GroupMirror", "Member", "Run", "member_packets", "main_scale"]

KINDS = ("zkconsumer", "kafka")
EVENTS = ("start", "join", "leave", "kill", "broker")


# ---------------------------------------------------------------------------- one event

@dataclass
class EventResult:
    event: str
    kind: str
    size: int
    settle_s: Optional[float] = None
    failed_attempts: int = 0
    gave_up: int = 0
    max_ownerless_s: float = 0.0
    ownerless_partition_s: float = 0.0
    kept_ownerless_s: float = 0.0
    moved: int = 0
    zk_requests: Optional[int] = None
    note: str = ""

    def as_json(self) -> Dict[str, Any]:
        def r(v: Optional[float]) -> Optional[float]:
            return None if v is None else round(v, 3)

        return {"event": self.event, "kind": self.kind, "size": self.size, "settle_s": r(self.settle_s),
                "failed_attempts": self.failed_attempts, "gave_up": self.gave_up,
                "max_ownerless_s": r(self.max_ownerless_s), "ownerless_partition_s": r(self.ownerless_partition_s),
                "kept_ownerless_s": r(self.kept_ownerless_s), "moved": self.moved, "zk_requests": self.zk_requests,
                "note": self.note}


class Run:
    """One kind, one size: a group through the five events."""

    def __init__(self, cluster: ProjectCluster, launcher: Launcher, mirror: GroupMirror, partitions: Dict[str, int],
                 size: int, stable_s: float, timeout_s: float, idle_s: float, say: Callable[[str], None]) -> None:
        self.cluster, self.launcher, self.mirror = cluster, launcher, mirror
        self.partitions, self.size, self.stable_s, self.timeout_s, self.idle_s = partitions, size, stable_s, timeout_s, idle_s
        self.say = say
        self.members: List[Member] = []
        self.idle_rps: Optional[float] = None
        self.rss: List[float] = []

    def failures(self) -> Tuple[int, int]:
        counts = [self.launcher.failures(m) for m in self.all_members]
        return sum(c[0] for c in counts), sum(c[1] for c in counts)

    @property
    def all_members(self) -> List[Member]:
        return self._all

    def settle(self, t0: float, expected_members: int) -> Optional[float]:
        """Wait until owners equal Range over ``expected_members`` members for ``stable_s``; the settle time."""
        deadline = time.monotonic() + self.timeout_s
        equal_since: Optional[float] = None
        while time.monotonic() < deadline:
            owners, members = self.mirror.state()
            ok = (len(members) == expected_members and len(owners) == sum(self.partitions.values())
                  and owners == self.mirror.expected(members, self.partitions))
            now = time.time()
            if ok:
                if equal_since is None:
                    equal_since = now
                elif now - equal_since >= self.stable_s:
                    with self.mirror.lock:
                        last = max((c.at for c in self.mirror.changes if c.seen <= equal_since), default=t0)
                    return max(0.0, last - t0)
            else:
                equal_since = None
            time.sleep(0.02)
        return None

    def departure_after(self, known: Set[str], since: float) -> float:
        """When one of ``known`` left the group (its member node deleted), waiting for it."""
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            with self.mirror.lock:
                times = [t for m, t in self.mirror.departures.items() if m in known and t >= since]
            if times:
                return min(times)
            time.sleep(0.02)
        return since

    def event(self, name: str, expected_members: int, act: Callable[[], float],
              from_departure: bool = False) -> EventResult:
        """Run ``act`` (it returns the event's start) and measure; ``from_departure``: the start is
        when a member's node was deleted (a killed member: its session expired)."""
        result = EventResult(name, self.launcher.kind, self.size)
        before_fail = self.failures()
        owners_before, _ = self.mirror.state()
        counters_before = read_counters(self.cluster.zk_port)
        with self.mirror.lock:
            first_change = len(self.mirror.changes)
        _, members_before = self.mirror.state()
        t0 = act()
        if from_departure:
            killed_at = t0
            t0 = self.departure_after(set(members_before), killed_at)
            result.note = f"session expired {t0 - killed_at:.2f}s after the kill; settle from there"
        settle = self.settle(t0, expected_members)
        counters_after = read_counters(self.cluster.zk_port)
        result.settle_s = settle
        after_fail = self.failures()
        result.failed_attempts = after_fail[0] - before_fail[0]
        result.gave_up = after_fail[1] - before_fail[1]
        with self.mirror.lock:
            changes = list(self.mirror.changes[first_change:])
            sessions = set(self.mirror.member_sessions)
        owners_after, _ = self.mirror.state()
        end = t0 + settle if settle is not None else counters_after.at
        self._ownerless(result, owners_before, owners_after, changes, t0, end)
        packets = member_packets(counters_before, counters_after, sessions)  # the mirror's session excluded
        if self.idle_rps is not None:
            packets -= int(round(self.idle_rps * (counters_after.at - counters_before.at)))
        result.zk_requests = packets
        if settle is None:
            result.note = (result.note + "; " if result.note else "") + "did not settle"
        self.say(f"  {self.launcher.kind} N={self.size} {name}: settle "
                 f"{'-' if settle is None else f'{settle:.2f}s'}, failed {result.failed_attempts}, gave up "
                 f"{result.gave_up}, max ownerless {result.max_ownerless_s:.2f}s, ownerless "
                 f"{result.ownerless_partition_s:.2f} partition-s (kept {result.kept_ownerless_s:.2f}), "
                 f"moved {result.moved}, zk requests {result.zk_requests}")
        return result

    def _ownerless(self, result: EventResult, before: Dict[TP, str], after: Dict[TP, str], changes: List[Change],
                   start: float, end: float) -> None:
        every = {(t, p) for t, n in self.partitions.items() for p in range(n)}
        moved = {tp for tp in every if before.get(tp) != after.get(tp)}
        result.moved = len(moved & set(before)) if before else len(every)
        by_tp: Dict[TP, List[Change]] = {}
        for change in sorted(changes, key=lambda c: c.at):
            by_tp.setdefault(change.tp, []).append(change)
        for tp in every:
            owned = tp in before
            since = start
            total = longest = 0.0
            for change in by_tp.get(tp, []):
                if change.owner is None and owned:
                    owned, since = False, max(start, change.at)
                elif change.owner is not None and not owned:
                    span = max(0.0, min(change.at, end) - since)
                    total, longest, owned = total + span, max(longest, span), True
            if not owned:
                span = max(0.0, end - since)
                total, longest = total + span, max(longest, span)
            result.ownerless_partition_s += total
            result.max_ownerless_s = max(result.max_ownerless_s, longest)
            if tp not in moved and before:
                result.kept_ownerless_s += total

    def run(self) -> List[EventResult]:
        self._all: List[Member] = []
        results: List[EventResult] = []
        launcher = self.launcher

        def spawn(n: int) -> List[Member]:
            started = [launcher.start() for _ in range(n)]
            self._all.extend(started)
            self.members.extend(started)
            return started

        def first_ctime(names_before: Set[str]) -> float:
            deadline = time.monotonic() + self.timeout_s
            while time.monotonic() < deadline:
                _, members = self.mirror.state()
                fresh = [c for m, (c, _s, _sid) in members.items() if m not in names_before]
                if fresh:
                    return min(fresh) / 1000.0
                time.sleep(0.02)
            return time.time()

        def start_all() -> float:
            spawn(self.size)
            return first_ctime(set())

        results.append(self.event("start", self.size, start_all))
        # idle: the members' own packets per second while nothing happens
        _, members = self.mirror.state()
        time.sleep(2.0)
        before = read_counters(self.cluster.zk_port)
        time.sleep(self.idle_s)
        after = read_counters(self.cluster.zk_port)
        with self.mirror.lock:
            sessions = set(self.mirror.member_sessions)
        self.idle_rps = member_packets(before, after, sessions) / (after.at - before.at)
        self.say(f"  {launcher.kind} N={self.size} idle: {self.idle_rps:.2f} requests/s")

        joiner: List[Member] = []

        def join() -> float:
            _, known = self.mirror.state()
            joiner.extend(spawn(1))
            return first_ctime(set(known))

        results.append(self.event("join", self.size + 1, join))
        time.sleep(1.0)

        def leave() -> float:
            t = time.time()
            member = joiner[0]
            member.process.send_signal(signal.SIGTERM)
            self.members.remove(member)
            return t

        results.append(self.event("leave", self.size, leave))
        try:
            joiner[0].process.wait(20)
        except subprocess.TimeoutExpired:
            processes.kill_all([joiner[0].process])

        def kill() -> float:
            victim = self.members.pop(0)
            t = time.time()
            victim.process.send_signal(signal.SIGKILL)
            victim.process.wait(10)
            return t

        results.append(self.event("kill", self.size - 1, kill, from_departure=True))

        def broker() -> float:
            t = time.time()
            self.cluster.kill_broker(1, wait_unregistered=True)  # its leaderships move after its session expires
            for topic in self.partitions:
                self.cluster.wait_for_leaders(topic)
            return t

        results.append(self.event("broker", self.size - 1, broker))
        self.rss = [r for r in (m.rss_mb() for m in self.members) if r is not None]
        return results

    def stop(self) -> None:
        alive = [m.process for m in getattr(self, "_all", []) if m.alive()]
        processes.terminate_all(alive, 20.0)


# ---------------------------------------------------------------------------- the benchmark

def run_scale(sizes: Sequence[int], kinds: Sequence[str], partitions: int, streams: int, stable_s: float,
              timeout_s: float, idle_s: float, keep: bool, say: Callable[[str], None]) -> Dict[str, Any]:
    directory = Path(os.environ.get("ZKCONSUMER_BENCH_DIR", "")) if os.environ.get("ZKCONSUMER_BENCH_DIR") \
        else Path(__import__("tempfile").mkdtemp(prefix="zkconsumer-rebalance-scale-"))
    directory.mkdir(parents=True, exist_ok=True)
    per_topic = partitions // 2
    output: Dict[str, Any] = {"settings": {"sizes": list(sizes), "kinds": list(kinds), "partitions": 2 * per_topic,
                                           "streams": streams, "backoff_ms": BACKOFF_MS, "max_retries": MAX_RETRIES,
                                           "session_timeout_ms": SESSION_TIMEOUT_MS, "stable_s": stable_s,
                                           "idle_s": idle_s},
                              "runs": []}
    with ProjectCluster(brokers=2, partitions=per_topic) as cluster:
        topics = [cluster.create_topic(f"scale-{name}", partitions=per_topic, replication=2) for name in ("a", "b")]
        parts = {t: per_topic for t in topics}
        for size in sizes:
            for kind in kinds:
                group = f"scale-{kind}-{size}-{uuid.uuid4().hex[:6]}"
                kind_dir = directory / f"{kind}-{size}"
                kind_dir.mkdir(parents=True, exist_ok=True)
                launcher = (ZkconsumerLauncher if kind == "zkconsumer" else KafkaLauncher)(
                    cluster, group, topics, streams, kind_dir)
                zk = cluster.kazoo_client()
                mirror = GroupMirror(zk, group, topics)
                mirror.start()
                run = Run(cluster, launcher, mirror, parts, size, stable_s, timeout_s, idle_s, say)
                say(f"{kind} N={size}: group {group}")
                events: List[EventResult] = []
                try:
                    events = run.run()
                finally:
                    run.stop()
                    mirror.stop()
                    zk.stop()
                    zk.close()
                    if not cluster.is_running(1):
                        cluster.start_broker(1)
                        for t in topics:
                            cluster.wait_for_leaders(t)
                        time.sleep(3.0)  # let the restarted broker settle before the next group
                rss = run.rss
                output["runs"].append({
                    "kind": kind, "size": size, "idle_rps": None if run.idle_rps is None else round(run.idle_rps, 2),
                    "rss_mb_max": round(max(rss), 1) if rss else None,
                    "rss_mb_mean": round(statistics.mean(rss), 1) if rss else None,
                    "events": [e.as_json() for e in events]})
    if not keep:
        shutil.rmtree(directory, ignore_errors=True)
    else:
        output["logs"] = str(directory)
    output["ratios"] = ratios(output["runs"])
    return output


def ratios(runs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """zkconsumer / kafka per size and event, for settle time, requests, ownerless time."""
    by = {(r["kind"], r["size"]): r for r in runs}
    out = []
    for (kind, size), run in sorted(by.items()):
        other = by.get(("kafka", size))
        if kind != "zkconsumer" or other is None:
            continue
        ev_k = {e["event"]: e for e in other["events"]}
        for e in run["events"]:
            k = ev_k.get(e["event"])
            if k is None:
                continue
            out.append({"size": size, "event": e["event"],
                        "settle": _ratio(e["settle_s"], k["settle_s"]),
                        "zk_requests": _ratio(e["zk_requests"], k["zk_requests"]),
                        "max_ownerless": _ratio(e["max_ownerless_s"], k["max_ownerless_s"]),
                        "ownerless_partition_s": _ratio(e["ownerless_partition_s"], k["ownerless_partition_s"])})
        out.append({"size": size, "event": "idle", "idle_rps": _ratio(run["idle_rps"], other["idle_rps"])})
    return out


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None or b is None or b <= 0:
        return None
    return round(a / b, 3)


def format_tables(output: Dict[str, Any]) -> str:
    header = ("N", "event", "kind", "settle s", "failed", "gave up", "max ownerless s", "ownerless p-s",
              "kept ownerless", "moved", "zk requests")
    rows = [header]
    for run in output["runs"]:
        for e in run["events"]:
            def f(v: Any) -> str:
                return "-" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))

            rows.append((str(run["size"]), e["event"], run["kind"], f(e["settle_s"]), str(e["failed_attempts"]),
                         str(e["gave_up"]), f(e["max_ownerless_s"]), f(e["ownerless_partition_s"]),
                         f(e["kept_ownerless_s"]), str(e["moved"]), f(e["zk_requests"])))
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    table = "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
    lines = [table, "", "idle requests/s and memory per member:"]
    for run in output["runs"]:
        lines.append(f"  N={run['size']} {run['kind']}: idle {run['idle_rps']} req/s, RSS max {run['rss_mb_max']} MB, "
                     f"mean {run['rss_mb_mean']} MB")
    lines.append("")
    lines.append("ratios zkconsumer / kafka (same run):")
    for r in output["ratios"]:
        lines.append("  " + ", ".join(f"{k}={v}" for k, v in r.items()))
    return "\n".join(lines)


def main_scale(args: Any) -> int:
    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    sizes = [int(s) for s in args.sizes.split(",") if s]
    kinds = [k for k in args.kinds.split(",") if k]
    for k in kinds:
        if k not in KINDS:
            raise SystemExit(f"unknown kind {k!r}")
    output = run_scale(sizes, kinds, args.partitions or 256, args.streams,
                       args.stable, args.event_timeout, args.idle, args.keep, say)
    print(format_tables(output))
    text = json.dumps(output, sort_keys=True)
    if args.json:
        Path(args.json).write_text(text + "\n")
        print(f"JSON: {args.json}")
    else:
        print(text)
    return 0
