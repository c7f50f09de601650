"""``python -m benchmarks.chaos`` (``scripts/chaos``): both sides, the table and a final JSON line."""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Optional, Sequence

from benchmarks.chaos.report import format_table, verdict
from benchmarks.chaos.run import run_chaos
from benchmarks.chaos.settings import KINDS, SCHEDULES, ChaosError, ChaosSettings
from zkconsumer.testing.errors import LocalClusterError


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
    parser.add_argument("--keep", action="store_true",
                        help="keep member outputs and logs (kept anyway on failure) and the clusters' logs")
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
