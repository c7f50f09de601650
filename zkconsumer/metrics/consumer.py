"""Consumer metrics: counters a connector updates, snapshots a monitor reads.

:class:`ConsumerMetrics` is owned by one connector. Its writers are the
threads that already do the work (iterators hand out messages, the rebalancer
finishes rebalances, fetchers see high watermarks); readers call
:meth:`ConsumerMetrics.snapshot` with the state only the connector knows
(owned partitions, queue sizes, lag) and get one JSON-ready ``dict``.
:class:`MetricsReporter` logs such a snapshot every N seconds on its own thread.

Contract:

* Every method is thread-safe; counters only ever grow.
* Rates (``messages_per_s``, ``bytes_per_s``) cover the *interval* since the
  previous :meth:`~ConsumerMetrics.snapshot` or
  :meth:`~ConsumerMetrics.restart_interval` (or since construction, for the
  first), measured with the injected ``clock`` (``time.monotonic`` by default).
  :meth:`~ConsumerMetrics.read` takes the same figures without starting a new
  interval, so a monitor that reads only counters (Prometheus) leaves the rates
  of the one that restarts them (the metrics log) alone.
* Event counters are the rows of :data:`EVENT_COUNTERS`: a new one is a row
  there (``snapshot()``, the Prometheus collector and the documentation's table
  follow) and a :meth:`~ConsumerMetrics.count` call where its event happens.
* Observers (:meth:`~ConsumerMetrics.add_observer`) are told every recorded
  event, whenever they were added: nothing captures a method that a late
  observer would have to replace.
* Lag of a partition is ``high watermark - next offset to consume`` (never
  negative); :meth:`~ConsumerMetrics.lag` computes it from the last high
  watermark recorded with :meth:`~ConsumerMetrics.record_high_watermark`.

Example (with a fake clock)::

    >>> now = [100.0]
    >>> m = ConsumerMetrics(clock=lambda: now[0])
    >>> m.record_messages(10, 1000)
    >>> now[0] = 102.0
    >>> s = m.snapshot(owned={("t", 0): "g_c-0"}, queue_sizes={"g_c-0": 1}, lag={("t", 0): 5})
    >>> s["messages_per_s"], s["bytes_per_s"], s["streams"]["g_c-0"]
    (5.0, 500.0, {'queue_size': 1, 'partitions': [['t', 0]]})
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Protocol, Tuple

from ..structs import TopicPartition
from ..threads import ShutdownableThread

__all__ = ["ConsumerMetrics", "EVENT_COUNTERS", "EventCounter", "MetricsObserver", "MetricsReporter",
           "PauseTimingListener", "REBALANCE", "partition_lag"]

log = logging.getLogger(__name__)

Clock = Callable[[], float]

CONSUMER_PREFIX = "zkconsumer_consumer"


@dataclass(frozen=True)
class EventCounter:
    """A counter of the member that an event adds to: ``name`` is its Prometheus family (the client adds
    ``_total``), ``help`` its meaning, ``key`` its field in :meth:`ConsumerMetrics.snapshot`."""

    name: str
    help: str
    key: str


#: The member's event counters, each recorded with ``ConsumerMetrics.count(key)``; the Prometheus collector
#: exports every row and the documentation's *Monitoring* page's table is generated from them.
#: Not "rebalance_failed_attempts_total": in OpenMetrics that counter's family would clash with the
#: rebalance_failed_attempts gauge (same family name), and Prometheus would reject the whole scrape.
EVENT_COUNTERS: Tuple[EventCounter, ...] = (
    EventCounter(f"{CONSUMER_PREFIX}_commits", "Offset commits that succeeded.", key="commits"),
    EventCounter(f"{CONSUMER_PREFIX}_commit_failures", "Offset commits that raised.", key="commit_failures"),
    EventCounter(f"{CONSUMER_PREFIX}_rebalance_attempt_failures",
                 "Failed rebalance attempts, all rebalances together (never reset).", key="failed_rebalance_attempts"),
)

#: The event :meth:`ConsumerMetrics.record_rebalance` tells observers (value: the duration in seconds).
REBALANCE = "rebalance"


class MetricsObserver(Protocol):
    """Told each event a :class:`ConsumerMetrics` records."""

    def recorded(self, event: str, value: float) -> None:
        """On the recording thread, after the counters changed: ``event`` is an :data:`EVENT_COUNTERS` key
        (``value``: the amount added) or :data:`REBALANCE` (``value``: the duration in seconds). Must not
        block; an exception is logged and dropped."""


def partition_lag(
    consumed: Mapping[TopicPartition, int], high_watermarks: Mapping[TopicPartition, int]
) -> Dict[TopicPartition, int]:
    """Per-partition lag ``max(0, high watermark - consumed)`` for partitions with both values known.

    ``consumed`` holds next offsets to consume; negative ones (position not yet
    known) are left out, as are partitions without a high watermark.

    >>> partition_lag({("t", 0): 7, ("t", 1): -1, ("u", 0): 3}, {("t", 0): 10, ("t", 1): 4})
    {('t', 0): 3}
    """
    result: Dict[TopicPartition, int] = {}
    for tp, offset in consumed.items():
        hw = high_watermarks.get(tp)
        if hw is None or offset < 0 or hw < 0:
            continue
        result[tp] = max(0, hw - offset)
    return result


class ConsumerMetrics:
    """Thread-safe counters of one consumer connector; see the module docstring.

    Counters: ``messages`` and ``bytes`` handed to the application,
    ``rebalances`` completed, ``last_rebalance_s`` and ``total_rebalance_s``,
    ``failed_rebalance_attempts`` (every failed attempt, never reset),
    ``commits`` / ``commit_failures`` (offset commit attempts that returned /
    raised) and ``paused_seconds()`` (time partitions went unfetched in
    rebalances).

    Event hooks, called by the connector (explicitly, no monkeypatching):
    :meth:`record_rebalance` (the rebalancer's ``on_rebalanced``),
    :meth:`record_failed_rebalance_attempt` (its ``on_attempt_failed``),
    :meth:`record_commit` (each attempt of the connector's commit path),
    :meth:`count` (any :data:`EVENT_COUNTERS` row) and
    :meth:`partitions_released` / :meth:`fetchers_starting` (through
    :class:`PauseTimingListener`, the rebalance listener the connector hands
    its rebalancer). Monitors (e.g. the Prometheus collector) read them, and
    observers (:meth:`add_observer`) are told each event as it is recorded.
    Hooks never raise for valid input and never block beyond the short lock
    and the observers.
    """

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._messages = 0
        self._bytes = 0
        self._rebalances = 0
        self._last_rebalance_s: Optional[float] = None
        self._total_rebalance_s = 0.0
        self._counts: Dict[str, int] = {c.key: 0 for c in EVENT_COUNTERS}
        self._observers: Tuple[MetricsObserver, ...] = ()
        self._paused_at: Optional[float] = None
        self._pause_s = 0.0
        self._high_watermarks: Dict[TopicPartition, int] = {}
        # Where the current rate interval started.
        self._interval_start = clock()
        self._interval_messages = 0
        self._interval_bytes = 0

    # ------------------------------------------------------------------ observers

    def add_observer(self, observer: MetricsObserver) -> None:
        """Tell ``observer`` every event recorded from now on (adding one twice tells it twice)."""
        with self._lock:
            self._observers = self._observers + (observer,)

    def remove_observer(self, observer: MetricsObserver) -> None:
        """Stop telling ``observer`` (one registration of it); nothing happens if it was not added."""
        with self._lock:
            observers = list(self._observers)
            if observer in observers:
                observers.remove(observer)
            self._observers = tuple(observers)

    def _notify(self, event: str, value: float) -> None:
        for observer in self._observers:  # a tuple replaced whole: no lock needed to iterate it
            try:
                observer.recorded(event, value)
            except Exception:  # an observer must not break the thread that records
                log.exception("metrics observer %r failed on %s", observer, event)

    # ------------------------------------------------------------------ writers

    def count(self, key: str, amount: int = 1) -> None:
        """Add ``amount`` to the :data:`EVENT_COUNTERS` counter ``key`` and tell the observers.

        Raises :class:`KeyError` for a key not in the table, :class:`ValueError` for a negative amount.
        """
        if amount < 0:
            raise ValueError(f"a counter cannot decrease: {key} += {amount}")
        with self._lock:
            self._counts[key] += amount  # KeyError: not a row of EVENT_COUNTERS
        self._notify(key, amount)

    def record_message(self, size: int) -> None:
        """One message of ``size`` bytes (key + value) was handed to the application."""
        with self._lock:
            self._messages += 1
            self._bytes += size

    def record_messages(self, count: int, size: int) -> None:
        """``count`` messages totalling ``size`` bytes were handed to the application."""
        if count < 0 or size < 0:
            raise ValueError(f"counts cannot be negative: count={count}, size={size}")
        with self._lock:
            self._messages += count
            self._bytes += size

    def record_rebalance(self, duration_s: float) -> None:
        """A rebalance completed successfully after ``duration_s`` seconds."""
        if duration_s < 0:
            raise ValueError(f"a duration cannot be negative: {duration_s}")
        with self._lock:
            self._rebalances += 1
            self._last_rebalance_s = duration_s
            self._total_rebalance_s += duration_s
        self._notify(REBALANCE, duration_s)

    def record_failed_rebalance_attempt(self) -> None:
        """A rebalance attempt failed (it will be retried); counted for good, unlike the status gauge."""
        self.count("failed_rebalance_attempts")

    def record_commit(self, ok: bool) -> None:
        """One offset commit attempt of the connector returned (``ok``) or raised (not ``ok``)."""
        self.count("commits" if ok else "commit_failures")

    def partitions_released(self) -> None:
        """The member stopped fetching and is about to release partitions (a rebalance pause begins)."""
        with self._lock:
            if self._paused_at is None:
                self._paused_at = self._clock()

    def fetchers_starting(self) -> None:
        """The member is about to fetch its (new) partitions: the pause under way, if any, ends."""
        with self._lock:
            if self._paused_at is not None:
                self._pause_s += max(0.0, self._clock() - self._paused_at)
                self._paused_at = None

    @contextlib.contextmanager
    def time_rebalance(self) -> Iterator[None]:
        """Time the enclosed block as one rebalance; recorded only if the block does not raise."""
        started = self._clock()
        yield
        self.record_rebalance(max(0.0, self._clock() - started))

    def record_high_watermark(self, topic: str, partition: int, high_watermark: int) -> None:
        """The latest high watermark a fetch reported for the partition (negative values ignored)."""
        if high_watermark < 0:
            return
        with self._lock:
            self._high_watermarks[(topic, partition)] = high_watermark

    def forget_partitions(self) -> None:
        """Drop recorded high watermarks (call when ownership changes, so lag covers owned partitions only)."""
        with self._lock:
            self._high_watermarks.clear()

    # ------------------------------------------------------------------ readers

    @property
    def messages(self) -> int:
        with self._lock:
            return self._messages

    @property
    def bytes(self) -> int:
        with self._lock:
            return self._bytes

    @property
    def rebalances(self) -> int:
        with self._lock:
            return self._rebalances

    @property
    def last_rebalance_s(self) -> Optional[float]:
        """Duration of the last completed rebalance, ``None`` before the first."""
        with self._lock:
            return self._last_rebalance_s

    @property
    def total_rebalance_s(self) -> float:
        with self._lock:
            return self._total_rebalance_s

    def counter(self, key: str) -> int:
        """The :data:`EVENT_COUNTERS` counter ``key`` (:class:`KeyError` for a key not in the table)."""
        with self._lock:
            return self._counts[key]

    @property
    def failed_rebalance_attempts(self) -> int:
        return self.counter("failed_rebalance_attempts")

    @property
    def commits(self) -> int:
        return self.counter("commits")

    @property
    def commit_failures(self) -> int:
        return self.counter("commit_failures")

    def paused_seconds(self) -> float:
        """Seconds spent between releasing and re-fetching partitions, the pause under way included."""
        with self._lock:
            running = 0.0 if self._paused_at is None else max(0.0, self._clock() - self._paused_at)
            return self._pause_s + running

    def lag(self, consumed: Mapping[TopicPartition, int]) -> Dict[TopicPartition, int]:
        """Lag of the partitions in ``consumed`` (next offsets) against recorded high watermarks."""
        with self._lock:
            high_watermarks = dict(self._high_watermarks)
        return partition_lag(consumed, high_watermarks)

    def restart_interval(self) -> None:
        """Start a new rate interval now (what :meth:`snapshot` does after reading)."""
        now = self._clock()
        with self._lock:
            self._restart_interval_locked(now)

    def _restart_interval_locked(self, now: float) -> None:
        self._interval_start = now
        self._interval_messages = self._messages
        self._interval_bytes = self._bytes

    def snapshot(
        self,
        owned: Mapping[TopicPartition, str],
        queue_sizes: Mapping[str, int],
        lag: Mapping[TopicPartition, int],
        rebalance: Optional[Mapping[str, Any]] = None,
    ) -> Dict[str, Any]:
        """:meth:`read`, then the start of a new rate interval (both under one lock: no message falls between)."""
        return self.read(owned, queue_sizes, lag, rebalance, restart_interval=True)

    def read(
        self,
        owned: Mapping[TopicPartition, str],
        queue_sizes: Mapping[str, int],
        lag: Mapping[TopicPartition, int],
        rebalance: Optional[Mapping[str, Any]] = None,
        *,
        restart_interval: bool = False,
    ) -> Dict[str, Any]:
        """One JSON-ready view of the consumer; rates over the interval so far, which goes on unless
        ``restart_interval``.

        ``owned`` maps each owned partition to its stream's thread id;
        ``queue_sizes`` maps thread id to queued chunks; ``lag`` maps partition
        to lag; ``rebalance``, when given, is the rebalancer's state
        (``RebalanceStatus.as_metrics()``: ``state``, ``failed_attempts``,
        ``last_error``, ``gave_up``, ``error``) and is passed through. The result::

            {"interval_s", "messages", "bytes", "messages_per_s", "bytes_per_s",
             "rebalances", "last_rebalance_s", "total_rebalance_s",
             "failed_rebalance_attempts", "commits", "commit_failures",
             "owned_partitions": int,
             "streams": {thread_id: {"queue_size": int, "partitions": [[topic, p], ...]}},
             "lag": [{"topic", "partition", "lag"}, ...], "total_lag": int,
             "rebalance": {...} (only when given)}

        Streams appear if they have a queue size or own a partition; lists are sorted.
        """
        now = self._clock()
        with self._lock:
            interval = now - self._interval_start
            new_messages = self._messages - self._interval_messages
            new_bytes = self._bytes - self._interval_bytes
            if restart_interval:
                self._restart_interval_locked(now)
            counters: Dict[str, Any] = {
                "messages": self._messages,
                "bytes": self._bytes,
                "rebalances": self._rebalances,
                "last_rebalance_s": self._last_rebalance_s,
                "total_rebalance_s": self._total_rebalance_s,
                **self._counts,
            }
        streams: Dict[str, Dict[str, Any]] = {}
        for thread_id in sorted(set(queue_sizes) | set(owned.values())):
            streams[thread_id] = {"queue_size": int(queue_sizes.get(thread_id, 0)), "partitions": []}
        for (topic, partition), thread_id in sorted(owned.items()):
            streams[thread_id]["partitions"].append([topic, partition])
        lag_rows: List[Dict[str, Any]] = [
            {"topic": topic, "partition": partition, "lag": value} for (topic, partition), value in sorted(lag.items())
        ]
        return {
            "interval_s": interval,
            "messages_per_s": new_messages / interval if interval > 0 else 0.0,
            "bytes_per_s": new_bytes / interval if interval > 0 else 0.0,
            **counters,
            "owned_partitions": len(owned),
            "streams": streams,
            "lag": lag_rows,
            "total_lag": sum(lag.values()),
            **({"rebalance": dict(rebalance)} if rebalance is not None else {}),
        }


class PauseTimingListener:
    """A ConsumerRebalanceListener that reports a rebalance's pause to ``metrics``, then delegates to ``inner``.

    The connector hands this to its rebalancer (``inner`` is the application's
    listener, possibly ``None``). ``before_releasing_partitions`` marks the
    pause start before the application's callback; ``before_starting_fetchers``
    ends it after the application's callback, even if that raises.
    """

    def __init__(self, inner: Any, metrics: ConsumerMetrics) -> None:
        self.inner = inner
        self._metrics = metrics
        #: Called after the application's ``before_starting_fetchers`` with the same arguments (the
        #: connector's pauses: ``consumer/pausing.py``), if set.
        self.on_assigned: Optional[Callable[[str, Any], None]] = None

    def before_releasing_partitions(self, partitions: Any) -> None:
        self._metrics.partitions_released()
        if self.inner is not None:
            self.inner.before_releasing_partitions(partitions)

    def partitions_lost(self, partitions: Any) -> None:
        self._metrics.partitions_released()
        told = getattr(self.inner, "partitions_lost", None)
        if told is not None:
            told(partitions)

    def before_starting_fetchers(self, consumer_id: str, assignment: Any) -> None:
        try:
            if self.inner is not None:
                self.inner.before_starting_fetchers(consumer_id, assignment)
        finally:
            self._metrics.fetchers_starting()
            if self.on_assigned is not None:
                self.on_assigned(consumer_id, assignment)


class MetricsReporter:
    """A thread that logs ``snapshot()`` every ``interval_s`` seconds until :meth:`stop`.

    ``snapshot`` is any callable returning a JSON-ready mapping (typically a
    closure calling :meth:`ConsumerMetrics.snapshot` with the connector's
    state). A failing snapshot is logged and the next tick tries again.
    ``start`` at most once; ``stop`` is idempotent, wakes the thread at once and
    joins it. :meth:`report_once` logs one snapshot on the calling thread.
    """

    def __init__(
        self,
        snapshot: Callable[[], Mapping[str, Any]],
        interval_s: float,
        *,
        logger: logging.Logger = log,
        level: int = logging.INFO,
        name: str = "zkconsumer-metrics",
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"the reporting interval must be positive, got {interval_s}")
        self._snapshot = snapshot
        self._interval_s = interval_s
        self._logger = logger
        self._level = level
        self._thread = ShutdownableThread(name, self._run)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: Optional[float] = None) -> bool:
        """Stop and join the thread (at most ``timeout`` s); ``True`` once it has ended.

        Safe to call twice, or before :meth:`start`.
        """
        return self._thread.stop(timeout)

    def report_once(self) -> Optional[Mapping[str, Any]]:
        """Take and log one snapshot; returns it, or ``None`` if taking it failed (logged)."""
        try:
            snap = self._snapshot()
        except Exception:  # a monitor must not die of a transient failure
            self._logger.exception("could not take a consumer metrics snapshot")
            return None
        self._logger.log(self._level, "consumer metrics: %s", json.dumps(snap, sort_keys=True, default=str))
        return snap

    def _run(self) -> None:
        while not self._thread.wait(self._interval_s):
            self.report_once()
