"""Latency through a rebalance: a group of 4 at 10,000 msg/s, a fifth member joins, later leaves.

Per kind (zkconsumer, Kafka's consumer, confluent-kafka; one kind at a time, each on a new
12-partition topic), four members start; after the warm-up and a quiet stretch a fifth joins,
and leaves (a clean shutdown) a stretch later. Every member writes a trace (partition, stamp,
delivered per message). For each event, over the minute around it (30 s either side; with
``--quick`` the stretches are 15 s and so is each side):

* per partition, the longest gap between consecutive deliveries (all members merged); a
  partition *moved* if more than one member delivered it in that minute;
* the p99 latency of the messages stamped in that minute (first delivery of each);
* for reference, the longest gap of any partition in the quiet stretch before the join;
* the *hand-over* (:func:`handover`): from the moved partitions' last delivery by their old
  owner to their first by the new one; how fast the partitions that stayed were delivered
  during it, as a ratio to their own rate over the minute (``stayed x``: 1.0 undisturbed, 0
  stopped), and their longest gap inside it.

Members commit offsets every second (a moved partition resumes where its last owner
committed, as in production), so duplicates after a move are possible; only first
deliveries count.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from benchmarks.report import read_cpu_times, steal_percent
from benchmarks.runner import child_env, log

from .stamps import now_us
from .workers import Launcher, Window, Worker, finish, wait_ready

PARTITIONS = 12
MEMBERS = 4
RATE = 10000
KINDS = ("zkconsumer", "kafka", "confluent")
ZK_COMMIT = {"auto.commit.enable": "true", "auto.commit.interval.ms": "1000", "rebalance.backoff.ms": "2000",
             "zookeeper.session.timeout.ms": "6000"}
#: How long before an event a moved partition's hand-over may begin (microseconds): the leaving
#: member stops reading at its event, a member's own rebalance starts at most this early.
LEAD = 2_000_000
CONFLUENT_COMMIT = {"enable.auto.commit": "true", "auto.commit.interval.ms": "1000"}


def run_rebalance(cluster: Any, launcher: Launcher, args: argparse.Namespace) -> Dict[str, Any]:
    """Every kind in turn; the record saved under ``rebalance`` in the JSON."""
    stretch = 15.0 if args.quick else 30.0
    results = {}
    for kind in [k for k in args.kinds.split(",") if k in KINDS]:
        log(f"rebalance, {kind}: {MEMBERS} members at {RATE} msg/s, a 5th joins after {stretch:.0f} s, "
            f"leaves {stretch:.0f} s later")
        results[kind] = rebalance_phase(cluster, launcher, kind, args.warmup, stretch)
        print(format_rebalance({kind: results[kind]}), flush=True)
    print("\n" + format_rebalance(results))
    return results


def rebalance_phase(cluster: Any, launcher: Launcher, kind: str, warmup: float, stretch: float) -> Dict[str, Any]:
    topic = f"lat-rebalance-{kind}-{launcher.counter}"
    group = f"lat-rebalance-{kind}-{launcher.counter}"
    cluster.create_topic(topic, partitions=PARTITIONS)
    cluster.wait_for_leaders(topic)
    props = CONFLUENT_COMMIT if kind == "confluent" else ZK_COMMIT
    window_file = launcher.directory / f"{topic}.window"
    members = [launcher.start(kind, topic, window_file, "defaults", group, trace=True, props=props)
               for _ in range(MEMBERS)]
    fifth: List[Worker] = []
    try:
        wait_ready(members, 120.0)
        begin = now_us()
        t0 = begin + int(warmup * 1e6)
        join = t0 + int(stretch * 1e6)
        leave = join + int(stretch * 1e6)
        t1 = leave + int(stretch * 1e6)
        Window(t0, t1, t1 + 3_000_000).publish(window_file)
        cpu0 = read_cpu_times()
        producer = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.latency.producer", cluster.bootstrap_servers, topic, str(RATE),
             str((t1 - begin) / 1e6 + 1.0), str(PARTITIONS)], stdout=subprocess.PIPE, text=True, env=child_env())
        time.sleep(max(0.0, (join - now_us()) / 1e6))
        fifth_window = launcher.directory / f"{topic}-fifth.window"
        Window(t0, t1, leave).publish(fifth_window)  # it stops reading, and leaves, at ``leave``
        fifth.append(launcher.start(kind, topic, fifth_window, "defaults", group, trace=True, props=props))
        joined_at = now_us()
        producer.wait(timeout=(t1 - now_us()) / 1e6 + 120)
        cpu1 = read_cpu_times()
        finish(members + fifth, 60.0)
    finally:
        for w in members + fifth:
            if w.process.poll() is None:
                w.process.kill()
                w.process.wait(10)
    steal = steal_percent(cpu0, cpu1)

    traces = [(i, load_trace(w.trace)) for i, w in enumerate(members + fifth) if w.trace is not None]
    record: Dict[str, Any] = {"topic": topic, "partitions": PARTITIONS, "members": MEMBERS, "rate": RATE,
                              "join_started": joined_at, "load": round(os.getloadavg()[0], 2),
                              "steal_pct": None if steal is None else round(steal, 2)}
    first = first_deliveries(traces)
    record["quiet_max_gap_ms"] = quiet_gap(first, t0, join - 5_000_000)
    half = min(30_000_000, int(stretch * 1e6))  # the minute around each event (less with --quick)
    record["window_ms"] = 2 * half // 1000
    record["join"] = event_figures(first, join, half)
    record["leave"] = event_figures(first, leave, half)
    return record


def load_trace(path: Path) -> np.ndarray:
    """A trace file as an (n, 3) int64 array: partition, stamp, delivered (microseconds)."""
    if not path.exists():
        return np.zeros((0, 3), dtype=np.int64)
    return np.fromfile(path, dtype=">i8").astype(np.int64).reshape(-1, 3)


def first_deliveries(traces: Sequence[Tuple[int, np.ndarray]]) -> np.ndarray:
    """(n, 4): partition, stamp, delivered, member; the first delivery of each (partition, stamp)."""
    rows = [np.column_stack([t, np.full(len(t), i, dtype=np.int64)]) for i, t in traces if len(t)]
    if not rows:
        return np.zeros((0, 4), dtype=np.int64)
    allrows = np.concatenate(rows)
    order = np.lexsort((allrows[:, 2], allrows[:, 1], allrows[:, 0]))
    allrows = allrows[order]
    keep = np.ones(len(allrows), dtype=bool)
    keep[1:] = (allrows[1:, 0] != allrows[:-1, 0]) | (allrows[1:, 1] != allrows[:-1, 1])
    return allrows[keep]


def _gaps(rows: np.ndarray, start: int, end: int) -> Dict[int, Tuple[float, int]]:
    """Per partition: (longest gap in ms between consecutive first deliveries in [start, end), members seen)."""
    out = {}
    for p in np.unique(rows[:, 0]):
        mine = rows[(rows[:, 0] == p) & (rows[:, 2] >= start) & (rows[:, 2] < end)]
        times = np.sort(mine[:, 2])
        if len(times) < 2:
            out[int(p)] = ((end - start) / 1000.0, len(np.unique(mine[:, 3])))
            continue
        bounded = np.concatenate([[start], times, [end]])
        out[int(p)] = (float(np.max(np.diff(bounded))) / 1000.0, len(np.unique(mine[:, 3])))
    return out


def _longest_gap_interval(times: np.ndarray, start: int, end: int) -> Tuple[int, int]:
    """The (from, to) of the longest gap between consecutive ``times`` within [start, end]."""
    bounded = np.concatenate([[start], np.sort(times), [end]])
    i = int(np.argmax(np.diff(bounded)))
    return int(bounded[i]), int(bounded[i + 1])


def _member_change(rows: np.ndarray, after: int) -> Optional[Tuple[int, int]]:
    """One partition's first hand-over after ``after``: (last delivery by the old member, first by the new one)."""
    rows = rows[rows[:, 2] >= after]
    rows = rows[np.argsort(rows[:, 2], kind="stable")]
    changes = np.nonzero(rows[1:, 3] != rows[:-1, 3])[0]
    if not len(changes):
        return None
    i = int(changes[0])
    return int(rows[i, 2]), int(rows[i + 1, 2])


def handover(rows: np.ndarray, at: int, half: int) -> Dict[str, Any]:
    """What the partitions that stayed did while the ones that moved were handed over.

    The hand-over runs from the earliest start to the latest end of the moved partitions'
    changes of member after the event (from :data:`LEAD` before it; the minutes around two
    events overlap, so a change before that belongs to the other event): each from its last
    first-delivery by the old member to its first by the new one. Stayed partitions' deliveries inside it, as a rate against
    their own rate over the whole window (1.0: undisturbed; 0: stopped, as a consumer that stops
    every fetcher), and their longest gap inside it.
    """
    start, end = at - half, at + half
    inside = rows[(rows[:, 2] >= start) & (rows[:, 2] < end)]
    search = at - LEAD
    moved, stayed = [], []
    for p in np.unique(inside[:, 0]):
        mine = inside[inside[:, 0] == p]
        (moved if len(np.unique(mine[:, 3])) > 1 else stayed).append(mine)
    if not moved or not stayed:
        return {"handover_ms": None, "stayed_rate_ratio": None, "stayed_max_gap_in_handover_ms": None}
    spans = [span for span in (_member_change(m, search) for m in moved) if span is not None]
    if not spans:
        return {"handover_ms": None, "stayed_rate_ratio": None, "stayed_max_gap_in_handover_ms": None}
    h0, h1 = min(a for a, _ in spans), max(b for _, b in spans)
    in_handover = sum(int(np.count_nonzero((m[:, 2] > h0) & (m[:, 2] < h1))) for m in stayed)
    overall = sum(len(m) for m in stayed) / ((end - start) / 1e6)
    during = in_handover / max((h1 - h0) / 1e6, 1e-6)
    gaps = []
    for m in stayed:
        a, b = _longest_gap_interval(m[(m[:, 2] > h0) & (m[:, 2] < h1)][:, 2], h0, h1)
        gaps.append((b - a) / 1000.0)
    return {"handover_ms": round((h1 - h0) / 1000.0, 1), "stayed_delivered_in_handover": in_handover,
            "stayed_rate_ratio": round(during / overall, 2) if overall else None,
            "stayed_max_gap_in_handover_ms": round(max(gaps), 1)}


def quiet_gap(rows: np.ndarray, start: int, end: int) -> float:
    gaps = _gaps(rows, start, end)
    return round(max(g for g, _ in gaps.values()), 1) if gaps else 0.0


def event_figures(rows: np.ndarray, at: int, half: int) -> Dict[str, Any]:
    """Gaps of partitions that stayed and that moved, and p99 latency, over ``at`` +- ``half`` microseconds."""
    gaps = _gaps(rows, at - half, at + half)
    stayed = [g for g, members in gaps.values() if members == 1]
    moved = [g for g, members in gaps.values() if members > 1]
    stamped = rows[(rows[:, 1] >= at - half) & (rows[:, 1] < at + half)]
    latencies = np.sort(stamped[:, 2] - stamped[:, 1])
    p99 = float(latencies[max(0, -(-99 * len(latencies) // 100) - 1)]) / 1000.0 if len(latencies) else None
    return {"stayed": len(stayed), "moved": len(moved),
            "stayed_max_gap_ms": round(max(stayed), 1) if stayed else None,
            "moved_max_gap_ms": round(max(moved), 1) if moved else None,
            "p99_ms": None if p99 is None else round(p99, 1), "messages": int(len(latencies)),
            **handover(rows, at, half)}


def format_rebalance(results: Dict[str, Dict[str, Any]]) -> str:
    head = (f"{'consumer':<11} {'event':<6} {'stayed':>6} {'gap ms':>8} {'moved':>6} {'gap ms':>8} "
            f"{'p99 ms':>8} {'quiet gap':>9} {'handover':>8} {'stayed x':>8} {'its gap':>8}  load  steal")
    lines = [head, "-" * len(head)]
    for kind, r in results.items():
        for event in ("join", "leave"):
            e = r[event]
            lines.append(f"{kind:<11} {event:<6} {e['stayed']:>6} {_v(e['stayed_max_gap_ms'])} {e['moved']:>6} "
                         f"{_v(e['moved_max_gap_ms'])} {_v(e['p99_ms'])} {r['quiet_max_gap_ms']:>9} "
                         f"{_v(e.get('handover_ms'))} {_v(e.get('stayed_rate_ratio'), 2)} "
                         f"{_v(e.get('stayed_max_gap_in_handover_ms'))}  "
                         f"{r['load']:<5} {r['steal_pct']}")
    return "\n".join(lines)


def _v(value: Any, decimals: int = 1) -> str:
    return f"{value:>8.{decimals}f}" if value is not None else f"{'-':>8}"
