"""The latency benchmark's driver: phases per rate and setting, the table, the JSON file.

For each rate and each setting (defaults, tuned) a new 6-partition topic gets one worker of
every kind (:mod:`.workers`) reading it at once, then the stamped producer
(:mod:`.producer`) for warm-up + window + 1 s. Workers keep the messages stamped inside the
window; load and steal are read over the phase.
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
from typing import Any, Dict, List, Optional, Sequence

from benchmarks.report import read_cpu_times, steal_percent
from benchmarks.runner import ROOT, child_env, log

from .stamps import now_us
from .workers import KINDS, PARTITIONS, Launcher, Window, finish, wait_ready

RATES = (1000, 10000, 100000)
SETTINGS = ("defaults", "tuned")
READY_TIMEOUT = 90.0
DRAIN_S = 3.0


def phase(cluster: Any, launcher: Launcher, rate: int, setting: str, kinds: Sequence[str], warmup: float,
          seconds: float) -> Dict[str, Any]:
    """One rate and setting: every kind reading the same new topic at once; the phase's record."""
    topic = f"lat-{rate}-{setting}-{launcher.counter}"
    cluster.create_topic(topic, partitions=PARTITIONS)
    cluster.wait_for_leaders(topic)
    window_file = launcher.directory / f"{topic}.window"
    workers = [launcher.start(kind, topic, window_file, setting) for kind in kinds]
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
            capture_output=True, text=True, env=child_env(), timeout=warmup + seconds + 120, check=True)
        load1, cpu1 = os.getloadavg()[0], read_cpu_times()
        results = finish(workers, DRAIN_S + 60)
    finally:
        for w in workers:
            if w.process.poll() is None:
                w.process.kill()
                w.process.wait(10)
    produced = json.loads(producer.stdout.strip().splitlines()[-1])
    steal = steal_percent(cpu0, cpu1)
    return {"rate": rate, "setting": setting, "topic": topic, "producer": produced,
            "expected": int(rate * seconds), "load": [round(load0, 2), round(load1, 2)],
            "steal_pct": None if steal is None else round(steal, 2), "results": results}


def format_table(phases: Sequence[Dict[str, Any]]) -> str:
    """One row per rate, setting and kind: p50, p99, p99.9, max (ms), p99 minus the floor's, CPU s per million."""
    head = (f"{'rate':>7} {'setting':<9} {'consumer':<17} {'count':>8} {'p50':>8} {'p99':>8} {'p99.9':>8} "
            f"{'max':>8} {'p99-floor':>9} {'CPU s/M':>8}  load   steal")
    lines = [head, "-" * len(head)]
    for ph in phases:
        floor = next((r for r in ph["results"] if r["kind"] == "floor"), None)
        for r in ph["results"]:
            over = (r["p99_ms"] - floor["p99_ms"]) if floor and r["p99_ms"] is not None and floor["p99_ms"] else None
            lines.append(
                f"{ph['rate']:>7} {ph['setting']:<9} {r['kind']:<17} {r['count']:>8} {_ms(r['p50_ms'])} "
                f"{_ms(r['p99_ms'])} {_ms(r['p999_ms'])} {_ms(r['max_ms'])} {_ms(over, 9)} "
                f"{_ms(r['cpu_s_per_m'])}  {ph['load'][1]:<5} {ph['steal_pct']}")
    return "\n".join(lines)


def _ms(value: Optional[float], width: int = 8) -> str:
    return f"{value:>{width}.1f}" if value is not None else f"{'-':>{width}}"


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
    parser = argparse.ArgumentParser(prog="scripts/bench_latency", description=__doc__)
    parser.add_argument("--rates", default=",".join(map(str, RATES)))
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--seconds", type=float, default=60.0, help="measured window per phase")
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--quick", action="store_true", help="10 s windows after a 5 s warm-up")
    parser.add_argument("--rebalance", action="store_true", help="the rebalance run (benchmarks.latency.rebalance)")
    parser.add_argument("--json", default="", help="where to save results (default benchmarks/results/latency-*.json)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (worker logs, traces)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.warmup = 10.0, 5.0
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    from benchmarks.cluster import ProjectCluster
    from benchmarks.tools import KAFKA_SERVER_HEAP, KAFKA_SERVER_JVM

    args = parse(argv)
    directory = Path(tempfile.mkdtemp(prefix="zkconsumer-latency-"))
    started = datetime.datetime.now(datetime.timezone.utc)
    record: Dict[str, Any] = {"command": " ".join(["scripts/bench_latency", *(argv if argv is not None else sys.argv[1:])]),
                              "commit": commit(), "date": started.isoformat(timespec="seconds"),
                              "machine": machine(), "seconds": args.seconds, "warmup": args.warmup,
                              "partitions": PARTITIONS, "value_bytes": 100}
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
            for rate in (int(r) for r in args.rates.split(",")):
                for setting in args.settings.split(","):
                    log(f"rate {rate} msg/s, {setting}: {args.warmup:.0f} s warm-up + {args.seconds:.0f} s")
                    phases.append(phase(cluster, launcher, rate, setting, args.kinds.split(","), args.warmup,
                                        args.seconds))
                    print(format_table(phases[-1:]), flush=True)
            record["phases"] = phases
            print("\n" + format_table(phases))
    out = Path(args.json) if args.json else ROOT / "benchmarks" / "results" / (
        f"latency-{'rebalance-' if args.rebalance else ''}{started.strftime('%Y%m%dT%H%M%SZ')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    log(f"saved {out}; work directory {directory}{'' if args.keep else ' (removed)'}")
    if not args.keep:
        import shutil

        shutil.rmtree(directory, ignore_errors=True)
    return 0
