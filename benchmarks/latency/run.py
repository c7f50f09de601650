"""The latency benchmark's driver: phases per rate and setting, the table, the JSON file.

A phase is a new 6-partition topic, its workers (:mod:`.workers`) reading it, and the stamped
producer (:mod:`.producer`) for warm-up + window + 1 s. Workers keep the messages stamped
inside the window; load and steal are read over the phase. Which workers share a phase is the
mode (:func:`schedule`):

* ``isolated`` (the default): for each rate and setting, one phase per consumer kind, with only
  the floor beside it; the kinds' order is rotated from one rate and setting to the next, so no
  kind always runs first (the broker least warm) or last. On a 2-core machine, every kind at
  once saturates it by itself (load 4-9, the floor's own p99 about 1 s at 1,000 msg/s): the
  figures then measure the machine, not the consumers.
* ``together``: every kind reading the same topic at once, one phase per rate and setting
  (the same messages for all; honest only with a core or so to spare per process).

``--zk-prop name=value`` (repeatable) gives the zkconsumer kinds (iterator and batch) more
consumer properties, over their setting's; they are recorded in the JSON (``zk_props``) and
printed above the table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from benchmarks.report import read_cpu_times, rotate, steal_percent
from benchmarks.runner import ROOT, child_env, log

from .stamps import now_us
from .workers import KINDS, PARTITIONS, Launcher, Window, finish, wait_ready

#: 0 is the idle phase: the producer sends nothing; each consumer's CPU over the window is its idle cost.
RATES = (0, 1000, 10000, 100000)
SETTINGS = ("defaults", "tuned")
MODES = ("isolated", "together")
#: The kinds ``--zk-prop`` applies to.
ZK_KINDS = ("zkconsumer", "zkconsumer-batch")
READY_TIMEOUT = 90.0
DRAIN_S = 3.0
#: Starting the workers, their joins, the drain: what a phase takes beyond warm-up + window (about).
PHASE_OVERHEAD_S = 8.0


def schedule(rates: Sequence[int], settings: Sequence[str], kinds: Sequence[str],
             mode: str) -> List[Tuple[int, str, List[str]]]:
    """The phases in run order: ``(rate, setting, the kinds reading that phase's topic)``.

    ``together``: one phase per rate and setting with ``kinds`` as given. ``isolated``: one
    phase per rate, setting and kind other than the floor, each with the floor beside it; the
    kinds' order rotated by one from one rate and setting to the next.
    """
    plan: List[Tuple[int, str, List[str]]] = []
    consumers = [k for k in kinds if k != "floor"]
    for i, (rate, setting) in enumerate((r, s) for r in rates for s in settings):
        if mode == "together":
            plan.append((rate, setting, list(kinds)))
        elif not consumers:
            plan.append((rate, setting, ["floor"]))
        else:
            plan.extend((rate, setting, ["floor", kind]) for kind in rotate(consumers, i))
    return plan


def phase(cluster: Any, launcher: Launcher, rate: int, setting: str, kinds: Sequence[str], warmup: float,
          seconds: float, zk_props: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """One rate and setting: ``kinds`` reading the same new topic at once; the phase's record.

    ``zk_props``: more consumer properties for the zkconsumer kinds only (not the floor or the peers).
    """
    topic = f"lat-{rate}-{setting}-{kinds[-1] if len(kinds) <= 2 else 'all'}-{launcher.counter}"
    cluster.create_topic(topic, partitions=PARTITIONS)
    cluster.wait_for_leaders(topic)
    window_file = launcher.directory / f"{topic}.window"
    workers = [launcher.start(kind, topic, window_file, setting, props=props_for(kind, zk_props)) for kind in kinds]
    try:
        wait_ready(workers, READY_TIMEOUT)
        # The producer starts once all are reading, and runs to 1 s past the window.
        begin = now_us()
        window = Window(begin + int(warmup * 1e6), begin + int((warmup + seconds) * 1e6),
                        begin + int((warmup + seconds + DRAIN_S) * 1e6))
        window.publish(window_file)
        load0, cpu0 = os.getloadavg()[0], read_cpu_times()
        producer = subprocess.run(
            [sys.executable, "-m", "benchmarks.latency.producer", cluster.bootstrap_servers, topic, str(rate),
             str(warmup + seconds + 1.0), str(PARTITIONS)],
            capture_output=True, text=True, env=child_env(), timeout=warmup + seconds + 120)
        if producer.returncode != 0:
            raise RuntimeError(f"the producer exited {producer.returncode}: {producer.stderr[-2000:]}")
        load1, cpu1 = os.getloadavg()[0], read_cpu_times()
        results = finish(workers, DRAIN_S + 60)
    finally:
        for w in workers:
            if w.process.poll() is None:
                w.process.kill()
                w.process.wait(10)
    produced = json.loads(producer.stdout.strip().splitlines()[-1])
    steal = steal_percent(cpu0, cpu1)
    return {"rate": rate, "setting": setting, "kinds": list(kinds), "topic": topic, "producer": produced,
            "seconds": seconds,
            "expected": int(rate * seconds), "load": [round(load0, 2), round(load1, 2)],
            "steal_pct": None if steal is None else round(steal, 2), "results": results}


def format_table(phases: Sequence[Dict[str, Any]]) -> str:
    """One row per phase and kind: p50, p99, p99.9, max (ms), p99 minus its phase's floor's, CPU s per million.

    ``#`` is the phase's place in the run; each phase's own floor row comes first, and carries
    the phase's producer's acknowledgement p99 (``ack-p99``, ms; blank in older results). At rate 0
    (the idle phase: no message sent) the CPU column is the share of one core over the window (``%``).
    """
    head = (f"{'#':>3} {'rate':>7} {'setting':<9} {'consumer':<17} {'count':>8} {'p50':>8} {'p99':>8} "
            f"{'p99.9':>8} {'max':>8} {'p99-floor':>9} {'CPU s/M':>8}  load   steal  ack-p99")
    lines = [head, "-" * len(head)]
    for ph in phases:
        floor = next((r for r in ph["results"] if r["kind"] == "floor"), None)
        for r in ph["results"]:
            over = (r["p99_ms"] - floor["p99_ms"]) if floor and r["p99_ms"] is not None and floor["p99_ms"] else None
            lines.append(
                f"{ph.get('position', ''):>3} {ph['rate']:>7} {ph['setting']:<9} {r['kind']:<17} {r['count']:>8} "
                f"{_ms(r['p50_ms'])} "
                f"{_ms(r['p99_ms'])} {_ms(r['p999_ms'])} {_ms(r['max_ms'])} {_ms(over, 9)} "
                f"{_cpu(ph, r)}  {ph['load'][1]:<5} {ph['steal_pct']!s:<6} {_ack(ph, r['kind'])}")
    return "\n".join(lines)


def in_table_order(phases: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """``phases`` by rate and setting as run, and within each by kind in :data:`KINDS` order (not run order)."""
    def key(ph: Dict[str, Any]) -> Tuple[int, int]:
        first = next(i for i, p in enumerate(phases) if (p["rate"], p["setting"]) == (ph["rate"], ph["setting"]))
        return first, max(KINDS.index(k) for k in ph.get("kinds", ["floor"]))

    return sorted(phases, key=key)


def props_for(kind: str, zk_props: Optional[Dict[str, str]]) -> Optional[Dict[str, str]]:
    """The extra properties a worker of ``kind`` gets: ``zk_props`` for the zkconsumer kinds, none for the others."""
    return dict(zk_props) if zk_props and kind in ZK_KINDS else None


def props_line(zk_props: Dict[str, str]) -> str:
    """The line printed above the table naming the zkconsumer kinds' extra properties ('' without any)."""
    if not zk_props:
        return ""
    return "zkconsumer kinds with: " + ", ".join(f"{k}={v}" for k, v in zk_props.items())


def parse_props(items: Sequence[str]) -> Dict[str, str]:
    """``name=value`` strings as a dict, in order (a later name replaces an earlier one).

    ValueError for an item without ``=`` or with an empty name.
    """
    props: Dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"not name=value: {item!r}")
        props[name.strip()] = value
    return props


def _ack(phase: Dict[str, Any], kind: str) -> str:
    """The producer's acknowledgement p99 (ms), on the floor's row of its phase only."""
    ack = phase.get("producer", {}).get("ack_p99_ms")
    return f"{ack:.1f}" if kind == "floor" and ack is not None else ""


def _cpu(phase: Dict[str, Any], result: Dict[str, Any]) -> str:
    """CPU seconds per million messages; at rate 0, the window's CPU as a percentage of one core."""
    if phase["rate"] == 0 and result.get("cpu_s") is not None and phase.get("seconds"):
        return f"{100.0 * result['cpu_s'] / phase['seconds']:>7.2f}%"
    return _ms(result.get("cpu_s_per_m"))


def _ms(value: Optional[float], width: int = 8) -> str:
    return f"{value:>{width}.1f}" if value is not None else f"{'-':>{width}}"


def save(out: Path, record: Dict[str, Any]) -> None:
    """Write the results so far (after every phase: a later failure keeps what was measured)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")


def machine() -> Dict[str, Any]:
    return {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "kernel": platform.release()}


def commit() -> str:
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def parse(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/bench-latency", description=__doc__)
    parser.add_argument("--rates", default=",".join(map(str, RATES)))
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="the consumers (isolated mode always adds the floor to each phase)")
    parser.add_argument("--mode", choices=MODES, default="isolated",
                        help="isolated: a phase per kind, only the floor beside it (default); "
                             "together: every kind on one topic at once")
    parser.add_argument("--seconds", type=float, default=60.0, help="measured window per phase")
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--quick", action="store_true", help="10 s windows after a 5 s warm-up")
    parser.add_argument("--rebalance", action="store_true", help="the rebalance run (benchmarks.latency.rebalance)")
    parser.add_argument("--json", default="", help="where to save results (default benchmarks/results/latency-*.json)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (worker logs, traces)")
    parser.add_argument("--zk-prop", action="append", default=[], metavar="NAME=VALUE",
                        help="a consumer property for the zkconsumer kinds (repeatable), e.g. fetcher.connections=1")
    args = parser.parse_args(argv)
    try:
        args.zk_props = parse_props(args.zk_prop)
    except ValueError as exc:
        parser.error(f"--zk-prop: {exc}")
    if args.rebalance and args.zk_props:
        parser.error("--zk-prop applies to the rate phases, not to --rebalance")
    if args.quick:
        args.seconds, args.warmup = 10.0, 5.0
    unknown = set(args.kinds.split(",")) - set(KINDS)
    if unknown:
        parser.error(f"unknown kinds {sorted(unknown)}; known: {','.join(KINDS)}")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    from benchmarks.tools import KAFKA_SERVER_HEAP, KAFKA_SERVER_JVM
    from harness.cluster import ProjectCluster

    args = parse(argv)
    directory = Path(tempfile.mkdtemp(prefix="zkconsumer-latency-"))
    started = datetime.datetime.now(datetime.timezone.utc)
    record: Dict[str, Any] = {"command": " ".join(["scripts/bench-latency", *(argv if argv is not None else sys.argv[1:])]),
                              "commit": commit(), "date": started.isoformat(timespec="seconds"),
                              "machine": machine(), "seconds": args.seconds, "warmup": args.warmup,
                              "mode": "rebalance" if args.rebalance else args.mode,
                              "partitions": PARTITIONS, "value_bytes": 100, "zk_props": args.zk_props}
    out = Path(args.json) if args.json else ROOT / "benchmarks" / "results" / (
        f"latency-{'rebalance-' if args.rebalance else ''}{started.strftime('%Y%m%dT%H%M%SZ')}.json")
    with ProjectCluster(brokers=1, partitions=PARTITIONS, heap=KAFKA_SERVER_HEAP,
                        broker_jvm_options=KAFKA_SERVER_JVM) as cluster:
        launcher = Launcher(cluster, directory)
        # A new broker JVM answers slowly until its JIT has compiled the produce and fetch paths
        # (a first phase's floor p99 34 ms, the next one's 6 ms): a discarded phase first.
        log("broker warm-up (discarded): 10,000 msg/s, the floor only")
        record["broker_warmup"] = phase(cluster, launcher, 10000, "defaults", ["floor"], 5.0,
                                        5.0 if args.quick else 20.0)
        if args.rebalance:
            from .rebalance import run_rebalance

            record["rebalance"] = run_rebalance(cluster, launcher, args)
        else:
            phases: List[Dict[str, Any]] = []
            record["phases"] = phases
            plan = schedule([int(r) for r in args.rates.split(",")], args.settings.split(","),
                            args.kinds.split(","), args.mode)
            if args.zk_props:
                log(props_line(args.zk_props))
            log(f"{args.mode}: {len(plan)} phases of {args.warmup:.0f} s warm-up + {args.seconds:.0f} s, "
                f"about {max(1, round(len(plan) * (args.warmup + args.seconds + PHASE_OVERHEAD_S) / 60))} min")
            for position, (rate, setting, kinds) in enumerate(plan, 1):
                log(f"phase {position}/{len(plan)}: rate {rate} msg/s, {setting}, {'+'.join(kinds)}")
                try:
                    phases.append({"position": position,
                                   **phase(cluster, launcher, rate, setting, kinds, args.warmup, args.seconds,
                                           args.zk_props)})
                except (RuntimeError, subprocess.SubprocessError, OSError, ValueError) as exc:
                    log(f"phase {position} failed: {exc}")  # recorded; the other phases still run
                    record.setdefault("failed", []).append({"position": position, "rate": rate, "setting": setting,
                                                            "kinds": kinds, "error": str(exc)})
                    continue
                print(format_table(phases[-1:]), flush=True)
                save(out, record)
            print("\n" + "\n".join(filter(None, [props_line(args.zk_props), format_table(in_table_order(phases))])))
    save(out, record)
    log(f"saved {out}; work directory {directory}{'' if args.keep else ' (removed)'}")
    if not args.keep:
        import shutil

        shutil.rmtree(directory, ignore_errors=True)
    return 0
