"""Ctrl-C always ends a command: the first within a bound, a second at once.

The console script (:func:`zkconsumer.__main__._console`) installs an
:class:`InterruptPolicy` around the command:

* the first SIGINT raises ``KeyboardInterrupt`` in the main thread, as Python
  does by default, so the command cleans up (stops the consumer and commits,
  closes its ZooKeeper session) and exits with its documented code (130, or 0
  for ``groups describe --watch``). It also puts SIGINT back to the default
  action and starts a watchdog: if the process still runs ``grace_s`` seconds
  later (a cleanup waiting on a paused ZooKeeper or broker), the watchdog says
  so on stderr and ends the process with :data:`~.common.EXIT_INTERRUPTED`;
* a second SIGINT takes the default action: the kernel ends the process at
  once, wherever its threads are (a shell reports exit status 130);
* a SIGINT that was ignored when the command started (a background job of a
  non-interactive shell, ``nohup``-style launchers) stays ignored, as with
  every Unix tool: such a command is ended with SIGTERM or SIGKILL.

Nothing is installed when :func:`zkconsumer.cli.run` is called as a function
(tests, embedding applications): the caller owns its signal handlers.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import Callable, Mapping, Optional

from .common import EXIT_INTERRUPTED

__all__ = ["DEFAULT_GRACE_S", "GRACE_ENV", "InterruptPolicy", "grace_from_environment"]

#: How long a command may clean up after the first Ctrl-C before the watchdog ends it.
DEFAULT_GRACE_S = 10.0
#: Environment variable overriding :data:`DEFAULT_GRACE_S` (seconds, > 0).
GRACE_ENV = "ZKCONSUMER_INTERRUPT_GRACE_S"


def grace_from_environment(environ: Mapping[str, str] = os.environ) -> float:
    """:data:`GRACE_ENV` as seconds if it is a number > 0, else :data:`DEFAULT_GRACE_S`."""
    try:
        value = float(environ.get(GRACE_ENV, ""))
    except ValueError:
        return DEFAULT_GRACE_S
    return value if value > 0 else DEFAULT_GRACE_S


class InterruptPolicy:
    """SIGINT handling of one command run (see the module docstring); use as a context manager.

    ``exit`` and ``write_stderr`` are injectable for tests; by default they are
    :func:`os._exit` (no cleanup can block it) and a raw ``write(2)`` (no lock
    on ``sys.stderr`` the interrupted main thread might hold).
    """

    def __init__(self, grace_s: float = DEFAULT_GRACE_S, *,
                 exit: Callable[[int], None] = os._exit,
                 write_stderr: Callable[[str], None] = lambda text: _write_fd(2, text)) -> None:
        if grace_s <= 0:
            raise ValueError("grace_s must be > 0")
        self.grace_s = grace_s
        self._exit = exit
        self._write_stderr = write_stderr
        self._installed = False
        self._previous: object = None
        self._done = threading.Event()
        self._watchdog: Optional[threading.Thread] = None

    @property
    def installed(self) -> bool:
        """Whether the handler is in place (False when SIGINT was ignored at start)."""
        return self._installed

    @property
    def interrupted(self) -> bool:
        """Whether a first Ctrl-C arrived (and the watchdog runs)."""
        return self._watchdog is not None

    def __enter__(self) -> "InterruptPolicy":
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def install(self) -> None:
        """Take over SIGINT from the main thread, unless it is ignored."""
        previous = signal.getsignal(signal.SIGINT)
        if previous == signal.SIG_IGN:
            return
        self._previous = previous
        signal.signal(signal.SIGINT, self._on_first_interrupt)
        self._installed = True

    def uninstall(self) -> None:
        """Restore the previous handler if no Ctrl-C came; after one, leave SIGINT at its default action
        and the watchdog running, so the exit that follows stays bounded too."""
        if self._installed and not self.interrupted:
            signal.signal(signal.SIGINT, self._previous)  # type: ignore[arg-type]
        self._installed = False

    def cancel(self) -> None:
        """Stop the watchdog (if one runs) and join it within a second. For tests and embedders."""
        self._done.set()
        if self._watchdog is not None:
            self._watchdog.join(1.0)

    def _on_first_interrupt(self, signum: int, frame: Optional[FrameType]) -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # a second Ctrl-C: the kernel ends the process
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch, name="zkconsumer-interrupt-watchdog", daemon=True)
            self._watchdog.start()
        raise KeyboardInterrupt

    def _watch(self) -> None:
        if self._done.wait(self.grace_s):
            return
        self._write_stderr(f"zkconsumer: interrupted; cleanup did not end within {self.grace_s:g}s, exiting "
                           "without it\n")
        self._exit(EXIT_INTERRUPTED)


def _write_fd(fd: int, text: str) -> None:
    try:
        os.write(fd, text.encode("utf-8", "replace"))
    except OSError:
        pass
