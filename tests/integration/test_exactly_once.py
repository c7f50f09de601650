"""Exactly-once: create_rdd batches whose results and offsets go to PostgreSQL in one transaction, killed and restarted.

The job is ``examples/spark_exactly_once.py`` (local[2] Spark in its own
process), writing to a real PostgreSQL started by this module on a temporary
data directory. Each round starts the job and SIGKILLs its whole process group
(driver, Spark JVM, Python workers) at a point chosen by a seeded RNG: inside an
open transaction (results inserted, not committed), right after a commit, or
at a random moment while batches are being processed (planning, the Spark job,
or the open transaction). A last run catches up. The results
table has no unique key on the message, so a duplicate would show: it must hold
every produced message exactly once, and the stored offsets must equal the log ends.

Seed: ``ZKCONSUMER_EXACTLY_ONCE_SEED`` (default below); the kill points are
printed.
"""

from __future__ import annotations

import os
import queue
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import pytest
from support.common import produced_values, wait_until

from zkconsumer.testing.processes import kill_all, spawn, tail

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "spark_exactly_once.py"
SEED = int(os.environ.get("ZKCONSUMER_EXACTLY_ONCE_SEED", "8207"))
PAUSE_IN_TRANSACTION = 1.5  # seconds between inserting a batch's results and committing (killed runs only)


@pytest.fixture(scope="module")
def postgres() -> Iterator[object]:
    pytest.importorskip("psycopg", reason="the exactly-once test needs psycopg (pip install 'psycopg[binary]>=3.1')")
    from harness.postgres import LocalPostgres, postgres_unavailable

    reason = postgres_unavailable()
    if reason:
        pytest.skip(reason)
    with LocalPostgres() as server:
        yield server


class Job:
    """One run of the example job; its stdout lines are read on a thread into a queue."""

    def __init__(self, zk_connect: str, topic: str, group: str, dsn: str, log_path: Path, pause: float) -> None:
        argv = [sys.executable, str(SCRIPT), "--zookeeper", zk_connect, "--topic", topic, "--group", group,
                "--dsn", dsn, "--no-produce", "--max-per-partition", "10", "--pause-in-transaction", str(pause)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                   PYTHONUNBUFFERED="1")
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.process = spawn(argv, cwd=str(ROOT), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=self._log, text=True)
        self.lines: List[str] = []
        self._queue: "queue.Queue[Optional[str]]" = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, needle: str, occurrence: int = 1, timeout: float = 240.0) -> bool:
        """Wait for the ``occurrence``-th stdout line containing ``needle``; False if the job ended first."""
        seen = sum(needle in line for line in self.lines)
        deadline = time.monotonic() + timeout
        while seen < occurrence:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {needle!r} line within {timeout}s:\n" + "\n".join(self.lines)
                                     + "\n" + tail(str(self.log_path))) from None
            if line is None:
                return False
            self.lines.append(line)
            seen += needle in line
        return True

    def kill(self) -> None:
        """SIGKILL the job's whole process group and reap it; collect what it printed."""
        kill_all([self.process])
        self._finish()

    def finish(self, timeout: float) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_all([self.process])
            self._finish()
            raise AssertionError("the job did not finish:\n" + "\n".join(self.lines) + "\n"
                                 + tail(str(self.log_path))) from None
        self._finish()
        return code

    def _finish(self) -> None:
        self._reader.join(10)
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.lines.append(line)
        self._log.close()

    def committed(self) -> int:
        """Results this run reported committed."""
        return sum(int(line.split("committed ")[1].split()[0]) for line in self.lines if " committed " in line)


def group_alive(pgid: int) -> bool:
    """Whether any process of process group ``pgid`` (zombies aside) still exists."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def stored_results(dsn: str, group: str, topic: str) -> Tuple[int, int, List[str]]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT value FROM results WHERE group_id = %s AND topic = %s", (group, topic)).fetchall()
        distinct = conn.execute("SELECT count(DISTINCT (topic, partition, msg_offset)) FROM results "
                                "WHERE group_id = %s AND topic = %s", (group, topic)).fetchone()[0]
    return len(rows), distinct, [r[0] for r in rows]


def stored_offsets(dsn: str, group: str, topic: str) -> Dict[int, int]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT partition, next_offset FROM offsets WHERE group_id = %s AND topic = %s",
                                 (group, topic)).fetchall())


@pytest.mark.slow  # four local[2] Spark drivers start one after another: minutes on a loaded 2-core machine
def test_exactly_once_results_and_offsets_in_one_transaction_survive_sigkill_at_random_points(
        postgres, cluster, make_topic, group_id, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    topic = make_topic(partitions=4)
    produced = produced_values(400, prefix="first")
    placed = list(cluster.produce(topic, produced))
    dsn = postgres.dsn
    kill_points = ["in-transaction", "after-commit", "random"]
    rng.shuffle(kill_points)
    reported = 0  # results the killed runs reported committed
    report = []
    for round_number, point in enumerate(kill_points, 1):
        job = Job(cluster.zk_connect, topic, group_id, dsn, tmp_path / f"job-{round_number}.log", PAUSE_IN_TRANSACTION)
        in_transaction = False
        if point == "in-transaction":
            assert job.wait_for("transaction open", occurrence=rng.randint(1, 2))
            time.sleep(rng.uniform(0.0, PAUSE_IN_TRANSACTION / 2))
            in_transaction = True
        elif point == "after-commit":
            assert job.wait_for(" committed ", occurrence=rng.randint(1, 2))
        else:
            assert job.wait_for(": read ")
            time.sleep(rng.uniform(0.0, 4.0))
        job.kill()
        wait_until(lambda job=job: not group_alive(job.process.pid), 15, "the job's Spark JVM and Python workers to die")
        reported += job.committed()
        rows, distinct, _ = stored_results(dsn, group_id, topic)
        last = job.lines[-1] if job.lines else "(nothing printed)"
        report.append(f"round {round_number}: killed {point}, after {last!r}; table holds {rows} rows")
        assert rows == distinct  # never a duplicate, at any kill point
        if in_transaction:
            # The batch whose transaction was open is not in the table: exactly what was reported committed.
            assert rows == reported, report[-1]
        else:
            # A kill between the commit and its print may leave one batch more than reported.
            assert rows >= reported
        reported = rows
        more = produced_values(40, prefix=f"round{round_number}")
        placed += cluster.produce(topic, more)
        produced += more

    final = Job(cluster.zk_connect, topic, group_id, dsn, tmp_path / "job-final.log", pause=0.0)
    code = final.finish(timeout=240)
    report.append(f"final run: exit {code}, {final.lines[-1] if final.lines else ''}")
    print("\n".join(report))
    assert code == 0, "\n".join(final.lines) + "\n" + tail(str(final.log_path))

    rows, distinct, values = stored_results(dsn, group_id, topic)
    print(f"exactly-once: produced {len(produced)}, table rows {rows}, distinct messages {distinct}")
    assert rows == distinct == len(produced)
    assert sorted(values) == sorted(v.decode() for v in produced)
    ends: Dict[int, int] = {}
    for partition, offset in placed:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    assert stored_offsets(dsn, group_id, topic) == ends


# --------------------------------------------------------------------------- commit_batch against PostgreSQL, no Spark


@pytest.fixture
def conn(postgres):
    import psycopg

    from spark_integration.exactly_once import create_offsets_table

    with psycopg.connect(postgres.dsn) as connection:
        create_offsets_table(connection)
        connection.execute("CREATE TABLE IF NOT EXISTS unit_results (group_id text, value text)")
        connection.commit()
        yield connection


def _insert(group: str, *values: str):
    return lambda cur: cur.executemany("INSERT INTO unit_results VALUES (%s, %s)", [(group, v) for v in values])


def _results(conn, group: str) -> List[str]:
    values = [r[0] for r in conn.execute("SELECT value FROM unit_results WHERE group_id = %s ORDER BY value",
                                         (group,)).fetchall()]
    conn.rollback()
    return values


def test_commit_batch_refuses_a_batch_planned_from_offsets_that_moved_since(conn, group_id) -> None:
    from spark_integration import OffsetRange
    from spark_integration.exactly_once import Batch, OffsetsChangedError, commit_batch, load_offsets

    first = Batch(group_id, (OffsetRange("t", 0, 0, 5), OffsetRange("t", 1, 0, 3)), {("t", 0): None, ("t", 1): None})
    twin = Batch(group_id, first.ranges, first.stored)  # a second job that planned from the same offsets
    commit_batch(conn, first, _insert(group_id, "a", "b"))
    with pytest.raises(OffsetsChangedError) as raised:
        commit_batch(conn, twin, _insert(group_id, "a-again"))
    assert raised.value.retriable and raised.value.conflicts == {("t", 0): (None, 5), ("t", 1): (None, 3)}
    assert _results(conn, group_id) == ["a", "b"]  # the twin's results were rolled back with its offsets
    assert load_offsets(conn, group_id, ["t"]) == {("t", 0): 5, ("t", 1): 3}

    following = Batch(group_id, (OffsetRange("t", 0, 5, 9), OffsetRange("t", 1, 3, 3)), {("t", 0): 5, ("t", 1): 3})
    commit_batch(conn, following, _insert(group_id, "c"))
    stale = Batch(group_id, (OffsetRange("t", 0, 5, 7),), {("t", 0): 5})
    with pytest.raises(OffsetsChangedError):
        commit_batch(conn, stale, _insert(group_id, "stale"))
    assert load_offsets(conn, group_id, ["t"]) == {("t", 0): 9, ("t", 1): 3}
    assert _results(conn, group_id) == ["a", "b", "c"]


def test_commit_batch_stores_nothing_when_writing_results_fails(conn, group_id) -> None:
    from spark_integration import OffsetRange
    from spark_integration.exactly_once import Batch, commit_batch, load_offsets

    batch = Batch(group_id, (OffsetRange("t", 0, 0, 4),), {("t", 0): None})

    def half_then_fail(cur) -> None:
        _insert(group_id, "x")(cur)
        raise RuntimeError("the writer failed half-way (on purpose)")

    with pytest.raises(RuntimeError, match="half-way"):
        commit_batch(conn, batch, half_then_fail)
    assert _results(conn, group_id) == [] and load_offsets(conn, group_id, ["t"]) == {}
    commit_batch(conn, batch, _insert(group_id, "x"))  # the same batch again: now it commits
    assert _results(conn, group_id) == ["x"] and load_offsets(conn, group_id, ["t"]) == {("t", 0): 4}


def test_commit_batch_rejects_an_autocommit_connection(postgres) -> None:
    import psycopg

    from spark_integration import OffsetRange
    from spark_integration.exactly_once import Batch, commit_batch

    with psycopg.connect(postgres.dsn, autocommit=True) as connection:
        with pytest.raises(ValueError, match="autocommit"):
            commit_batch(connection, Batch("g", (OffsetRange("t", 0, 0, 1),), {}), None)
