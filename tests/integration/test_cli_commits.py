"""``zkconsumer consume`` commits what reached its output, no more and no less: Ctrl-C and a
closed pipe at random moments, checked against what the reader received.

Every message's value says where it came from (``<partition>:<offset>:`` and padding), so
the test knows, for each partition, which offsets reached it. Each run is a real
``zkconsumer`` process (:func:`support.cli_process.interruptible_command`: Ctrl-C handled as in a
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
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from support.cli_process import cli_env, interruptible_command
from support.common import new_topic, unique

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
KILLED_RUNS = 20
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


def start(local: LocalCluster, topic: str, group: str, *extra: str) -> "subprocess.Popen[bytes]":
    argv = ["consume", "--zookeeper", local.zk_connect, "--group", group, "--topic", topic, "--from-beginning",
            "--timeout-ms", "5000", *extra]  # a run the test forgot ends on its own
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
    often = rng.random() < 0.5  # commits while running too, not only at exit
    run = Run(f"Ctrl-C ({mode}: after {lines if mode != 'delay' else f'{delay:.2f}s'}"
              f"{', commits every 50 ms' if often else ''})", unique("commits-int"))
    proc = start(local, topic, run.group, *(["--property", "auto.commit.interval.ms=50"] if often else []))
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


def killed_run(local: LocalCluster, topic: str, rng: random.Random) -> Run:
    """SIGKILL (no final commit) after a random number of lines read, the reader then pausing
    long enough for the pipe to fill, with commits every 50 ms: what is committed is what the
    periodic commits wrote while the command ran."""
    lines = rng.randrange(TOTAL - PIPE_HOLDS_AT_MOST)
    pause = rng.uniform(0.0, 0.3)
    run = Run(f"SIGKILL after {lines} lines and a {pause:.2f}s pause", unique("commits-kill"))
    proc = start(local, topic, run.group, "--property", "auto.commit.interval.ms=50")
    assert proc.stdout is not None
    fd, buffer = proc.stdout.fileno(), bytearray()
    try:
        if read_lines(fd, buffer, lines):
            time.sleep(pause)
            proc.kill()
        read_to_end(fd, buffer)
    finally:
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
    fn = {"ctrl_c": ctrl_c_run, "closed_pipe": closed_pipe_run, "killed": killed_run}[make]
    seeds = [random.Random(seed).randrange(1 << 32) + i for i in range(KILLED_RUNS if make == "killed" else RUNS)]
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


def test_commits_while_running_never_pass_what_was_written(
        local: LocalCluster, local_zk: KazooClient, topic: str, seed: int) -> None:
    """SIGKILL leaves only the commits made while the command ran (every 50 ms here). The reader
    read everything written before the kill (to the end of the pipe), so for every partition
    the committed offset is at most the end of what was received: a commit never counts a
    message handed to the command and not yet written (at-least-once: it may be behind)."""
    failures = []
    for run_seed, run in runs(seed + 2, "killed", local, topic):
        contiguous(run)
        committed = committed_offsets(local_zk, run.group, topic)
        ahead = {p: (committed[p], len(run.received.get(p, []))) for p in range(PARTITIONS)
                 if (committed[p] or 0) > len(run.received.get(p, []))}
        if ahead:
            failures.append(f"seed {run_seed}: committed ahead of received {ahead}: {run.describe(committed)}")
    assert not failures, f"{SEED_ENV}={seed}: {len(failures)} of {KILLED_RUNS} runs:\n" + "\n".join(failures)


# --------------------------------------------------------------------------- offsets reset --execute

RESET_PARTITIONS = 40
RESET_RUNS = 20


@pytest.fixture(scope="module")
def wide_topic(local: LocalCluster) -> Tuple[str, Dict[int, int]]:
    """40 partitions with messages in (almost) every one: ``(topic, {partition: log end})``."""
    name = new_topic(local, "t-reset", RESET_PARTITIONS)
    placed = local.produce(name, [b"x"] * 400, keys=[str(i).encode() for i in range(400)])
    ends: Dict[int, int] = {}
    for p, _ in placed:
        ends[p] = ends.get(p, 0) + 1
    return name, ends


def seeded_group(zk: KazooClient, topic: str, offset: int = 0) -> str:
    group = unique("reset-atomic")
    for p in range(RESET_PARTITIONS):
        zk.create(f"/consumers/{group}/offsets/{topic}/{p}", str(offset).encode(), makepath=True)
    return group


def offsets_now(zk: KazooClient, group: str, topic: str) -> Dict[int, int]:
    return {p: int(zk.get(f"/consumers/{group}/offsets/{topic}/{p}")[0]) for p in range(RESET_PARTITIONS)}


def test_a_reset_refused_part_way_writes_nothing_and_says_so(
        local: LocalCluster, local_zk: KazooClient, wide_topic: Tuple[str, Dict[int, int]]) -> None:
    """One partition's offset node refuses the write (an ACL: readable, not writable without the
    credential). The old reset wrote the partitions before it and then failed; now nothing is
    written, and the command says so."""
    from kazoo.security import ACL, Id, Permissions, make_digest_acl

    topic, ends = wide_topic
    group = seeded_group(local_zk, topic)
    protected = f"/consumers/{group}/offsets/{topic}/20"
    local_zk.set_acls(protected, [make_digest_acl("ops", "s3cret", all=True), ACL(Permissions.READ, Id("world", "anyone"))])
    result = subprocess.run(interruptible_command("offsets", "reset", "--zookeeper", local.zk_connect, "--group", group,
                                                  "--topic", topic, "--to", "latest", "--execute"),
                            capture_output=True, env=cli_env(), timeout=60)
    assert result.returncode == 1, result.stderr
    assert offsets_now(local_zk, group, topic) == {p: 0 for p in range(RESET_PARTITIONS)}
    assert b"Nothing was written" in result.stdout + result.stderr, result.stdout + result.stderr
    assert b"NoAuth" in result.stderr


def test_a_reset_whose_offsets_changed_since_the_plan_writes_nothing(
        local: LocalCluster, local_zk: KazooClient, wide_topic: Tuple[str, Dict[int, int]]) -> None:
    """A commit lands between the plan and its execution (a shift computed from a value that no longer
    holds): the reset is refused whole, naming the partition, and nothing else is written."""
    from zkconsumer import admin

    topic, ends = wide_topic
    group = seeded_group(local_zk, topic, offset=1)
    with admin.BrokerOffsets(local_zk) as log_offsets:
        plan = admin.plan_reset(local_zk, group, topic, admin.parse_reset_target("shift:-1"), log_offsets)
    local_zk.set(f"/consumers/{group}/offsets/{topic}/7", b"1")  # same value, new version: a commit
    with pytest.raises(admin.AdminError, match=f"nothing was written.*{topic}/7 changed since the plan"):
        admin.apply_reset(local_zk, plan)
    assert offsets_now(local_zk, group, topic) == {p: 1 for p in range(RESET_PARTITIONS)}


def interrupted_reset(local: LocalCluster, topic: str, group: str, sig: int) -> Tuple[bytes, Optional[int]]:
    """Run ``offsets reset --to latest --execute`` and send it ``sig`` the moment partition 0's
    offset changes in ZooKeeper (seen through a watch of the test's own session): the
    middle of a reset that writes one partition at a time. Returns its output and status."""
    watcher = local.kazoo_client()
    try:
        proc = subprocess.Popen(interruptible_command("offsets", "reset", "--zookeeper", local.zk_connect,
                                                      "--group", group, "--topic", topic, "--to", "latest",
                                                      "--execute"),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=cli_env())

        def changed(data: Optional[bytes], stat: object) -> bool:
            if data is not None and data != b"0" and proc.poll() is None:
                proc.send_signal(sig)
                return False
            return True

        watcher.DataWatch(f"/consumers/{group}/offsets/{topic}/0", changed)
        try:
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        return out, proc.returncode
    finally:
        watcher.stop()
        watcher.close()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_a_reset_interrupted_while_it_writes_is_all_or_nothing_and_says_which(
        local: LocalCluster, local_zk: KazooClient, wide_topic: Tuple[str, Dict[int, int]], sig: int) -> None:
    """20 resets of 40 partitions, each interrupted the moment its first offset lands in ZooKeeper.
    Every time, every partition has its new offset (the reset was one transaction: its first
    write is all of them). Ctrl-C: the command says what was written, naming every partition
    (the reset finished, or it was interrupted after the transaction was applied)."""
    topic, ends = wide_topic
    new = {p: ends.get(p, 0) for p in range(RESET_PARTITIONS)}
    failures = []
    for _ in range(RESET_RUNS):
        group = seeded_group(local_zk, topic)
        out, code = interrupted_reset(local, topic, group, sig)
        now = offsets_now(local_zk, group, topic)
        if now != new:
            partial = sorted(p for p in now if now[p] != new[p] and new[p] != 0)
            failures.append(f"{group}: exit {code}, not reset: partitions {partial}; output: {out[-600:]!r}")
        elif sig == signal.SIGINT:
            said = out.decode(errors="replace")
            named = all(f"{topic}/{p}: 0 -> {new[p]}" in said for p in new if new[p])
            if not (("Reset " in said or "offset(s) were written" in said) and named):
                failures.append(f"{group}: exit {code}, reset but not said: {said[-600:]!r}")
    assert not failures, f"{len(failures)} of {RESET_RUNS}:\n" + "\n".join(failures)
