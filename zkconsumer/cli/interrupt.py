"""Ctrl-C always ends a command: the first within a bound, a second at once.

The console script (:func:`zkconsumer.__main__.main` without arguments) runs each
command inside an :class:`InterruptPolicy`:

* the first SIGINT raises ``KeyboardInterrupt`` in the main thread, as Python
  does by default, so the command cleans up (stops the consumer and commits,
  closes its ZooKeeper session) and exits with its documented code (130, or 0
  for ``groups describe --watch``). If the process still runs ``grace_s``
  seconds later (a cleanup waiting on a paused ZooKeeper or broker), it says so
  on stderr and exits with :data:`~.common.EXIT_INTERRUPTED` (130);
* a second SIGINT ends the process at once (status 130, or killed by SIGINT's
  default action once the main thread has seen the first: a shell shows 130);
* a SIGINT that was ignored when the command started (a background job of a
  non-interactive shell, ``nohup``-style launchers) stays ignored, as with
  every Unix tool: such a command is ended with SIGTERM or SIGKILL.

Where the signal lands does not matter. The kernel may deliver SIGINT to any
thread (a kazoo thread, a fetcher): the main thread then learns of it only
when it next runs Python code, and a main thread blocked on a lock without a
timeout (kazoo's synchronous calls wait that way for ZooKeeper's answer) would
go on waiting until ZooKeeper answers or the connection drops. So the signal is
also written to a wakeup pipe (:func:`signal.set_wakeup_fd`), read by a
watcher thread that (1) starts the grace period at once, (2) wakes the main
thread with a harmless SIGWINCH until its handler has run (a signal sent to
the main thread itself interrupts its wait), and (3) exits at once on a second
SIGINT. Exits from the watcher use :func:`os._exit`: no cleanup can block them.

Nothing is installed when :func:`zkconsumer.cli.run` is called as a function
(tests, embedding applications): the caller owns its signal handlers.

A command that must not be cut short between two of its own steps (``consume``: a
message written and the record that it was written) takes the first Ctrl-C through an
:class:`InterruptLatch` instead: while the latch is entered, that SIGINT only sets the
latch, which the command polls at the points where stopping is safe; the grace period
and the second Ctrl-C work as above.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from types import FrameType
from typing import Callable, Mapping, Optional, Tuple

from ..threads import ShutdownableThread
from .common import EXIT_INTERRUPTED

__all__ = ["DEFAULT_GRACE_S", "GRACE_ENV", "InterruptLatch", "InterruptPolicy", "grace_from_environment"]

#: How long a command may clean up after the first Ctrl-C before it is ended anyway.
DEFAULT_GRACE_S = 10.0
#: Environment variable overriding :data:`DEFAULT_GRACE_S` (seconds, > 0).
GRACE_ENV = "ZKCONSUMER_INTERRUPT_GRACE_S"
#: The signal that wakes a blocked main thread (harmless: its default action is to ignore it).
NUDGE = signal.SIGWINCH
#: How often the watcher nudges the main thread until its SIGINT handler has run.
NUDGE_INTERVAL_S = 0.1
_STOP = b"\0"  # written to the wakeup pipe by uninstall(): no signal has number 0


def grace_from_environment(environ: Mapping[str, str] = os.environ) -> float:
    """:data:`GRACE_ENV` as seconds if it is a number > 0, else :data:`DEFAULT_GRACE_S`."""
    try:
        value = float(environ.get(GRACE_ENV, ""))
    except ValueError:
        return DEFAULT_GRACE_S
    return value if value > 0 else DEFAULT_GRACE_S


class InterruptPolicy:
    """SIGINT handling of one command run (see the module docstring); use as a context manager
    from the main thread.

    ``exit`` and ``write_stderr`` are injectable for tests; by default they are
    :func:`os._exit` and a raw ``write(2)`` (no lock on ``sys.stderr`` that the
    interrupted main thread might hold).
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
        self._previous_sigint: object = None
        self._previous_nudge: object = None
        self._previous_wakeup_fd = -1
        self._pipe: Optional[Tuple[int, int]] = None
        self._watcher: Optional[ShutdownableThread] = None
        self._main_ident = threading.get_ident()
        self._handled = threading.Event()  # the main thread's SIGINT handler has run
        self._interrupted = threading.Event()  # a SIGINT arrived (seen by either thread)

    @property
    def installed(self) -> bool:
        """Whether the policy is in place (False when SIGINT was ignored at start)."""
        return self._installed

    @property
    def interrupted(self) -> bool:
        """Whether a Ctrl-C arrived."""
        return self._interrupted.is_set()

    def __enter__(self) -> "InterruptPolicy":
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def install(self) -> None:
        """Take over SIGINT (from the main thread), unless it is ignored."""
        if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
            return
        self._main_ident = threading.get_ident()
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        self._pipe = (read_fd, write_fd)
        self._previous_wakeup_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        self._previous_sigint = signal.signal(signal.SIGINT, self._on_sigint)
        self._previous_nudge = signal.signal(NUDGE, _ignore)
        self._watcher = ShutdownableThread("zkconsumer-interrupt-watcher", self._watch, wake=self._wake_watcher)
        self._watcher.start()
        self._installed = True

    def uninstall(self) -> None:
        """Restore the previous handlers and stop the watcher (joined within a second).

        After a Ctrl-C nothing is restored: SIGINT keeps its default action and the
        watcher keeps running, so the exit that follows stays bounded too; both end
        with the process.
        """
        if self._installed and not self.interrupted:
            self.cancel()

    def cancel(self) -> None:
        """Restore the previous handlers and stop the watcher whatever happened (joined within a
        second). For tests and embedders; :meth:`uninstall` is the command's way out."""
        if not self._installed:
            return
        self._installed = False
        signal.signal(signal.SIGINT, self._previous_sigint)  # type: ignore[arg-type]
        signal.signal(NUDGE, self._previous_nudge)  # type: ignore[arg-type]
        signal.set_wakeup_fd(self._previous_wakeup_fd)
        assert self._pipe is not None and self._watcher is not None
        read_fd, write_fd = self._pipe
        if self._watcher.stop(1.0):
            os.close(read_fd)
            os.close(write_fd)
            self._pipe = None

    def _wake_watcher(self) -> None:
        """The watcher's stop request: a stop byte in its pipe (never blocks: the pipe's write end is non-blocking)."""
        pipe = self._pipe
        if pipe is None:
            return
        try:
            os.write(pipe[1], _STOP)
        except OSError:
            pass

    # ------------------------------------------------------------------ main thread

    def _on_sigint(self, signum: int, frame: Optional[FrameType]) -> None:
        if self._handled.is_set():
            return  # a later Ctrl-C: the watcher ends the process; don't disturb the cleanup
        self._handled.set()
        self._interrupted.set()
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # from now on the kernel ends the process at once
        raise KeyboardInterrupt

    def _latched(self) -> None:
        """An :class:`InterruptLatch` took the first SIGINT in the main thread (the command stops at its
        next safe point): as :meth:`_on_sigint`, without raising."""
        if self._handled.is_set():
            return
        self._handled.set()
        self._interrupted.set()
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    # ------------------------------------------------------------------ watcher thread

    def _watch(self) -> None:
        assert self._pipe is not None
        read_fd = self._pipe[0]
        sigints = 0
        deadline: Optional[float] = None
        while True:
            if deadline is None:
                wait: Optional[float] = None
            elif self._handled.is_set():
                wait = max(0.0, deadline - time.monotonic())
            else:
                wait = max(0.0, min(NUDGE_INTERVAL_S, deadline - time.monotonic()))
            ready, _, _ = select.select([read_fd], [], [], wait)
            data = os.read(read_fd, 64) if ready else b""
            if _STOP in data:
                return
            sigints += data.count(bytes([signal.SIGINT]))
            if sigints >= 2:
                self._write_stderr("zkconsumer: interrupted again; exiting at once\n")
                self._exit(EXIT_INTERRUPTED)
                return
            if sigints == 1 and deadline is None:
                self._interrupted.set()
                deadline = time.monotonic() + self.grace_s
            if deadline is None:
                continue
            if time.monotonic() >= deadline:
                self._write_stderr(f"zkconsumer: interrupted; cleanup did not end within {self.grace_s:g}s, "
                                   "exiting without it\n")
                self._exit(EXIT_INTERRUPTED)
                return
            if not self._handled.is_set():
                # The SIGINT reached another thread: interrupt the main thread's blocking wait so
                # that it runs its handler now rather than when ZooKeeper or a broker answers.
                try:
                    signal.pthread_kill(self._main_ident, NUDGE)
                except (OSError, ValueError):
                    pass


class InterruptLatch:
    """The first Ctrl-C as a flag, not an exception: use as a context manager from the main thread.

    While entered, the first SIGINT sets :attr:`is_set` and returns; nothing is raised,
    so the code polling the latch decides where it stops (``consume`` stops only between
    a message written and the record of it, never in between). Under an
    :class:`InterruptPolicy` the grace period starts as for any first Ctrl-C and a second
    ends the process at once (the policy's SIGINT handling is not restored on exit once
    the latch was set); otherwise later SIGINTs go to the handler found on entry
    (Python's default raises ``KeyboardInterrupt``), which exiting restores.

    Entered outside the main thread, or with SIGINT ignored or at the kernel's default,
    it installs nothing and stays unset (those SIGINTs never reach Python code).

    The code waiting for the latch must wake up by itself: a latched SIGINT interrupts no
    wait (poll it with a timeout).
    """

    def __init__(self) -> None:
        self._set = False
        self._installed = False
        self._previous: object = None

    @property
    def is_set(self) -> bool:
        """Whether a Ctrl-C arrived while the latch was entered."""
        return self._set

    def __enter__(self) -> "InterruptLatch":
        if threading.current_thread() is not threading.main_thread():
            return self
        previous = signal.getsignal(signal.SIGINT)
        if previous in (signal.SIG_IGN, signal.SIG_DFL, None):
            return self
        self._previous = previous
        signal.signal(signal.SIGINT, self._on_sigint)
        self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._installed:
            return
        self._installed = False
        if signal.getsignal(signal.SIGINT) == self._on_sigint:
            policy = getattr(self._previous, "__self__", None)
            if self._set and isinstance(policy, InterruptPolicy):
                signal.signal(signal.SIGINT, signal.SIG_DFL)  # as the policy leaves it after a first Ctrl-C
            else:
                signal.signal(signal.SIGINT, self._previous)  # type: ignore[arg-type]

    def _on_sigint(self, signum: int, frame: Optional[FrameType]) -> None:
        if self._set:
            # A later Ctrl-C: what the handler found on entry does with it (a policy's watcher has
            # already seen it in its wakeup pipe and ends the process).
            previous = self._previous
            if callable(previous):
                previous(signum, frame)
            return
        self._set = True
        policy = getattr(self._previous, "__self__", None)
        if isinstance(policy, InterruptPolicy):
            policy._latched()


def _ignore(signum: int, frame: Optional[FrameType]) -> None:
    """The nudge's handler: nothing (its arrival alone interrupts the main thread's wait)."""


def _write_fd(fd: int, text: str) -> None:
    try:
        os.write(fd, text.encode("utf-8", "replace"))
    except OSError:
        pass
