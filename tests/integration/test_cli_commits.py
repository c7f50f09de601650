"""``zkconsumer consume`` commits what reached its output, no more and no less: Ctrl-C and a
closed pipe at random moments, checked against what the reader received.

Every message's value says where it came from (``<partition>:<offset>:`` and padding), so
the test knows, for each partition, which offsets reached it. Each run is a real
``zkconsumer`` process (:func:`cli_process.interruptible_command`: Ctrl-C handled as in a
terminal) of a fresh group reading one topic from the beginning, its stdout a pipe that the
test reads; after it ended, the group's committed offsets are read from ZooKeeper.

The moments are random: the seed of the whole test is printed (``-s`` shows it; a failure
names it too) and ``ZKCONSUMER_CLI_COMMITS_SEED=<seed>`` replays the same runs. Runs go
three at a time against one cluster (module scope): the command's startup dominates.

The payloads are about 1 KB, so a pipe (64 KB) holds some 60 messages and the command
spends most of a run waiting for the reader: the moments that matter (a write waiting for
a full pipe, a message handed out and not yet written) are where a signal or a close lands.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import pytest
from cli_process import cli_env, interruptible_command
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from support import new_topic, unique

from zkconsumer.testing import LocalCluster

pytestmark = pytest.mark.integration

PARTITIONS = 3
PER_PARTITION = 200
TOTAL = PARTITIONS * PER_PARTITION
PAD = b"." * 1000
#: Messages a 64 KB pipe can hold and then some: a reader that closes with more than this left
#: unread makes the command's next write fail (it cannot have written everything ahead of the reader).
PIPE_HOLDS_AT_MOST = 100
RUNS = 50
PARALLEL = 3
SEED_ENV = "ZKCONSUMER_CLI_COMMITS_SEED"


def payload(partition: int, offset: int) -> bytes:
    return f"{partition}:{offset}:".encode() + PAD


@pytest.fixture(scope="module")
def topic(local: LocalCluster) -> str:
    """3 partitions of 200 messages each, message ``o`` of partition ``p`` saying ``p:o:``."""
    name = new_topic(local, "t-commits", PARTITIONS)
    for p in range(PARTITIONS):
        local.produce(name, [payload(p, o) for o in range(PER_PARTITION)], partition=p)
    return name


@pytest.fixture(scope="module")
def seed() -> int:
    value = int(os.environ.get(SEED_ENV) or random.randrange(1 << 32))
    print(f"\n{SEED_ENV}={value}")
    return value


@dataclass
class Run:
    """One command run: what the reader received and what the command said."""

    what: str
    group: str
    data: bytes = b""
    stderr: bytes = b""
    returncode: Optional[int] = None
    received: Dict[int, List[int]] = field(default_factory=dict)

    def parse(self) -> None:
        complete = self.data[:self.data.rfind(b"\n") + 1]  # a line without its newline was not received
        for line in complete.splitlines():
            p, o, _ = line.split(b":", 2)
            self.received.setdefault(int(p), []).append(int(o))

    @property
    def lines(self) -> int:
        return sum(len(v) for v in self.received.values())

    def reported(self) -> Optional[int]:
        """The count of "Processed a total of N messages", if the command got that far."""
        found = re.search(rb"Processed a total of (\d+) messages", self.stderr)
        return int(found.group(1)) if found else None

    def describe(self, committed: Dict[int, Optional[int]]) -> str:
        ends = {p: len(v) for p, v in sorted(self.received.items())}
        return (f"{self.what}: received per partition {ends}, committed {committed}, reported {self.reported()}, "
                f"exit {self.returncode}; stderr: {self.stderr.decode(errors='replace')[-2000:]}")


def start(local: LocalCluster, topic: str, group: str) -> "subprocess.Popen[bytes]":
    argv = ["consume", "--zookeeper", local.zk_connect, "--group", group, "--topic", topic, "--from-beginning",
            "--timeout-ms", "5000"]  # a run the test forgot ends on its own
    return subprocess.Popen(interruptible_command(*argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=cli_env())


def read_lines(fd: int, buffer: bytearray, lines: int) -> bool:
    """Read from ``fd`` until ``buffer`` holds ``lines`` complete lines; ``False`` at end of file first."""
    while buffer.count(b"\n") < lines:
        chunk = os.read(fd, 65536)
        if not chunk:
            return False
        buffer += chunk
    return True


def read_to_end(fd: int, buffer: bytearray) -> None:
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        buffer += chunk


def finish(proc: "subprocess.Popen[bytes]", run: Run) -> Run:
    assert proc.stderr is not None
    try:
        run.stderr = proc.stderr.read()
        run.returncode = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    run.parse()
    return run


def ctrl_c_run(local: LocalCluster, topic: str, rng: random.Random) -> Run:
    """Ctrl-C after a random number of lines read (while the reader keeps reading, or once it paused
    long enough for the pipe to fill), or after a random delay; then read everything to the end."""
    mode = rng.choice(["reading", "pipe full", "delay"])
    lines, delay = rng.randrange(TOTAL), rng.uniform(0.3, 3.0)
    run = Run(f"Ctrl-C ({mode}: after {lines if mode != 'delay' else f'{delay:.2f}s'})", unique("commits-int"))
    proc = start(local, topic, run.group)
    assert proc.stdout is not None
    fd, buffer = proc.stdout.fileno(), bytearray()
    timer: Optional[threading.Timer] = None
    try:
        if mode == "delay":
            timer = threading.Timer(delay, lambda: proc.poll() is None and proc.send_signal(signal.SIGINT))
            timer.start()
        elif read_lines(fd, buffer, lines):
            if mode == "pipe full":
                time.sleep(0.2)  # the command fills the pipe and waits for room
            proc.send_signal(signal.SIGINT)
        read_to_end(fd, buffer)
    finally:
        if timer is not None:
            timer.cancel()
        run.data = bytes(buffer)
    return finish(proc, run)


def closed_pipe_run(local: LocalCluster, topic: str, rng: random.Random) -> Run:
    """The reader closes the pipe after a random number of lines (``head -n N``), with more than a
    pipeful unread so the command's next write fails."""
    lines = rng.randrange(TOTAL - PIPE_HOLDS_AT_MOST)
    run = Run(f"closed pipe after {lines} lines", unique("commits-pipe"))
    proc = start(local, topic, run.group)
    assert proc.stdout is not None
    buffer = bytearray()
    try:
        read_lines(proc.stdout.fileno(), buffer, lines)
    finally:
        proc.stdout.close()
        run.data = bytes(buffer)
    return finish(proc, run)


def committed_offsets(zk: KazooClient, group: str, topic: str) -> Dict[int, Optional[int]]:
    found: Dict[int, Optional[int]] = {}
    for p in range(PARTITIONS):
        try:
            found[p] = int(zk.get(f"/consumers/{group}/offsets/{topic}/{p}")[0])
        except NoNodeError:
            found[p] = None
    return found


def contiguous(run: Run) -> None:
    for p, offsets in run.received.items():
        assert offsets == list(range(len(offsets))), f"{run.what}: partition {p} received out of order: {offsets}"


def runs(seed: int, make: str, local: LocalCluster, topic: str) -> List[Tuple[int, Run]]:
    """``RUNS`` runs of ``make`` (``ctrl_c_run`` or ``closed_pipe_run``), each with its own seed."""
    fn = ctrl_c_run if make == "ctrl_c" else closed_pipe_run
    seeds = [random.Random(seed).randrange(1 << 32) + i for i in range(RUNS)]
    with ThreadPoolExecutor(PARALLEL) as pool:
        results = list(pool.map(lambda s: fn(local, topic, random.Random(s)), seeds))
    return list(zip(seeds, results))


def test_ctrl_c_at_random_moments_commits_exactly_what_reached_the_reader(
        local: LocalCluster, local_zk: KazooClient, topic: str, seed: int) -> None:
    """After Ctrl-C the reader read everything the command wrote (to the end of the pipe), so for
    every partition the committed offset equals the end of what was received: nothing committed
    that was not received (that would be lost), nothing received beyond the commit (consumed
    again). A line cut short (no newline) counts as not received. The count the command
    reports is the number of lines received."""
    failures = []
    for run_seed, run in runs(seed, "ctrl_c", local, topic):
        contiguous(run)
        committed = committed_offsets(local_zk, run.group, topic)
        ends = {p: len(run.received.get(p, [])) for p in range(PARTITIONS)}
        as_committed = {p: committed[p] or 0 for p in range(PARTITIONS)}  # no node: nothing consumed
        reported = run.reported()
        if as_committed != ends or (reported if reported is not None else 0) != run.lines:
            failures.append(f"seed {run_seed}: {run.describe(committed)}")
    assert not failures, f"{SEED_ENV}={seed}: {len(failures)} of {RUNS} runs:\n" + "\n".join(failures)


def test_a_closed_pipe_at_random_moments_commits_exactly_what_was_written(
        local: LocalCluster, local_zk: KazooClient, topic: str, seed: int) -> None:
    """The reader reads some lines and closes the pipe, as ``head -n N`` does; the command's next
    write fails and it exits.

    Observable here: what the reader read is a prefix of what the command wrote, and the
    command's count of messages written. Not observable: which of the lines left in the pipe
    buffer when it was closed the command had written completely (the kernel discards them);
    the command counts those as written (its write returned), and rightly so: it cannot know
    that nobody will read them. So the promise checked is: the committed offsets add up to
    exactly the reported count (the message whose write failed is neither counted nor
    committed), each partition's commit covers what the reader received, and the count
    covers at least the lines read."""
    failures = []
    for run_seed, run in runs(seed + 1, "closed_pipe", local, topic):
        contiguous(run)
        committed = committed_offsets(local_zk, run.group, topic)
        as_committed = {p: committed[p] or 0 for p in range(PARTITIONS)}
        reported = run.reported()
        ok = (reported is not None and sum(as_committed.values()) == reported and reported >= run.lines
              and all(len(run.received.get(p, [])) <= as_committed[p] for p in range(PARTITIONS)))
        if not ok:
            failures.append(f"seed {run_seed}: {run.describe(committed)}")
    assert not failures, f"{SEED_ENV}={seed}: {len(failures)} of {RUNS} runs:\n" + "\n".join(failures)
