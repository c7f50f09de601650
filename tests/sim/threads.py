"""kazoo's handler threads and async results, for the simulated client (:mod:`.client`):
the callback and completion threads (:class:`Worker`), ``IAsyncResult`` (:class:`AsyncResult`)."""

from __future__ import annotations

from collections import deque
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Deque, List, Optional

if TYPE_CHECKING:
    from .client import SimKazoo


class SimTimeoutError(Exception):
    """The handler's timeout exception (kazoo's ``handler.timeout_exception``)."""


class Handler:
    timeout_exception = SimTimeoutError


class Worker:
    """One of kazoo's handler threads: the callback thread (watch callbacks) or the completion
    thread (``rawlink`` callbacks). It runs what it is given in order, one at a time, after the
    event that queued it (never inline with a reply), on the kernel's own greenlet: a callback
    that blocks still raises :class:`~.kernel.BlockedInCallback`. Frozen with its process."""

    def __init__(self, client: "SimKazoo") -> None:
        self._client = client
        self._items: Deque[Callable[[], Any]] = deque()
        self._busy = False

    def put(self, item: Callable[[], Any]) -> None:
        self._items.append(item)
        if not self._busy:
            self._busy = True
            self._next()

    def _next(self) -> None:
        client = self._client
        lag = client.faults.lag()
        if lag > 0.0:
            client.kernel.at(client.kernel.now + lag, self._run)
        else:
            client.kernel.soon(self._run)

    def _run(self) -> None:
        client = self._client
        if client.dead:  # kill -9: the thread is gone with its process
            self._items.clear()
            self._busy = False
            return
        if client.kernel.now < client.frozen_until:
            client.kernel.at(client.frozen_until, self._run)
            return
        item = self._items.popleft()
        try:
            item()
        finally:
            if self._items:
                self._next()
            else:
                self._busy = False


class AsyncResult:
    """kazoo's ``IAsyncResult`` for one simulated request."""

    def __init__(self, client: "SimKazoo") -> None:
        self._client = client
        self._done = False
        self._value: Any = None
        self._exc: Optional[BaseException] = None
        self._waiters: List[Any] = []
        self._links: List[Callable[["AsyncResult"], None]] = []

    def ready(self) -> bool:
        return self._done

    def set(self, value: Any) -> None:
        self._finish(value, None)

    def set_exception(self, exc: BaseException) -> None:
        self._finish(None, exc)

    def _finish(self, value: Any, exc: Optional[BaseException]) -> None:
        if self._done:
            return
        self._done, self._value, self._exc = True, value, exc
        self._client.kernel.wake(self._waiters)
        for link in self._links:
            self._client.completions.put(partial(link, self))  # kazoo's completion thread

    def get(self, block: bool = True, timeout: Optional[float] = None) -> Any:
        if not self._done:
            self._client.kernel.block(timeout, self._waiters)
        if not self._done:
            raise SimTimeoutError()
        if self._exc is not None:
            raise self._exc
        return self._value

    def rawlink(self, callback: Callable[["AsyncResult"], None]) -> None:
        if self._done:
            self._client.completions.put(partial(callback, self))
        else:
            self._links.append(callback)
