"""The ``zkconsumer`` command as a separate process that Ctrl-C reaches, and a look at where it is.

Signals ignored by a process are ignored by its children: a test suite started as a
background job of a non-interactive shell (``bash .ci/run > log &``, a CI runner) passes
SIGINT ignored to every command it starts, and a command that ignores Ctrl-C never ends.
:func:`interruptible_command` starts the command as a terminal's foreground job is
started, with SIGINT at its default (Python's ``KeyboardInterrupt``), whatever the suite
inherited, and with a stack dump of every thread on SIGUSR1 (:func:`main_thread_stack`),
so a test can check where the command is before it delivers a signal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import IO, Dict, List, Optional

from support import ROOT

# The process starts here: SIGINT as in a terminal's foreground job, faulthandler on SIGUSR1, then
# ``python -m zkconsumer`` (whose console entry point installs the CLI's own Ctrl-C policy).
_LAUNCHER = (
    "import faulthandler, runpy, signal, sys\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
    "sys.argv[0] = 'zkconsumer'\n"
    "runpy.run_module('zkconsumer', run_name='__main__', alter_sys=True)\n"
)


def interruptible_command(*argv: str) -> List[str]:
    """argv running ``zkconsumer *argv`` with SIGINT at its default and stack dumps on SIGUSR1."""
    return [sys.executable, "-c", _LAUNCHER, *argv]


def cli_env(**extra: str) -> Dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **extra)
    env.pop("NO_COLOR", None)
    return env


class PipeReader:
    """Accumulates what a running process wrote to one of its pipes (non-blocking reads)."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self._pipe = pipe
        os.set_blocking(pipe.fileno(), False)
        self.data = b""

    def poll(self) -> bytes:
        try:
            chunk = self._pipe.read()
        except (BlockingIOError, ValueError):
            chunk = None
        self.data += chunk or b""
        return self.data


def thread_stacks(dump: str) -> List[str]:
    """The per-thread blocks of one faulthandler dump."""
    blocks: List[str] = []
    for line in dump.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            blocks.append(line + "\n")
        elif blocks:
            blocks[-1] += line + "\n"
    return blocks


def main_thread_stack(proc: "subprocess.Popen[bytes]", stderr: PipeReader, timeout: float = 10.0) -> str:
    """The main thread's stack right now (the one that ran the launcher), from a SIGUSR1 dump.

    Raises AssertionError if no dump arrives within ``timeout``.
    """
    start = len(stderr.poll())
    proc.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = stderr.poll()[start:].decode("utf-8", "replace")
        # Only the main thread's stack holds the launcher's frame (its bottom: the dump is complete).
        main = [b for b in thread_stacks(text) if 'File "<string>"' in b]
        if main:
            return main[0]
        time.sleep(0.05)
    raise AssertionError(f"no stack dump from pid {proc.pid} within {timeout}s: {stderr.data[start:]!r}")


def wait_for_main_thread_in(proc: "subprocess.Popen[bytes]", stderr: PipeReader, marker: str,
                            timeout: float) -> str:
    """Dump the main thread's stack until it shows ``marker`` (a path or function name); returns that stack."""
    deadline = time.monotonic() + timeout
    last: Optional[str] = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the command exited ({proc.returncode}) before reaching {marker}"
        last = main_thread_stack(proc, stderr)
        if marker in last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"the main thread never reached {marker} within {timeout}s; last stack:\n{last}")
