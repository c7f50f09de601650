"""The simulation kernel: a virtual clock, one ordered event queue, and cooperative tasks.

Everything in a simulated run happens on one OS thread. Each member's
background threads (its rebalancer) are greenlets; they run until they block
on a :class:`SimEvent`, a :class:`SimCondition`, a reply from the simulated
ZooKeeper or a sleep, and then switch back to the kernel, which runs the next
event in ``(time, sequence)`` order. Callbacks that stand for kazoo's threads
(watch events, request completions, connection-state listeners) run on the
kernel's own greenlet and must not block: one that tries raises
:class:`BlockedInCallback` (a real bug: a kazoo thread that blocks stalls every
other callback of that client).

Nothing here reads the wall clock or a global random generator, so a run is a
function of its seed.
"""

from __future__ import annotations

import heapq
import threading
from functools import partial
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import greenlet


class BlockedInCallback(RuntimeError):
    """A callback that stands for a kazoo thread tried to block."""


class Kernel:
    """Virtual time and the event queue; see the module docstring."""

    def __init__(self) -> None:
        self.now = 0.0
        self._queue: List[Tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        self._root = greenlet.getcurrent()
        self.tasks: Set["SimTask"] = set()
        self.steps = 0
        self.failures: List[BaseException] = []  # exceptions that escaped a task or a callback
        self.ran: Set[str] = set()  # owners of the tasks that ran since the caller last cleared it
        #: Whether anyone keeps the trace: callers skip formatting trace lines nobody reads.
        self.tracing = False
        #: Processes stopped whole (SIGSTOP, a VM pause): owner -> virtual time it runs again.
        #: None of its tasks resumes before then.
        self.frozen: Dict[str, float] = {}

    def clock(self) -> float:
        return self.now

    def at(self, when: float, action: Callable[[], None]) -> None:
        """Run ``action`` at virtual time ``when`` (after everything already queued for that time)."""
        self._seq += 1
        now = self.now
        heapq.heappush(self._queue, (when if when > now else now, self._seq, action))

    def soon(self, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (self.now, self._seq, action))

    def in_task(self) -> bool:
        return greenlet.getcurrent() is not self._root

    def step(self) -> bool:
        """Run the next event; ``False`` when none is left."""
        if not self._queue:
            return False
        when, _, action = heapq.heappop(self._queue)
        self.now = when
        self.steps += 1
        try:
            action()
        except BlockedInCallback as exc:
            self.failures.append(exc)
        return True

    def run_until(self, done: Optional[Callable[[], bool]], limit: float,
                  check: Optional[Callable[[], None]] = None) -> bool:
        """Run events until ``done()`` (never, if ``None``) or virtual time passes ``limit``;
        ``check`` after every event. (:meth:`step`'s body, inlined: this loop is the simulator's.)"""
        queue = self._queue
        pop = heapq.heappop
        failures = self.failures
        while done is None or not done():
            if not queue or queue[0][0] > limit:
                return done is not None and done()
            when, _, action = pop(queue)
            self.now = when
            self.steps += 1
            try:
                action()
            except BlockedInCallback as exc:
                failures.append(exc)
            if check is not None:
                check()
        return True

    # ------------------------------------------------------------ blocking

    def block(self, timeout: Optional[float], waiters: Optional[List["greenlet.greenlet"]] = None) -> bool:
        """Suspend the calling task until woken (``True``) or ``timeout`` virtual seconds pass (``False``).

        ``waiters``: a list the current greenlet is added to; whoever wakes it
        calls :meth:`wake`. A timeout of 0 or less returns at once.
        """
        me = greenlet.getcurrent()
        if me is self._root:
            raise BlockedInCallback("a callback (a kazoo thread) tried to block")
        if timeout is not None and timeout <= 0:
            return False
        state = object()  # this wait, by identity
        me.sim_state = state  # type: ignore[attr-defined]
        if waiters is not None:
            waiters.append(me)
        if timeout is not None:
            def expire() -> None:
                if getattr(me, "sim_state", None) is state and not me.dead:
                    me.sim_state = None  # type: ignore[attr-defined]
                    self._resume(me, False)
            self.at(self.now + timeout, expire)
        woken = bool(self._root.switch())
        if waiters and me in waiters:
            waiters.remove(me)
        return woken

    def wake(self, waiters: List["greenlet.greenlet"]) -> None:
        """Wake every task blocked in ``waiters`` (each resumes as its own event, in order)."""
        if not waiters:
            return
        for g in list(waiters):
            state = getattr(g, "sim_state", None)
            if state is None:
                continue
            g.sim_state = None
            self.soon(lambda g=g: self._resume(g, True))
        waiters.clear()

    def _resume(self, g: "greenlet.greenlet", value: bool) -> None:
        if g.dead:
            return
        owner = getattr(g, "sim_owner", "")
        if self.frozen:
            until = self.frozen.get(owner, 0.0)
            if until > self.now:  # its process is stopped: the thread runs on once it is resumed
                self.at(until, partial(self._resume, g, value))
                return
        self.ran.add(owner)
        if g:  # started: hand it the outcome of its wait
            g.switch(value)
        else:
            g.switch()

    def sleep(self, seconds: float) -> None:
        if not self.in_task():
            raise BlockedInCallback("a callback (a kazoo thread) tried to sleep")
        self.block(max(seconds, 0.0) or 1e-6)


class SimTask:
    """A greenlet standing for one thread; joinable (:class:`zkconsumer.threads.Task`)."""

    def __init__(self, kernel: Kernel, target: Callable[[], None], name: str, owner: str = "") -> None:
        self.kernel = kernel
        self.name = name
        self.owner = owner  # the simulated process it belongs to (kill -9 stops all of them)
        self._joiners: List[greenlet.greenlet] = []
        self.done = False

        def body() -> None:
            try:
                target()
            except greenlet.GreenletExit:
                raise
            except BaseException as exc:  # noqa: BLE001 - a thread that dies is a finding
                kernel.failures.append(exc)
            finally:
                self.done = True
                kernel.tasks.discard(self)
                kernel.wake(self._joiners)

        self.greenlet = greenlet.greenlet(body, parent=kernel._root)
        self.greenlet.sim_owner = owner  # type: ignore[attr-defined]
        kernel.tasks.add(self)
        kernel.soon(lambda: kernel._resume(self.greenlet, True) if not self.done else None)

    def join(self, timeout: Optional[float] = None) -> None:
        if self.done:
            return
        self.kernel.block(timeout, self._joiners)

    def is_current(self) -> bool:
        return greenlet.getcurrent() is self.greenlet

    def kill(self) -> None:
        """kill -9: the task never runs again (its greenlet is dropped without unwinding)."""
        self.kernel.tasks.discard(self)
        self.done = True
        self.greenlet.sim_state = None  # type: ignore[attr-defined]


class SimEvent:
    """:class:`threading.Event` on the kernel."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self._flag = False
        self._waiters: List[greenlet.greenlet] = []

    def set(self) -> None:
        self._flag = True
        self._kernel.wake(self._waiters)

    def clear(self) -> None:
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    def wait(self, timeout: Optional[float] = None) -> bool:
        if self._flag:
            return True
        self._kernel.block(timeout, self._waiters)
        return self._flag


class SimCondition:
    """:class:`threading.Condition` on the kernel: the lock is free (one task runs at a time and
    none is switched away from while holding it, except inside :meth:`wait`, which releases it)."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self._waiters: List[greenlet.greenlet] = []

    def __enter__(self) -> "SimCondition":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def wait(self, timeout: Optional[float] = None) -> bool:
        return self._kernel.block(timeout, self._waiters)

    def notify_all(self) -> None:
        self._kernel.wake(self._waiters)

    def notify(self, n: int = 1) -> None:
        self.notify_all()


class SimLock:
    """:class:`threading.Lock` on the kernel: a task that finds it held blocks until it is released."""

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self._held = False
        self._waiters: List[greenlet.greenlet] = []

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        end = None if timeout < 0 else self._kernel.now + timeout
        while self._held:
            if not blocking or (end is not None and end <= self._kernel.now):
                return False
            self._kernel.block(None if end is None else end - self._kernel.now, self._waiters)
        self._held = True
        return True

    def release(self) -> None:
        self._held = False
        if self._waiters:
            self._kernel.wake(self._waiters)

    def locked(self) -> bool:
        return self._held

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


class SimRuntime:
    """:class:`zkconsumer.threads.Runtime` on the kernel."""

    def __init__(self, kernel: Kernel, owner: str = "") -> None:
        self.kernel = kernel
        self.owner = owner

    def condition(self) -> threading.Condition:
        return SimCondition(self.kernel)  # type: ignore[return-value]

    def event(self) -> threading.Event:
        return SimEvent(self.kernel)  # type: ignore[return-value]

    def lock(self) -> threading.Lock:
        return SimLock(self.kernel)  # type: ignore[return-value]

    def start(self, target: Callable[[], None], name: str) -> SimTask:
        return SimTask(self.kernel, target, name, self.owner)
