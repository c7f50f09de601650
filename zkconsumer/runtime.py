"""Where the rebalancer gets its thread, lock-with-condition and events: real threads by default.

The rebalancer's (and the offset committer's) decisions never depend on *how* it waits, only on what it is
woken by (a signal, a deleted owner node, a timeout) and on the clock it is
given. :class:`Runtime` names the few primitives it uses, so a deterministic
simulator can run the very same code on cooperative tasks and a virtual clock
(the test-only ``tests/sim`` package does). Production uses :data:`THREADS`:
:class:`threading.Condition`, :class:`threading.Event`, :class:`threading.Lock`
and a daemon :class:`threading.Thread`, exactly as before this seam existed.

May import: the standard library only.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional, Protocol

__all__ = ["THREADS", "Runtime", "Task", "ThreadRuntime"]


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


class _ThreadTask:
    def __init__(self, thread: threading.Thread) -> None:
        self._thread = thread

    def join(self, timeout: Optional[float] = None) -> None:
        self._thread.join(timeout)

    def is_current(self) -> bool:
        return self._thread is threading.current_thread()


class ThreadRuntime:
    """Real threads: what every connector uses."""

    def condition(self) -> threading.Condition:
        return threading.Condition()

    def event(self) -> threading.Event:
        return threading.Event()

    def lock(self) -> "threading.Lock":
        return threading.Lock()

    def start(self, target: Callable[[], None], name: str) -> Task:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        return _ThreadTask(thread)


#: The default runtime.
THREADS: Runtime = ThreadRuntime()
