"""Per-broker fetch counters shared by a manager's fetcher threads (read by metrics and monitoring)."""

from __future__ import annotations

import threading
from typing import Any, Dict, Sequence

__all__ = ["FetchStats", "error_kind"]


class FetchStats:
    """Cumulative fetch counters per broker id; thread-safe, counters only grow.

    Fetcher threads add one response's totals at a time (one lock acquisition
    per fetch response, nothing per message). :meth:`snapshot` returns
    ``{broker_id: {"requests", "bytes", "messages", "held_back_waits", "deadline_cuts", "errors": {kind: n}}}``:
    ``requests`` counts Fetch requests sent (failed and abandoned ones included), ``bytes``
    the message-set bytes of the responses (as received, a trailing partial
    message included), ``messages`` the messages decoded from them and handed
    to the streams' queues, ``held_back_waits`` the requests that left out a
    partition with a parked chunk, asked the broker to wait the whole
    ``fetch.wait.max.ms`` and were answered with no data: a partition whose chunk
    was queued meanwhile waited that long for its next fetch (a fetcher shortens
    such waits, see ``fetcher_thread.py``; only a stream left unread for long
    reaches the whole wait again), ``deadline_cuts`` the requests of rounds run on a consumer's
    thread that the broker had not answered by the consumer's deadline and
    ``ANSWER_GRACE_MS`` (the consumer's wait ended on time; the fetcher thread then
    runs the rounds for a while, see ``rounds.py``; a slow or hung broker; not
    in ``errors``), ``errors`` failed requests by exception
    (``KafkaProtocolError.error_name`` or the class name, e.g.
    ``BrokerUnavailableError``) and per-partition error codes by Kafka's name
    (e.g. ``NOT_LEADER_FOR_PARTITION``, ``OFFSET_OUT_OF_RANGE``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._brokers: Dict[int, Dict[str, Any]] = {}

    def _entry(self, broker_id: int) -> Dict[str, Any]:
        entry = self._brokers.get(broker_id)
        if entry is None:
            entry = self._brokers[broker_id] = {"requests": 0, "bytes": 0, "messages": 0, "held_back_waits": 0,
                                                 "deadline_cuts": 0, "errors": {}}
        return entry

    def record_response(self, broker_id: int, size: int, messages: int, errors: Sequence[str] = (),
                        held_back_wait: bool = False) -> None:
        """One fetch request answered: ``size`` message-set bytes, ``messages`` decoded, partition ``errors``;
        ``held_back_wait``: it is one of the ``held_back_waits``."""
        with self._lock:
            entry = self._entry(broker_id)
            entry["requests"] += 1
            entry["held_back_waits"] += held_back_wait
            entry["bytes"] += size
            entry["messages"] += messages
            for kind in errors:
                entry["errors"][kind] = entry["errors"].get(kind, 0) + 1

    def record_failure(self, broker_id: int, kind: str) -> None:
        """One fetch request failed as a whole with an error of ``kind``."""
        with self._lock:
            entry = self._entry(broker_id)
            entry["requests"] += 1
            entry["errors"][kind] = entry["errors"].get(kind, 0) + 1

    def record_abandoned(self, broker_id: int, deadline_cut: bool) -> None:
        """One fetch request sent whose answer the fetcher gave up on without a failure of the broker's: cut at
        a consumer's deadline (``deadline_cut``: one of the ``deadline_cuts``), interrupted, or stopping."""
        with self._lock:
            entry = self._entry(broker_id)
            entry["requests"] += 1
            entry["deadline_cuts"] += deadline_cut

    def snapshot(self) -> Dict[int, Dict[str, Any]]:
        with self._lock:
            return {b: {**e, "errors": dict(e["errors"])} for b, e in self._brokers.items()}


def error_kind(exc: BaseException) -> str:
    """The label of a failed fetch: Kafka's error name for a protocol error, else the exception's class name."""
    name = getattr(exc, "error_name", None)
    return name if isinstance(name, str) and name else type(exc).__name__

