"""What a member's ZooKeeper connection says when it has nothing to say: heartbeats.

An idle member sends ZooKeeper nothing but heartbeats (pings); they keep its session
alive (the server expires a session T, to T + tickTime, after the last packet it received
from it, T the negotiated session timeout), prove to the session lease that the session
is alive (:mod:`.lease`), and let the client notice a server that stopped answering, so it
moves to another server of the ensemble before the session expires. :class:`SessionHeartbeat`
instruments one kazoo client's connection for all three, in one of two modes
(``zookeeper.heartbeat``):

``quiet`` (the default where the C extension ``_heartbeat`` is built, i.e. on Linux)
    A native thread pings after 0.7 T of silence, plus a random 0 to T/30 (so members that
    started together do not ping together): on average one ping every 0.72 T, where Kafka's
    client, and kazoo, ping every T/3. Measured with the server's own counters
    (``scripts/bench_rebalance``, T = 6 s): 0.23 packets per second per idle member, against
    Kafka's 0.50. The thread needs no GIL, and kazoo's frames are written by the same C code
    with the GIL released: a Python thread that holds the GIL in one long C call (a big
    ``sorted()``, a regular expression, an extension that does not release it) delays
    kazoo's own ping by as long, but not this one, so the session survives a GIL stall of any
    length (Kafka's client, a JVM thread, survives a stall of its application thread too).

    What the lower rate costs. The last packet the server saw may be up to 0.733 T old, so a
    freeze of the *whole* process (SIGSTOP, a paused VM), or a pause of the server it is
    connected to, that lasts longer than 0.27 T can cost the session, where Kafka's cadence
    allows 0.67 T: at T = 6 s, a 2 s freeze expires about 7 % of idle sessions (Kafka's
    cadence: none), a 3 s freeze about 30 %. A server that stops answering is noticed when a
    write (a ping or a request) gets no byte back within T/6 (the kernel's TCP_INFO says
    whether anything arrived, read or not, so a member whose own threads are slow to read is
    not cut off): for an idle member at most 0.9 T after the last packet, leaving 0.1 T to
    reconnect to another server, where kazoo's own check comes 2/3 T after it. On ZooKeeper 3.4
    a server holds every request, pings included, behind a pending write, so an fsync stall
    longer than T/6 makes members reconnect (each keeps its session). ``zookeeper.heartbeat=kafka``
    keeps Kafka's cadence for those who prefer its margins to half the idle traffic.

``kafka``
    kazoo's own heartbeat: a ping whenever nothing was sent for T/3 less 0.01-0.4 s
    (0.55 packets per second per idle member at T = 6 s; Kafka's client 0.50), sent by kazoo's
    thread (it needs the GIL). Used where the C extension is not built, over TLS (the native
    thread writes plain TCP), and when asked for.

Whichever mode, the instrumentation also records, per session, the send time of the last
request or ping the server answered (:meth:`SessionHeartbeat.last_proof`), the session
lease's proofs, and the session timeout the server granted
(:meth:`SessionHeartbeat.negotiated_timeout`; a server clamps the requested one).

How: :meth:`SessionHeartbeat.install`, before ``client.start()``, wraps methods of the
client's kazoo connection handler *on that instance*, all of which run only on kazoo's
connection thread: ``_connect`` (the handshake: records the negotiated timeout; in quiet
mode hands the new socket and kazoo's wake-up socket to the native thread and stretches
kazoo's ping interval to an hour), ``_connect_attempt`` (the connection's life: the native
thread lets go of the socket when it ends), ``_read_socket`` (kazoo's reads keep their own
timeout), ``_send_request`` (woken by the native thread, it drops a suspect connection),
``_submit`` (every request and ping: send times, and no pings after Close), ``_write`` (a
frame, written by the native side without the GIL) and ``_read_header`` (every reply:
answered requests become proofs). On a kazoo without these methods it logs a warning and
leaves the client as it is (kazoo's pings; no proofs, so the lease reads for itself).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Dict, List, Optional

from kazoo.exceptions import ConnectionDropped
from kazoo.protocol.serialization import Close

log = logging.getLogger(__name__)

__all__ = ["HEARTBEAT_MODES", "QUIET_AVAILABLE", "SessionHeartbeat", "session_of"]

HEARTBEAT_MODES = ("quiet", "kafka")

#: Quiet mode, as fractions of the negotiated session timeout: silence before a ping, its
#: random extra, and how long a ping may wait for a first byte back.
QUIET_INTERVAL = 0.7
QUIET_JITTER = 1.0 / 30.0
ANSWER_TIMEOUT = 1.0 / 6.0
#: kazoo's own cadence (and Kafka's client's): a ping after T/3 of silence.
KAFKA_INTERVAL = 1.0 / 3.0
#: The read timeout handed to kazoo on a connection the native thread serves: kazoo pings
#: after half of it, so practically never.
_KAZOO_PINGS_OFF_MS = 2 * 3600 * 1000.0

_PING_XID = -2
_WATCH_XID = -1
_MAX_PENDING = 10_000
_MAX_SESSIONS = 4


def _load_native() -> Any:
    if os.environ.get("ZKCONSUMER_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from . import _heartbeat
    except ImportError:  # not built (another platform, no compiler): kazoo's pings
        return None
    return _heartbeat


_native = _load_native()
#: Whether the quiet heartbeat can run here (the C extension is built).
QUIET_AVAILABLE = _native is not None


def session_of(client: Any) -> Optional[int]:
    """The id of ``client``'s current session (``None`` before a handshake, or on a client without one)."""
    client_id = getattr(client, "client_id", None)
    return client_id[0] if client_id else None


class SessionHeartbeat:
    """Heartbeats, proofs and the negotiated timeout of one kazoo client; see the module docstring.

    Create with :meth:`install` before ``client.start()``; :meth:`stop` after
    ``client.close()`` joins the native thread (bounded: it wakes at once). Methods other
    than :meth:`stop` may be called from any thread.
    """

    def __init__(self, mode: str = "quiet", clock: Callable[[], float] = time.monotonic) -> None:
        """``clock`` must be ``time.monotonic`` (the native thread's clock) unless ``mode`` is ``kafka``."""
        if mode not in HEARTBEAT_MODES:
            raise ValueError(f"heartbeat mode must be one of {', '.join(HEARTBEAT_MODES)}, not {mode!r}")
        self._clock = clock
        self._pinger: Any = _native.Heartbeat() if mode == "quiet" and _native is not None else None
        self._negotiated: Optional[float] = None
        self._sent: Dict[int, float] = {}  # xid -> send time, kazoo's requests (connection thread only)
        # session id -> send time of its last answered request or ping; replaced whole (atomic for readers)
        self._proofs: Dict[Optional[int], float] = {}
        self._observing = False
        self._unanswered_drops = 0  # written on kazoo's connection thread only

    @classmethod
    def install(cls, client: Any, mode: str = "quiet",
                clock: Callable[[], float] = time.monotonic) -> "SessionHeartbeat":
        """Instrument ``client`` (a kazoo client, or a wrapper with the raw one as ``raw``); see the module docstring."""
        heartbeat = cls(mode, clock)
        heartbeat._instrument(getattr(client, "raw", client))
        return heartbeat

    # ------------------------------------------------------------------ what it knows

    @property
    def mode(self) -> str:
        """``quiet`` if the native thread was set up for this client, else ``kafka``.

        A connection it cannot serve (``attach`` failed: logged as a warning) is pinged by kazoo.
        """
        return "quiet" if self._pinger is not None else "kafka"

    @property
    def observing(self) -> bool:
        """Whether replies are observed (:meth:`last_proof` can answer)."""
        return self._observing

    def negotiated_timeout(self) -> Optional[float]:
        """The session timeout in seconds the server granted at the last handshake (``None`` before one)."""
        return self._negotiated

    def longest_silence(self, timeout: float) -> float:
        """The longest an idle connection of a session with ``timeout`` goes without a ping, in seconds."""
        if self._pinger is not None:
            return timeout * (QUIET_INTERVAL + QUIET_JITTER)
        return timeout * KAFKA_INTERVAL

    @property
    def unanswered_drops(self) -> int:
        """Connections dropped because a write (a ping or a request) got no byte back within a
        sixth of the session timeout, since :meth:`install` (``quiet`` mode; always 0 in ``kafka``
        mode, where kazoo's own ping timeout drops a connection and is not counted)."""
        return self._unanswered_drops

    def last_proof(self, session: Optional[int]) -> Optional[float]:
        """Send time (``clock()``) of the last request or ping of ``session`` the server answered; ``None``: none seen."""
        return self._proofs.get(session)

    def stop(self) -> None:
        """Join the native thread (call after ``client.close()``; bounded by a ping or frame being written); idempotent."""
        if self._pinger is not None:
            self._pinger.stop()

    # ------------------------------------------------------------------ instrumentation

    def _note(self, session: Optional[int], sent: float) -> None:
        previous = self._proofs.get(session)
        if previous is not None and sent <= previous:
            return
        proofs = dict(self._proofs)
        proofs[session] = sent
        if len(proofs) > _MAX_SESSIONS:  # keep the newest sessions only
            for old in sorted(proofs, key=proofs.__getitem__)[: len(proofs) - _MAX_SESSIONS]:
                del proofs[old]
        self._proofs = proofs

    def _instrument(self, raw: Any) -> None:
        connection: Any = getattr(raw, "_connection", None)
        names = ("_connect", "_connect_attempt", "_read_socket", "_send_request", "_submit", "_write", "_read_header")
        methods: List[Any] = [getattr(connection, name, None) for name in names]
        if not all(callable(m) for m in methods):
            log.warning("cannot instrument this kazoo's connection handler: kazoo's own pings, no reply proofs")
            self.stop()
            self._pinger = None
            return
        if self._pinger is not None and getattr(raw, "use_ssl", False):
            self.stop()  # the native thread writes plain TCP; kazoo pings over TLS
            self._pinger = None
        connect, attempt, read_socket, send_request, submit, write, read_header = methods
        pinger, clock, sent_at = self._pinger, self._clock, self._sent
        # kazoo's read timeout (s) of the connection the native thread serves, for the reads it bounds
        read_timeout: List[Optional[float]] = [None]

        def instrumented_connect(*args: Any, **kwargs: Any) -> Any:
            read_timeout_ms, connect_timeout_ms = connect(*args, **kwargs)
            timeout = round(float(read_timeout_ms) * 1.5) / 1000.0  # kazoo's read timeout is 2/3 of it
            self._negotiated = timeout
            if pinger is None:
                return read_timeout_ms, connect_timeout_ms
            try:
                pinger.attach(connection._socket.fileno(), connection._write_sock.fileno(), QUIET_INTERVAL * timeout,
                              QUIET_JITTER * timeout, ANSWER_TIMEOUT * timeout)
            except (AttributeError, OSError, RuntimeError, ValueError) as exc:
                log.warning("ZooKeeper heartbeat thread unavailable (%s): kazoo pings this connection", exc)
                return read_timeout_ms, connect_timeout_ms
            read_timeout[0] = float(read_timeout_ms) / 1000.0
            return _KAZOO_PINGS_OFF_MS, connect_timeout_ms  # kazoo pings after half its read timeout

        def instrumented_attempt(*args: Any, **kwargs: Any) -> Any:
            try:
                return attempt(*args, **kwargs)
            finally:
                read_timeout[0] = None
                sent_at.clear()  # what this connection left unanswered is never answered
                if pinger is not None:
                    pinger.detach()

        def instrumented_read_socket(timeout: Any) -> Any:
            # a frame's rest is awaited for kazoo's own read timeout, not the stretched one
            return read_socket(timeout if read_timeout[0] is None else read_timeout[0])

        def instrumented_send_request(timeout: Any, connect_timeout: Any) -> Any:
            # the native thread wakes kazoo's thread (through the wake-up socket this method serves)
            # when a write went unanswered: drop the connection here, on kazoo's thread, which
            # then reconnects at once (to another server: see server_order)
            if pinger is not None and pinger.suspect():
                self._unanswered_drops += 1
                raise ConnectionDropped(f"no answer from the server within {ANSWER_TIMEOUT * (self._negotiated or 0.0):.1f}s")
            return send_request(timeout if read_timeout[0] is None else read_timeout[0], connect_timeout)

        def instrumented_submit(request: Any, timeout: Any, xid: Any = None) -> Any:
            sent = clock()
            if pinger is not None and isinstance(request, Close):
                pinger.closing()  # no ping may follow a Close
            result = submit(request, timeout, xid)
            if isinstance(xid, int) and xid != _WATCH_XID:
                if len(sent_at) > _MAX_PENDING:  # defensive: replies lost
                    sent_at.clear()
                sent_at[xid] = sent
            return result

        def instrumented_write(msg: Any, timeout: Any) -> Any:
            if pinger is None:
                return write(msg, timeout)
            try:
                written = pinger.write(msg, float(timeout))
            except OSError as exc:
                raise ConnectionDropped(f"socket connection error: {exc.strerror or exc}") from exc
            if written is None:
                raise connection.handler.timeout_exception("socket time-out during write")
            if not written:  # no socket attached (the handshake): kazoo writes it
                return write(msg, timeout)
            return None

        def instrumented_read_header(timeout: Any) -> Any:
            answer = read_header(timeout)
            xid = getattr(answer[0], "xid", _WATCH_XID)
            sent = sent_at.pop(xid, None)
            if sent is None and xid == _PING_XID and pinger is not None:
                sent = pinger.answered()  # a ping of the native thread's
            if sent is not None:
                self._note(session_of(raw), sent)
            return answer

        connection._connect = instrumented_connect
        connection._connect_attempt = instrumented_attempt
        connection._read_socket = instrumented_read_socket
        connection._send_request = instrumented_send_request
        connection._submit = instrumented_submit
        connection._write = instrumented_write
        connection._read_header = instrumented_read_header
        self._observing = True
