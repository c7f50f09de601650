"""zkconsumer.testing.processes: children in their own group that die with their parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from zkconsumer.testing.processes import JavaProcess, spawn, tail, terminate_all

REPO = Path(__file__).resolve().parents[3]


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_dead(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_spawned_child_has_its_own_process_group() -> None:
    child = spawn(["sleep", "30"])
    try:
        assert os.getpgid(child.pid) == child.pid != os.getpgid(0)
    finally:
        terminate_all([child], 1)
    assert child.returncode == -signal.SIGTERM


def test_child_survives_the_thread_that_asked_for_it() -> None:
    holder = {}
    thread = threading.Thread(target=lambda: holder.update(child=spawn(["sleep", "30"])))
    thread.start()
    thread.join()
    child = holder["child"]
    try:
        time.sleep(0.3)
        assert child.poll() is None
    finally:
        terminate_all([child], 1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_child_dies_when_its_parent_is_killed() -> None:
    script = ("import sys, time\n"
              "from zkconsumer.testing.processes import spawn\n"
              "print(spawn(['sleep', '300']).pid, flush=True)\n"
              "time.sleep(300)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    assert parent.stdout is not None
    grandchild = int(parent.stdout.readline())
    assert alive(grandchild)
    parent.kill()
    parent.wait()
    assert wait_dead(grandchild, 10), "the grandchild outlived its SIGKILLed parent"


def test_terminate_all_escalates_to_sigkill_within_the_grace() -> None:
    stubborn = spawn([sys.executable, "-c",
                      "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); "
                      "time.sleep(60)"], stdout=subprocess.PIPE)
    assert stubborn.stdout is not None
    stubborn.stdout.readline()  # the handler is installed
    started = time.monotonic()
    terminate_all([stubborn], 0.5)
    assert time.monotonic() - started < 5
    assert stubborn.returncode == -signal.SIGKILL
    stubborn.stdout.close()


def test_spawn_refuses_to_lose_its_own_settings() -> None:
    with pytest.raises(TypeError):
        spawn(["true"], start_new_session=False)


def test_java_process_logs_and_restarts(tmp_path: Path) -> None:
    log = tmp_path / "p.log"
    process = JavaProcess("echoer", ["sh", "-c", "echo hello; exit 3"], str(log), cwd=str(tmp_path))
    process.start()
    assert process.process is not None
    process.process.wait()
    assert process.exit_code() == 3 and not process.running()
    process.start()
    process.process.wait()
    assert process.log_tail().count("hello") == 2
    assert "starting echoer" in process.log_tail()


def test_tail_of_missing_file_is_empty(tmp_path: Path) -> None:
    assert tail(str(tmp_path / "nope")) == ""
    path = tmp_path / "f"
    path.write_text("".join(f"line {i}\n" for i in range(100)))
    assert tail(str(path), 2) == "line 98\nline 99"
