"""A session lease: may this member still believe its ZooKeeper session is alive?

kazoo learns that a session expired only when it next hears from the server. A
process frozen past its session timeout (SIGSTOP, a stalled VM) resumes still
believing it is connected, and for a moment its fetchers go on fetching and its
iterators go on handing out partitions that another member owns by now: in the
chaos test, that moment delivered ~10 s of backlog twice.

:class:`SessionLease` proves the session with a cheap read every
``session_timeout / 3`` and is valid for ``session_timeout`` after the last
proof (the server cannot have expired a session that answered within that
time). A resumed process finds the lease lapsed at once, before kazoo notices
anything; fetchers stop queuing until a proof succeeds again, on the same
session or on the new one the rebalancer rejoins with.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

log = logging.getLogger(__name__)


class SessionLease:
    """Valid for ``session_timeout_s`` after the last successful read of ``path``.

    Thread-safe; :meth:`valid` is cheap (a clock read). :meth:`stop` joins the thread.
    """

    def __init__(
        self,
        client: KazooClient,
        path: str,
        session_timeout_s: float,
        *,
        name: str = "zkconsumer-lease",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._path = path
        self._timeout = session_timeout_s
        self._clock = clock
        self._last_proof = clock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def valid(self) -> bool:
        """``True`` while the session was proven alive less than one session timeout ago."""
        return self._clock() - self._last_proof < self._timeout

    def prove(self) -> bool:
        """One read of ``path``; on success the lease runs for another session timeout."""
        started = self._clock()
        try:
            self._client.exists(self._path)
        except KazooException:
            return False
        self._last_proof = started  # the server answered a request sent at `started`
        return True

    def _run(self) -> None:
        interval = self._timeout / 3.0
        lapsed = False
        while not self._stopped.wait(interval if not lapsed else min(interval, 0.2)):
            proven = self.prove()
            if not proven and not self.valid() and not lapsed:
                log.warning("ZooKeeper session not proven for %.1fs: holding back deliveries", self._timeout)
            lapsed = not self.valid()
