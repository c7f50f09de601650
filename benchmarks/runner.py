"""Running one benchmarked process: its output, exit status, CPU seconds, peak RSS and the machine's steal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from .report import busy_percent, read_cpu_times, steal_percent

ROOT = Path(__file__).resolve().parent.parent


def log(message: str) -> None:
    """A progress line on stderr."""
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


def child_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """This environment with the checkout first on PYTHONPATH (so children import this tree's code)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


class Run:
    """One finished process: stdout, stderr, exit code, CPU seconds and peak RSS (``wait4``), and the
    machine-wide steal and busy shares (``/proc/stat``) and 1-minute load while it ran.

    The process runs in its own session; after ``timeout`` seconds its whole group is killed.
    """

    def __init__(self, argv: Sequence[str], timeout: float, env: Optional[Dict[str, str]] = None) -> None:
        self.argv = list(argv)
        load_before = os.getloadavg()[0]
        cpu_before = read_cpu_times()
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            start = time.monotonic()
            process = subprocess.Popen(self.argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                       start_new_session=True, env=env)
            timer = threading.Timer(timeout, _kill_group, (process.pid,))
            timer.start()
            try:
                _, status, usage = os.wait4(process.pid, 0)
            finally:
                timer.cancel()
                timer.join(5)
            self.wall = time.monotonic() - start
            out.seek(0)
            err.seek(0)
            self.stdout = out.read().decode("utf-8", "replace")
            self.stderr = err.read().decode("utf-8", "replace")
        cpu_after = read_cpu_times()
        self.returncode = os.waitstatus_to_exitcode(status)
        self.cpu = usage.ru_utime + usage.ru_stime
        self.peak_rss_mb = usage.ru_maxrss / 1024.0
        self.load = (load_before, os.getloadavg()[0])
        self.steal_pct = steal_percent(cpu_before, cpu_after)
        self.busy_pct = busy_percent(cpu_before, cpu_after)

    def check(self) -> "Run":
        """Raise RuntimeError (with the output's tail) unless the process exited 0."""
        if self.returncode != 0:
            raise RuntimeError(f"{self.argv[:6]}... exited {self.returncode}:\n"
                               f"{self.stderr[-3000:]}{self.stdout[-2000:]}")
        return self

    def last_line(self) -> str:
        """The last non-blank stdout line; RuntimeError if there is none."""
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        if not lines:
            raise RuntimeError(f"no output from {self.argv[:6]}...:\n{self.stderr[-3000:]}")
        return lines[-1]

    def measurement(self, **fields: Any) -> Dict[str, Any]:
        """``fields`` (messages, msgs_per_sec, mb_per_sec, seconds, ...) plus this process's costs."""
        return {**fields, "cpu_seconds": round(self.cpu, 3), "peak_rss_mb": round(self.peak_rss_mb, 1),
                "wall_seconds": round(self.wall, 2), "load": [round(x, 2) for x in self.load],
                "steal_pct": None if self.steal_pct is None else round(self.steal_pct, 2),
                "busy_pct": None if self.busy_pct is None else round(self.busy_pct, 1)}


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
