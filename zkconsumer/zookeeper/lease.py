"""A session lease: may this member still believe its ZooKeeper session is alive?

kazoo learns that a session expired only when it next hears from the server. A
process frozen past its session timeout (SIGSTOP, a stalled VM) resumes still
believing it is connected, and for a moment its fetchers go on fetching and its
iterators go on handing out partitions that another member owns by now: in the
chaos test, that moment delivered ~10 s of backlog twice.

:class:`SessionLease` is valid for one session timeout after the last proof:
the send time of a request whose session the *leader* checked and that was
answered (the leader cannot have expired a session that passed its check for a
request sent within that time): a write (a commit, a claim) or a ``sync``.
Reads and pings do not count: a follower cut off from its leader answers them
from its own state for as long as syncLimit x tickTime (10 s with ZooKeeper's
sample configuration), also for a session the leader has expired meanwhile
(found by the simulator's model of a minority follower). And a proof counts from its send
time only once a later proof, sent 0.3 x the timeout after it was answered, was answered too
(or from a handshake's send time at once): a follower reports its clients' touches to the
leader only in its answers to the leader's pings, so the leader may never hear of the last
proofs before a cut (:mod:`.proofs`; a CI run saw a cut-off member deliver after its
partition's new owner did). So a new lease counts from the session's handshake, not from
when it is made: a member that connected long before it registered waits for a confirmed
proof before it delivers. Proofs come from the
connection's own writes, which the
:class:`~zkconsumer.zookeeper.heartbeat.SessionHeartbeat` observes; when no proof
came for nine tenths of the heartbeat's shortest silence, the lease sends its
own ``sync``, just before the heartbeat would ping an idle connection, so the
sync proves the session and spares that ping (an idle member sends about as
many packets as before; a ``sync`` is forwarded to the leader where a ping is
answered by the server the member is connected to). A resumed process finds the lease lapsed at once, before
kazoo notices anything; fetchers stop queuing until a proof succeeds again, on
the same session or on the new one the rebalancer rejoins with.

The timeout is the one the server *negotiated*, not the one requested: a
ZooKeeper server clamps the requested timeout to ``[minSessionTimeout,
maxSessionTimeout]`` (by default ``[2, 20] x tickTime``), and a lease longer
than the real session would let an expired member keep delivering. The
heartbeat records it at each handshake.

Outages: while ZooKeeper is away the proofs fail and the lease runs out one
session timeout after the last proof. Until then fetchers keep fetching and
iterators keep handing out; after it, iterators still hand out what was
already queued, but nothing new is queued, since the session may have
expired and the partitions may belong to another member by now. Positions
do not move meanwhile, so nothing is skipped: when ZooKeeper answers again on
the same session, fetching resumes where it stopped; on a new session the
rebalancer rejoins and fetching resumes from the committed offsets.

Proofs count only on the session the member last (re)joined with
(:meth:`SessionLease.accept_session`), whether they are the lease's own reads
or observed replies (each observed proof is noted with the session it was
answered on): after an expiry kazoo opens a new session at once, and a proof on
it says nothing about the partitions owned under the old one, so deliveries stay
held until the rebalancer has rejoined. Once kazoo reports the accepted session LOST
(:meth:`SessionLease.session_lost`), its proofs stop counting too: a session can end before
its timeout (closed by another client with its id and password, as kazoo's test harness
does), and a proof sent a moment before says nothing about partitions it no longer holds; the
lease is lapsed from then until the member rejoins (tests/sim seed 6000666: a member's
session was closed from outside, it rejoined on a new session, and its fetchers queued the
partitions it claimed there before the rejoin was complete, on the old session's proofs).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional, Tuple

from kazoo.exceptions import KazooException

from ..errors import ZkConsumerError
from ..threads import ShutdownableThread
from .heartbeat import KAFKA_INTERVAL, SessionHeartbeat, session_of
from .proofs import CONFIRM_GAP, MAX_CADENCE, ProofChain

log = logging.getLogger(__name__)

#: Without an observing heartbeat, how long past a third of the session timeout a proof may be
#: missing before the lease proves the session itself, as a fraction of the session timeout.
OVERDUE = 1.0 / 6.0
#: With one, the lease's ``sync`` goes out at this fraction of the heartbeat's shortest silence
#: after the last proof: just before the heartbeat would ping an idle connection, so the sync
#: proves the session and spares that ping (an idle member sends about as many packets as before).
LEAD = 0.9
#: While lapsed, how often the lease tries to prove the session again (seconds, at most).
LAPSED_RETRY_S = 0.2


class SessionLease:
    """Valid for one session timeout after the last proof of the accepted session.

    With a ``heartbeat`` (the :class:`~zkconsumer.zookeeper.heartbeat.SessionHeartbeat`
    of ``client``'s kazoo client), the session timeout is the negotiated one once known,
    and proofs are the replies it observes; without one, the configured
    ``session_timeout_s`` and the lease's own reads only. The lease reads ``path``
    itself when no proof came for the connection's longest silence
    (``heartbeat.longest_silence``, else a third of the timeout) plus :data:`OVERDUE`
    of the timeout. ``client`` should bound its calls (a
    :class:`~zkconsumer.zookeeper.zkcalls.BoundedZooKeeper`), so the thread never
    blocks longer than a proof interval while ZooKeeper is away. Thread-safe;
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
        heartbeat: Optional[SessionHeartbeat] = None,
    ) -> None:
        self._client = client
        self._path = path
        self._configured = session_timeout_s
        self._heartbeat = heartbeat if heartbeat is not None and heartbeat.observing else None
        self._versioned = heartbeat  # its ``version`` changes after its proofs or negotiated timeout do
        self._negotiated: Callable[[], Optional[float]] = (
            heartbeat.negotiated_timeout if heartbeat is not None else lambda: None)
        self._clock = clock
        # the lease's own syncs. Observed, the session counts from its handshake's send time (the
        # leader touches a session it creates or revalidates; SessionHeartbeat.counted_since), not
        # from now: the member may have connected long before it registered, and a follower cut off
        # right after the registration never tells the leader of it. Unobserved, from now (the
        # member just registered, so the session was alive moments ago; the best it can know).
        self._own = ProofChain(counted=None if self._heartbeat is not None else clock())
        # the session whose proofs count: the one the member joined with (None: the first one seen)
        self._accepted: Optional[int] = session_of(client)
        self._lapsed = False  # the thread's view, for its log lines
        self._lost = False  # kazoo reported the accepted session LOST: no proof counts until accept_session
        #: Bumped after ``_lost`` or ``_accepted`` changes (never before): a :meth:`valid` cache of an
        #: older epoch is not used.
        self._epoch = 0
        #: ``(epoch, heartbeat version, proven at, timeout)`` of the last full :meth:`valid`; see there.
        self._cache: Tuple[int, int, float, float] = (-1, -1, float("-inf"), 0.0)
        self._thread = ShutdownableThread(name, self._run)

    @property
    def timeout(self) -> float:
        """The session timeout in seconds: the negotiated one once known, else the configured one."""
        negotiated = self._negotiated()
        return self._configured if negotiated is None else negotiated

    def start(self) -> None:
        self._thread.start()

    def request_stop(self) -> None:
        """Ask the thread to end (returns at once)."""
        self._thread.request_stop()

    def stop(self, timeout: Optional[float] = None) -> bool:
        """Stop and join the thread (at most ``timeout`` s); ``True`` once it has ended."""
        return self._thread.stop(timeout)

    def valid(self) -> bool:
        """``True`` while the accepted session was proven alive less than one session timeout ago.

        A fetcher asks before each chunk it queues, so the answer is cached: the proof time and
        timeout of the last full look are used again while nothing they came from changed (the
        epoch: :meth:`session_lost`, :meth:`accept_session`; the heartbeat's ``version``: its
        proofs, its negotiated timeout) and while they still say valid; otherwise (and while no
        session is accepted yet, whose proofs may change with the client's session) it looks
        again. Every input that can move the proof time back or shorten the timeout changes the
        epoch or the version *after* it changed, and the cache keeps the epoch and version read
        *before* the look, so a stale cache is never used; the lease's own proofs only move the
        proof time forward, so a cache older than one of them errs towards looking again.
        """
        epoch, version, proven, timeout = self._cache
        versioned = self._versioned
        if (epoch == self._epoch and (versioned is None or version == versioned.version)
                and self._clock() - proven < timeout):
            return True
        return self._look()

    def _look(self) -> bool:
        """:meth:`valid` in full, caching what it used (see there)."""
        epoch, versioned, accepted = self._epoch, self._versioned, self._accepted
        version = versioned.version if versioned is not None else 0
        timeout = self.timeout
        proven = self._proven_at()
        if accepted is not None:
            self._cache = (epoch, version, proven, timeout)
        return self._clock() - proven < timeout

    def _proven_at(self) -> float:
        """The send time the accepted session's proofs count from (:mod:`.proofs`): our own syncs',
        or the observed replies' (the later)."""
        if self._lost:
            return float("-inf")
        return self._later(self._own.counted, self._heartbeat.counted_since if self._heartbeat is not None else None)

    def _last_sent(self) -> float:
        """The send time of the accepted session's last proof, counted or not: when the next is due."""
        own = self._own.last_sent if self._own.last_sent is not None else self._own.counted
        return self._later(own, self._heartbeat.last_proof if self._heartbeat is not None else None)

    def _later(self, own: Optional[float], observed: Optional[Callable[[Optional[int]], Optional[float]]]) -> float:
        """The later of ``own`` and what ``observed`` says of the accepted session (or the current one while
        none is accepted yet); ``-inf`` when neither has a time."""
        seen = None
        if observed is not None:
            accepted = self._accepted
            seen = observed(self._current_session() if accepted is None else accepted)
        times = [t for t in (own, seen) if t is not None]
        return max(times) if times else float("-inf")

    def accept_session(self) -> None:
        """The member (re)joined on the current session: proofs on it count from now on.

        The lease's own proofs so far still count (the new session was created after them), but
        none of them waits to be confirmed by a proof of the new session (:mod:`.proofs`).
        """
        self._own = ProofChain(counted=self._own.counted)
        self._accepted = self._current_session()
        self._lost = False
        self._epoch += 1

    def session_lost(self) -> None:
        """kazoo reported the session LOST: the lease lapses now, until :meth:`accept_session`.

        Called on kazoo's connection thread (a flag, never blocks).
        """
        self._lost = True
        self._epoch += 1

    def _current_session(self) -> Optional[int]:
        return session_of(self._client)

    @property
    def overdue_after(self) -> float:
        """Seconds after the last proof at which one is overdue and the lease proves the session itself."""
        timeout = self.timeout
        if self._heartbeat is None:
            due = timeout * (KAFKA_INTERVAL + OVERDUE)
        else:
            due = LEAD * self._heartbeat.shortest_silence(timeout)
        return min(due, MAX_CADENCE * timeout)  # a proof counts from two proofs back at worst (proofs.py)

    def prove(self) -> bool:
        """One ``sync`` of ``path``; on success the lease runs for another session timeout.

        A read answered on a session other than the accepted one is no proof.
        """
        started = self._clock()
        try:
            self._client.sync(self._path)  # checked by the leader: a cut-off follower cannot answer it
        except (KazooException, ZkConsumerError):
            return False
        session = self._current_session()
        if session is not None:
            if self._accepted is None:
                self._accepted = session
                self._epoch += 1
            elif session != self._accepted:
                return False  # a new session: wait for the rejoin (accept_session)
        # the server answered a request sent at `started`: it counts once a later one confirms it
        self._own.note(started, self._clock(), CONFIRM_GAP * self.timeout)
        return True

    def _run(self) -> None:
        """Wake when a proof becomes overdue (at least every third of the timeout); read only then.

        An unexpected exception in one round (a bug, a client in a state nobody foresaw) is
        logged and the round retried after :data:`LAPSED_RETRY_S`: the thread never dies while
        the lease is in use, since a dead thread would leave the lease to lapse for good.
        """
        self._lapsed = False
        wait = self.timeout / 3.0
        while not self._thread.wait(wait):
            try:
                wait = self._round()
            except Exception:  # noqa: BLE001 - logged and retried: see above
                log.exception("session lease: unexpected failure; retrying in %.1fs", LAPSED_RETRY_S)
                wait = LAPSED_RETRY_S

    def _round(self) -> float:
        """One look at the lease: prove it if a proof is overdue. Returns how long to wait until the next."""
        if self._accepted is None:
            self._accepted = self._current_session()  # the session the member joined with
            self._epoch += 1
        overdue_at = self._last_sent() + self.overdue_after
        now = self._clock()
        if now < overdue_at:
            if self._lapsed:
                log.info("ZooKeeper session proven again: deliveries resume")
            self._lapsed = False
            return min(self.timeout / 3.0, overdue_at - now)  # the connection's own traffic proves it
        proven = self.prove()
        if not proven and not self.valid() and not self._lapsed:
            log.warning("ZooKeeper session not proven for %.1fs: holding back new deliveries until it is",
                        self.timeout)
        elif proven and self._lapsed:
            log.info("ZooKeeper session proven again: deliveries resume")
        self._lapsed = not self.valid()
        if self._lapsed:
            return min(self.timeout / 3.0, LAPSED_RETRY_S)
        # proven, or not yet lapsed: look again at the latest when it would lapse or the next proof is due
        now = self._clock()
        return max(min(LAPSED_RETRY_S, self.overdue_after / 2.0), min(self.timeout / 3.0, self._proven_at() + self.timeout - now,
                                       self._last_sent() + self.overdue_after - now))
