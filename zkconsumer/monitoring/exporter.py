"""The standalone lag exporter: every group under ``/consumers``, judged by Burrow's rules.

:class:`LagExporter` polls ZooKeeper (and each partition's leader for its log
end offset) every ``interval_s`` on its own thread, read-only, for every group
under ``/consumers`` (or the ones named): zkconsumer's groups and Kafka's own
Scala consumers' alike, since both keep the same nodes. Each poll feeds a
:class:`~zkconsumer.monitoring.lag.LagMonitor`; :class:`LagCollector` exposes
the latest evaluation as Prometheus metrics (prefix ``zkconsumer_group_``, labels
``group``, ``topic``, ``partition``). ``zkconsumer exporter`` serves it over HTTP.

Contract: a poll never raises into the thread (a failing group is counted in
``zkconsumer_exporter_poll_errors_total`` and keeps its previous figures);
:meth:`LagExporter.stop` wakes the thread and joins it within a bound. One
group's failure does not stop the others'. Log end offsets are looked up once
per partition per poll, however many groups read the topic.

``offsets_storage`` (``zookeeper`` by default; the CLI's default is ``detect``)
says where each group's committed offsets are read, as ``--offsets-storage``
does for ``groups describe``: ``kafka`` from the group's coordinator (a
connection per group per poll), ``both`` side by side (the larger is judged; a
disagreement is one of the group's warnings), ``detect`` per group at each poll.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Dict, Iterable, Iterator, Optional, Sequence, Tuple, TypedDict

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..admin import BrokerOffsets, LogOffsets, list_groups
from ..admin.access import PLAINTEXT, BrokerAccess
from ..admin.snapshot import snapshot_group
from ..admin.stores import STORE_CHOICES, CoordinatorOffsets
from ..errors import ZkConsumerError
from ..structs import TopicPartition
from ..threads import ShutdownableThread
from .burrow import DEFAULT_WINDOW, GroupStatus, PartitionStatus
from .lag import GroupLag, LagMonitor

__all__ = ["LagExporter", "LagCollector", "GROUP_PREFIX", "STATUS_CODES"]

log = logging.getLogger(__name__)

GROUP_PREFIX = "zkconsumer_group"
#: Numeric codes of ``*_status_code`` gauges.
STATUS_CODES: Dict[str, int] = {"NOTFOUND": -1, "OK": 0, "WARN": 1, "ERR": 2, "STALL": 2, "STOP": 3, "REWIND": 4}
PARTITION_CODES = {s: STATUS_CODES[s.value] for s in PartitionStatus}
#: How long :meth:`LagExporter.stop` waits for a poll in progress.
STOP_TIMEOUT_S = 30.0


class _PollOffsets:
    """A :class:`LogOffsets` that asks ``inner`` once per partition and time within one poll."""

    def __init__(self, inner: LogOffsets) -> None:
        self._inner = inner
        self._cache: Dict[Tuple[TopicPartition, int], Tuple[Optional[int], Optional[str]]] = {}

    def fetch(self, partitions: Sequence[TopicPartition], time_: int
              ) -> Tuple[Dict[TopicPartition, int], Dict[TopicPartition, str]]:
        missing = [tp for tp in partitions if (tp, time_) not in self._cache]
        if missing:
            found, problems = self._inner.fetch(missing, time_)
            for tp in missing:
                self._cache[(tp, time_)] = (found.get(tp), problems.get(tp, None if tp in found else "no answer"))
        offsets, problems = {}, {}
        for tp in partitions:
            value, problem = self._cache[(tp, time_)]
            if value is not None:
                offsets[tp] = value
            else:
                problems[tp] = problem or "no answer"
        return offsets, problems


class LagExporter:
    """Polls groups and keeps their latest :class:`GroupLag`; see the module docstring.

    ``groups``: the groups to watch (``None``: every child of ``/consumers`` at each poll).
    ``log_offsets``: where log end offsets come from (default: :class:`BrokerOffsets` on ``zk``).
    ``offsets_storage``: where committed offsets are read (see the module docstring).
    ``access``: the brokers' endpoint, TLS and SASL (:class:`~zkconsumer.admin.access.BrokerAccess`).
    """

    def __init__(self, zk: KazooClient, *, groups: Optional[Iterable[str]] = None, window: int = DEFAULT_WINDOW,
                 interval_s: float = 10.0, log_offsets: Optional[LogOffsets] = None,
                 socket_timeout_ms: int = 10000, clock: Callable[[], float] = time.time,
                 offsets_storage: str = "zookeeper", access: BrokerAccess = PLAINTEXT) -> None:
        if interval_s <= 0:
            raise ValueError(f"the poll interval must be positive, got {interval_s}")
        if offsets_storage not in STORE_CHOICES:
            raise ValueError(f"unknown offsets storage {offsets_storage!r}: expected one of {', '.join(STORE_CHOICES)}")
        self._store = offsets_storage
        self._access = access
        self._zk = zk
        self._groups = sorted(set(groups)) if groups else None
        self._interval_s = interval_s
        self._log_offsets = log_offsets
        self._socket_timeout_ms = socket_timeout_ms
        self._clock = clock
        self._monitor = LagMonitor(window)
        self._lock = threading.Lock()
        self._latest: Dict[str, GroupLag] = {}
        self._polls = 0
        self._errors: Dict[str, int] = {}
        self._last_poll_s: Optional[float] = None
        self._last_duration_s: Optional[float] = None
        self._thread = ShutdownableThread("zkconsumer-lag-exporter", self._run)
        self._started = False

    # ------------------------------------------------------------------ polling

    def poll_once(self) -> Dict[str, GroupLag]:
        """Poll every group once on the calling thread; returns the new evaluations (also kept)."""
        started = self._clock()
        # Default source: fresh broker connections and addresses each poll (brokers move and restart).
        brokers = None
        if self._log_offsets is None:
            brokers = BrokerOffsets(self._zk, socket_timeout_ms=self._socket_timeout_ms,
                                    client_id="zkconsumer-exporter", access=self._access)
        try:
            return self._poll(_PollOffsets(self._log_offsets or brokers), started)  # type: ignore[arg-type]
        finally:
            if brokers is not None:
                brokers.close()

    def _poll(self, offsets: "_PollOffsets", started: float) -> Dict[str, GroupLag]:
        listed = True
        try:
            groups = self._groups if self._groups is not None else list_groups(self._zk)
        except (KazooException, ZkConsumerError) as exc:
            log.warning("cannot list consumer groups: %s", exc)
            self._count_error("")
            listed = False  # keep every group's figures and windows; poll the ones we know
            with self._lock:
                groups = sorted(self._latest)
        results: Dict[str, GroupLag] = {}
        for group in groups:
            kafka = None
            try:
                if self._store == "zookeeper":
                    snap = snapshot_group(self._zk, group, offsets, clock=self._clock)
                else:
                    kafka = CoordinatorOffsets(self._zk, group, socket_timeout_ms=self._socket_timeout_ms,
                                               client_id="zkconsumer-exporter", access=self._access)
                    snap = snapshot_group(self._zk, group, offsets, clock=self._clock, store=self._store, kafka=kafka)
            except (KazooException, ZkConsumerError) as exc:
                log.info("cannot read group %s: %s", group, exc)
                self._count_error(group)
                continue
            finally:
                if kafka is not None:
                    kafka.close()
            results[group] = self._monitor.observe(snap)
        with self._lock:
            gone = set(self._latest) - set(groups) if listed else set()
            for group in gone:
                del self._latest[group]
            self._latest.update(results)
            self._polls += 1
            self._last_poll_s = self._clock()
            self._last_duration_s = max(0.0, self._last_poll_s - started)
        for group in gone:
            self._monitor.forget(group)
        return results

    def _count_error(self, group: str) -> None:
        with self._lock:
            self._errors[group] = self._errors.get(group, 0) + 1

    def start(self) -> None:
        """Poll every ``interval_s`` on a daemon thread until :meth:`stop` (the first poll at once)."""
        if self._started:
            raise RuntimeError("the exporter was already started")
        self._started = True
        self._thread.start()

    def _run(self) -> None:
        while not self._thread.stopping:
            try:
                self.poll_once()
            except Exception:  # noqa: BLE001 - the exporter must outlive a bad poll
                log.exception("lag exporter poll failed")
                self._count_error("")
            self._thread.wait(self._interval_s)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> bool:
        """Stop polling and join the thread (within ``timeout``; idempotent); ``True`` once it has ended."""
        ended = self._thread.stop(timeout)
        if not ended and self._started and not self._thread.is_current():
            log.warning("lag exporter thread did not stop within %ss", timeout)
        return ended

    # ------------------------------------------------------------------ reading

    def latest(self) -> Dict[str, GroupLag]:
        with self._lock:
            return dict(self._latest)

    def stats(self) -> "ExporterStats":
        """The exporter's own figures (see :class:`ExporterStats`)."""
        with self._lock:
            return {"polls": self._polls, "errors": dict(self._errors), "last_poll_s": self._last_poll_s,
                    "last_duration_s": self._last_duration_s}


class ExporterStats(TypedDict):
    """What :meth:`LagExporter.stats` returns."""

    #: Polls of ZooKeeper completed.
    polls: int
    #: Failed reads per group (``""``: listing the groups failed).
    errors: Dict[str, int]
    #: When the last poll ended (the exporter's clock), ``None`` before the first.
    last_poll_s: Optional[float]
    #: How long the last poll took, ``None`` before the first.
    last_duration_s: Optional[float]


class LagCollector(Collector):
    """Prometheus metrics of a :class:`LagExporter`'s latest evaluations (read at scrape time)."""

    def __init__(self, exporter: LagExporter) -> None:
        self._exporter = exporter

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        p = GROUP_PREFIX
        tp_labels = ["group", "topic", "partition"]
        offset = GaugeMetricFamily(f"{p}_partition_offset", "Committed offset (the next to consume).", labels=tp_labels)
        log_end = GaugeMetricFamily(f"{p}_partition_log_end_offset", "Log end offset of the partition's leader.",
                                    labels=tp_labels)
        lag = GaugeMetricFamily(f"{p}_partition_lag", "Log end offset minus committed offset (messages).",
                                labels=tp_labels)
        owned = GaugeMetricFamily(f"{p}_partition_owned", "1 for each partition with an owner, labelled with it.",
                                  labels=tp_labels + ["owner"])
        ownerless = GaugeMetricFamily(f"{p}_partition_ownerless_seconds",
                                      "How long the partition has had no owner (0 when owned).", labels=tp_labels)
        pstatus = GaugeMetricFamily(f"{p}_partition_status",
                                    "1 for the partition's Burrow status (OK, WARN, STALL, STOP, REWIND).",
                                    labels=tp_labels + ["status"])
        pcode = GaugeMetricFamily(f"{p}_partition_status_code",
                                  "Burrow status as a number: 0 OK, 1 WARN, 2 STALL, 3 STOP, 4 REWIND.",
                                  labels=tp_labels)
        complete = GaugeMetricFamily(f"{p}_partition_window_complete_ratio",
                                     "How full the partition's window of offsets is (0-1).", labels=tp_labels)
        gstatus = GaugeMetricFamily(f"{p}_status", "1 for the group's Burrow status (NOTFOUND, OK, WARN, ERR).",
                                    labels=["group", "status"])
        gcode = GaugeMetricFamily(f"{p}_status_code", "Group status as a number: -1 NOTFOUND, 0 OK, 1 WARN, 2 ERR.",
                                  labels=["group"])
        total = GaugeMetricFamily(f"{p}_lag", "Sum of the group's partition lags.", labels=["group"])
        members = GaugeMetricFamily(f"{p}_members", "Registered members of the group.", labels=["group"])
        nowned = GaugeMetricFamily(f"{p}_owned_partitions", "Partitions of the group that have an owner.",
                                   labels=["group"])
        ownerless_total = CounterMetricFamily(f"{p}_ownerless_seconds",
                                              "Partition-seconds spent without an owner, as seen by the exporter.",
                                              labels=["group"])
        for group, result in sorted(self._exporter.latest().items()):
            for row in result.partitions:
                labels = [group, row.topic, str(row.partition)]
                if row.offset is not None:
                    offset.add_metric(labels, row.offset)
                if row.log_end_offset is not None:
                    log_end.add_metric(labels, row.log_end_offset)
                if row.lag is not None:
                    lag.add_metric(labels, row.lag)
                if row.owner is not None:
                    owned.add_metric(labels + [row.owner], 1)
                ownerless.add_metric(labels, row.ownerless_s or 0.0)
                for status in PartitionStatus:
                    pstatus.add_metric(labels + [status.value], 1 if row.status is status else 0)
                pcode.add_metric(labels, PARTITION_CODES[row.status])
                complete.add_metric(labels, row.complete)
            for group_status in GroupStatus:
                gstatus.add_metric([group, group_status.value], 1 if result.status is group_status else 0)
            gcode.add_metric([group], STATUS_CODES[result.status.value])
            total.add_metric([group], result.total_lag)
            members.add_metric([group], len(result.members))
            nowned.add_metric([group], result.owned_partitions)
            ownerless_total.add_metric([group], result.ownerless_s_total)
        yield from (offset, log_end, lag, owned, ownerless, pstatus, pcode, complete, gstatus, gcode, total, members,
                    nowned, ownerless_total)
        stats = self._exporter.stats()
        polls = CounterMetricFamily("zkconsumer_exporter_polls", "Polls of ZooKeeper completed.")
        polls.add_metric([], stats["polls"])
        yield polls
        errors = CounterMetricFamily("zkconsumer_exporter_poll_errors",
                                     "Groups that could not be read (group \"\": listing the groups failed).",
                                     labels=["group"])
        for group, count in sorted(stats["errors"].items()):
            errors.add_metric([group], count)
        yield errors
        last_poll_s, last_duration_s = stats["last_poll_s"], stats["last_duration_s"]
        if last_poll_s is not None:
            g = GaugeMetricFamily("zkconsumer_exporter_last_poll_timestamp_seconds", "When the last poll ended.")
            g.add_metric([], last_poll_s)
            yield g
        if last_duration_s is not None:
            g = GaugeMetricFamily("zkconsumer_exporter_poll_duration_seconds", "How long the last poll took.")
            g.add_metric([], last_duration_s)
            yield g


