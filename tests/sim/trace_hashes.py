"""One sha256 of the full trace per schedule: proof that a refactoring changed no request.

A trace line is every ZooKeeper request a client makes (with its session, outcome and virtual
time), every connection loss, expiry and schedule event. Two checkouts whose hash files are
equal made the very same requests at the very same virtual times over those schedules.

Run from ``tests/``::

    PYTHONHASHSEED=0 ../.venv/bin/python -m sim.trace_hashes --seeds 0-999 --out before.txt
    PYTHONHASHSEED=0 ../.venv/bin/python -m sim.trace_hashes --seeds 0-999 --out after.txt
    diff before.txt after.txt

Schedules: ``seed N`` for each seed of ``--seeds`` as a search plays it (one in five mixes in
Kafka 0.8.2's own members: :func:`~.search.schedule_for`), ``mixed N`` for each seed of
``--mixed`` (:func:`~.world.generate_mixed`), the seeds of ``test_simulation``'s ``FOUND_BUGS``
and ``MODEL_FIXES`` (``fixed N``), and every shrunk schedule under ``schedules/`` (``file NAME``).
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import sys
from pathlib import Path
from typing import List, Tuple

#: The checkout this file is in: its zkconsumer is the one hashed (from ``tests/``, ``import
#: zkconsumer`` would otherwise find whatever the virtualenv installed, maybe another checkout's).
CHECKOUT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(CHECKOUT))

import zkconsumer  # noqa: E402

from .search import schedule_for  # noqa: E402
from .world import Schedule, generate, generate_mixed, run  # noqa: E402

SCHEDULES_DIR = Path(__file__).parent / "schedules"
#: test_simulation's FOUND_BUGS + MODEL_FIXES (repeated: importing the test module needs pytest).
FIXED_SEEDS = (105, 201810, 2235, 1079, 2039, 102503)


def _seeds(spec: str) -> List[int]:
    out: List[int] = []
    for part in filter(None, spec.split(",")):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _schedule(key: str) -> Schedule:
    kind, _, arg = key.partition(" ")
    if kind == "seed":
        return schedule_for(int(arg))
    if kind == "mixed":
        return generate_mixed(int(arg))
    if kind == "fixed":
        return generate(int(arg))
    return Schedule.from_json((SCHEDULES_DIR / arg).read_text())


def digest(key: str) -> Tuple[str, str]:
    """``(key, sha256 of the trace of the schedule named key, with its outcome)``."""
    outcome = run(_schedule(key), keep_trace=True)
    text = "\n".join(outcome.trace) + f"\noutcome: {outcome.violation}"
    return key, hashlib.sha256(text.encode()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.trace_hashes", description=__doc__)
    parser.add_argument("--seeds", default="0-999", help="seeds as a search plays them, e.g. 0-999,2000-2099")
    parser.add_argument("--mixed", default="500000-500079", help="seeds of mixed groups (generate_mixed)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if Path(zkconsumer.__file__).resolve().parents[1] != CHECKOUT:
        sys.exit(f"zkconsumer was imported from {zkconsumer.__file__}, not from {CHECKOUT}: import sim.trace_hashes first")
    keys = ([f"seed {s}" for s in _seeds(args.seeds)] + [f"mixed {s}" for s in _seeds(args.mixed)]
            + [f"fixed {s}" for s in FIXED_SEEDS] + [f"file {p.name}" for p in sorted(SCHEDULES_DIR.glob("*.json"))])
    if args.workers > 1:
        with multiprocessing.get_context("fork").Pool(args.workers) as pool:
            rows = pool.map(digest, keys, chunksize=8)
    else:
        rows = [digest(k) for k in keys]
    Path(args.out).write_text("".join(f"{k}\t{h}\n" for k, h in rows))
    print(f"{len(rows)} schedules of {Path(zkconsumer.__file__).parent} hashed into {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
