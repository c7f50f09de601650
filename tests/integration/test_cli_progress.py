"""Observability item 5: terminal progress and ``groups describe --watch``, run as a person would.

The CLI runs as a real process inside tmux (a real terminal); the pane is
read with ``tmux capture-pane``. The group has lag growing on one partition
only (messages keep arriving there, nobody consumes them), so its sparkline
must rise while the others stay flat. Piped runs must print no progress and no
escape codes. Skipped with a reason when tmux is not installed.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest
from kazoo.client import KazooClient
from support.cli_process import cli_env, interruptible_command
from support.common import produced_values, unique, wait_until

from zkconsumer.testing import LocalCluster
from zkconsumer.zookeeper.group import GroupClient

pytestmark = pytest.mark.integration

TMUX = shutil.which("tmux")
needs_tmux = pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install -y tmux): "
                                                     "the terminal tests drive the CLI through a real tmux pane")
ANSI = re.compile(r"\x1b\[")
BLOCK_CHARS = "▁▂▃▄▅▆▇█"


def cli_command(*argv: str) -> List[str]:
    return [sys.executable, "-m", "zkconsumer", *argv]


class Producer:
    """Keeps appending to one partition (a few messages every ``every_s``) until stopped."""

    def __init__(self, cluster: LocalCluster, topic: str, partition: int, every_s: float = 0.4) -> None:
        self._cluster, self._topic, self._partition, self._every_s = cluster, topic, partition, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-producer", daemon=True)

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(self._every_s):
            n += 1
            self._cluster.produce(self._topic, produced_values(5, f"grow{n}-"), partition=self._partition)

    def __enter__(self) -> "Producer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


@dataclass
class LaggingGroup:
    """A 3-partition topic whose group is caught up on partitions 0 and 2; :meth:`growing` keeps
    appending to partition 1 (nobody consumes it) while in use."""

    cluster: LocalCluster
    topic: str
    group: str

    def growing(self) -> Producer:
        return Producer(self.cluster, self.topic, 1)


@pytest.fixture
def lagging_group(local: LocalCluster, local_zk: KazooClient) -> LaggingGroup:
    topic = local.create_topic(f"t-watch-{uuid.uuid4().hex[:6]}", partitions=3)
    for p in range(3):
        local.produce(topic, produced_values(10, f"p{p}-"), partition=p)
    group = unique("watch")
    GroupClient(local_zk, group, f"{group}_writer").commit_offsets({(topic, p): 10 for p in range(3)})
    return LaggingGroup(local, topic, group)


class Tmux:
    """A detached tmux session (its own server socket) running one shell command; read with :meth:`screen`."""

    def __init__(self, tmp_path: Path, shell: str, env: Dict[str, str], width: int = 200, height: int = 40) -> None:
        self.socket = str(tmp_path / "tmux.sock")
        self.session = f"zkc{uuid.uuid4().hex[:6]}"
        self.status_file = tmp_path / "exit-status"
        # The pane's shell records the exit status, then lingers so the last screen stays readable. It
        # survives the Ctrl-C meant for the command by trapping SIGINT (the command gets the default action).
        script = f"trap : INT; {shell}; echo $? > {_quote(str(self.status_file))}; sleep 600"
        self._tmux("new-session", "-d", "-s", self.session, "-x", str(width), "-y", str(height),
                   "sh", "-c", script, env=env)

    def _tmux(self, *args: str, env: Dict[str, str] = None) -> str:
        done = subprocess.run([TMUX, "-S", self.socket, *args], capture_output=True, text=True, timeout=20,
                              env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", self.session)

    def send_keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", self.session, *keys)

    def exited(self) -> bool:
        return self.status_file.exists() and bool(self.status_file.read_text().strip())

    def exit_status(self) -> int:
        return int(self.status_file.read_text().strip())

    def close(self) -> None:
        subprocess.run([TMUX, "-S", self.socket, "kill-server"], capture_output=True, timeout=20)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def shell_line(argv: List[str]) -> str:
    return " ".join(_quote(a) for a in argv)


def screen_with(term: Tmux, predicate: Callable[[str], bool], timeout: float, what: str) -> str:
    """The first screen of ``term`` for which ``predicate`` holds (polled until ``timeout``)."""
    found: List[str] = []

    def check() -> bool:
        s = term.screen()
        if predicate(s):
            found.append(s)
            return True
        return False

    wait_until(check, timeout, what)
    return found[-1]


def fields(row: str) -> List[str]:
    """TOPIC PARTITION OFFSET LOG-END LAG TREND OWNER SPARKLINE of a watch row."""
    return row.split()


def partition_row(screen: str, topic: str, partition: int) -> str:
    rows = [line for line in screen.splitlines() if re.match(rf"{re.escape(topic)}\s+{partition}\s", line)]
    assert len(rows) == 1, screen
    return rows[0]


def row_sparkline(row: str) -> str:
    """The sparkline cell: the row's trailing run of block characters."""
    match = re.search(f"[{BLOCK_CHARS} ]+$", row.rstrip())
    return match.group(0).strip() if match else ""


# --------------------------------------------------------------------------- --watch in a terminal


@needs_tmux
def test_watch_redraws_in_place_with_a_rising_sparkline_for_the_lagging_partition(
        local: LocalCluster, lagging_group: LaggingGroup, tmp_path: Path) -> None:
    topic, group = lagging_group.topic, lagging_group.group
    term = Tmux(tmp_path, shell_line(cli_command("groups", "describe", "--zookeeper", local.zk_connect,
                                                 "--group", group, "--watch", "1")), cli_env(TERM="xterm-256color"))
    try:
        with lagging_group.growing():
            first = screen_with(term, lambda s: "LAG, LAST 10 MIN" in s and topic in s, 30, "the first screen")
            assert f"Group: {group}" in first

            def rising(s: str) -> bool:
                if topic not in s:
                    return False
                spark = row_sparkline(partition_row(s, topic, 1))
                return len(spark) >= 4 and spark[-1] != spark[0]

            screen = screen_with(term, rising, 40, "partition 1's sparkline to rise")
        row1 = partition_row(screen, topic, 1)
        spark1 = row_sparkline(row1)
        # Partition 1 (lag growing): a rising line ending at the top, and a positive trend.
        assert spark1[-1] == "█" and BLOCK_CHARS.index(spark1[0]) < BLOCK_CHARS.index(spark1[-1]), screen
        assert fields(row1)[5].startswith("+"), row1
        # Partitions 0 and 2 (caught up): lag 0, trend 0, a flat line at the bottom.
        for p in (0, 2):
            row = partition_row(screen, topic, p)
            assert fields(row)[4:6] == ["0", "0"] and set(row_sparkline(row)) == {"▁"}, screen
        # In place: one header on the screen however many refreshes happened; and it keeps refreshing.
        assert screen.count(f"Group: {group}") == 1, screen
        stamp = re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", screen).group(0)
        screen_with(term, lambda s: stamp not in s and f"Group: {group}" in s, 10, "another refresh")

        term.send_keys("C-c")
        wait_until(term.exited, 15, "the command to exit after Ctrl-C")
        assert term.exit_status() == 0
        assert "Traceback" not in term.screen()
    finally:
        term.close()


@needs_tmux
def test_consume_shows_messages_and_rate_on_the_terminal_and_only_messages_in_the_file(
        local: LocalCluster, tmp_path: Path) -> None:
    topic = local.create_topic(f"t-progress-{uuid.uuid4().hex[:6]}", partitions=3)
    values = produced_values(30)
    local.produce(topic, values)
    out_file = tmp_path / "out.txt"
    command = cli_command("consume", "--zookeeper", local.zk_connect, "--group", unique("progress"),
                          "--topic", topic, "--from-beginning", "--timeout-ms", "4000")
    term = Tmux(tmp_path, f"{shell_line(command)} > {_quote(str(out_file))}", cli_env(TERM="xterm"))
    try:
        # The idle wait (--timeout-ms) leaves the progress line up with every message counted.
        screen_with(term, lambda s: re.search(r"consumed: 30 messages\s+[\d.,]+ msg/s\s+\d+:\d\d", s) is not None,
                    30, "the progress line with 30 messages")
        wait_until(term.exited, 30, "consume to end")
        assert term.exit_status() == 0
        final = term.screen()
        assert "Processed a total of 30 messages" in final
        assert "consumed: " not in final  # the status line was erased at the end
    finally:
        term.close()
    assert sorted(out_file.read_bytes().splitlines()) == sorted(values)  # stdout: exactly the messages


@needs_tmux
def test_consume_to_the_terminal_keeps_messages_whole_and_leaves_no_status_behind(
        local: LocalCluster, tmp_path: Path) -> None:
    topic = local.create_topic(f"t-shared-{uuid.uuid4().hex[:6]}", partitions=3)
    values = produced_values(25)
    local.produce(topic, values)
    command = cli_command("consume", "--zookeeper", local.zk_connect, "--group", unique("shared"),
                          "--topic", topic, "--from-beginning", "--timeout-ms", "3000")
    term = Tmux(tmp_path, shell_line(command), cli_env(TERM="xterm"), height=50)
    try:
        # While idle at the end, the status line sits under the messages.
        screen_with(term, lambda s: "consumed: 25 messages" in s, 30, "the status line under the messages")
        wait_until(term.exited, 30, "consume to end")
        lines = [line.strip() for line in term.screen().splitlines() if line.strip()]
    finally:
        term.close()
    assert term.exit_status() == 0
    assert sorted(line.encode() for line in lines[:-1]) == sorted(values), lines  # each message on its own line
    assert lines[-1] == "Processed a total of 25 messages"


# --------------------------------------------------------------------------- piped: nothing extra


def test_piped_watch_prints_successive_plain_screens_and_exits_0_on_interrupt(
        local: LocalCluster, lagging_group: LaggingGroup) -> None:
    topic, group = lagging_group.topic, lagging_group.group
    # Started with SIGINT at its default, as a terminal's foreground job: a suite run as a background job
    # of a non-interactive shell would otherwise pass SIGINT on ignored, and the command never end.
    proc = subprocess.Popen(interruptible_command("groups", "describe", "--zookeeper", local.zk_connect,
                                                  "--group", group, "--watch", "0.5"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(TERM="xterm"))
    try:
        deadline = time.monotonic() + 30
        out = b""
        os.set_blocking(proc.stdout.fileno(), False)
        while out.count(b"Group: ") < 3 and time.monotonic() < deadline:
            chunk = proc.stdout.read()
            out += chunk or b""
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    out += rest or b""
    text = out.decode()
    assert proc.returncode == 0, err
    assert not ANSI.search(text) and b"\x1b" not in err, (text, err)
    screens = [s for s in text.split("\nGroup: ") if s.strip()]
    assert len(screens) >= 3, text
    assert f"\n\nGroup: {group}" in text  # screens are separated by a blank line
    assert re.search(rf"{re.escape(topic)}\s+1\s", screens[-1])


def test_piped_consume_and_reset_print_no_progress(local: LocalCluster, local_zk: KazooClient) -> None:
    topic = local.create_topic(f"t-piped-{uuid.uuid4().hex[:6]}", partitions=3)
    values = []
    for p in range(3):
        values += produced_values(7, f"p{p}-")
        local.produce(topic, values[-7:], partition=p)
    group = unique("piped")
    done = subprocess.run(cli_command("consume", "--zookeeper", local.zk_connect, "--group", group, "--topic", topic,
                                      "--from-beginning", "--timeout-ms", "2000"),
                          capture_output=True, env=cli_env(TERM="xterm"), timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == sorted(values)
    assert done.stderr.decode().splitlines()[-1] == "Processed a total of 21 messages"
    assert b"\x1b" not in done.stderr and b"\r" not in done.stderr and b"msg/s" not in done.stderr

    done = subprocess.run(cli_command("offsets", "reset", "--zookeeper", local.zk_connect, "--group", group,
                                      "--topic", topic, "--to", "earliest", "--execute"),
                          capture_output=True, env=cli_env(TERM="xterm"), timeout=60)
    assert done.returncode == 0, done.stderr
    assert b"\x1b" not in done.stdout + done.stderr and b"\r" not in done.stderr
    assert "Reset 3 offset(s)" in done.stdout.decode()


# --------------------------------------------------------------------------- stderr on a pseudo-terminal


def run_with_tty_stderr(argv: List[str], timeout: float = 60) -> Tuple[int, bytes, bytes]:
    """Run the CLI with stderr on a pseudo-terminal and stdout on a pipe: (exit code, stdout, raw stderr bytes)."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(cli_command(*argv), stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
                                env=cli_env(TERM="xterm"))
        os.close(slave)
        slave = -1
        err = b""
        while True:
            ready, _, _ = select.select([master], [], [], timeout)
            if not ready:
                proc.kill()
                raise AssertionError(f"no output for {timeout}s from {argv}")
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the pty's other side is closed (the process exited)
                break
            if not chunk:
                break
            err += chunk
        out = proc.stdout.read()
        proc.wait(timeout)
    finally:
        os.close(master)
        if slave != -1:
            os.close(slave)
    return proc.returncode, out, err


def test_reset_execute_and_import_draw_progress_on_a_terminal_stderr_only(
        local: LocalCluster, local_zk: KazooClient, tmp_path: Path) -> None:
    topic = local.create_topic(f"t-many-{uuid.uuid4().hex[:6]}", partitions=40)
    group = unique("many")
    GroupClient(local_zk, group, f"{group}_writer").commit_offsets({(topic, p): 0 for p in range(40)})
    local.produce(topic, produced_values(1), partition=7)

    code, out, err = run_with_tty_stderr(["offsets", "reset", "--zookeeper", local.zk_connect, "--group", group,
                                          "--topic", topic, "--to", "latest", "--execute"])
    assert code == 0, err
    assert f"\rresetting offsets of {group}: 1/1".encode() in err and err.endswith(b"\r\x1b[K")
    assert b"\x1b" not in out and b"Reset 1 offset(s)" in out

    export = tmp_path / "offsets.txt"
    export.write_text("".join(f"/consumers/{group}/offsets/{topic}/{p}:0\n" for p in range(40)))
    code, out, err = run_with_tty_stderr(["offsets", "import", "--zookeeper", local.zk_connect,
                                          "--input", str(export)])
    assert code == 0, err
    assert b"\rimporting offsets: 40/40" in err and err.endswith(b"\r\x1b[K")
    assert out == f"Imported 40 offsets into 1 group(s): {group} in ZooKeeper.\n".encode()  # the store it wrote


def test_perf_draws_its_rate_on_a_terminal_stderr_and_keeps_stdout_parseable(local: LocalCluster) -> None:
    topic = local.create_topic(f"t-perf-{uuid.uuid4().hex[:6]}", partitions=3)
    local.produce(topic, produced_values(300))
    code, out, err = run_with_tty_stderr(["perf", "--zookeeper", local.zk_connect, "--topic", topic,
                                          "--messages", "300", "--warmup-ms", "1500"])
    assert code == 0, err
    assert re.search(rb"\rperf [\d,]+/300: [\d,]+ messages  [\d.,]+ msg/s  [\d.,]+ MB/s  \d+:\d\d\x1b\[K", err), err
    assert err.endswith(b"\r\x1b[K")
    lines = out.decode().splitlines()
    assert len(lines) == 3 and lines[0].startswith("start.time, end.time") and b"\x1b" not in out
    assert json.loads(lines[2])["messages"] == 300
