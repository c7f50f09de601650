"""Ctrl-C always ends a command (zkconsumer.cli.interrupt), wherever it lands: tested at known places.

Each test first puts the command somewhere a Ctrl-C used to be risky and checks it is there
(a stack dump of its main thread, support.cli_process.main_thread_stack): inside a ZooKeeper call
while ZooKeeper is paused (SIGSTOP), inside a broker request whose replies a TCP proxy holds,
inside the ZooKeeper close that follows a first Ctrl-C, inside ``consume``'s iteration. Then
it delivers SIGINT and checks how the command ended. Each has its own cluster (module scope)
because they pause its ZooKeeper. Bounds passed to ``wait_exit`` detect hangs; no test
asserts a duration.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from typing import Iterator, List, Tuple

import pytest
from kazoo.client import KazooClient
from support.cli_process import PipeReader, cli_env, interruptible_command, wait_for_main_thread_in
from support.common import new_topic, produced_values, unique, wait_until

from harness.cluster.proxy import TcpProxy
from zkconsumer.testing import LocalCluster
from zkconsumer.zookeeper.group import GroupClient

pytestmark = pytest.mark.integration


@pytest.fixture
def group(local: LocalCluster, local_zk: KazooClient) -> Tuple[str, str]:
    """(topic, group): 3 partitions of 10 messages, the group's offsets committed at 10.

    The previous test may have paused ZooKeeper long enough to expire the broker's session:
    :func:`support.common.new_topic` waits for the broker to register again.
    """
    topic = new_topic(local, "t-int", 3)
    for p in range(3):
        local.produce(topic, produced_values(10, f"p{p}-"), partition=p)
    group_id = unique("interrupt")
    GroupClient(local_zk, group_id, f"{group_id}_writer").commit_offsets({(topic, p): 10 for p in range(3)})
    return topic, group_id


class Command:
    """A running ``zkconsumer`` command whose stdout and stderr are read as they come."""

    def __init__(self, argv: List[str], **env: str) -> None:
        self.proc = subprocess.Popen(interruptible_command(*argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=cli_env(**env))
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.out, self.err = PipeReader(self.proc.stdout), PipeReader(self.proc.stderr)

    def interrupt(self) -> None:
        self.proc.send_signal(signal.SIGINT)

    def main_thread_in(self, marker: str, timeout: float = 30.0) -> str:
        return wait_for_main_thread_in(self.proc, self.err, marker, timeout)

    def wait_exit(self, bound: float) -> int:
        """The exit status; fails if the command still runs after ``bound`` seconds (a hang)."""
        wait_until(lambda: (self.out.poll(), self.err.poll(), self.proc.poll())[2] is not None, bound,
                   f"the command to exit; stderr so far: {self.err.data[-3000:]!r}")
        self.out.poll()
        self.err.poll()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@contextlib.contextmanager
def command(argv: List[str], **env: str) -> Iterator[Command]:
    running = Command(argv, **env)
    try:
        yield running
    finally:
        running.kill()


@contextlib.contextmanager
def resumed_after(local: LocalCluster) -> Iterator[None]:
    """ZooKeeper running again after the block, whether or not it paused ZooKeeper."""
    try:
        yield
    finally:
        local.resume_zookeeper()


def watch_argv(local: LocalCluster, group_id: str, *extra: str) -> List[str]:
    return ["groups", "describe", "--zookeeper", local.zk_connect, "--group", group_id, "--watch", "0.5", *extra]


def screens(cmd: Command, n: int) -> None:
    wait_until(lambda: cmd.out.poll().count(b"Group: ") >= n, 60, f"{n} screens of the watch")


def interrupt_inside_a_paused_zookeeper_call(local: LocalCluster, cmd: Command) -> None:
    """Let the watch draw, pause ZooKeeper, wait until its main thread is blocked in a kazoo call, Ctrl-C it.
    The caller resumes ZooKeeper (:func:`resumed_after`)."""
    screens(cmd, 2)
    local.pause_zookeeper()
    cmd.main_thread_in("kazoo")  # the next refresh is blocked on ZooKeeper
    cmd.interrupt()


def test_ctrl_c_inside_a_zookeeper_call_ends_watch_with_status_0(local: LocalCluster, group: Tuple[str, str]) -> None:
    with command(watch_argv(local, group[1])) as cmd, resumed_after(local):
        interrupt_inside_a_paused_zookeeper_call(local, cmd)
        code = cmd.wait_exit(30)
    assert code == 0, cmd.err.data.decode(errors="replace")
    assert b"Traceback" not in cmd.err.data, cmd.err.data.decode(errors="replace")


def test_second_ctrl_c_ends_the_command_at_once_while_its_zookeeper_close_waits(
        local: LocalCluster, group: Tuple[str, str]) -> None:
    # A 30 s session: with ZooKeeper paused, kazoo's close waits ~20 s for an answer. The
    # watchdog is set far beyond that, so only the second Ctrl-C can end the command soon.
    with command(watch_argv(local, group[1], "--zk-timeout-ms", "30000"), ZKCONSUMER_INTERRUPT_GRACE_S="300") as cmd, \
            resumed_after(local):
        interrupt_inside_a_paused_zookeeper_call(local, cmd)
        cmd.main_thread_in(" in _close")  # the first Ctrl-C's cleanup: closing the ZooKeeper session
        cmd.interrupt()
        code = cmd.wait_exit(10)
    # 130 from the watcher, or SIGINT's default action once the main thread saw the first (a shell shows 130)
    assert code in (130, -signal.SIGINT), cmd.err.data.decode(errors="replace")


def test_first_ctrl_c_ends_the_command_within_the_grace_when_its_cleanup_cannot_finish(
        local: LocalCluster, group: Tuple[str, str]) -> None:
    with command(watch_argv(local, group[1], "--zk-timeout-ms", "30000"), ZKCONSUMER_INTERRUPT_GRACE_S="2") as cmd, \
            resumed_after(local):
        interrupt_inside_a_paused_zookeeper_call(local, cmd)
        code = cmd.wait_exit(15)
    assert code == 130, cmd.err.data.decode(errors="replace")
    assert b"cleanup did not end within 2s" in cmd.err.data, cmd.err.data


def test_ctrl_c_ends_consume_with_130_while_zookeeper_is_paused(local: LocalCluster) -> None:
    topic = new_topic(local, "t-int-consume", 3)
    local.produce(topic, produced_values(20))
    argv = ["consume", "--zookeeper", local.zk_connect, "--group", unique("interrupt-consume"), "--topic", topic,
            "--from-beginning"]
    with command(argv, ZKCONSUMER_INTERRUPT_GRACE_S="3") as cmd:
        wait_until(lambda: cmd.out.poll().count(b"\n") >= 20, 60, "the 20 messages")
        with resumed_after(local):
            local.pause_zookeeper()
            cmd.main_thread_in("consume.py")
            cmd.interrupt()  # its commit and shutdown need ZooKeeper: the grace period ends it
            code = cmd.wait_exit(20)
    assert code == 130, cmd.err.data.decode(errors="replace")


@contextlib.contextmanager
def broker_behind_proxy(local: LocalCluster, local_zk: KazooClient) -> Iterator[TcpProxy]:
    """Broker 0's registration pointed at a TCP proxy to it (restored after), so its replies can be held."""
    path = "/brokers/ids/0"
    original, _ = local_zk.get(path)
    registration = json.loads(original)
    with TcpProxy("127.0.0.1", local.broker_port(0), name="broker-0-proxy") as proxy:
        moved = dict(registration, host="127.0.0.1", port=proxy.port,
                     endpoints=[f"PLAINTEXT://127.0.0.1:{proxy.port}"])
        local_zk.set(path, json.dumps(moved).encode())
        try:
            yield proxy
        finally:
            local_zk.set(path, original)


def test_ctrl_c_inside_a_broker_request_ends_watch_with_status_0(
        local: LocalCluster, local_zk: KazooClient, group: Tuple[str, str]) -> None:
    with broker_behind_proxy(local, local_zk) as proxy:
        with command(watch_argv(local, group[1], "--socket-timeout-ms", "60000")) as cmd:
            screens(cmd, 2)
            proxy.cut("blackhole")  # the next ListOffsets request is never answered
            cmd.main_thread_in("wire/connection.py")
            cmd.interrupt()
            code = cmd.wait_exit(30)
    assert code == 0, cmd.err.data.decode(errors="replace")
    assert b"Traceback" not in cmd.err.data, cmd.err.data.decode(errors="replace")
