"""``python -m sim`` (run from ``tests/``; ``scripts/simulate`` does): search, replay, shrink."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional

from .search import Report, run_many, schedule_for, shrink
from .world import Schedule, run


def _load_average() -> str:
    try:
        return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()
    except OSError:
        return "?"


def _steal() -> int:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu "):
            return int(line.split()[8])
    return 0


def _play(schedule: Schedule) -> int:
    outcome = run(schedule, keep_trace=True)
    print(schedule.describe())
    print("\n".join(outcome.trace))
    print(f"outcome: {outcome.violation or 'all invariants held'}; {outcome.steps} events, "
          f"{outcome.virtual_s:.1f}s virtual, settled {outcome.settle_s}s after the faults stopped")
    return 0 if outcome.ok else 1


def _progress(every: int) -> Optional[Callable[[Report], None]]:
    """A ``run_many`` progress callback printing a line every ``every`` schedules and each new failure."""
    if every <= 0:
        return None
    state = {"next": every, "failures": 0}

    def show(report: Report) -> None:
        for seed, violation in report.failures[state["failures"]:]:
            print(f"  failed seed {seed}: {violation}", flush=True)
        state["failures"] = len(report.failures)
        if report.runs >= state["next"]:
            state["next"] = (report.runs // every + 1) * every
            print(f"  {report.runs} schedules, {report.seconds:.0f}s, {report.runs / report.seconds:.1f}/s, "
                  f"{len(report.failures)} failed", flush=True)
    return show


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/simulate", description=__doc__)
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--replay")
    parser.add_argument("--no-shrink", action="store_true")
    parser.add_argument("--switch", action="store_true",
                        help="switch schedules (generate_switch): the group moves between ZooKeeper and coordinator membership")
    parser.add_argument("--progress", type=int, default=10_000, metavar="N",
                        help="print a line every N schedules, and each failure as it is found (0: only the summary)")
    args = parser.parse_args()
    if args.replay:
        return _play(Schedule.from_json(Path(args.replay).read_text()))
    if args.seed is not None:
        return _play(schedule_for(args.seed, args.switch))
    steal0 = _steal()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "zkconsumer", "tests/sim"], capture_output=True,
                           text=True).stdout.strip()
    print(f"code: {head}{' with uncommitted changes' if dirty else ''}; load average before: {_load_average()}",
          flush=True)
    report = run_many(args.first, args.schedules, workers=args.workers, progress=_progress(args.progress),
                      switch=args.switch)
    print(report.summary())
    print(f"load average after: {_load_average()}; steal: {_steal() - steal0} ticks of /proc/stat during the run")
    for seed, violation in report.failures[:20]:
        print(f"FAILED seed {seed}: {violation}")
    if report.failures and not args.no_shrink:
        seed = report.failures[0][0]
        minimal = shrink(schedule_for(seed, args.switch))
        out = Path(tempfile.gettempdir()) / "zkconsumer-sim"
        out.mkdir(exist_ok=True)
        saved = out / f"seed-{seed}.json"
        saved.write_text(minimal.to_json() + "\n")
        print(f"minimal schedule of seed {seed} (replay: scripts/simulate --replay {saved}):")
        print(minimal.describe())
        print(minimal.to_json())
        print(f"  -> {run(minimal).violation}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
