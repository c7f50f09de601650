"""What a member's ZooKeeper connection says when it has nothing to say: heartbeats.

An idle member sends ZooKeeper nothing but heartbeats (pings); they keep its session
alive (the server expires a session T, to T + tickTime, after the last packet it received
from it, T the negotiated session timeout), prove to the session lease that the session
is alive (:mod:`.lease`), and let the client notice a server that stopped answering, so it
moves to another server of the ensemble before the session expires. :class:`SessionHeartbeat`
instruments one kazoo client's connection for all three, in one of two modes
(``zookeeper.heartbeat``):

``kafka`` (the default): the margins of ZooKeeper's Java client, which Kafka's consumer uses
    A ping after T/3 without traffic (0.3 T plus a random 0 to T/30, so members that started
    together do not ping together), and a server dropped only once it sent nothing for 2T/3
    while a write is outstanding. So a whole-process freeze (SIGSTOP, a stunned VM, swap) or a
    paused server of up to about 2T/3 costs neither the session nor a reconnect, and an fsync
    stall of the leader shorter than 2T/3 makes no member reconnect.

    Where the C extension ``_heartbeat`` is built (Linux) the pings come from a native thread
    that needs no GIL, and kazoo's frames are written by the same C code with the GIL
    released: a Python thread that holds the GIL in one long C call (a big ``sorted()``, a
    regular expression, an extension that does not release it) would delay kazoo's own ping
    by as long, but not this one, so the session survives a GIL stall of any length (Kafka's
    client, a JVM thread, survives a stall of its application thread too). The silence is
    read from the kernel (TCP_INFO: the time since the socket last received data, read or not),
    so a member whose own threads are slow to read is not cut off. Elsewhere (no extension,
    TLS, ``ZKCONSUMER_PURE_PYTHON=1``) kazoo pings itself, at the same cadence: every T/3 less
    0.01-0.4 s, a ping unanswered by the next one dropping the connection; but every request
    postpones kazoo's ping, so a client that writes more often than that is never dropped
    from a hung server (the documentation's *Guarantees under faults* page has the fallback's margins).

``quiet`` (opt-in, where the extension is built): fewer packets, thinner margins
    The native thread pings after 0.7 T of silence plus a random 0 to T/30, and drops a server
    that leaves a write unanswered for T/6. That halved an idle member's packets (0.23 per
    second at T = 6 s, against 0.5) while the session lease proved the session at 0.63 T; it now
    proves it every 0.27 T in either mode (a proof counts only once a later one confirms it:
    :mod:`.proofs`), so a *leased* member saves no packets this way any more. It spends the
    margins above: for a client whose only traffic is these pings the last packet the server saw
    may be 0.733 T old, so a whole-process freeze or a server pause longer than about 0.27 T can
    cost the session (a leased member's syncs keep its last packet within about 0.27 T; the
    documentation's *Guarantees under faults* page has freezes measured before that), and an
    fsync stall longer than T/6 makes every member with a write outstanding reconnect at once.
    Meant for large fleets of idle clients with long session timeouts, where the ensemble's
    packet rate matters more than these margins.

Whichever mode, the instrumentation also records, per session, the send time of the last
request the *leader* checked the session of and that was answered
(:meth:`SessionHeartbeat.last_proof`), the session lease's proofs, and the session timeout
the server granted
(:meth:`SessionHeartbeat.negotiated_timeout`; a server clamps the requested one).
:attr:`SessionHeartbeat.effective` names what runs (``kafka/native``, ``kafka/kazoo`` or
``quiet/native``); the connector logs it at connect and exports it.

How: :meth:`SessionHeartbeat.install`, before ``client.start()``, wraps methods of the
client's kazoo connection handler *on that instance* (:data:`HOOKED_METHODS`), all of which
run only on kazoo's connection thread: ``_connect`` (the handshake: records the negotiated
timeout; with the native thread hands it the new socket and kazoo's wake-up socket and
stretches kazoo's ping interval to an hour), ``_connect_attempt`` (the connection's life: the
native thread lets go of the socket when it ends), ``_read_socket`` (kazoo's reads keep their
own timeout), ``_send_request`` (woken by the native thread, it drops a suspect connection),
``_submit`` (every request and ping: send times, and no pings after Close), ``_write`` (a
frame, written by the native side without the GIL) and ``_read_header`` (every reply:
answered requests become proofs). On a kazoo without these methods it logs a warning and
leaves the client as it is (kazoo's pings; no proofs, so the lease reads for itself); the
unit tests install it on a real kazoo client so that a kazoo release that renames one fails
them instead.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from kazoo.exceptions import ConnectionDropped
from kazoo.protocol.serialization import Close

from .proofs import CONFIRM_GAP, ProofChain

log = logging.getLogger(__name__)

__all__ = ["HEARTBEAT_MODES", "HOOKED_METHODS", "NATIVE_AVAILABLE", "QUIET_AVAILABLE", "SessionHeartbeat",
           "close_client", "session_of"]

HEARTBEAT_MODES = ("kafka", "quiet")

#: kazoo's own cadence and Kafka's client's: a ping after T/3 of silence.
KAFKA_INTERVAL = 1.0 / 3.0
#: The native thread in ``kafka`` mode, as fractions of the negotiated session timeout: silence
#: before a ping and its random extra (so a ping is due at most T/3 after the last write), and
#: how long a server may send nothing while a write is outstanding before it is dropped (the
#: Java client's read timeout, 2T/3, counted from the last byte received).
KAFKA_NATIVE_INTERVAL = 0.3
KAFKA_NATIVE_JITTER = 1.0 / 30.0
KAFKA_SILENCE_TIMEOUT = 2.0 / 3.0
#: Quiet mode: silence before a ping, its random extra, and how long a write may wait for a
#: first byte back (counted from the write).
QUIET_INTERVAL = 0.7
QUIET_JITTER = 1.0 / 30.0
ANSWER_TIMEOUT = 1.0 / 6.0
#: The kazoo connection-handler methods :meth:`SessionHeartbeat.install` wraps; all must exist.
HOOKED_METHODS = ("_connect", "_connect_attempt", "_read_socket", "_send_request", "_submit", "_write",
                  "_read_header")
#: The read timeout handed to kazoo on a connection the native thread serves: kazoo pings
#: after half of it, so practically never.
_KAZOO_PINGS_OFF_MS = 2 * 3600 * 1000.0

_PING_XID = -2
_WATCH_XID = -1

#: Request types a follower forwards to the leader, whose session check they pass (ZooKeeper's
#: PrepRequestProcessor): the writes (create, delete, setData, setACL, check, multi, create2,
#: reconfig) and ``sync``. Only their answers prove the session alive: a follower cut off from
#: its leader answers reads and pings from its own state, for as long as syncLimit x tickTime
#: (10 s with ZooKeeper's sample configuration), also for a session the leader expired meanwhile.
LEADER_CHECKED = frozenset((1, 2, 5, 7, 9, 13, 14, 15, 16))
#: ZooKeeper's error codes of a request refused for its session: no proof.
_SESSION_ERRORS = frozenset((-112, -118))  # SESSIONEXPIRED, SESSIONMOVED
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
#: Whether the native heartbeat thread can run here (the C extension is built).
NATIVE_AVAILABLE = _native is not None
#: Whether ``quiet`` can run here (it needs the native thread).
QUIET_AVAILABLE = NATIVE_AVAILABLE


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

    def __init__(self, mode: str = "kafka", clock: Callable[[], float] = time.monotonic) -> None:
        """``mode`` is one of :data:`HEARTBEAT_MODES`. The native thread serves the connection
        when the extension is built and ``clock`` is ``time.monotonic`` (the native thread's
        clock; tests that pass another clock get kazoo's pings); ``quiet`` needs it and falls
        back to ``kafka`` (kazoo's pings, logged) where it cannot run."""
        if mode not in HEARTBEAT_MODES:
            raise ValueError(f"heartbeat mode must be one of {', '.join(HEARTBEAT_MODES)}, not {mode!r}")
        self._clock = clock
        native = _native is not None and clock is time.monotonic
        if mode == "quiet" and not native:
            log.warning("zookeeper.heartbeat=quiet needs the _heartbeat C extension (Linux): using kafka")
            mode = "kafka"
        self._mode = mode
        self._pinger: Any = _native.Heartbeat() if native else None
        self._negotiated: Optional[float] = None
        self._sent: Dict[int, float] = {}  # xid -> send time, kazoo's requests (connection thread only)
        # session id -> send time of its last answered request or ping; replaced whole (atomic for readers)
        self._proofs: Dict[Optional[int], float] = {}
        # session id -> the send time its proofs count from (proofs.py); replaced whole as well
        self._counted: Dict[Optional[int], float] = {}
        self._chains: Dict[Optional[int], ProofChain] = {}  # kazoo's connection thread only
        #: Bumped right after the proofs or the negotiated timeout change (a reader that saw the
        #: old value may have read the old data: the session lease caches by it).
        self.version = 0
        self._observing = False
        self._unanswered_drops = 0  # written on kazoo's connection thread only

    @classmethod
    def install(cls, client: Any, mode: str = "kafka",
                clock: Callable[[], float] = time.monotonic) -> "SessionHeartbeat":
        """Instrument ``client`` (a kazoo client, or a wrapper with the raw one as ``raw``); see the module docstring."""
        heartbeat = cls(mode, clock)
        heartbeat._instrument(getattr(client, "raw", client))
        return heartbeat

    # ------------------------------------------------------------------ what it knows

    @property
    def mode(self) -> str:
        """The cadence that runs: ``kafka`` (Kafka's margins) or ``quiet`` (see the module docstring).

        ``quiet`` falls back to ``kafka`` where the native thread cannot serve the client.
        """
        return self._mode

    @property
    def pinger(self) -> str:
        """Who sends the pings: ``native`` (the thread that needs no GIL) or ``kazoo`` (kazoo's own thread).

        A connection the native thread cannot serve (``attach`` failed: logged as a warning) is
        pinged by kazoo, at Kafka's cadence, whatever the mode.
        """
        return "native" if self._pinger is not None else "kazoo"

    @property
    def effective(self) -> str:
        """``<mode>/<pinger>``: ``kafka/native``, ``kafka/kazoo`` or ``quiet/native``."""
        return f"{self._mode}/{self.pinger}"

    @property
    def observing(self) -> bool:
        """Whether replies are observed (:meth:`last_proof` can answer)."""
        return self._observing

    def negotiated_timeout(self) -> Optional[float]:
        """The session timeout in seconds the server granted at the last handshake (``None`` before one)."""
        return self._negotiated

    def longest_silence(self, timeout: float) -> float:
        """The longest an idle connection of a session with ``timeout`` goes without a ping, in seconds."""
        if self._pinger is not None and self._mode == "quiet":
            return timeout * (QUIET_INTERVAL + QUIET_JITTER)
        return timeout * KAFKA_INTERVAL

    def shortest_silence(self, timeout: float) -> float:
        """The soonest an idle connection of a session with ``timeout`` pings after its last send, in seconds
        (the native thread's interval; kazoo's: half its read timeout, 2T/3, less up to 0.4 s)."""
        if self._pinger is not None:
            return timeout * (QUIET_INTERVAL if self._mode == "quiet" else KAFKA_NATIVE_INTERVAL)
        return max(0.0, timeout * KAFKA_INTERVAL - 0.4)

    def _timings(self, timeout: float) -> Tuple[float, float, float, bool]:
        """The native thread's ``(interval, jitter, answer_timeout, since_receive)`` for a session of ``timeout`` s."""
        if self._mode == "quiet":
            return QUIET_INTERVAL * timeout, QUIET_JITTER * timeout, ANSWER_TIMEOUT * timeout, False
        return (KAFKA_NATIVE_INTERVAL * timeout, KAFKA_NATIVE_JITTER * timeout, KAFKA_SILENCE_TIMEOUT * timeout,
                True)

    @property
    def unanswered_drops(self) -> int:
        """Connections the native thread dropped because the server stopped answering, since
        :meth:`install` (``kafka``: nothing received for 2T/3 while a write was outstanding;
        ``quiet``: a write got no byte back within T/6). Always 0 with kazoo's pings, whose own
        ping timeout drops a connection uncounted."""
        return self._unanswered_drops

    def last_proof(self, session: Optional[int]) -> Optional[float]:
        """Send time (``clock()``) of the last request of ``session`` the leader checked and answered
        (:data:`LEADER_CHECKED`); ``None``: none seen. When proofs are due, not how long the session lives:
        see :meth:`counted_since`."""
        return self._proofs.get(session)

    def counted_since(self, session: Optional[int]) -> Optional[float]:
        """The send time from which ``session``'s proofs count (:mod:`.proofs`): the leader keeps the
        session for one timeout from then at least. The send time of a handshake that answered with
        the session counts at once (the leader touches the session when it creates or revalidates
        it); a request's only once a later proof confirms it. ``None``: nothing counts yet."""
        return self._counted.get(session)

    def stop(self) -> None:
        """Join the native thread (call after ``client.close()``; bounded by a ping or frame being written); idempotent."""
        if self._pinger is not None:
            self._pinger.stop()

    # ------------------------------------------------------------------ instrumentation

    def _chain(self, session: Optional[int]) -> ProofChain:
        """``session``'s proof chain, made empty if it has none (kazoo's connection thread only). The callers
        keep :attr:`_chains` to the sessions of :attr:`_proofs` and :attr:`_counted` (each
        :data:`_MAX_SESSIONS` at most)."""
        chain = self._chains.get(session)
        if chain is None:
            chain = self._chains[session] = ProofChain()
        return chain

    def _chained_counts(self) -> Dict[Optional[int], float]:
        """A new dict of the published counts of the sessions that still have a chain, for the caller to
        complete and publish whole (:attr:`_counted` itself is never mutated: other threads read it)."""
        return {s: t for s, t in self._counted.items() if s in self._chains}

    def _note(self, session: Optional[int], sent: float) -> None:
        previous = self._proofs.get(session)
        if previous is not None and sent <= previous:
            return
        chain = self._chain(session)
        timeout = self._negotiated
        if chain.note(sent, self._clock(), CONFIRM_GAP * timeout if timeout else float("inf")):
            self._count(session, chain)
        proofs = dict(self._proofs)
        proofs[session] = sent
        if len(proofs) > _MAX_SESSIONS:  # keep the newest sessions only
            for old in sorted(proofs, key=proofs.__getitem__)[: len(proofs) - _MAX_SESSIONS]:
                del proofs[old]
                self._chains.pop(old, None)
            self._counted = self._chained_counts()
        self._proofs = proofs
        self.version += 1

    def _count(self, session: Optional[int], chain: ProofChain) -> None:
        """Publish ``chain``'s count for ``session`` (a new dict: readers on other threads see one or the other)."""
        if chain.counted is None:
            return
        counted = self._chained_counts()
        counted[session] = chain.counted
        if len(counted) > _MAX_SESSIONS:  # keep the newest sessions only
            for old in sorted(counted, key=counted.__getitem__)[: len(counted) - _MAX_SESSIONS]:
                del counted[old]
                if old not in self._proofs:
                    self._chains.pop(old, None)
        self._counted = counted
        self.version += 1

    def _handshake(self, session: Optional[int], sent: float) -> None:
        """A handshake sent at ``sent`` answered with ``session``: the leader touched it (created or revalidated)."""
        if session is None:
            return
        chain = self._chain(session)
        if chain.counted is None or sent > chain.counted:
            chain.counted = sent
            self._count(session, chain)

    def _use_kazoo_pings(self) -> None:
        """No native thread for this client: kazoo pings, at Kafka's cadence."""
        self.stop()
        self._pinger = None
        if self._mode == "quiet":
            log.warning("zookeeper.heartbeat=quiet cannot serve this client (TLS, or an unknown kazoo): using kafka")
            self._mode = "kafka"

    def _answer_window(self) -> float:
        """Seconds the native thread lets the server stay silent, for the message of a drop."""
        return self._timings(self._negotiated or 0.0)[2]

    def _instrument(self, raw: Any) -> None:
        connection: Any = getattr(raw, "_connection", None)
        methods: List[Any] = [getattr(connection, name, None) for name in HOOKED_METHODS]
        if not all(callable(m) for m in methods):
            log.warning("cannot instrument this kazoo's connection handler: kazoo's own pings, no reply proofs")
            self._use_kazoo_pings()
            return
        if self._pinger is not None and getattr(raw, "use_ssl", False):
            self._use_kazoo_pings()  # the native thread writes plain TCP; kazoo pings over TLS
        connect, attempt, read_socket, send_request, submit, write, read_header = methods
        pinger, clock, sent_at = self._pinger, self._clock, self._sent
        # kazoo's read timeout (s) of the connection the native thread serves, for the reads it bounds
        read_timeout: List[Optional[float]] = [None]

        def instrumented_connect(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            read_timeout_ms, connect_timeout_ms = connect(*args, **kwargs)
            timeout = round(float(read_timeout_ms) * 1.5) / 1000.0  # kazoo's read timeout is 2/3 of it
            self._negotiated = timeout
            self.version += 1
            self._handshake(session_of(raw), started)
            if pinger is None:
                return read_timeout_ms, connect_timeout_ms
            try:
                pinger.attach(connection._socket.fileno(), connection._write_sock.fileno(), *self._timings(timeout))
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
                raise ConnectionDropped(f"no answer from the server within {self._answer_window():.1f}s")
            return send_request(timeout if read_timeout[0] is None else read_timeout[0], connect_timeout)

        def instrumented_submit(request: Any, timeout: Any, xid: Any = None) -> Any:
            sent = clock()
            if pinger is not None and isinstance(request, Close):
                pinger.closing()  # no ping may follow a Close
            result = submit(request, timeout, xid)
            if isinstance(xid, int) and xid >= 0 and getattr(request, "type", None) in LEADER_CHECKED:
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
            header = answer[0]
            xid = getattr(header, "xid", _WATCH_XID)
            sent = sent_at.pop(xid, None)
            if xid == _PING_XID and pinger is not None:
                pinger.answered()  # a ping of the native thread's: kept alive, but no proof (see LEADER_CHECKED)
            if sent is not None and getattr(header, "err", 0) not in _SESSION_ERRORS:
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


def close_client(client: Any, heartbeat: Optional[SessionHeartbeat], who: str) -> None:
    """Stop and close ``client``, then join its heartbeat thread (the connection it served is
    closed by then). Each step runs whatever the one before raised, an interrupt included: a
    failure to stop or close is logged for ``who`` (an interrupt is raised again once all ran)."""
    try:
        try:
            client.stop()
        except Exception as exc:  # noqa: BLE001 - e.g. kazoo's WriterNotClosedException: still close
            log.warning("%s: closing the ZooKeeper session: %r", who, exc)
        finally:  # an interrupt while stopping still releases the client
            try:
                client.close()
            except Exception as exc:  # noqa: BLE001 - still join the heartbeat
                log.warning("%s: releasing the ZooKeeper client: %r", who, exc)
    finally:
        if heartbeat is not None:
            heartbeat.stop()
