"""A fetcher's rounds: the rules for their waits and width, and whose turn one is. No I/O.

The broker wait of a request that leaves out a parked partition (:func:`held_back_wait_ms`), when a
response makes a fetcher wide (:func:`large_response`, :data:`QUIET_S`), and who runs a round: the
fetcher's own thread, or a consumer waiting on its empty queue (:class:`RoundTurns`).

A *round* is one turn of a fetcher's loop (queue parked chunks, one fetch, its response queued).
At the rates most members run at every message is a fetch response of its own, and handing each
from the fetcher thread to the consumer's costs two thread wake-ups (each taking the GIL) per
message. So a consumer that finds its queue empty runs the round itself, within what is left of
its own wait (:func:`round_bounds`: the broker's wait and the socket's): one thread wakes per
response. A round cut at the consumer's deadline (no answer within :data:`ANSWER_GRACE_MS`) leaves
the rounds to the fetcher thread for :data:`CUT_BACKOFF_S`. The fetcher thread steps back while a
consumer runs rounds, and fetches ahead as before once no consumer ran or asked for one within
:data:`HANDBACK_S` (the application is busy with what it got), once a response is large (a
backlog: fetching ahead on its own thread is what gives the throughput), or while the fetcher is
wide (several connections). After a fetcher's ``join`` returns, no round runs, on any thread.

:class:`RoundTurns` holds what decides whose turn it is (``fetch.on.consumer.thread``, see
``fetcher_thread.py``): the round lock (held by whoever runs a round, on any thread), the
consumer running one (if any), and when a consumer last ran or asked to run one. It does no I/O.

Contract: at most one round runs at a time; :meth:`RoundTurns.wait_until_idle` returns once no
round runs (or at its deadline); the fetcher thread leaves the rounds to consumers
(:meth:`RoundTurns.thread_pause_s` > 0) only while a consumer runs one or ran or asked to run one
within :data:`HANDBACK_S`.
"""

from __future__ import annotations

import threading
import time
from typing import Optional, Tuple

__all__ = ["ANSWER_GRACE_MS", "CUT_BACKOFF_S", "HANDBACK_S", "MIN_CONSUMER_ROUND_MS", "QUIET_S", "ROOM_WAIT_S", "RoundTurns",
           "held_back_wait_ms", "large_response", "round_bounds"]

#: Longest wait of a fetcher whose partitions all wait for room before it looks again
#: (room listeners normally wake it at once; this only bounds a missed signal).
ROOM_WAIT_S = 0.2

#: How long (seconds) none of a wide fetcher's threads may have had a :func:`large_response`
#: before its partitions go back to one connection.
QUIET_S = 5.0


def large_response(partition_bytes: int, fetch_message_max_bytes: int) -> bool:
    """Whether one partition's data in a response is large enough to make its fetcher wide:
    at least half of ``fetch.message.max.bytes`` (the broker cut it at the fetch size: a backlog).

    >>> large_response(600_000, 1 << 20), large_response(1_000, 1 << 20), large_response(1, 1)
    (True, False, True)
    """
    return 2 * partition_bytes >= max(1, fetch_message_max_bytes)


def held_back_wait_ms(previous: int, fetch_wait_max_ms: int) -> int:
    """The broker wait of a request that leaves out a parked partition, after one that waited ``previous`` ms.

    1 ms first (``previous`` 0: the last request left nothing out), then doubled, never
    over ``fetch_wait_max_ms``.

    >>> [held_back_wait_ms(p, 100) for p in (0, 1, 2, 64, 100)]
    [1, 2, 4, 100, 100]
    """
    return max(0, min(fetch_wait_max_ms, 2 * previous if previous > 0 else 1))


#: How long (seconds) after a consumer last ran (or asked to run) a round on its own thread the
#: fetcher thread leaves the fetching to it.
HANDBACK_S = 0.05

#: A consumer runs no round with less than this left before its deadline (ms): it waits on its queue.
MIN_CONSUMER_ROUND_MS = 5

#: How long (ms) past its deadline a consumer's round waits for the broker's answer: the broker is asked
#: to answer by the deadline, and a healthy broker's answer comes a round trip later.
ANSWER_GRACE_MS = 50

#: After a consumer's round was cut at its deadline (the answer did not come within the grace: a hung
#: broker, or one farther than the grace), how long (s) the fetcher thread runs the rounds, with its
#: own ``socket.timeout.ms``, before consumers may again: so a broker that answers slowly still
#: delivers, and one that answers nothing is failed on the thread's wait.
CUT_BACKOFF_S = 1.0


def round_bounds(wait_ms: int, left_ms: Optional[int], socket_timeout_ms: int,
                 silent_s: Optional[float]) -> Tuple[int, Optional[int], bool]:
    """``(broker wait, socket bound, by_deadline)`` of a round whose broker wait would be ``wait_ms``.

    ``left_ms``: the time (ms) left before the deadline of the consumer running the round (``None``:
    the fetcher thread's round, no deadline). ``silent_s``: how long ago the first request the broker
    has not answered yet was sent (``None``: it answered the last one). The socket bound (``None``:
    the connection's own ``socket.timeout.ms``) is what is left of ``socket.timeout.ms`` since then,
    and for a consumer at most ``left_ms`` + :data:`ANSWER_GRACE_MS`, its broker wait at most
    ``left_ms``: a consumer is never held past its deadline by more than the grace, whatever the
    broker does, and a broker silent for ``socket.timeout.ms`` over several rounds fails as one
    silent within one request does. ``by_deadline``: the bound is the consumer's (a timeout then is
    not the broker's failure).

    >>> round_bounds(100, None, 30000, None), round_bounds(100, None, 30000, 29.5)
    ((100, None, False), (100, 500, False))
    >>> round_bounds(100, 1000, 30000, None), round_bounds(100, 60, 30000, None), round_bounds(1, 10, 30000, None)
    ((100, 1050, True), (60, 110, True), (1, 60, True))
    >>> round_bounds(100, 1000, 30000, 29.5), round_bounds(100, 1000, 0, 29.5)
    ((100, 500, False), (100, 1050, True))
    """
    bound: Optional[int] = None
    if silent_s is not None and socket_timeout_ms > 0:
        bound = max(1, socket_timeout_ms - int(silent_s * 1000))
    if left_ms is None:
        return wait_ms, bound, False
    deadline_ms = left_ms + ANSWER_GRACE_MS
    socket_ms = bound if bound is not None else socket_timeout_ms
    if 0 < socket_ms <= deadline_ms:
        return min(wait_ms, left_ms), bound, False
    return min(wait_ms, left_ms), deadline_ms, True


class RoundTurns:
    """The turn-taking state of one fetcher (see the module docstring). Thread-safe."""

    def __init__(self, fetch_wait_max_ms: int) -> None:
        self.lock = threading.Lock()
        #: The thread ident of a consumer running a round, else ``None``.
        self.driving: Optional[int] = None
        self._round_s = fetch_wait_max_ms / 1000.0
        self._consumer_seen = float("-inf")  # time.monotonic() a consumer last ran a round or asked to

    def consumer_waits(self) -> None:
        """A consumer asked for a round and found one running: the thread steps back after it."""
        self._consumer_seen = time.monotonic()

    def begin_consumer_round(self) -> bool:
        """On a consumer's thread: take the round lock if free (``False``: a round runs)."""
        if not self.lock.acquire(False):
            self.consumer_waits()
            return False
        self.driving = threading.get_ident()
        return True

    def end_consumer_round(self, fetched: bool) -> None:
        """Release what :meth:`begin_consumer_round` took; ``fetched``: the round sent a fetch."""
        self.driving = None
        if fetched:
            self._consumer_seen = time.monotonic()
        self.lock.release()

    def thread_pause_s(self, may_hand_over: bool) -> float:
        """How long from now the fetcher thread leaves the rounds to a consumer (<= 0: it runs one).

        ``may_hand_over``: the fetcher hands rounds over at all now (one queue, narrow, small responses).
        While a consumer runs a round, until about when it ends (within the broker's wait) plus
        :data:`HANDBACK_S`."""
        if not may_hand_over:
            return 0.0
        if self.driving is not None:
            return HANDBACK_S + self._round_s
        return HANDBACK_S - (time.monotonic() - self._consumer_seen)

    def wait_until_idle(self, deadline: Optional[float]) -> None:
        """Wait until no round runs, at most until ``deadline`` (``time.monotonic()``; ``None``: no bound).
        Returns at once on the consumer thread running one (a round never waits for itself)."""
        if self.driving == threading.get_ident():
            return
        left = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
        if self.lock.acquire(timeout=left):
            self.lock.release()
