"""A model of a ZooKeeper ensemble: what the group's members rely on, nothing more.

Modelled (each as ZooKeeper 3.4/3.5 documents it):

* a tree of znodes with ``version``, ``cversion``, ``ephemeralOwner``, ``czxid``/``mzxid``/``pzxid``;
  persistent and ephemeral nodes; ``create`` (with ``makepath``), ``get``, ``exists``,
  ``get_children`` (with the parent's stat), ``set``/``delete`` conditional on a version,
  and ``multi`` (all or nothing; results as kazoo returns them);
* sessions with a timeout: a session lives while the leader hears of its client within the
  timeout, and its ephemeral nodes go when it expires. The leader hears of a client connected
  to it at each packet; of a client connected to a follower only through that follower: the
  follower notes each session it hears from (``LearnerSessionTracker.touchSession``) and sends
  the sessions noted since its last answer in its answer to the leader's ping, which the leader
  sends every tickTime/2 (``Leader.lead``, ``Learner.ping``, ``LearnerHandler``'s PING case). A
  request the follower forwards (a write, a ``sync``) is checked at the leader but touches
  nothing there (``ZooKeeperServer.touch`` returns for a request without a connection, which a
  forwarded one is). A touch expires the session at the first tick of the session tracker
  *after* touch time + timeout (``SessionTrackerImpl.roundToInterval``); :meth:`Ensemble.expire_idle`
  runs at those ticks, so ``now - last_heard > timeout`` is the same rule;
* one-shot watches (data, exists, children), registered on the server that answered the read
  and fired when *that* server applies the change; every reply and event of a session travels
  on one ordered channel, so a client sees an event before any reply that reflects the change;
* an ensemble of a leader and followers that apply the committed log with a lag: reads on a
  follower may be stale, but a client always sees its own writes (the follower catches up
  before answering a write) and never goes back in time when it moves to another server;
* the server faults of :mod:`.servers` (a follower cut off from the leader, the quorum lost, a
  session moved), whose state is kept here (``down``, ``isolated``, ``closed``, ``held``);
* a pause of the whole ensemble (SIGSTOP): nothing is processed; at resume every session whose
  client was not heard from within its timeout may expire (whether the client's queued
  reconnection or the session tracker comes first is a coin the schedule tosses).

Errors are kazoo's exception classes, so the real client code sees what it sees in production.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.protocol.states import ZnodeStat

#: A change, as servers replay it: ("create", path, node) / ("set", path, node) / ("delete", path, None).
Effect = Tuple[str, str, Optional["Node"]]


@dataclass
class Node:
    data: bytes
    version: int = 0
    cversion: int = 0
    owner: int = 0  # ephemeralOwner (0: persistent)
    czxid: int = 0
    mzxid: int = 0
    pzxid: int = 0
    children: Set[str] = field(default_factory=set)

    def copy(self) -> "Node":
        return Node(self.data, self.version, self.cversion, self.owner, self.czxid, self.mzxid, self.pzxid,
                    set(self.children))

    def stat(self) -> ZnodeStat:
        return ZnodeStat(self.czxid, self.mzxid, 0, 0, self.version, self.cversion, 0, self.owner,
                         len(self.data), len(self.children), self.pzxid)


def parent_of(path: str) -> str:
    head = path.rsplit("/", 1)[0]
    return head or "/"


def name_of(path: str) -> str:
    return path.rsplit("/", 1)[1]


#: ``notify(session_id, event_type, path)``: a watch of that session fired on the server applying a change.
Notify = Callable[[int, str, str], None]


class Server:
    """One server's copy of the tree, up to ``zxid``, and the watches its clients set on it."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.tree: Dict[str, Node] = {"/": Node(b"")}
        self.zxid = 0
        self.data_watches: Dict[str, Set[int]] = {}
        self.child_watches: Dict[str, Set[int]] = {}

    def apply(self, zxid: int, effects: List[Effect], notify: Notify) -> None:
        for kind, path, node in effects:
            if kind == "create":
                assert node is not None
                self.tree[path] = node.copy()
                parent = self.tree[parent_of(path)]
                parent.children.add(name_of(path))
                parent.cversion += 1
                parent.pzxid = zxid
                self._fire(self.data_watches, path, "CREATED", notify)
                self._fire(self.child_watches, parent_of(path), "CHILD", notify)
            elif kind == "set":
                assert node is not None
                self.tree[path] = node.copy()
                self._fire(self.data_watches, path, "CHANGED", notify)
            else:
                del self.tree[path]
                parent = self.tree[parent_of(path)]
                parent.children.discard(name_of(path))
                parent.cversion += 1
                parent.pzxid = zxid
                self._fire(self.data_watches, path, "DELETED", notify)
                self._fire(self.child_watches, path, "DELETED", notify)
                self._fire(self.child_watches, parent_of(path), "CHILD", notify)
        self.zxid = zxid

    @staticmethod
    def _fire(watches: Dict[str, Set[int]], path: str, kind: str, notify: Notify) -> None:
        sessions = watches.pop(path, None)
        if sessions:
            for session in sorted(sessions):
                notify(session, kind, path)

    def drop_watches(self, session: int) -> None:
        for table in (self.data_watches, self.child_watches):
            for path in [p for p, s in table.items() if session in s]:
                table[path].discard(session)
                if not table[path]:
                    del table[path]


@dataclass
class Session:
    sid: int
    timeout: float
    last_heard: float
    alive: bool = True
    ephemerals: Set[str] = field(default_factory=set)


class Ensemble:
    """The leader (server 0) and followers; writes go through the leader's log."""

    def __init__(self, followers: int, clock: Callable[[], float]) -> None:
        self.servers = [Server(i) for i in range(1 + followers)]
        self.log: List[Tuple[int, List[Effect]]] = []
        self.zxid = 0
        self.sessions: Dict[int, Session] = {}
        self.paused = False
        #: Requests that reached a paused ensemble, in arrival order: served first at resume.
        self.backlog: List[Callable[[], None]] = []
        #: Server faults (:mod:`.servers`): the quorum is lost (no server serves); followers cut off
        #: from the leader; servers that shut down (LOOKING); what an isolated follower holds
        #: (server -> [(session, forward)]: writes forwarded to the leader, and what waits behind them).
        self.down = False
        self.isolated: Set[int] = set()
        self.closed: Set[int] = set()
        self.held: Dict[int, List[Tuple[int, Callable[[], None]]]] = {}
        #: Each follower's touch table: the sessions it heard from since its last answer to the
        #: leader's ping (module docstring), reported by :meth:`leader_ping`.
        self.touch_tables: Dict[int, Set[int]] = {}
        self._clock = clock
        self._next_sid = 0x1000
        #: The client of each session (anything with ``watch_fired(kind, path)``): fired watches go there.
        self.clients: Dict[int, Any] = {}
        self.notify: Notify = self._deliver
        #: Observers of committed changes: ``(zxid, effects)``, called once the leader applied them.
        self.observers: List[Callable[[int, List[Effect]], None]] = []
        #: The session whose request (or expiry) last changed each path.
        self.last_writer: Dict[str, int] = {}
        #: (path, ephemeral owner) -> the session whose request or expiry last deleted that owner's
        #: node at that path, kept until that owner creates the node again: what others did with the
        #: path since (created it in the hole, released it) does not hide who took it from the owner.
        self.deleted_from: Dict[Tuple[str, int], int] = {}
        self._writer = 0

    def _deliver(self, sid: int, kind: str, path: str) -> None:
        client = self.clients.get(sid)
        if client is not None:
            client.watch_fired(kind, path)

    @property
    def leader(self) -> Server:
        return self.servers[0]

    # ----------------------------------------------------------- sessions

    def open_session(self, timeout: float) -> int:
        self._next_sid += 1
        sid = (0x1F << 32) | self._next_sid
        self.sessions[sid] = Session(sid, timeout, self._clock())
        return sid

    def touch(self, sid: int, server: int = 0) -> bool:
        """Server ``server`` heard from the session's client; ``False`` if the session is gone.

        The leader (0) touches the session now; a follower only notes it for its next answer to
        the leader's ping (:meth:`note_touch`, :meth:`leader_ping`).
        """
        session = self.sessions.get(sid)
        if session is None or not session.alive:
            return False
        if server == 0:
            session.last_heard = self._clock()
        else:
            self.note_touch(server, sid)
        return True

    def note_touch(self, server: int, sid: int) -> None:
        """Follower ``server`` heard from session ``sid`` (it notes any session: it cannot know
        whether the leader expired it, and a follower cut off from the leader notes them too)."""
        self.touch_tables.setdefault(server, set()).add(sid)

    def leader_ping(self) -> None:
        """The leader's ping (every tickTime/2): each follower it reaches answers with its touch
        table, and the leader touches those sessions now. A session already expired stays
        expired (``touchSession`` refuses a closing session). A follower cut off from the leader
        keeps its table (TCP delivers the ping and the answer if the link is back in time);
        :meth:`forget_touches` drops it when the follower shuts down."""
        if self.paused or self.down:
            return
        for index in sorted(self.touch_tables):
            if index not in self.isolated:
                self.report_touches(index)

    def report_touches(self, index: int) -> None:
        """Follower ``index``'s answer to a ping reaches the leader: its sessions are touched now."""
        now = self._clock()
        for sid in sorted(self.touch_tables.pop(index, ())):
            session = self.sessions.get(sid)
            if session is not None and session.alive:
                session.last_heard = now

    def forget_touches(self, server: Optional[int] = None) -> None:
        """Follower ``server`` (default: every server) shut down: its touch table is gone."""
        if server is None:
            self.touch_tables.clear()
        else:
            self.touch_tables.pop(server, None)

    def alive(self, sid: int) -> bool:
        session = self.sessions.get(sid)
        return session is not None and session.alive

    def expire_idle(self) -> List[int]:
        """The session tracker's tick: expire sessions not heard from within their timeout."""
        now = self._clock()
        gone = [s.sid for s in sorted(self.sessions.values(), key=lambda s: s.sid)
                if s.alive and now - s.last_heard > s.timeout]
        for sid in gone:
            self.expire(sid)
        return gone

    def expire(self, sid: int) -> None:
        """End the session (expiry, or a client's close): its ephemeral nodes are deleted."""
        session = self.sessions.get(sid)
        if session is None or not session.alive:
            return
        session.alive = False
        effects: List[Effect] = [("delete", path, None) for path in sorted(session.ephemerals, reverse=True)
                                 if path in self.leader.tree]
        session.ephemerals.clear()
        if effects:
            self._writer = sid
            self._commit(effects)
        for server in self.servers:
            server.drop_watches(sid)

    # ----------------------------------------------------------- the log

    def _commit(self, effects: List[Effect]) -> int:
        tree = self.leader.tree
        for kind, path, node in effects:
            self.last_writer[path] = self._writer
            if kind == "delete":
                gone = tree.get(path)
                if gone is not None and gone.owner:
                    self.deleted_from[(path, gone.owner)] = self._writer
            elif kind == "create" and node is not None and node.owner:
                self.deleted_from.pop((path, node.owner), None)
        self.zxid += 1
        self.log.append((self.zxid, effects))
        self.leader.apply(self.zxid, effects, self.notify)
        for observer in self.observers:
            observer(self.zxid, effects)
        return self.zxid

    def sync(self, server: Server, upto: Optional[int] = None) -> None:
        """Bring a follower up to ``upto`` (default: the leader)."""
        target = self.zxid if upto is None else min(upto, self.zxid)
        if server.zxid >= target:
            return
        start = self._log_index(server.zxid)
        for zxid, effects in self.log[start:]:
            if zxid > target:
                break
            server.apply(zxid, effects, self.notify)

    def _log_index(self, zxid: int) -> int:
        # zxids are consecutive from 1: the entry after ``zxid`` is at index ``zxid``.
        return zxid

    # ----------------------------------------------------------- requests

    def execute(self, server: Server, sid: int, op: str, args: Dict[str, Any]) -> Any:
        """Run one request of session ``sid`` on ``server``; returns the result or raises kazoo's error.

        Writes are applied by the leader and the server catches up before answering.
        """
        if op in ("get", "exists", "get_children"):
            return self._read(server, sid, op, args)
        if op == "sync":  # the follower catches up with the leader before answering (ZooKeeper's sync)
            self.sync(server)
            return args["path"]
        if op == "multi":
            results = self._multi(sid, args["ops"])
        else:
            results = self._multi(sid, [(op, args)])
            if isinstance(results[0], Exception):
                raise results[0]
            results = results[0]
        self.sync(server)
        return results

    def _read(self, server: Server, sid: int, op: str, args: Dict[str, Any]) -> Any:
        path = args["path"]
        node = server.tree.get(path)
        watch = args.get("watch", False)
        if op == "exists":
            if watch:
                server.data_watches.setdefault(path, set()).add(sid)
            return None if node is None else node.stat()
        if node is None:
            raise NoNodeError()
        if watch:
            table = server.child_watches if op == "get_children" else server.data_watches
            table.setdefault(path, set()).add(sid)
        if op == "get":
            return (node.data, node.stat())
        children = sorted(node.children)
        return (children, node.stat()) if args.get("include_data") else children

    def _multi(self, sid: int, ops: List[Tuple[str, Dict[str, Any]]]) -> List[Any]:
        """Check every op against a scratch view; commit all effects or none."""
        tree = self.leader.tree
        view: Dict[str, Optional[Node]] = {}

        def look(path: str) -> Optional[Node]:
            return view[path] if path in view else tree.get(path)

        effects: List[Effect] = []
        results: List[Any] = []
        failed: Optional[int] = None
        for i, (op, args) in enumerate(ops):
            try:
                results.append(self._stage(sid, op, args, look, view, effects))
            except (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError) as exc:
                failed = i
                results.append(exc.with_traceback(None))  # a result, as kazoo hands it back: no frames
                break
        if failed is not None:
            return [RolledBackError() if i < failed else results[failed] if i == failed else RuntimeInconsistency()
                    for i in range(len(ops))]
        if effects:
            zxid = self.zxid + 1
            for kind, _path, node in effects:
                if node is not None:
                    node.mzxid = zxid
                    if kind == "create":
                        node.czxid = node.pzxid = zxid
            self._writer = sid
            self._commit(effects)
            session = self.sessions.get(sid)
            for kind, path, node in effects:
                if kind == "create" and node is not None and node.owner and session is not None:
                    session.ephemerals.add(path)
                elif kind == "delete":
                    for other in self.sessions.values():
                        other.ephemerals.discard(path)
        return results

    def _stage(self, sid: int, op: str, args: Dict[str, Any], look: Callable[[str], Optional[Node]],
               view: Dict[str, Optional[Node]], effects: List[Effect]) -> Any:
        path = args["path"]
        node = look(path)
        version = args.get("version", -1)
        if op == "check":
            if node is None:
                raise NoNodeError()
            if version != -1 and node.version != version:
                raise BadVersionError()
            return True
        if op == "create":
            sequential = bool(args.get("sequence"))
            if node is not None and not sequential:
                raise NodeExistsError()
            parent = parent_of(path)
            if look(parent) is None:
                if not args.get("makepath"):
                    raise NoNodeError()
                self._stage(sid, "create", {"path": parent, "value": b"", "makepath": True}, look, view, effects)
            parent_node = look(parent)
            assert parent_node is not None
            if parent_node.owner:
                raise NoNodeError()  # ZooKeeper: NoChildrenForEphemerals; never met by these members
            parent_copy = parent_node.copy()
            if sequential:  # ZooKeeper appends the parent's cversion, ten digits (it counts every child made)
                path = f"{path}{parent_copy.cversion:010d}"
                if look(path) is not None:
                    raise NodeExistsError()
            parent_copy.cversion += 1  # in this multi's view only: a later sequential create counts on
            created = Node(args.get("value", b""), owner=sid if args.get("ephemeral") else 0)
            view[path] = created
            parent_copy.children.add(name_of(path))
            view[parent] = parent_copy
            effects.append(("create", path, created))
            return path
        if node is None:
            raise NoNodeError()
        if version != -1 and node.version != version:
            raise BadVersionError()
        if op == "set":
            changed = node.copy()
            changed.data = args["value"]
            changed.version += 1
            view[path] = changed
            effects.append(("set", path, changed))
            return changed.stat()
        if op == "delete":
            if node.children:
                raise NotEmptyError()
            view[path] = None
            parent = look(parent_of(path))
            if parent is not None:
                parent_copy = parent.copy()
                parent_copy.children.discard(name_of(path))
                view[parent_of(path)] = parent_copy
            effects.append(("delete", path, None))
            return True
        raise ValueError(f"unknown op {op}")
