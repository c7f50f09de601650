"""A simulated kazoo client: the part of :class:`kazoo.client.KazooClient` zkconsumer uses,
talking to :class:`~.zkmodel.Ensemble` over a simulated network.

Behaves as kazoo 2.x does (read from its source):

* ``client_id`` is ``(session id, password)`` only while CONNECTED (kazoo's ``_live``), ``None``
  while SUSPENDED, after LOST and before the first connection; ``_session_id`` is kept across
  SUSPENDED (it is what the client reconnects with) and is ``None`` from LOST until a new
  session is established (kazoo's ``_reset()``);
* requests made while disconnected wait in a queue and are sent once connected;
* on a lost connection every request sent and not yet answered fails with ``ConnectionLoss``
  (it may well have been applied), the state goes SUSPENDED, every watch is dropped and its
  callback called with an ``EventType.NONE`` event; the client then reconnects, to any
  server whose state is not older than what it has seen;
* if the session expired meanwhile, the state goes LOST, the requests queued while
  disconnected fail with ``SessionExpiredError`` (kazoo's ``_notify_pending`` drains the
  queue before ``_reset()`` replaces it), watches are dropped as above; until the next
  connection attempt (kazoo's connection retry) a new call fails at once with
  ``SessionExpiredError``; then a new session is opened: CONNECTED;
* watch callbacks run on the client's callback thread and ``rawlink`` callbacks on its
  completion thread (:class:`~.threads.Worker`: in order, one at a time, never inline with the reply
  that caused them), so a caller can see a later reply before an earlier watch fired;
  state listeners run synchronously on the connection thread, as kazoo's do;
* pings every third of the session timeout; a server that sent nothing for two thirds of it
  while a write is outstanding is dropped then, the first write since its last answer given a third
  (production's native heartbeat thread; ZooKeeper's Java client drops at two thirds too);
* an :class:`AsyncResult`'s ``get(timeout)`` raises the handler's timeout exception when
  no answer came in time: the request stays sent and may still be applied.

Latencies, drops and partitions come from the :class:`Network` (the schedule decides); the
servers' own faults (a follower cut off from its leader, the quorum lost, a session moved while
requests of the old connection are on their way) are :mod:`.servers`'.
Two faults of the process around the client are drawn by the schedule (:class:`ClientFaults`):
a calling thread descheduled between its decision and its request entering the queue
(``preempt``), and the callback threads running late (``callback_lag``). A whole-process
freeze (``frozen_until``) stops the client's connection and callback threads too.
"""

from __future__ import annotations

from collections import deque
from functools import partial
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple

from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, SessionExpiredError
from kazoo.protocol.states import EventType, KazooState, KeeperState, WatchedEvent

from . import servers
from .kernel import Kernel
from .network import ClientFaults, Network
from .threads import AsyncResult, Handler, Worker
from .zkmodel import Ensemble

#: kazoo's connection retry as zkconsumer's connector configures it (``connection_retry``).
#: Requests whose session the leader checks (a follower forwards them): their answers are proofs.
LEADER_CHECKED = frozenset(("create", "set", "delete", "multi", "sync"))

RETRY_DELAY = 0.1
RETRY_MAX_DELAY = 2.0

_EVENT_TYPES = {"CREATED": EventType.CREATED, "CHANGED": EventType.CHANGED, "DELETED": EventType.DELETED,
                "CHILD": EventType.CHILD}


def _pong() -> None:
    """A ping's answer: nothing to deliver."""


class _Transaction:
    def __init__(self, client: "SimKazoo") -> None:
        self._client = client
        self._ops: List[Tuple[str, Dict[str, Any]]] = []

    def check(self, path: str, version: int) -> None:
        self._ops.append(("check", {"path": path, "version": version}))

    def create(self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False,
               sequence: bool = False) -> None:
        self._ops.append(("create", {"path": path, "value": value, "ephemeral": ephemeral, "sequence": sequence}))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self._ops.append(("set", {"path": path, "value": value, "version": version}))

    def delete(self, path: str, version: int = -1) -> None:
        self._ops.append(("delete", {"path": path, "version": version}))

    def commit_async(self) -> AsyncResult:
        return self._client._request("multi", {"ops": list(self._ops), "path": "multi"})


class SimKazoo:
    """One member's ZooKeeper client; see the module docstring."""

    handler = Handler()

    def __init__(self, kernel: Kernel, ensemble: Ensemble, network: Network, name: str, session_timeout: float,
                 trace: Callable[[str], None]) -> None:
        self.kernel = kernel
        self.ensemble = ensemble
        self.network = network
        self.name = name
        self.timeout = session_timeout
        self._trace = trace
        self.state = KazooState.LOST
        self.sid: Optional[int] = None
        self.server = 0
        self.last_zxid = 0
        self._conn = 0  # connection generation: replies of an older connection are dropped
        self._chan_time = 0.0  # replies and events of this connection are delivered in order
        #: What is on its way to us, in order, per connection generation (:meth:`_reply`).
        self._inbox: Dict[int, Deque[Callable[[], None]]] = {}
        self._req_time = 0.0  # requests of this connection reach the server in order
        self._queue: List[Tuple[str, Dict[str, Any], AsyncResult]] = []
        self._pending: Dict[int, AsyncResult] = {}
        self._xid = 0
        self._unarrived: Dict[int, int] = {}  # xid -> connection: sent, not at a server yet
        #: Connections left while their requests may still reach a server (:mod:`.servers`):
        #: connection -> (server, session, on their way until); and those whose session moved since.
        self.lingering: Dict[int, Tuple[int, Optional[int], float]] = {}
        self.moved: Set[int] = set()
        #: The next request sent stalls the connection: kazoo gives up on it at once, the request
        #: still on its way for that long (:mod:`.servers`' session moved; 0: no stall).
        self.stall_next = 0.0
        self._retry_delay = RETRY_DELAY
        self._listeners: List[Callable[[str], Any]] = []
        self._data_watchers: Dict[str, List[Callable[[WatchedEvent], None]]] = {}
        self._child_watchers: Dict[str, List[Callable[[WatchedEvent], None]]] = {}
        self._last_answer = 0.0
        #: When the first write (request or ping) since the last answer went out, ``None`` if none:
        #: the write the heartbeat's silence rule watches (see :meth:`_silence_check`).
        self._first_unanswered: Optional[float] = None
        self._silence_check_token = 0
        #: The drop rule as it was (``Schedule.late_drop``): a silent server checked at each ping only.
        self.late_drop = False
        self.closed = False
        self.dead = False  # kill -9: nothing of this client reaches anyone again
        #: The whole process is stopped (SIGSTOP, a VM pause) until then: no request, ping or
        #: callback of this client runs, and nothing it receives is read.
        self.frozen_until = 0.0
        #: kazoo's EXPIRED_SESSION state: from the expiry's discovery to the next connection
        #: attempt, a new call fails at once with ``SessionExpiredError``.
        self._expired = False
        self.faults = ClientFaults()
        self._late_until = 0.0  # a request of the client's own threads (callbacks) is queued no earlier
        self.callbacks = Worker(self)  # kazoo's callback thread: watch callbacks
        self.completions = Worker(self)  # kazoo's completion thread: rawlink callbacks
        #: Told ``(session, send time)`` of every answered request whose session the leader checked
        #: (writes and ``sync``: the heartbeat's proofs, ``fetch.SimHeartbeat``, as production's
        #: ``heartbeat.LEADER_CHECKED``); ``_sent``: their send times by xid. Reads and pings prove
        #: nothing: an isolated follower answers them (servers.py).
        self.on_proof: Optional[Callable[[Optional[int], float], None]] = None
        #: Told ``(session, send time)`` of every handshake answered with the session (the leader
        #: touches it when it creates or revalidates it: production's ``heartbeat`` hooks ``_connect``).
        self.on_handshake: Optional[Callable[[Optional[int], float], None]] = None
        self._sent: Dict[int, float] = {}

    # ------------------------------------------------------------ kazoo's surface

    @property
    def connected(self) -> bool:
        return self.state == KazooState.CONNECTED

    @property
    def client_id(self) -> Optional[Tuple[int, bytes]]:
        """kazoo: ``(session id, password)`` while connected (``_live`` set), else ``None``."""
        if self.state != KazooState.CONNECTED or self.sid is None:
            return None
        return (self.sid, b"password")

    @property
    def _session_id(self) -> Optional[int]:
        """kazoo's ``_session_id``: kept across SUSPENDED, ``None`` from LOST until the next
        session is established (and before the first)."""
        return self.sid

    def add_listener(self, listener: Callable[[str], Any]) -> None:
        if listener not in self._listeners:
            self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[str], Any]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def get_async(self, path: str, watch: Optional[Callable[..., Any]] = None) -> AsyncResult:
        return self._request("get", {"path": path}, watch, "data")

    def exists_async(self, path: str, watch: Optional[Callable[..., Any]] = None) -> AsyncResult:
        return self._request("exists", {"path": path}, watch, "data")

    def get_children_async(self, path: str, watch: Optional[Callable[..., Any]] = None,
                           include_data: bool = False) -> AsyncResult:
        return self._request("get_children", {"path": path, "include_data": include_data}, watch, "child")

    def create_async(self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False) -> AsyncResult:
        return self._request("create", {"path": path, "value": value, "ephemeral": ephemeral, "makepath": makepath,
                                        "sequence": sequence})

    def set_async(self, path: str, value: bytes, version: int = -1) -> AsyncResult:
        return self._request("set", {"path": path, "value": value, "version": version})

    def delete_async(self, path: str, version: int = -1) -> AsyncResult:
        return self._request("delete", {"path": path, "version": version})

    def sync_async(self, path: str) -> AsyncResult:
        """kazoo's ``sync_async``: answered (with ``path``) once the server has caught up with the leader."""
        return self._request("sync", {"path": path})

    def ensure_path_async(self, path: str, acl: Any = None) -> AsyncResult:
        result = AsyncResult(self)
        inner = self.create_async(path, b"", makepath=True)

        def done(answer: AsyncResult) -> None:
            try:
                answer.get()
                result.set(True)
            except Exception as exc:  # noqa: BLE001
                from kazoo.exceptions import NodeExistsError
                if isinstance(exc, NodeExistsError):
                    result.set(True)
                else:
                    result.set_exception(exc)
        inner.rawlink(done)
        return result

    def transaction(self) -> _Transaction:
        return _Transaction(self)

    # ------------------------------------------------------------ requests

    def set_watch_now(self, path: str, watch: Callable[..., Any], children: bool) -> AsyncResult:
        """ZooKeeper's Java client's ``SetWatches`` (a model for :mod:`.kafka_member`): its send thread
        puts it first on a new connection (``ClientCnxn.primeConnection``), before any queued request.
        No application thread sends it, so no preemption nor a callback's lateness delays it; call it
        from a CONNECTED state listener (which runs on the connection, as the handshake does)."""
        if children:
            return self._request("get_children", {"path": path, "include_data": False}, watch, "child", prompt=True)
        return self._request("exists", {"path": path}, watch, "data", prompt=True)

    def _request(self, op: str, args: Dict[str, Any], watch: Optional[Callable[..., Any]] = None,
                 table: str = "data", prompt: bool = False) -> AsyncResult:
        """``table``: which of the client's watcher tables a ``watch`` goes to ("data" or "child"),
        looked up when the answer arrives (a reconnection replaces them meanwhile). ``prompt``: sent
        by the client library itself as part of the connection (:meth:`set_watch_now`), never late."""
        result = AsyncResult(self)
        if watch is not None:
            args = dict(args, watch=True)
            args["_watch"] = (watch, table)
        if prompt:
            self._call(op, args, result)
            return result
        pause = self.faults.preemption() if self.faults.preempt > 0.0 else 0.0
        if pause > 0.0:
            if self.kernel.in_task():  # the calling thread is descheduled inside the call, before kazoo's _call
                self.kernel.sleep(pause)
            else:  # one of the client's own threads: its request enters the queue late, after what it queued before
                self._late_until = max(self.kernel.now + pause, self._late_until)
                self.kernel.at(self._late_until, partial(self._call, op, args, result))
                return result
        elif self._late_until > self.kernel.now and not self.kernel.in_task():
            self.kernel.at(self._late_until, partial(self._call, op, args, result))
            return result
        self._call(op, args, result)
        return result

    def _call(self, op: str, args: Dict[str, Any], result: AsyncResult) -> None:
        """kazoo's ``_call``: fail at once when closed or in EXPIRED_SESSION, else queue (sent when connected)."""
        if self.closed or self.dead:
            result.set_exception(ConnectionClosedError("closed"))
        elif self._expired:
            result.set_exception(SessionExpiredError())
        elif self.state == KazooState.CONNECTED:
            self._send(op, args, result)
        else:
            self._queue.append((op, args, result))

    def _send(self, op: str, args: Dict[str, Any], result: AsyncResult) -> None:
        self._xid += 1
        xid, conn = self._xid, self._conn
        self._pending[xid] = result
        self._unarrived[xid] = conn
        now = self.kernel.now
        if op in LEADER_CHECKED:
            self._sent[xid] = now
        self._req_time = max(self._req_time, now + self.network.latency(now), self.frozen_until)
        self._wrote(conn, max(now, self.frozen_until))
        self.kernel.at(self._req_time, lambda: self._arrive(conn, xid, op, args))
        if self.stall_next > 0.0:
            linger, self.stall_next = self.stall_next, 0.0
            self.kernel.soon(partial(self.drop_connection, "connection stalled (a request on its way)", linger))

    def _arrive(self, conn: int, xid: int, op: str, args: Dict[str, Any]) -> None:
        """The request reaches the server (or the wire is cut and it never does)."""
        linger = self.lingering.get(conn) if conn != self._conn else None
        if (conn != self._conn and linger is None) or self.dead:
            self._unarrived.pop(xid, None)
            return
        if self.network.cut(self.name, self.kernel.now):  # TCP retransmits: it arrives once the link is back
            self.kernel.at(self.network.cut_until(self.name), lambda: self._arrive(conn, xid, op, args))
            return
        if linger is not None and self.kernel.now < linger[2]:  # the stalled link: still on its way
            self.kernel.at(linger[2], lambda: self._arrive(conn, xid, op, args))
            return
        if self.ensemble.paused:  # served in arrival order once ZooKeeper resumes
            self.ensemble.backlog.append(lambda: self._arrive(conn, xid, op, args))
            return
        self._unarrived.pop(xid, None)
        if self.ensemble.down:
            return  # no server serves: the connection is being closed
        index, sid = (self.server, self.sid) if linger is None else linger[:2]
        assert sid is not None
        if linger is not None and conn in self.moved:
            self._trace(f"{self.name} 0x{sid:x} {op} {args.get('path')} -> SessionMovedException "
                        "(a request of the old connection: not applied, that connection closed)")
            return
        if index in self.ensemble.isolated:  # a follower cut off from the leader (servers.py)
            if index in self.ensemble.closed:
                return
            self.ensemble.note_touch(index, sid)  # reported if the link is back in time (zkmodel.py)
            if servers.hold(self.ensemble, index, sid, op, partial(self._forwarded, conn, xid, op, args, sid, index)):
                return
        elif not self.ensemble.touch(sid, index):  # a follower: reported at the leader's next ping
            return  # the session is gone: the connection is closed by the server (found at the next ping)
        self._serve(conn, xid, op, args, sid, index)

    def _forwarded(self, conn: int, xid: int, op: str, args: Dict[str, Any], sid: int, index: int) -> None:
        """A request an isolated follower held reaches the leader (the link is back before syncLimit)."""
        if conn != self._conn and (conn in self.moved or conn not in self.lingering):
            self._trace(f"{self.name} 0x{sid:x} {op} {args.get('path')} -> SessionMovedException "
                        "(forwarded by the follower after the session moved: not applied)")
            return
        if self.ensemble.alive(sid):  # checked by the leader, not touched (the follower noted it: zkmodel.py)
            self._serve(conn, xid, op, args, sid, index)

    def _serve(self, conn: int, xid: int, op: str, args: Dict[str, Any], sid: int, index: int) -> None:
        """Run the request on server ``index`` and send its answer (none to a connection left)."""
        server = self.ensemble.servers[index]
        watch = args.pop("_watch", None)
        try:
            answer: Any = self.ensemble.execute(server, sid, op, args)
            failed: Optional[BaseException] = None
        except Exception as exc:  # kazoo's errors, returned to the caller (as kazoo's, without the model's frames)
            answer, failed = None, exc.with_traceback(None)
        if self.kernel.tracing:  # formatted only when someone keeps the trace
            if op == "multi":
                what = "; ".join(f"{o} {a['path']}{' v' + str(a['version']) if a.get('version', -1) != -1 else ''}"
                                 f"{' =' + a['value'].decode('utf-8', 'replace') if a.get('value') else ''}"
                                 for o, a in args["ops"])
            else:
                what = str(args.get("path"))
            outcome = type(failed).__name__ if failed else (
                "ok" if op != "multi" else ",".join(type(r).__name__ for r in answer))
            late = " (late: on a connection left)" if conn != self._conn else ""
            self._trace(f"{self.name} 0x{sid:x} {op} {what} -> {outcome}{late}")
        if conn != self._conn:
            return  # the client left that connection: the answer is never read
        zxid = server.zxid

        def deliver() -> None:
            if watch is not None and failed is None:  # kazoo registers the watcher with the answer
                callback, kind = watch
                table = self._child_watchers if kind == "child" else self._data_watchers
                callbacks = table.setdefault(args["path"], [])
                if callback not in callbacks:  # kazoo keeps a set per path: the same callback is called once
                    callbacks.append(callback)
            self._answer(xid, answer, failed, zxid)
        self._reply(conn, deliver)

    def _reply(self, conn: int, deliver: Callable[[], None]) -> None:
        now = self.kernel.now
        self._chan_time = max(self._chan_time, now + self.network.latency(now), self.frozen_until)
        # The channel is a FIFO (one TCP stream, read in order by kazoo's connection thread): each
        # arrival event delivers the *oldest* message still on its way, not the one it was made
        # for. An arrival held back (a cut link, a frozen process) is scheduled again with a later
        # sequence number than a message sent meanwhile for the very same time (``frozen_until``),
        # so delivering "its own" message reordered the stream: a watch event overtook the answer
        # of the read that set the watch, found no watcher, and was lost (seed 2025705).
        self._inbox.setdefault(conn, deque()).append(deliver)
        self.kernel.at(self._chan_time, partial(self._reply_arrives, conn))

    # The events below are methods bound with partial, not closures that reschedule themselves:
    # such a closure is a reference cycle, left for the cyclic collector (see world.run).

    def _reply_arrives(self, conn: int) -> None:
        """A message of connection ``conn`` arrives: its oldest on its way (:meth:`_reply`; one event
        per message)."""
        if conn != self._conn or self.dead:
            self._inbox.pop(conn, None)
            return  # the connection is gone, and what was on its way with it
        if self.network.cut(self.name, self.kernel.now):  # delayed, in order, until the link is back
            self.kernel.at(self.network.cut_until(self.name), partial(self._reply_arrives, conn))
            return
        if self.kernel.now < self.frozen_until:  # read, in order, once the process runs again
            self.kernel.at(self.frozen_until, partial(self._reply_arrives, conn))
            return
        deliver = self._inbox[conn].popleft()
        self._last_answer = self.kernel.now
        self._first_unanswered = None
        deliver()

    def _answer(self, xid: int, answer: Any, failed: Optional[BaseException], zxid: int) -> None:
        self.last_zxid = max(self.last_zxid, zxid)
        result = self._pending.pop(xid, None)
        sent = self._sent.pop(xid, None)
        if result is None:
            return
        if self.on_proof is not None and sent is not None and not isinstance(failed, SessionExpiredError):
            self.on_proof(self.sid, sent)
        if failed is not None:
            result.set_exception(failed)
        else:
            result.set(answer)

    def watch_fired(self, kind: str, path: str) -> None:
        """The server fired a watch of our session: the event travels on the ordered channel."""
        conn = self._conn

        def deliver() -> None:
            table = self._child_watchers if kind == "CHILD" else self._data_watchers
            callbacks = list(table.pop(path, []))
            if kind == "DELETED":
                callbacks += self._child_watchers.pop(path, [])
            event = WatchedEvent(_EVENT_TYPES[kind], KeeperState.CONNECTED, path)
            for callback in callbacks:  # kazoo: handler.dispatch_callback, to its callback thread
                self.callbacks.put(partial(callback, event))
        self._reply(conn, deliver)

    # ------------------------------------------------------------ connection

    def start(self) -> None:
        """Open a session and connect (asynchronously: CONNECTED is announced when done)."""
        self.closed = False
        self._connect()

    def _connect(self) -> None:
        conn = self._conn

        def attempt() -> None:
            if conn != self._conn or self.closed or self.dead:
                return
            now = self.kernel.now
            if self.ensemble.paused or self.network.cut(self.name, now) or now < self.frozen_until:
                self.kernel.at(max(now + 0.5, self.frozen_until), attempt)
                return
            if self.ensemble.down:  # every server refuses: kazoo's connection retry backs off
                self.kernel.at(now + self._retry_sleep(), attempt)
                return
            if self._expired:
                # kazoo's next connection attempt: CONNECTING (no listener is told; new calls are
                # queued again), then the handshake opens a new session.
                self._expired = False
                self.kernel.at(now + self.network.latency(now) * 3, attempt)
                return
            candidates = [s.index for s in self.ensemble.servers if s.zxid >= self.last_zxid
                          and self._may_connect(s.index)]
            if not candidates:  # kazoo's loop over its hosts: each refuses or stalls; it goes round again
                self.kernel.at(now + self._retry_sleep(), attempt)
                return
            self.server = self.network.rng.choice(candidates)
            if self.sid is not None and not self.ensemble.alive(self.sid):
                self._session_lost()
                # EXPIRED_SESSION until kazoo's connection retry tries again: at once with another
                # host to try, after its retry delay (0.1 s and jitter) with one.
                self._expired = True
                self.kernel.at(now + self.network.rng.choice((0.0, 0.0, self.network.rng.uniform(0.1, 0.5))),
                               attempt)
                return
            if self.sid is None:
                self.sid = self.ensemble.open_session(self.timeout)
                self.ensemble.clients[self.sid] = self
                self.last_zxid = 0
            self.ensemble.touch(self.sid)  # at the leader: a follower revalidates the session there (REVALIDATE)
            if self.on_handshake is not None:
                self.on_handshake(self.sid, now)
            for old, (index, _sid, _until) in self.lingering.items():
                if index != self.server:  # revalidated elsewhere: the leader's checkSession now fails
                    self.moved.add(old)
            self._conn += 1
            self._chan_time = self._req_time = now
            self._retry_delay = RETRY_DELAY  # kazoo: retry.reset() once connected
            self._last_answer = now
            self._first_unanswered = None
            self._set_state(KazooState.CONNECTED)
            queued, self._queue = self._queue, []
            for op, args, result in queued:
                self._send(op, args, result)
            self._ping(self._conn)
        self.kernel.at(self.kernel.now + self.network.latency(self.kernel.now) * 3, attempt)

    def _retry_sleep(self) -> float:
        """kazoo's connection retry after a full cycle of hosts failed (``KazooRetry``: the delay
        times a jitter of +-40%, then doubled, up to the connector's ``max_delay``). Used where
        :mod:`.servers`' faults leave no server to connect to (the older faults poll every 0.5 s)."""
        sleep = self._retry_delay * self.network.rng.uniform(0.6, 1.4)
        self._retry_delay = min(sleep * 2, RETRY_MAX_DELAY)
        return sleep

    def _may_connect(self, index: int) -> bool:
        """A server that can take the session now: not cut off from its leader (revalidating a
        session or creating one needs the leader), and not one that requests of a connection left
        are still on their way to (kazoo goes to the next host; see :mod:`.servers`)."""
        if index in self.ensemble.isolated:
            return False
        return not any(self.lingering.get(c, (-1,))[0] == index for c in set(self._unarrived.values()))

    def _ping(self, conn: int) -> None:
        """Every third of the timeout (a silent server is dropped by :meth:`_silence_check`)."""
        self.kernel.at(self.kernel.now + self.timeout / 3, partial(self._ping_tick, conn))

    def _wrote(self, conn: int, at: float) -> None:
        """A request or ping written at ``at``: the first since the last answer is watched."""
        if self._first_unanswered is None and conn == self._conn and not self.late_drop:
            self._first_unanswered = at
            self._arm_silence_check(conn)

    def _arm_silence_check(self, conn: int) -> None:
        self._silence_check_token += 1
        self.kernel.at(self._silence_due(), partial(self._silence_check, conn, self._silence_check_token))

    def _silence_due(self) -> float:
        """When the watched write's server is dropped if nothing comes: 2T/3 after its last answer, and
        at least T/3 after the first write since then."""
        assert self._first_unanswered is not None
        return max(self._last_answer + self.timeout * 2 / 3, self._first_unanswered + self.timeout / 3)

    def _silence_check(self, conn: int, token: int) -> None:
        """The production heartbeat's rule (``zookeeper.heartbeat=kafka``, the native thread): a server is
        dropped once nothing came from it for two thirds of the timeout while a write is outstanding, and
        the first write since its last answer has had a third of the timeout (after a freeze of this
        process, the server is given time to answer the first write). ZooKeeper's Java client drops at
        two thirds of silence as well."""
        if token != self._silence_check_token or conn != self._conn or self.closed or self.dead \
                or self.state != KazooState.CONNECTED or self._first_unanswered is None:
            return
        now = self.kernel.now
        if now < self.frozen_until:  # the native thread is stopped with its process; what came meanwhile counts
            self.kernel.at(self.frozen_until + 1e-6, partial(self._silence_check, conn, token))
            return
        due = self._silence_due()
        if now + 1e-9 >= due:
            self.drop_connection("no answer within two thirds of the timeout")
        else:
            self.kernel.at(due, partial(self._silence_check, conn, token))

    def _ping_tick(self, conn: int) -> None:
        if conn != self._conn or self.closed or self.dead or self.state != KazooState.CONNECTED:
            return
        now = self.kernel.now
        if now < self.frozen_until:  # the connection thread is stopped with its process
            self.kernel.at(self.frozen_until, partial(self._ping_tick, conn))
            return
        if self.late_drop and now - self._last_answer > self.timeout * 2 / 3:
            self.drop_connection("no answer within the read timeout")
            return
        if now >= self.frozen_until:
            self._send_ping(conn)
        self.kernel.at(now + self.timeout / 3, partial(self._ping_tick, conn))

    def _send_ping(self, conn: int) -> None:
        now = self.kernel.now
        self._wrote(conn, now)
        self.kernel.at(now + self.network.latency(now), partial(self._ping_arrives, conn))

    def _ping_arrives(self, conn: int) -> None:
        if conn != self._conn or self.dead or self.ensemble.paused or self.ensemble.down:
            return
        if self.network.cut(self.name, self.kernel.now):
            self.kernel.at(self.network.cut_until(self.name), partial(self._ping_arrives, conn))
            return
        assert self.sid is not None
        if self.server in self.ensemble.isolated:  # answered by the follower; the leader hears nothing now
            if self.server not in self.ensemble.closed and not servers.blocked(self.ensemble, self.server, self.sid):
                self.ensemble.note_touch(self.server, self.sid)
                self._reply(conn, _pong)
        elif self.ensemble.touch(self.sid, self.server):
            self._reply(conn, _pong)

    def drop_connection(self, why: str, linger: float = 0.0) -> None:
        """The TCP connection broke (or was dropped): SUSPENDED, then reconnect. ``linger``: the
        requests sent on it are still on their way to the server for that long (a stalled link,
        :mod:`.servers`' session moved); so are those an isolated follower holds."""
        if self.state != KazooState.CONNECTED or self.dead:
            return
        if self.kernel.now < self.frozen_until:  # noticed once the process runs again
            self.kernel.at(self.frozen_until, partial(self.drop_connection, why, linger))
            return
        self._trace(f"{self.name} connection lost ({why})")
        if linger > 0.0 or (self.server in self.ensemble.isolated and self.server not in self.ensemble.closed):
            self.lingering[self._conn] = (self.server, self.sid, self.kernel.now + linger)
        if self.server in self.ensemble.isolated and self.sid is not None:
            # ZooKeeper's watches belong to the connection (closing it removes them): an isolated
            # follower, which fires a batch when it catches up, must not fire them at this client.
            self.ensemble.servers[self.server].drop_watches(self.sid)
        self._conn += 1
        self._first_unanswered = None
        # ZooKeeper keeps watches per connection: closing one removes its watches on that server
        # (NIOServerCnxn.close -> ZooKeeperServer.removeCnxn -> DataTree.removeCnxn), and kazoo 2.11
        # sends no SetWatches on reconnection (it drops its watchers: _reset_watchers).
        if self.sid is not None:
            self.ensemble.servers[self.server].drop_watches(self.sid)
        # kazoo's _session_callback(CONNECTING): _live cleared, pending requests failed,
        # listeners told SUSPENDED, watches dropped.
        self.state = KazooState.SUSPENDED
        self._fail_pending(ConnectionLoss())
        self._set_state(KazooState.SUSPENDED)
        self._reset_watchers(KeeperState.CONNECTING)
        self._connect()

    def _session_lost(self) -> None:
        """kazoo's ``_session_callback(EXPIRED_SESSION)``: listeners told LOST, then
        ``_notify_pending`` fails what was sent and what was queued with ``SessionExpiredError``,
        then ``_reset()``: an empty queue, watches dropped, no session id."""
        self._trace(f"{self.name} session 0x{self.sid or 0:x} expired")
        self._set_state(KazooState.LOST)
        self._fail_pending(SessionExpiredError())
        queued, self._queue = self._queue, []
        for _op, _args, result in queued:
            result.set_exception(SessionExpiredError())
        self._reset_watchers(KeeperState.EXPIRED_SESSION)
        self.sid = None

    def _fail_pending(self, exc: BaseException) -> None:
        pending, self._pending = self._pending, {}
        self._sent.clear()
        for xid in sorted(pending):
            pending[xid].set_exception(type(exc)())

    def _reset_watchers(self, state: str) -> None:
        callbacks = [cb for table in (self._child_watchers, self._data_watchers) for path in sorted(table)
                     for cb in table[path]]
        self._child_watchers, self._data_watchers = {}, {}
        event = WatchedEvent(EventType.NONE, state, None)
        for callback in callbacks:  # kazoo: handler.dispatch_callback, to its callback thread
            self.callbacks.put(partial(callback, event))

    def _set_state(self, state: str) -> None:
        """kazoo's ``_make_state_change``: the listeners run synchronously on the connection thread."""
        self.state = state
        for listener in list(self._listeners):
            listener(state)

    def stop(self) -> None:
        """A clean close: the session ends at once (its ephemerals go), as ``KazooClient.stop()`` + ``close()``."""
        if self.closed:
            return
        self.closed = True
        self._conn += 1
        if self.sid is not None and not self.dead and not self.network.cut(self.name, self.kernel.now) \
                and not self.ensemble.paused and not self.ensemble.down and self.server not in self.ensemble.isolated:
            self.ensemble.expire(self.sid)
        self._fail_pending(ConnectionClosedError())
        self._queue = []
        self.state = KazooState.LOST

    def kill(self) -> None:
        """kill -9: the session is left to expire."""
        self.dead = True
        self._conn += 1
