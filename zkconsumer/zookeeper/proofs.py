"""From when a proof of a session counts: the leader hears of a follower's clients late.

What ZooKeeper 3.4 does (read in its source, release-3.4.6; the same on branch-3.4):

* The session tracker lives on the leader. It expires a session at the first tick of its own
  (every tickTime) after the last touch + the timeout (``SessionTrackerImpl.touchSession``,
  ``roundToInterval``); a touch of a session already expiring is refused.
* A client connected to the leader touches its session with every packet
  (``ZooKeeperServer.submitRequest`` -> ``touch(cnxn)``).
* A client connected to a follower touches it only at the follower, which notes the session
  (``LearnerSessionTracker.touchSession``) and lists the sessions noted since its last answer
  in its answer to the leader's ping (``Learner.ping``); the leader pings each follower every
  tickTime/2 (``Leader.lead``) and touches what the answer lists (``LearnerHandler``, PING).
  The requests a follower forwards (writes, ``sync``) are checked at the leader
  (``PrepRequestProcessor``: ``checkSession``) but touch nothing there: the leader's copy of a
  forwarded request has no connection, and ``ZooKeeperServer.touch`` returns for those.
* The follower reads its link to the leader in order on one thread, and the leader reads the
  follower's in order on one ``LearnerHandler`` thread: a ping answer the follower wrote before
  it forwarded a request is processed by the leader before that request.

So an answered ``sync`` or write sent at ``s`` proves the session alive *when the leader
checked it*, but not that the leader will keep it for a timeout from ``s``: if the follower is
cut off from the leader before its next ping answer, the leader's last touch is an earlier
packet's, and it expires the session before ``s`` + timeout (CI saw a member deliver 0.19 s
after its partition's new owner did).

The rule here: a proof ``P`` (sent at ``s_P``, answered at ``a_P``) counts from ``s_P`` once a
later proof ``Q`` sent at least :data:`CONFIRM_GAP` x the timeout after ``a_P`` was answered.
The follower noted ``P``'s session before it answered ``P``; a ping answer it wrote between
``a_P`` and ``Q``'s arrival carries that note and reaches the leader before ``Q``; the leader
pings every tickTime/2, and tickTime is at most half the negotiated timeout (a server's
minSessionTimeout is 2 x tickTime unless configured lower), so a gap of 0.3 x the timeout holds
a ping with room to spare (a tenth of tickTime at the smallest timeout). The leader's touch is
then at least ``s_P``, and it expires the session only after ``s_P`` + timeout. Left open: a
cut of the follower's link that ends within syncLimit x tickTime delivers what the follower
forwarded during it before its answers to the pings sent meanwhile; a session whose expiry
falls in those few milliseconds could expire although such a ``P`` counts.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

#: A proof counts once a later one sent this long after its answer was answered, as a fraction
#: of the session timeout (module docstring).
CONFIRM_GAP = 0.3
#: So an idle member's own proofs must come at least this often (fraction of the timeout): a
#: proof counts from two proofs back at worst, and three gaps plus a round trip stay within the
#: timeout.
MAX_CADENCE = 0.27
#: Unconfirmed proofs kept per session; one answered within a sixteenth of the gap of the last
#: kept one is not kept (the count errs late, never early).
_KEPT = 16


class ProofChain:
    """The proofs of one session, and the send time from which they count (see the module docstring).

    Not thread-safe: one writer; :attr:`counted` and :attr:`last_sent` are plain floats, safe to read.
    """

    def __init__(self, counted: Optional[float] = None) -> None:
        #: The send time the session's proofs count from (``None``: none yet).
        self.counted = counted
        #: The send time of the last proof noted, counted or not (the cadence of new proofs).
        self.last_sent: Optional[float] = None
        self._waiting: List[Tuple[float, float]] = []  # (sent, answered), oldest first

    def note(self, sent: float, answered: float, gap: float) -> bool:
        """A proof sent at ``sent`` was answered at ``answered``; ``gap`` is :data:`CONFIRM_GAP`
        x the timeout. Returns whether :attr:`counted` moved."""
        moved = False
        while self._waiting and self._waiting[0][1] + gap <= sent:
            earlier, _ = self._waiting.pop(0)
            if self.counted is None or earlier > self.counted:
                self.counted = earlier
                moved = True
        if self.last_sent is None or sent > self.last_sent:
            self.last_sent = sent
        if not self._waiting or (answered - self._waiting[-1][1] >= gap / _KEPT and len(self._waiting) < _KEPT):
            self._waiting.append((sent, answered))
        return moved
