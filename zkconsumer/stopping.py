"""Stopping several parts at once, each on its own thread, waiting with deadlines.

``shutdown()`` must not wait, one part after the other, for threads that may be
blocked in ZooKeeper calls: the waits would add up. :class:`ParallelStops` runs
each blocking ``stop()`` on a thread named ``zkconsumer-stop-<what>-<id>``;
the caller waits for the ones it needs before going on, each until a
deadline, and finally joins them all (after closing the ZooKeeper client,
which releases every call still waiting).

May import: the standard library only.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, List

__all__ = ["ParallelStops"]

log = logging.getLogger(__name__)


class ParallelStops:
    """Runs blocking ``stop()`` calls at once, each on its own named thread, and waits with deadlines.

    shutdown() must not wait, one after the other, for threads that may be
    blocked in ZooKeeper calls: each stop runs on ``zkconsumer-stop-<what>-<id>``,
    :meth:`wait` waits for one until a deadline, and :meth:`join` (after the
    ZooKeeper client was closed, which releases every blocked call) joins them all.
    A failing stop is logged, never raised.
    """

    def __init__(self, consumer_id: str) -> None:
        self._consumer_id = consumer_id
        self._threads: Dict[str, threading.Thread] = {}

    def run(self, what: str, stop: Callable[[], Any]) -> None:
        def target() -> None:
            try:
                stop()
            except Exception:  # noqa: BLE001 - shutdown goes on
                log.exception("%s: stopping %s failed", self._consumer_id, what)

        thread = threading.Thread(target=target, name=f"zkconsumer-stop-{what}-{self._consumer_id}", daemon=True)
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
