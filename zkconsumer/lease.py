"""A session lease: may this member still believe its ZooKeeper session is alive?

kazoo learns that a session expired only when it next hears from the server. A
process frozen past its session timeout (SIGSTOP, a stalled VM) resumes still
believing it is connected, and for a moment its fetchers go on fetching and its
iterators go on handing out partitions that another member owns by now: in the
chaos test, that moment delivered ~10 s of backlog twice.

:class:`SessionLease` is valid for ``session_timeout`` after the last proof:
the send time of a request (or of kazoo's heartbeat ping) that the server
answered (the server cannot have expired a session that answered a request
sent within that time). Proofs come for free from kazoo's own traffic
(:class:`ReplyObserver` notes, on kazoo's connection thread, when each
request was sent and when its reply came: kazoo pings every third of the
session timeout when idle, so no extra request is needed); only when no
reply was observed for half a session timeout (or the observer cannot be
installed on this kazoo version) does the lease make its own cheap read. A resumed process finds the lease lapsed at once, before kazoo notices
anything; fetchers stop queuing until a proof succeeds again, on the same
session or on the new one the rebalancer rejoins with.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, Optional

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

log = logging.getLogger(__name__)


class ReplyObserver:
    """Notes the send time of the last request or ping of ``client`` that the server answered.

    Wraps two methods of kazoo's connection handler *on that instance*
    (``_submit``, which sends every request and ping with its xid, and
    ``_read_header``, which reads every reply's xid); both run only on kazoo's
    connection thread, and the wrappers only record a clock reading. Replies
    come in request order; watch notifications (no request) prove nothing.
    :meth:`install` returns ``None`` when this kazoo has no such methods.
    """

    _MAX_PENDING = 10_000

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._sent: Dict[int, float] = {}
        self.last_proof: Optional[float] = None  # read from any thread (a float: atomic)

    @classmethod
    def install(cls, client: Any, clock: Callable[[], float]) -> Optional["ReplyObserver"]:
        connection = getattr(client, "_connection", None)
        submit = getattr(connection, "_submit", None)
        read_header = getattr(connection, "_read_header", None)
        if not callable(submit) or not callable(read_header):
            return None
        observer = cls(clock)

        def observed_submit(request: Any, timeout: Any, xid: Any = None) -> Any:
            sent = clock()
            result = submit(request, timeout, xid)
            if isinstance(xid, int) and xid != -1:
                if len(observer._sent) > cls._MAX_PENDING:  # replies lost with a connection
                    observer._sent.clear()
                observer._sent[xid] = sent
            return result

        def observed_read_header(timeout: Any) -> Any:
            answer = read_header(timeout)
            sent = observer._sent.pop(getattr(answer[0], "xid", -1), None)
            if sent is not None and (observer.last_proof is None or sent > observer.last_proof):
                observer.last_proof = sent
            return answer

        connection._submit = observed_submit  # type: ignore[union-attr]
        connection._read_header = observed_read_header  # type: ignore[union-attr]
        return observer


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
        self._observer = ReplyObserver.install(client, clock)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def valid(self) -> bool:
        """``True`` while the session was proven alive less than one session timeout ago."""
        return self._clock() - self._proven_at() < self._timeout

    def _proven_at(self) -> float:
        observed = self._observer.last_proof if self._observer is not None else None
        return self._last_proof if observed is None else max(self._last_proof, observed)

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
            if self._clock() - self._proven_at() < self._timeout / 2.0:
                lapsed = False
                continue  # kazoo's own requests and pings prove it: no read of ours
            proven = self.prove()
            if not proven and not self.valid() and not lapsed:
                log.warning("ZooKeeper session not proven for %.1fs: holding back deliveries", self._timeout)
            lapsed = not self.valid()
