"""Faults of the ZooKeeper servers themselves: a follower cut off from its leader, the loss of
the quorum, and a session moved while a request of the old connection is still on its way.

Each as ZooKeeper 3.4/3.5 and kazoo 2.x behave (read from their sources):

* **isolate** (a minority follower): a follower loses the leader (its link to it is cut) while
  the member's connection to the follower stays up. The follower answers reads from its own
  tree, stale from then on, and pings locally; a write it forwards (and every later request of
  that session, ordered behind it by the CommitProcessor) gets no answer, so neither does the
  session's next ping and the client's read timeout moves it to another server. The session
  tracker lives on the leader (the follower's ``LearnerSessionTracker`` only collects touches
  for its answer to the leader's next ping, which does not arrive; so the touches of what the
  session sent shortly before the cut, its last ``sync`` included, may never reach the leader,
  :mod:`.zkmodel`): the session may expire on the leader
  while its client is still served by the follower, and the follower does not learn of it.
  After ``syncLimit`` ticks without the leader (``Learner``'s socket read timeout) the follower
  shuts down (``Learner.shutdown``: ``cnxnFactory.closeAll()``), goes LOOKING and serves
  nobody (a minority cannot elect) until the link is back; the forwarded requests are then
  gone. A client does not connect to it meanwhile (a session needs the leader to revalidate
  or create it). A link back before ``syncLimit`` delivers the forwarded requests to the leader.
* **quorum** (quorum loss): a majority of servers away. The leader gives up leading (not
  enough followers synced), every server shuts down and closes its client connections (the
  client: ConnectionLoss, SUSPENDED; what was sent may or may not have been committed); a
  connection attempt fails until a leader is elected again, and kazoo's connection retry backs
  off between full cycles of its hosts (:meth:`~.client.SimKazoo._retry_sleep`). The new leader's session tracker
  is built from the sessions it knows, each with a full timeout from its start
  (``SessionTrackerImpl``'s constructor: ``addSession`` touches each), so no session expires
  for the time of the outage and the clients reconnect with their sessions.
* **moved** (session moved): the client's connection stalls at its next request and it gives
  up on it while that request (and what it sent before) is still on its way to the old server
  (a short while, or seconds); it reconnects to another server
  (kazoo's connection loop goes to the next host). Until the session's revalidation on the new
  server, an old request that reaches the leader is applied (its answer lost: the client saw
  ConnectionLoss); after it, the leader's ``checkSession`` fails with SessionMovedException and
  the request is not applied. The old server then closes that connection instead of answering
  -118 (``FinalRequestProcessor``: "session moved is a connection level error ...
  ZOOKEEPER-710"), so kazoo never raises ``SessionMovedError`` (-118) to the caller: a caller
  sees ConnectionLoss for a write that may or may not happen, possibly after it saw the loss.

Drawn by :func:`server_faults` from a generator of their own, for seeds from
``SERVER_FAULTS_FROM`` only, so every schedule of a smaller seed is exactly the one it was.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Tuple

if TYPE_CHECKING:
    from .world import World

Event = Tuple[Any, ...]

#: Seeds below this draw no server fault (their schedules, and the traces hashed, stay as they were).
SERVER_FAULTS_FROM = 5_000_000
#: The share of those seeds' schedules that draw server faults.
SERVER_FAULTS_SHARE = 0.5
SERVER_EVENTS = ("isolate", "quorum", "moved")
WRITES = frozenset(("create", "set", "delete", "multi"))


def server_faults(seed: int, n_slots: int, followers: int, events: List[Event], horizon: float) -> None:
    """Add server faults to ``events`` (sorted again), from a generator of their own."""
    if seed < SERVER_FAULTS_FROM:
        return
    rng = random.Random(seed * 53 + 0x5E4)
    if rng.random() >= SERVER_FAULTS_SHARE:
        return
    kinds = ["quorum"] + (["moved", "moved"] if followers >= 1 else []) + (["isolate", "isolate"] if followers >= 2
                                                                            else [])
    for _ in range(rng.choice((1, 1, 2, 3))):
        t = round(rng.uniform(0.5, horizon - 4), 3)
        kind = rng.choice(kinds)
        if kind == "isolate":  # follower, how long cut off, syncLimit (tickTime x syncLimit)
            events.append((t, kind, rng.randint(1, followers), round(rng.uniform(0.5, 12.0), 3),
                           round(rng.uniform(1.0, 8.0), 3)))
        elif kind == "quorum":
            events.append((t, kind, 0, round(rng.uniform(0.2, 10.0), 3)))
        else:  # member slot, how long its request on the old connection is still on its way: often
            # less than a reconnection takes (applied after its caller saw ConnectionLoss), else more
            delay = rng.uniform(0.0005, 0.01) if rng.random() < 0.5 else rng.uniform(0.05, 4.0)
            events.append((t, kind, rng.randrange(n_slots), round(delay, 4)))
    events.sort(key=lambda e: (e[0], e[1]))


def blocked(ensemble: Any, server: int, sid: int) -> bool:
    """Has ``sid`` a request held by the isolated follower ``server`` (later ones wait behind it)?"""
    return any(s == sid for s, _ in ensemble.held.get(server, ()))


def hold(ensemble: Any, server: int, sid: int, op: str, forward: Callable[[], None]) -> bool:
    """An isolated follower received a request of ``sid``: ``True`` if it is held (a write, or
    behind one), ``forward`` then runs when the link to the leader is back in time."""
    if op in WRITES or op == "sync" or blocked(ensemble, server, sid):  # sync: forwarded to the leader too
        ensemble.held.setdefault(server, []).append((sid, forward))
        return True
    return False


class ServerFaults:
    """The world's side of the server faults: the events, their ends, and what heals them."""

    def __init__(self, world: "World") -> None:
        self.world = world
        self.quorum_end = 0.0
        self.isolated_until: Dict[int, float] = {}

    def apply(self, kind: str, args: Tuple[Any, ...]) -> None:
        world = self.world
        now = world.kernel.now
        ensemble = world.ensemble
        if kind == "quorum":
            if ensemble.down:
                return
            ensemble.down = True
            ensemble.forget_touches()  # every server shuts down
            self.quorum_end = now + args[1]
            self._close(lambda client: True, "server closed the connection (quorum lost)")
            world.kernel.at(self.quorum_end, self.quorum_back)
        elif kind == "isolate":
            index = args[0]
            if index >= len(ensemble.servers) or index in ensemble.isolated:
                return
            ensemble.isolated.add(index)
            self.isolated_until[index] = now + args[1]
            world.kernel.at(now + args[2], lambda: self._lose_leader(index))
            world.kernel.at(now + args[1], lambda: self.link_back(index))
        else:
            m = world._member(args[0] % max(1, len(world.schedule.specs)))
            if m is not None and len(ensemble.servers) > 1:
                m.client.stall_next = args[1]  # at its next request (servers.py docstring)

    def _close(self, which: Callable[[Any], bool], why: str) -> None:
        world = self.world
        for sid in sorted(world.ensemble.clients):
            client = world.ensemble.clients[sid]
            if client.sid == sid and which(client):
                client.drop_connection(why)

    def quorum_back(self) -> None:
        """A leader again: every live session gets a full timeout from now; followers sync."""
        ensemble = self.world.ensemble
        if not ensemble.down:
            return
        ensemble.down = False
        now = self.world.kernel.now
        for sid in sorted(ensemble.sessions):
            session = ensemble.sessions[sid]
            if session.alive:
                session.last_heard = now
        self.world.trace("quorum back: sessions restarted with a full timeout")
        self.world._sync()

    def _lose_leader(self, index: int) -> None:
        """syncLimit passed without the leader: the follower shuts down and drops its clients."""
        ensemble = self.world.ensemble
        if index not in ensemble.isolated or index in ensemble.closed:
            return
        ensemble.closed.add(index)
        ensemble.held.pop(index, None)  # forwarded requests die with the follower's pipeline
        ensemble.forget_touches(index)  # and its touch table with its session tracker
        server = ensemble.servers[index]
        server.data_watches.clear()  # and the watches with the connections that set them
        server.child_watches.clear()
        self._close(lambda client: client.server == index, f"server {index} lost its leader")

    def link_back(self, index: int) -> None:
        """The follower reaches the leader again: it syncs, forwards what it held, serves again."""
        ensemble = self.world.ensemble
        if index not in ensemble.isolated:
            return
        ensemble.isolated.discard(index)
        ensemble.closed.discard(index)
        if not ensemble.down:
            ensemble.sync(ensemble.servers[index])
        held = ensemble.held.pop(index, [])
        if not ensemble.down:  # else they die with the leader's pipeline
            for _sid, forward in held:
                forward()
            # The leader's pings sent during the cut arrive now, behind nothing the follower
            # wrote before them: its answers, with its touches, reach the leader right after the
            # requests it forwarded (one TCP stream, read in order by one LearnerHandler thread).
            ensemble.report_touches(index)
        # Sessions that expired meanwhile: the follower learns of it from the log and closes them.
        self._close(lambda client: client.server == index and not ensemble.alive(client.sid),
                    "session expired (learnt from the leader)")

    def heal(self) -> None:
        for index in sorted(self.world.ensemble.isolated):
            self.link_back(index)
        self.quorum_back()
