"""A session lease: may this member still believe its ZooKeeper session is alive?

kazoo learns that a session expired only when it next hears from the server. A
process frozen past its session timeout (SIGSTOP, a stalled VM) resumes still
believing it is connected, and for a moment its fetchers go on fetching and its
iterators go on handing out partitions that another member owns by now: in the
chaos test, that moment delivered ~10 s of backlog twice.

:class:`SessionLease` is valid for one session timeout after the last proof:
the send time of a request (or of kazoo's heartbeat ping) that the server
answered (the server cannot have expired a session that answered a request
sent within that time). Proofs come for free from kazoo's own traffic
(:class:`ReplyObserver` notes, on kazoo's connection thread, when each
request was sent and when its reply came: kazoo pings every third of the
session timeout when idle, so no extra request is needed); only when no
reply was observed for half a session timeout (or the observer cannot be
installed on this kazoo version) does the lease make its own cheap read. A
resumed process finds the lease lapsed at once, before kazoo notices
anything; fetchers stop queuing until a proof succeeds again, on the same
session or on the new one the rebalancer rejoins with.

The timeout is the one the server *negotiated*, not the one requested: a
ZooKeeper server clamps the requested timeout to ``[minSessionTimeout,
maxSessionTimeout]`` (by default ``[2, 20] x tickTime``), and a lease longer
than the real session would let an expired member keep delivering.
:func:`track_negotiated_timeout` records it from kazoo's connection handshake.

Outages: while ZooKeeper is away the proofs fail and the lease runs out one
session timeout after the last proof. Until then fetchers keep fetching and
iterators keep handing out; after it, iterators still hand out what was
already queued, but nothing new is queued, since the session may have
expired and the partitions may belong to another member by now. Positions
do not move meanwhile, so nothing is skipped: when ZooKeeper answers again on
the same session, fetching resumes where it stopped; on a new session the
rebalancer rejoins and fetching resumes from the committed offsets.

Idle traffic, and why it is not lower. An idle member sends nothing but kazoo's
heartbeat: one session, one ping whenever nothing was sent for a third of the negotiated
timeout T, less 0.01-0.4 s of jitter (measured with the server's ``cons``, T = 6 s: 0.55
packets/s per member, every one a PING; Kafka's consumer pings at exactly T/3: 0.50/s).
The member neither polls nor holds a second session. Pinging less often is not safe: the
server expires a session T (to T + tickTime) after its last packet, so with pings every I
seconds a ping may be delayed by up to T - I (GIL, GC, a loaded host) before the session
is lost: 2T/3 (4 s) at I = T/3, only T/3 (2 s) at the I = 2T/3 it would take to halve the
idle rate. And kazoo notices a dead server only when a ping is still unanswered at the next
ping time (2I after the last reply): at I = 2T/3 that is 4T/3, past the session timeout, so
a member on a failing ensemble server would reconnect to a healthy one too late and lose
its session, where at T/3 it reconnects within 2T/3. This lease also relies on the cadence
(a proof at least every T/3; its own read only after T/2 without one). So zkconsumer keeps
kazoo's cadence; idle ZooKeeper traffic is level with Kafka's consumer by design.

Proofs count only on the session the member last (re)joined with
(:meth:`SessionLease.accept_session`), whether they are the lease's own reads
or observed replies to kazoo's requests and pings (each observed proof is
noted with the session it was answered on): after an expiry kazoo opens a new
session at once, and a proof on it says nothing about the partitions owned
under the old one, so deliveries stay held until the rebalancer has rejoined.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from ..errors import ZkConsumerError

log = logging.getLogger(__name__)


def track_negotiated_timeout(client: KazooClient) -> Callable[[], Optional[float]]:
    """Record the session timeout the server grants ``client`` at each handshake; call before ``start()``.

    Returns a function giving the last negotiated timeout in seconds (``None``
    before the first handshake, or if this kazoo version's connection handler
    cannot be observed). kazoo does not keep the negotiated value: its
    connection handler's ``_connect`` returns ``(read timeout, connect
    timeout)`` derived from it (read timeout = 2/3 of it), which is what is
    recorded here.
    """
    negotiated: List[Any] = [None]
    connection: Any = getattr(client, "_connection", None)
    original = getattr(connection, "_connect", None)
    if original is None:  # pragma: no cover - another kazoo version: fall back to the configured timeout
        log.warning("cannot observe the negotiated ZooKeeper session timeout; using the configured one")
        return lambda: None

    def connect(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        try:
            negotiated[0] = round(float(result[0]) * 1.5) / 1000.0
        except (TypeError, ValueError, IndexError):  # pragma: no cover - unexpected shape
            pass
        return result

    connection._connect = connect
    return lambda: negotiated[0]


def _session_of(client: Any) -> Optional[int]:
    """The id of ``client``'s current session (``None`` before a handshake, or on a client without one)."""
    client_id = getattr(client, "client_id", None)
    return client_id[0] if client_id else None


class ReplyObserver:
    """Notes, per session, the send time of the last request or ping of ``client`` that the server answered.

    Wraps two methods of kazoo's connection handler *on that instance*
    (``_submit``, which sends every request and ping with its xid, and
    ``_read_header``, which reads every reply's xid); both run only on kazoo's
    connection thread, and the wrappers only record a clock reading and the
    session the reply came on (kazoo sets the session id at the handshake,
    before any reply is read on it). Replies come in request order; watch
    notifications (no request) prove nothing. :meth:`install` returns
    ``None`` when this kazoo has no such methods.
    """

    _MAX_PENDING = 10_000
    _MAX_SESSIONS = 4

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._sent: Dict[int, float] = {}
        # session id -> send time of its last answered request; replaced whole (atomic for readers)
        self._proofs: Dict[Optional[int], float] = {}

    def last_proof(self, session: Optional[int]) -> Optional[float]:
        """Send time of the last answered request on ``session`` (``None``: none observed). Any thread."""
        return self._proofs.get(session)

    def _note(self, session: Optional[int], sent: float) -> None:
        previous = self._proofs.get(session)
        if previous is not None and sent <= previous:
            return
        proofs = dict(self._proofs)
        proofs[session] = sent
        if len(proofs) > self._MAX_SESSIONS:  # keep the newest sessions only
            for old in sorted(proofs, key=proofs.__getitem__)[: len(proofs) - self._MAX_SESSIONS]:
                del proofs[old]
        self._proofs = proofs

    @classmethod
    def install(cls, client: Any, clock: Callable[[], float]) -> Optional["ReplyObserver"]:
        """Observe ``client`` (a kazoo client, or a wrapper with the raw one as ``raw``)."""
        raw = getattr(client, "raw", client)
        connection = getattr(raw, "_connection", None)
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
            if sent is not None:
                observer._note(_session_of(raw), sent)
            return answer

        connection._submit = observed_submit  # type: ignore[union-attr]
        connection._read_header = observed_read_header  # type: ignore[union-attr]
        return observer


class SessionLease:
    """Valid for one session timeout after the last proof of the accepted session.

    The session timeout is ``negotiated()`` when it gives one (see
    :func:`track_negotiated_timeout`), else ``session_timeout_s``. Proofs are
    replies to kazoo's own requests and pings (:class:`ReplyObserver`) and,
    when none came for half a session timeout, the lease's own read of
    ``path``. ``client`` should bound its calls (a
    :class:`~zkconsumer.zookeeper.zkcalls.BoundedZooKeeper`), so the thread never blocks
    longer than a proof interval while ZooKeeper is away. Thread-safe;
    :meth:`valid` is cheap (a clock read). :meth:`stop` joins the thread.
    """

    def __init__(
        self,
        client: Any,
        path: str,
        session_timeout_s: float,
        *,
        name: str = "zkconsumer-lease",
        clock: Callable[[], float] = time.monotonic,
        negotiated: Callable[[], Optional[float]] = lambda: None,
    ) -> None:
        self._client = client
        self._path = path
        self._configured = session_timeout_s
        self._negotiated = negotiated
        self._clock = clock
        self._last_proof = clock()
        # the session whose proofs count: the one the member joined with (None: the first one seen)
        self._accepted: Optional[int] = _session_of(client)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._observer = ReplyObserver.install(client, clock)

    @property
    def timeout(self) -> float:
        """The session timeout in seconds: the negotiated one once known, else the configured one."""
        negotiated = self._negotiated()
        return self._configured if negotiated is None else negotiated

    def start(self) -> None:
        self._thread.start()

    def request_stop(self) -> None:
        """Ask the thread to end (returns at once)."""
        self._stopped.set()

    def stop(self, timeout: Optional[float] = None) -> bool:
        """Stop and join the thread (at most ``timeout`` s); ``True`` once it has ended."""
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def valid(self) -> bool:
        """``True`` while the accepted session was proven alive less than one session timeout ago."""
        return self._clock() - self._proven_at() < self.timeout

    def _proven_at(self) -> float:
        """The last proof of the accepted session: our own read's, or an observed reply's (the later)."""
        if self._observer is None:
            return self._last_proof
        accepted = self._accepted
        observed = self._observer.last_proof(self._current_session() if accepted is None else accepted)
        return self._last_proof if observed is None else max(self._last_proof, observed)

    def accept_session(self) -> None:
        """The member (re)joined on the current session: proofs on it count from now on."""
        self._accepted = self._current_session()

    def _current_session(self) -> Optional[int]:
        return _session_of(self._client)

    def prove(self) -> bool:
        """One read of ``path``; on success the lease runs for another session timeout.

        A read answered on a session other than the accepted one is no proof.
        """
        started = self._clock()
        try:
            self._client.exists(self._path)
        except (KazooException, ZkConsumerError):
            return False
        session = self._current_session()
        if session is not None:
            if self._accepted is None:
                self._accepted = session
            elif session != self._accepted:
                return False  # a new session: wait for the rejoin (accept_session)
        self._last_proof = started  # the server answered a request sent at `started`
        return True

    def _run(self) -> None:
        lapsed = False
        while not self._stopped.wait(self.timeout / 3.0 if not lapsed else min(self.timeout / 3.0, 0.2)):
            if self._accepted is None:
                self._accepted = self._current_session()  # the session the member joined with
            if self._clock() - self._proven_at() < self.timeout / 2.0:
                if lapsed:
                    log.info("ZooKeeper session proven again: deliveries resume")
                lapsed = False
                continue  # kazoo's own requests and pings prove it: no read of ours
            proven = self.prove()
            if not proven and not self.valid() and not lapsed:
                log.warning("ZooKeeper session not proven for %.1fs: holding back new deliveries until it is",
                            self.timeout)
            elif proven and lapsed:
                log.info("ZooKeeper session proven again: deliveries resume")
            lapsed = not self.valid()
