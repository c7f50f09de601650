"""Child processes that cannot outlive the test process.

Every child is started

- in its own session and process group (``start_new_session``), so stopping it
  signals the whole group and a terminal's Ctrl-C does not reach it half-way;
- on Linux with ``PR_SET_PDEATHSIG = SIGKILL``, so it dies when its parent dies,
  even if the parent is killed with SIGKILL and no Python cleanup runs.

The kernel delivers the parent-death signal when the *thread* that forked the child
exits, not the process. Children are therefore forked by one daemon thread that
lives as long as the process (:func:`spawn`), whichever thread asks for them.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Optional[Callable[..., int]]:
    """libc's ``prctl`` on Linux, else None. Resolved before any fork."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    return None


_PRCTL = _load_prctl()


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A ``preexec_fn`` making the child receive SIGKILL when its parent dies."""
    def preexec() -> None:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)
    return preexec


class _Spawner:
    """One daemon thread that forks every child (see the module docstring).

    It is started on first use, and again in a forked child process, which has no copy of it.
    """

    def __init__(self) -> None:
        self._requests: "queue.Queue[Tuple[Callable[[], Any], Future[Any]]]" = queue.Queue()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    def run(self, action: Callable[[], Any]) -> Any:
        """Run ``action`` on the spawner thread and return its result (or raise its error)."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="zkconsumer-spawner", daemon=True)
                self._thread.start()
        future: "Future[Any]" = Future()
        self._requests.put((action, future))
        return future.result()

    def _loop(self) -> None:
        while True:
            action, future = self._requests.get()
            try:
                future.set_result(action())
            except BaseException as error:  # handed to the caller
                future.set_exception(error)


_SPAWNER = _Spawner()


def spawn(argv: Sequence[str], **popen_kwargs: Any) -> "subprocess.Popen[Any]":
    """``subprocess.Popen(argv, **popen_kwargs)`` in a new process group, dying with this process.

    ``start_new_session`` and ``preexec_fn`` are set here and may not be passed.
    """
    if "preexec_fn" in popen_kwargs or "start_new_session" in popen_kwargs:
        raise TypeError("spawn() sets preexec_fn and start_new_session itself")
    preexec = _die_with_parent(os.getpid())
    process: "subprocess.Popen[Any]" = _SPAWNER.run(lambda: subprocess.Popen(
        list(argv), start_new_session=True, preexec_fn=preexec, **popen_kwargs))
    return process


def signal_group(process: "subprocess.Popen[Any]", sig: int) -> None:
    """Send ``sig`` to the process group of a child started by :func:`spawn`, if it still runs.

    The group id is the child's pid, which stays reserved until the child is reaped,
    so this never signals an unrelated process group.
    """
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
            os.killpg(process.pid, sig)


def terminate_all(processes: Sequence["subprocess.Popen[Any]"], grace: float) -> None:
    """SIGTERM every group, wait up to ``grace`` seconds in total, then SIGKILL what is left.

    Returns once every process has exited and been reaped.
    """
    for process in processes:
        signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    kill_all(processes)


def kill_all(processes: Sequence["subprocess.Popen[Any]"]) -> None:
    """SIGKILL every group and reap every process."""
    for process in processes:
        signal_group(process, signal.SIGKILL)
    for process in processes:
        process.wait()


def tail(path: str, lines: int = 40) -> str:
    """The last ``lines`` lines of a text file ("" if it cannot be read)."""
    try:
        with open(path, "rb") as handle:  # the last 64 KiB are plenty
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - 64 * 1024))
            data = handle.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


class JavaProcess:
    """One JVM (ZooKeeper, a broker, a tool) with its log file; restartable.

    ``start()`` launches ``argv`` with stdout and stderr appended to ``log_path``.
    """

    def __init__(self, name: str, argv: Sequence[str], log_path: str, cwd: str,
                 env: Optional[Dict[str, str]] = None) -> None:
        self.name = name
        self.argv: List[str] = list(argv)
        self.log_path = log_path
        self._cwd = cwd
        self._env = env
        #: The current child, or None if never started.
        self.process: Optional["subprocess.Popen[bytes]"] = None

    def start(self) -> None:
        """Launch the JVM; it must not be running."""
        if self.running():
            raise RuntimeError(f"{self.name} is already running")
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} starting {self.name}\n".encode())
            log.flush()
            self.process = spawn(self.argv, cwd=self._cwd, env=self._env, stdin=subprocess.DEVNULL,
                                  stdout=log, stderr=subprocess.STDOUT)

    def running(self) -> bool:
        """True while the JVM has not exited."""
        return self.process is not None and self.process.poll() is None

    def exit_code(self) -> Optional[int]:
        """The exit status once exited (negative: killed by that signal), else None."""
        return None if self.process is None else self.process.poll()

    def kill(self) -> None:
        """SIGKILL the JVM and wait until it is gone."""
        if self.process is not None:
            kill_all([self.process])

    def terminate(self, grace: float) -> None:
        """SIGTERM the JVM, SIGKILL it after ``grace`` seconds; returns once it is gone."""
        if self.process is not None:
            terminate_all([self.process], grace)

    def log_tail(self, lines: int = 40) -> str:
        """The end of this JVM's log, for error messages."""
        return tail(self.log_path, lines)
