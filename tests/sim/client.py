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
  completion thread (:class:`_Worker`: in order, one at a time, never inline with the reply
  that caused them), so a caller can see a later reply before an earlier watch fired;
  state listeners run synchronously on the connection thread, as kazoo's do;
* pings every third of the session timeout; a server that answered nothing for two thirds
  of it is dropped (ZooKeeper's Java client and kazoo alike);
* an :class:`AsyncResult`'s ``get(timeout)`` raises the handler's timeout exception when
  no answer came in time: the request stays sent and may still be applied.

Latencies, drops and partitions come from the :class:`Network` (the schedule decides).
Two faults of the process around the client are drawn by the schedule (:class:`ClientFaults`):
a calling thread descheduled between its decision and its request entering the queue
(``preempt``), and the callback threads running late (``callback_lag``). A whole-process
freeze (``frozen_until``) stops the client's connection and callback threads too.
"""

from __future__ import annotations

import random
from collections import deque
from functools import partial
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, SessionExpiredError
from kazoo.protocol.states import EventType, KazooState, KeeperState, WatchedEvent

from .kernel import Kernel
from .zkmodel import Ensemble

_EVENT_TYPES = {"CREATED": EventType.CREATED, "CHANGED": EventType.CHANGED, "DELETED": EventType.DELETED,
                "CHILD": EventType.CHILD}


class SimTimeoutError(Exception):
    """The handler's timeout exception (kazoo's ``handler.timeout_exception``)."""


class _Handler:
    timeout_exception = SimTimeoutError


class Network:
    """Latencies and faults between clients and the ensemble, drawn from the schedule's generator."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.slow_until = 0.0  # replies are slow (seconds) until then
        self.partitioned: Dict[str, float] = {}  # client name -> cut off from ZooKeeper until then

    def latency(self, now: float) -> float:
        if now < self.slow_until and self.rng.random() < 0.3:
            return self.rng.uniform(1.0, 8.0)
        return self.rng.uniform(0.0005, 0.004)

    def cut(self, name: str, now: float) -> bool:
        return self.partitioned.get(name, 0.0) > now

    def cut_until(self, name: str) -> float:
        return self.partitioned.get(name, 0.0)


class ClientFaults:
    """Faults of the process around one client, drawn by the schedule (none by default).

    ``preempt``: the probability that a thread making a request is descheduled between its
    decision (what it read before the call) and the request entering kazoo's queue, for a
    time drawn by :meth:`preemption` (sometimes across a reconnection, or a session expiry
    and a new session). ``callback_lag``: the most a callback thread may lag behind the
    connection thread per callback. Draws come from ``rng`` alone (not the network's), so a
    schedule that draws none of these faults plays as it would without them.
    """

    def __init__(self, rng: Optional[random.Random] = None, preempt: float = 0.0, callback_lag: float = 0.0) -> None:
        self.rng = rng or random.Random(0)
        self.preempt = preempt
        self.callback_lag = callback_lag

    def preemption(self) -> float:
        """Seconds the calling thread is descheduled before its request is queued (0: not at all)."""
        if self.preempt <= 0.0 or self.rng.random() >= self.preempt:
            return 0.0
        roll = self.rng.random()
        if roll < 0.6:
            return self.rng.uniform(0.0001, 0.05)  # an ordinary time slice
        if roll < 0.9:
            return self.rng.uniform(0.05, 2.0)  # across a reconnection
        return self.rng.uniform(2.0, 10.0)  # across a session expiry and a new session

    def lag(self) -> float:
        return self.rng.uniform(0.0, self.callback_lag) if self.callback_lag > 0.0 else 0.0


class _Worker:
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

    handler = _Handler()

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
        self._listeners: List[Callable[[str], Any]] = []
        self._data_watchers: Dict[str, List[Callable[[WatchedEvent], None]]] = {}
        self._child_watchers: Dict[str, List[Callable[[WatchedEvent], None]]] = {}
        self._last_answer = 0.0
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
        self.callbacks = _Worker(self)  # kazoo's callback thread: watch callbacks
        #: Told ``(session, send time)`` of every request and ping the server answered (the
        #: heartbeat's proofs: ``fetch.SimHeartbeat``); ``_sent``: send times by xid.
        self.on_proof: Optional[Callable[[Optional[int], float], None]] = None
        self._sent: Dict[int, float] = {}
        self.completions = _Worker(self)  # kazoo's completion thread: rawlink callbacks

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
        now = self.kernel.now
        self._sent[xid] = now
        self._req_time = max(self._req_time, now + self.network.latency(now), self.frozen_until)
        self.kernel.at(self._req_time, lambda: self._arrive(conn, xid, op, args))

    def _arrive(self, conn: int, xid: int, op: str, args: Dict[str, Any]) -> None:
        """The request reaches the server (or the wire is cut and it never does)."""
        if conn != self._conn or self.dead:
            return
        if self.network.cut(self.name, self.kernel.now):  # TCP retransmits: it arrives once the link is back
            self.kernel.at(self.network.cut_until(self.name), lambda: self._arrive(conn, xid, op, args))
            return
        if self.ensemble.paused:  # served in arrival order once ZooKeeper resumes
            self.ensemble.backlog.append(lambda: self._arrive(conn, xid, op, args))
            return
        sid = self.sid
        assert sid is not None
        if not self.ensemble.touch(sid):
            return  # the session is gone: the connection is closed by the server (found at the next ping)
        server = self.ensemble.servers[self.server]
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
            self._trace(f"{self.name} 0x{sid:x} {op} {what} -> {outcome}")
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
        deliver()

    def _answer(self, xid: int, answer: Any, failed: Optional[BaseException], zxid: int) -> None:
        self.last_zxid = max(self.last_zxid, zxid)
        result = self._pending.pop(xid, None)
        sent = self._sent.pop(xid, None)
        if result is None:
            return
        if self.on_proof is not None and sent is not None:
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
            if self._expired:
                # kazoo's next connection attempt: CONNECTING (no listener is told; new calls are
                # queued again), then the handshake opens a new session.
                self._expired = False
                self.kernel.at(now + self.network.latency(now) * 3, attempt)
                return
            candidates = [s.index for s in self.ensemble.servers if s.zxid >= self.last_zxid]
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
            self.ensemble.touch(self.sid)
            self._conn += 1
            self._chan_time = self._req_time = now
            self._last_answer = now
            self._set_state(KazooState.CONNECTED)
            queued, self._queue = self._queue, []
            for op, args, result in queued:
                self._send(op, args, result)
            self._ping(self._conn)
        self.kernel.at(self.kernel.now + self.network.latency(self.kernel.now) * 3, attempt)

    def _ping(self, conn: int) -> None:
        """Every third of the timeout; a silent server is dropped after two thirds (read timeout)."""
        self.kernel.at(self.kernel.now + self.timeout / 3, partial(self._ping_tick, conn))

    def _ping_tick(self, conn: int) -> None:
        if conn != self._conn or self.closed or self.dead or self.state != KazooState.CONNECTED:
            return
        now = self.kernel.now
        if now < self.frozen_until:  # the connection thread is stopped with its process
            self.kernel.at(self.frozen_until, partial(self._ping_tick, conn))
            return
        if now - self._last_answer > self.timeout * 2 / 3:
            self.drop_connection("no answer within the read timeout")
            return
        if now >= self.frozen_until:
            self._send_ping(conn)
        self.kernel.at(now + self.timeout / 3, partial(self._ping_tick, conn))

    def _send_ping(self, conn: int) -> None:
        now = self.kernel.now
        self.kernel.at(now + self.network.latency(now), partial(self._ping_arrives, conn, now))

    def _ping_arrives(self, conn: int, sent: float) -> None:
        if conn != self._conn or self.dead or self.ensemble.paused:
            return
        if self.network.cut(self.name, self.kernel.now):
            self.kernel.at(self.network.cut_until(self.name), partial(self._ping_arrives, conn, sent))
            return
        assert self.sid is not None
        if self.ensemble.touch(self.sid):
            self._reply(conn, partial(self._pong, sent))

    def _pong(self, sent: float) -> None:
        """A ping's answer: a proof of the session (sent at ``sent``)."""
        if self.on_proof is not None:
            self.on_proof(self.sid, sent)

    def drop_connection(self, why: str) -> None:
        """The TCP connection broke (or was dropped): SUSPENDED, then reconnect."""
        if self.state != KazooState.CONNECTED or self.dead:
            return
        if self.kernel.now < self.frozen_until:  # noticed once the process runs again
            self.kernel.at(self.frozen_until, partial(self.drop_connection, why))
            return
        self._trace(f"{self.name} connection lost ({why})")
        self._conn += 1
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
                and not self.ensemble.paused:
            self.ensemble.expire(self.sid)
        self._fail_pending(ConnectionClosedError())
        self._queue = []
        self.state = KazooState.LOST

    def kill(self) -> None:
        """kill -9: the session is left to expire."""
        self.dead = True
        self._conn += 1
