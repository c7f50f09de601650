"""Running many schedules, shrinking a failing one, and printing what replays it.

:func:`shrink` is delta debugging (ddmin) over a schedule's events, then over the
members it starts: a candidate is kept when it still breaks the *same* invariant.
Every candidate is a complete schedule, so the minimal one replays exactly with
:func:`~.world.run` (``scripts/simulate --replay``).
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from .world import Event, Outcome, Schedule, generate, generate_mixed, generate_switch, run

#: One schedule in this many mixes in Kafka 0.8.2's own members (:mod:`.kafka_member`).
MIXED_EVERY = 5


def schedule_for(seed: int, switch: bool = False) -> Schedule:
    """The schedule a search runs for ``seed`` (``switch``: the switch schedule of that seed)."""
    if switch:
        return generate_switch(seed)
    return generate_mixed(seed) if seed % MIXED_EVERY == MIXED_EVERY - 1 else generate(seed)


def shrink(schedule: Schedule, fails: Optional[Callable[[Schedule], bool]] = None, budget: int = 300) -> Schedule:
    """The smallest schedule found (within ``budget`` runs) that still fails as ``schedule`` does."""
    if fails is None:
        first = run(schedule)
        assert first.violation is not None, "shrink() needs a failing schedule"
        name = first.violation.name

        def fails(candidate: Schedule) -> bool:
            outcome = run(candidate)
            return outcome.violation is not None and outcome.violation.name == name

    runs = [0]

    def still_fails(events: List[Event]) -> bool:
        if runs[0] >= budget:
            return False
        runs[0] += 1
        return fails(schedule.replace_events(events))

    events = list(schedule.events)
    n = 2
    while len(events) >= 2:
        chunk = max(1, len(events) // n)
        subsets = [events[i:i + chunk] for i in range(0, len(events), chunk)]
        reduced = False
        for i in range(len(subsets)):
            complement = [e for j, s in enumerate(subsets) if j != i for e in s]
            if still_fails(complement):
                events, n, reduced = complement, max(n - 1, 2), True
                break
        if not reduced:
            if n >= len(events):
                break
            n = min(len(events), n * 2)
    # Then make the remaining faults shorter where they have a duration.
    for i, event in enumerate(list(events)):
        if event[1] in ("cut", "pause", "slow", "lag", "freeze", "isolate", "quorum", "moved") and event[3] > 1.0:
            shorter = events[:i] + [event[:3] + (round(event[3] / 2, 3),) + event[4:]] + events[i + 1:]
            if still_fails(shorter):
                events = shorter
    minimal = schedule.replace_events(events)
    # Then drop the process faults the failure does not need (so the schedule says which it needs).
    for name in ("callback_lag", "preempt"):
        if getattr(minimal, name) and runs[0] < budget:
            runs[0] += 1
            candidate = dataclasses.replace(minimal, **{name: 0.0})
            if fails(candidate):
                minimal = candidate
    return minimal


@dataclass
class Report:
    runs: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # CPU time of the processes that ran them (the machine may be shared)
    failures: List[Tuple[int, str]] = field(default_factory=list)
    by_invariant: Dict[str, int] = field(default_factory=dict)
    steps: int = 0
    handouts: int = 0
    stale_handouts: int = 0
    max_held_over: int = 0
    queued: int = 0
    forced_queued: int = 0
    offset_writes: int = 0
    max_settle_s: float = 0.0
    mixed: int = 0
    switch: int = 0  # switch schedules run
    switches: int = 0  # hand-overs members completed in them
    #: invariants Kafka 0.8.2's own members broke in mixed groups: name -> schedules
    kafka_findings: Dict[str, int] = field(default_factory=dict)

    @property
    def per_second(self) -> float:
        return self.runs / self.seconds if self.seconds else 0.0

    def add(self, seed: int, outcome: Outcome) -> None:
        self.runs += 1
        self.steps += outcome.steps
        self.handouts += outcome.handouts
        self.stale_handouts += outcome.stale_handouts
        self.max_held_over = max(self.max_held_over, outcome.max_held_over)
        self.queued += outcome.queued
        self.forced_queued += outcome.forced_queued
        self.offset_writes += outcome.offset_writes
        self.max_settle_s = max(self.max_settle_s, outcome.settle_s or 0.0)
        self.mixed += bool(outcome.schedule.kafka)
        self.switch += outcome.schedule.switch
        self.switches += outcome.switches
        for name in outcome.kafka_findings:
            self.kafka_findings[name] = self.kafka_findings.get(name, 0) + 1
        if outcome.violation is not None:
            self.failures.append((seed, str(outcome.violation)))
            self.by_invariant[outcome.violation.name] = self.by_invariant.get(outcome.violation.name, 0) + 1

    def merge(self, other: "Report") -> None:
        self.runs += other.runs
        self.cpu_seconds += other.cpu_seconds
        self.steps += other.steps
        self.handouts += other.handouts
        self.stale_handouts += other.stale_handouts
        self.max_held_over = max(self.max_held_over, other.max_held_over)
        self.queued += other.queued
        self.forced_queued += other.forced_queued
        self.offset_writes += other.offset_writes
        self.max_settle_s = max(self.max_settle_s, other.max_settle_s)
        self.failures += other.failures
        self.mixed += other.mixed
        self.switch += other.switch
        self.switches += other.switches
        for k, v in other.kafka_findings.items():
            self.kafka_findings[k] = self.kafka_findings.get(k, 0) + v
        for k, v in other.by_invariant.items():
            self.by_invariant[k] = self.by_invariant.get(k, 0) + v

    def summary(self) -> str:
        cpu = self.runs / self.cpu_seconds if self.cpu_seconds else 0.0
        return (f"{self.runs} schedules in {self.seconds:.1f}s wall ({self.per_second:.1f}/s), "
                f"{self.cpu_seconds:.1f} CPU s ({cpu:.1f} per CPU second): "
                f"{len(self.failures)} failed {self.by_invariant or ''}; {self.steps} events, "
                f"{self.handouts} messages handed out ({self.stale_handouts} after the session was gone, each "
                f"queued before, at most {self.max_held_over} of a partition per loss), {self.queued} chunks "
                f"queued ({self.forced_queued} under a session another client closed, before kazoo said LOST), "
                f"{self.offset_writes} offset writes, slowest settle {self.max_settle_s:.1f}s virtual; "
                f"{self.mixed} mixed with Kafka 0.8.2's members, whose own breaches (schedules): "
                f"{self.kafka_findings or 'none'}"
                + (f"; {self.switch} switch schedules, {self.switches} hand-overs completed" if self.switch else ""))


def run_seeds(seeds: Iterable[int], switch: bool = False) -> Report:
    report = Report()
    started = time.process_time()
    for seed in seeds:
        report.add(seed, run(schedule_for(seed, switch)))
    report.cpu_seconds = time.process_time() - started
    return report


#: Schedules a worker process runs before it is replaced by a fresh one (bounds its memory).
RECYCLE_EVERY = 5_000


def run_many(first: int, count: int, workers: int = 2, chunk: int = 250,
             progress: Optional[Callable[[Report], None]] = None, switch: bool = False) -> Report:
    """Seeds ``first .. first+count-1`` over ``workers`` processes; the merged report.

    ``progress``, if given, is called with the report so far after every finished chunk (its
    ``seconds`` kept current), so a long run says how far it got and what failed as it goes.
    """
    started = time.monotonic()
    chunks = [range(s, min(s + chunk, first + count)) for s in range(first, first + count, chunk)]
    total = Report()

    def merge(part: Report) -> None:
        total.merge(part)
        if progress is not None:
            total.seconds = time.monotonic() - started
            progress(total)
    if workers <= 1 and count <= RECYCLE_EVERY:
        for c in chunks:
            merge(run_seeds(c, switch))
    else:
        # Each worker is replaced after RECYCLE_EVERY schedules: a process running schedules for an
        # hour grew to 7 GB (a run of 90,000 on one worker), and a long search must not eat the machine.
        with multiprocessing.get_context("fork").Pool(max(1, workers), maxtasksperchild=max(1, RECYCLE_EVERY // chunk)) as pool:
            for part in pool.imap_unordered(functools.partial(run_seeds, switch=switch), chunks):
                merge(part)
    total.seconds = time.monotonic() - started
    total.failures.sort()
    return total
