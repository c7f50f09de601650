"""Background threads: one lifecycle for every thread the package starts, and the seams around it.

:class:`ShutdownableThread` is Kafka's ``ShutdownableThread`` in Python: a named
daemon thread with :meth:`~ShutdownableThread.start`, a non-blocking
:meth:`~ShutdownableThread.request_stop` (Kafka's ``initiateShutdown``), a bounded
:meth:`~ShutdownableThread.join` (``awaitShutdown``) and
:meth:`~ShutdownableThread.stop` (``shutdown``: both, returning whether the thread
ended). Its body is a ``target`` given at construction or, in a subclass,
:meth:`~ShutdownableThread.run` (by default :meth:`~ShutdownableThread.do_work` in a
loop until a stop is requested, as Kafka's ``doWork``). Names follow
``zkconsumer-<what>-<id>``. ``stop(timeout)`` is the one verb for stopping a thread
across the package; what is not a thread (sockets, clients, servers) keeps ``close``.

:class:`ParallelStops` runs several blocking ``stop()`` calls at once on such
threads, waited for with deadlines (the connector's ``shutdown()``).

:class:`Runtime` is where the rebalancer (and the offset committer) get their
thread, lock-with-condition and events: their decisions never depend on *how*
they wait, only on what wakes them (a signal, a deleted owner node, a timeout)
and on the clock they are given, so a deterministic simulator can run the very
same code on cooperative tasks and a virtual clock (the test-only ``tests/sim``
package does). Production uses :data:`THREADS`: :class:`threading.Condition`,
:class:`threading.Event`, :class:`threading.Lock` and a :class:`ShutdownableThread`.

May import: the standard library only.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Protocol

__all__ = ["THREADS", "ParallelStops", "Runtime", "ShutdownableThread", "Task", "ThreadRuntime"]

log = logging.getLogger(__name__)


class ShutdownableThread:
    """A named daemon thread with one lifecycle (Kafka's ``ShutdownableThread``).

    Contract:

    * ``name`` is the thread's name (``zkconsumer-<what>-<id>`` by convention).
    * :meth:`start` at most once.
    * :meth:`request_stop` never blocks and may be called from any thread (kazoo's
      callback threads included), before :meth:`start`, and more than once: it marks
      the thread :attr:`stopping` and calls ``wake`` (given at construction; a subclass
      overrides :meth:`request_stop` and calls ``super()``) to end the body's waits
      (notify a condition, abort a socket). A stop requested before :meth:`start`
      still lets the body run, which sees :attr:`stopping` at once.
    * :meth:`join` waits at most ``timeout`` seconds (``None``: until the end); it
      returns at once before :meth:`start` and on the thread itself.
    * :meth:`stop` is :meth:`request_stop` then :meth:`join`; it returns ``True``
      once the thread has ended (or never started), ``False`` if it is still
      running after ``timeout`` (or ``stop`` was called on the thread itself).
    * The body catches and reports its own exceptions: the lifecycle neither
      catches nor hides them (one that escapes reaches :func:`threading.excepthook`).
    """

    def __init__(self, name: str, target: Optional[Callable[[], None]] = None, *,
                 wake: Optional[Callable[[], None]] = None) -> None:
        self._target = target
        self._wake = wake
        self._stop_requested = threading.Event()
        #: Whether a stop was requested (the body should return soon). A plain attribute, not a
        #: property: fetch rounds read it several times per message. Set before the event, never reset.
        self.stopping = False
        self._thread = threading.Thread(target=self.run, name=name, daemon=True)
        self._started = False

    @property
    def name(self) -> str:
        return self._thread.name

    def start(self) -> None:
        self._started = True
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def is_current(self) -> bool:
        """Whether the caller runs on this thread."""
        return self._thread is threading.current_thread()

    def wait(self, timeout: Optional[float]) -> bool:
        """Sleep up to ``timeout`` seconds, less if a stop is requested; ``True`` when stopping."""
        return self._stop_requested.wait(timeout)

    def request_stop(self) -> None:
        """Ask the thread to end; returns at once (see the class docstring)."""
        self.stopping = True
        self._stop_requested.set()
        if self._wake is not None:
            self._wake()

    def join(self, timeout: Optional[float] = None) -> None:
        """Wait for the thread to end, at most ``timeout`` seconds; no stop is requested."""
        if self._started and not self.is_current():
            self._thread.join(timeout)

    def stop(self, timeout: Optional[float] = None) -> bool:
        """Request a stop and join (at most ``timeout`` s); ``True`` once the thread has ended."""
        self.request_stop()
        self.join(timeout)
        return not self._thread.is_alive()

    def run(self) -> None:
        """The body, on the thread: ``target()`` if one was given, else :meth:`do_work` until stopping."""
        if self._target is not None:
            self._target()
            return
        while not self.stopping:
            self.do_work()

    def do_work(self) -> None:
        """One round of the default body (Kafka's ``doWork``); a subclass without a target overrides it."""
        raise NotImplementedError

    def __repr__(self) -> str:
        state = "alive" if self.is_alive() else "stopped" if self._started else "new"
        return f"<{type(self).__name__} {self.name} {state}{' stopping' if self.stopping else ''}>"


class ParallelStops:
    """Runs blocking ``stop()`` calls at once, each on its own named thread, and waits with deadlines.

    ``shutdown()`` must not wait, one after the other, for threads that may be
    blocked in ZooKeeper calls: the waits would add up. Each stop runs on
    ``zkconsumer-stop-<what>-<id>``, :meth:`wait` waits for one until a deadline,
    and :meth:`join` (after the ZooKeeper client was closed, which releases every
    blocked call) joins them all within a bound. A failing stop is logged, never raised.
    """

    def __init__(self, consumer_id: str) -> None:
        self._consumer_id = consumer_id
        self._threads: Dict[str, ShutdownableThread] = {}

    def run(self, what: str, stop: Callable[[], Any]) -> None:
        def target() -> None:
            try:
                stop()
            except Exception:  # noqa: BLE001 - shutdown goes on
                log.exception("%s: stopping %s failed", self._consumer_id, what)

        thread = ShutdownableThread(f"zkconsumer-stop-{what}-{self._consumer_id}", target)
        self._threads[what] = thread
        thread.start()

    def wait(self, what: str, deadline: float) -> bool:
        """Wait for ``what`` until ``deadline`` (monotonic); ``True`` if it has stopped."""
        thread = self._threads.get(what)
        if thread is None:
            return True
        thread.join(max(0.0, deadline - time.monotonic()))
        return not thread.is_alive()

    def join(self, timeout: float) -> List[str]:
        """Join every stop within ``timeout`` in all; the names of those still running."""
        deadline = time.monotonic() + timeout
        for thread in self._threads.values():
            thread.join(max(0.0, deadline - time.monotonic()))
        return [what for what, thread in self._threads.items() if thread.is_alive()]


class Task(Protocol):
    """A started task: join it (bounded or not), or ask whether the caller is running on it."""

    def join(self, timeout: Optional[float] = None) -> None: ...

    def is_current(self) -> bool: ...


class Runtime(Protocol):
    """The primitives a background component may block on."""

    def condition(self) -> threading.Condition: ...

    def event(self) -> threading.Event: ...

    def lock(self) -> "threading.Lock": ...

    def start(self, target: Callable[[], None], name: str) -> Task: ...


class ThreadRuntime:
    """Real threads: what every connector uses (each task a started :class:`ShutdownableThread`)."""

    def condition(self) -> threading.Condition:
        return threading.Condition()

    def event(self) -> threading.Event:
        return threading.Event()

    def lock(self) -> "threading.Lock":
        return threading.Lock()

    def start(self, target: Callable[[], None], name: str) -> Task:
        thread = ShutdownableThread(name, target)
        thread.start()
        return thread


#: The default runtime.
THREADS: Runtime = ThreadRuntime()
