"""Prometheus metrics of one :class:`~zkconsumer.connector.ZookeeperConsumerConnector`.

Two parts:

* :class:`ConnectorCollector`, a custom ``prometheus_client`` collector that
  reads the connector's public state at scrape time (``connector.status``,
  ``connector.metrics_snapshot()``, ``connector.config``) and the counters of
  its :class:`ConnectorHooks`;
* :class:`ConnectorHooks`, counters that need an event rather than a snapshot:
  the rebalance duration histogram (an observer of ``connector.metrics``, so it
  sees every rebalance recorded after :func:`instrument_connector`, whenever
  that is called) and ZooKeeper connection state changes (a kazoo state
  listener that only counts). The member's event counters (commits, failed
  rebalance attempts: ``EVENT_COUNTERS``) are read from ``connector.metrics``.

:func:`instrument_connector` attaches both and, given a port, serves them over
HTTP (or pushes them to a Pushgateway); the connector calls it when built with
``metrics_port=`` or ``metrics_registry=``. Every metric has the labels
``group``, ``client_id`` (``client.id``) and ``consumer_id``; per-partition
ones add ``topic`` and ``partition``, per-stream ones ``stream`` (the consumer
thread id). Names follow Prometheus' conventions: counters end in ``_total``,
durations are ``_seconds``. The documentation's *Monitoring* page lists them.

Contract: collecting never raises (a failing snapshot yields the metrics that
could be read plus ``zkconsumer_consumer_scrape_errors_total``); the kazoo
listener never blocks; :meth:`ConnectorInstrumentation.close` is idempotent,
removes the listener, stops the HTTP server and joins its thread.

A scrape reads ``metrics_snapshot(restart_interval=False)``: it leaves the rate
interval of the metrics log (``metrics_interval_s``) alone. Prometheus computes
its own rates from the ``_total`` counters.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional

from kazoo.protocol.states import KazooState
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .consumer import CONSUMER_PREFIX, EVENT_COUNTERS, REBALANCE
from .http import MetricsServer
from .push import DEFAULT_PUSH_INTERVAL_S, Pusher

__all__ = ["ConnectorCollector", "ConnectorHooks", "ConnectorInstrumentation", "instrument_connector",
           "REBALANCE_BUCKETS"]

log = logging.getLogger(__name__)

#: Rebalance duration buckets (seconds): from a quiet join to a long retry storm.
REBALANCE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_ZK_STATES = ("CONNECTED", "SUSPENDED", "LOST")
_REBALANCE_STATES = ("starting", "rebalancing", "stable", "retrying", "disconnected", "stopped")


class ConnectorHooks:
    """Event counters of one connector; thread-safe. :meth:`attach` registers them (an observer of the
    connector's metrics, a kazoo listener), :meth:`detach` removes both."""

    def __init__(self, labels: Dict[str, str], registry: Optional[CollectorRegistry] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self.zk_transitions: Dict[str, int] = {s: 0 for s in _ZK_STATES}
        self.zk_reconnects = 0
        self._labels = labels
        # A private registry: the histogram is re-exported by ConnectorCollector with the common labels.
        self.rebalance_histogram = Histogram(
            f"{CONSUMER_PREFIX}_rebalance_duration_seconds", "Duration of successful rebalances.",
            labelnames=list(labels), buckets=REBALANCE_BUCKETS, registry=registry or CollectorRegistry(),
        )
        self.rebalance_seconds = self.rebalance_histogram.labels(**labels)
        self._previous_zk_state: Optional[str] = None
        self._zk: Any = None
        self._metrics: Any = None
        self._clock = clock

    # ------------------------------------------------------------------ events

    def on_zk_state(self, state: str) -> None:
        """kazoo listener: count the transition (never blocks, never raises)."""
        with self._lock:
            if state in self.zk_transitions:
                self.zk_transitions[state] += 1
            if state == KazooState.CONNECTED and self._previous_zk_state in ("SUSPENDED", "LOST"):
                self.zk_reconnects += 1
            self._previous_zk_state = str(state)
        return None

    def observe_rebalance(self, duration_s: float) -> None:
        self.rebalance_seconds.observe(max(0.0, duration_s))

    def recorded(self, event: str, value: float) -> None:
        """Observer of the connector's ``ConsumerMetrics``: a rebalance's duration feeds the histogram."""
        if event == REBALANCE:
            self.observe_rebalance(value)

    # ------------------------------------------------------------------ wiring

    def attach(self, connector: Any) -> None:
        """Register the hooks on ``connector``, before or after it joined its group: from now on every
        rebalance its ``metrics`` records feeds the duration histogram, and a kazoo state listener counts
        transitions. Nothing of the connector is replaced; commits, rebalance pauses and failed rebalance
        attempts are read from its :class:`~zkconsumer.metrics.consumer.ConsumerMetrics` by the collector.
        """
        self._metrics = connector.metrics
        self._metrics.add_observer(self)
        self._zk = connector.zk_client
        self._previous_zk_state = str(self._zk.state)
        self._zk.add_listener(self.on_zk_state)

    def detach(self) -> None:
        """Remove the observer and the kazoo listener (idempotent)."""
        if self._metrics is not None:
            self._metrics.remove_observer(self)
            self._metrics = None
        if self._zk is not None:
            try:
                self._zk.remove_listener(self.on_zk_state)
            except (KeyError, ValueError):
                pass
            self._zk = None

    def counters(self) -> Dict[str, Any]:
        with self._lock:
            return {"zk_transitions": dict(self.zk_transitions), "zk_reconnects": self.zk_reconnects}


class ConnectorCollector(Collector):
    """Reads one connector's state at scrape time; see the module docstring for the contract."""

    def __init__(self, connector: Any, hooks: Optional[ConnectorHooks] = None) -> None:
        self._connector = connector
        self._hooks = hooks
        self._scrape_errors = 0
        self._lock = threading.Lock()
        self._snapshot_lock = threading.Lock()

    def labels(self) -> Dict[str, str]:
        c = self._connector
        return {"group": c.config.group_id, "client_id": c.config.client_id, "consumer_id": c.consumer_id}

    def describe(self) -> Iterable[Metric]:
        return []  # collected lazily: never touch the connector at registration time

    def collect(self) -> Iterator[Metric]:
        base = self.labels()
        names, values = list(base), list(base.values())
        c = self._connector
        snapshot: Optional[Dict[str, Any]] = None
        status = None
        try:
            with self._snapshot_lock:  # concurrent scrapes must not interleave metrics_snapshot() calls
                status = c.status
                snapshot = c.metrics_snapshot(restart_interval=False)
        except Exception:  # noqa: BLE001 - a scrape must not fail because the connector is shutting down
            log.debug("metrics snapshot of %s failed", c.consumer_id, exc_info=True)
            with self._lock:
                self._scrape_errors += 1
        yield from self._from_snapshot(names, values, snapshot, status)
        yield from self._from_metrics(names, values)
        yield from self._from_hooks(names, values)
        with self._lock:
            errors = self._scrape_errors
        m = CounterMetricFamily(f"{CONSUMER_PREFIX}_scrape_errors", "Scrapes whose connector snapshot failed.",
                                labels=names)
        m.add_metric(values, errors)
        yield m

    def _from_snapshot(self, names: List[str], values: List[str], snap: Optional[Dict[str, Any]],
                       status: Any) -> Iterator[Metric]:
        p = CONSUMER_PREFIX
        if snap is not None:
            g = GaugeMetricFamily(f"{p}_owned_partitions", "Partitions this member owns.", labels=names)
            g.add_metric(values, snap["owned_partitions"])
            yield g
            owned = GaugeMetricFamily(f"{p}_partition_owned",
                                      "1 for each partition this member owns, labelled with its stream.",
                                      labels=names + ["topic", "partition", "stream"])
            queue = GaugeMetricFamily(f"{p}_queue_chunks", "Chunks waiting in a stream's queue.",
                                      labels=names + ["stream"])
            fill = GaugeMetricFamily(f"{p}_queue_fill_ratio",
                                     "Queued chunks over queued.max.message.chunks, per stream (0-1).",
                                     labels=names + ["stream"])
            capacity = max(1, int(self._connector.config.queued_max_message_chunks))
            for stream, info in sorted(snap["streams"].items()):
                queue.add_metric(values + [stream], info["queue_size"])
                fill.add_metric(values + [stream], min(1.0, info["queue_size"] / capacity))
                for topic, partition in info["partitions"]:
                    owned.add_metric(values + [topic, str(partition), stream], 1)
            yield owned
            yield queue
            yield fill
            lag = GaugeMetricFamily(f"{p}_partition_lag",
                                    "Messages between the last fetched high watermark and the next offset to "
                                    "hand out, per owned partition.", labels=names + ["topic", "partition"])
            for row in snap["lag"]:
                lag.add_metric(values + [row["topic"], str(row["partition"])], row["lag"])
            yield lag
            g = GaugeMetricFamily(f"{p}_lag", "Sum of the partition lags of this member.", labels=names)
            g.add_metric(values, snap["total_lag"])
            yield g
            m = CounterMetricFamily(f"{p}_messages", "Messages handed to the application.", labels=names)
            m.add_metric(values, snap["messages"])
            yield m
            m = CounterMetricFamily(f"{p}_bytes", "Bytes (key + value) handed to the application.", labels=names)
            m.add_metric(values, snap["bytes"])
            yield m
            yield from self._fetch_counters(names, values, snap.get("fetch") or {})
            if "zookeeper_unanswered_drops" in snap:
                m = CounterMetricFamily(f"{p}_zookeeper_unanswered_drops",
                                        "ZooKeeper connections the native heartbeat dropped because the server stopped "
                                        "answering (kafka: nothing for 2/3 of the session timeout while a write was "
                                        "outstanding; quiet: no answer to a write within 1/6 of it).",
                                        labels=names)
                m.add_metric(values, snap["zookeeper_unanswered_drops"])
                yield m
            if snap.get("zookeeper_heartbeat"):
                mode, _, pinger = str(snap["zookeeper_heartbeat"]).partition("/")
                g = GaugeMetricFamily(f"{p}_zookeeper_heartbeat_info",
                                      "1 for the ZooKeeper heartbeat that runs: mode (zookeeper.heartbeat, kafka or "
                                      "quiet) and pinger (native: a thread that needs no GIL; kazoo: kazoo's own).",
                                      labels=names + ["mode", "pinger"])
                g.add_metric(values + [mode, pinger], 1)
                yield g
        if status is not None:
            m = CounterMetricFamily(f"{p}_rebalances", "Rebalances completed.", labels=names)
            m.add_metric(values, status.rebalances)
            yield m
            g = GaugeMetricFamily(f"{p}_rebalance_failed_attempts",
                                  "Failed attempts of the rebalance under way (0 once it succeeds).", labels=names)
            g.add_metric(values, status.failed_attempts)
            yield g
            g = GaugeMetricFamily(f"{p}_rebalance_state", "1 for the rebalancer's current state.",
                                  labels=names + ["state"])
            for state in _REBALANCE_STATES:
                g.add_metric(values + [state], 1 if status.state.value == state else 0)
            yield g

    @staticmethod
    def _fetch_counters(names: List[str], values: List[str], brokers: Dict[Any, Dict[str, Any]]) -> Iterator[Metric]:
        """Per-broker fetch counters from ``metrics_snapshot()["fetch"]`` (``FetcherManager.metrics()["brokers"]``)."""
        p = CONSUMER_PREFIX
        requests = CounterMetricFamily(f"{p}_fetch_requests", "Fetch requests sent to a broker (failed ones included).",
                                       labels=names + ["broker"])
        size = CounterMetricFamily(f"{p}_fetched_bytes", "Message-set bytes fetched from a broker.",
                                   labels=names + ["broker"])
        messages = CounterMetricFamily(f"{p}_fetched_messages", "Messages fetched from a broker and queued.",
                                       labels=names + ["broker"])
        cuts = CounterMetricFamily(f"{p}_fetch_deadline_cuts",
                                   "Fetch requests of rounds run on a consumer's thread that a broker had not answered "
                                   "by the consumer's deadline (a slow or hung broker; not counted as errors).",
                                   labels=names + ["broker"])
        errors = CounterMetricFamily(f"{p}_fetch_errors",
                                     "Fetch errors per broker: failed requests by exception, partition errors by "
                                     "Kafka's error name.", labels=names + ["broker", "error"])
        for broker, row in sorted(brokers.items(), key=lambda kv: str(kv[0])):
            b = str(broker)
            requests.add_metric(values + [b], row["requests"])
            size.add_metric(values + [b], row["bytes"])
            messages.add_metric(values + [b], row["messages"])
            cuts.add_metric(values + [b], row["deadline_cuts"])
            for kind, count in sorted(row["errors"].items()):
                errors.add_metric(values + [b, kind], count)
        yield requests
        yield size
        yield messages
        yield cuts
        yield errors

    def _from_metrics(self, names: List[str], values: List[str]) -> Iterator[Metric]:
        """The rebalance pause and the :data:`~zkconsumer.metrics.consumer.EVENT_COUNTERS` the connector records
        in its ConsumerMetrics."""
        p = CONSUMER_PREFIX
        metrics = getattr(self._connector, "metrics", None)
        if metrics is None:
            return
        m = CounterMetricFamily(f"{p}_rebalance_pause_seconds",
                                "Seconds this member's partitions went unfetched in rebalances (from releasing "
                                "them to fetching again).", labels=names)
        m.add_metric(values, metrics.paused_seconds())
        yield m
        for counter in EVENT_COUNTERS:  # listed in the documentation from the table itself
            m = CounterMetricFamily(counter.name, counter.help, labels=names)
            m.add_metric(values, metrics.counter(counter.key))
            yield m

    def _from_hooks(self, names: List[str], values: List[str]) -> Iterator[Metric]:
        p = CONSUMER_PREFIX
        zk = getattr(self._connector, "zk_client", None)
        if zk is not None:
            state = str(zk.state)
            g = GaugeMetricFamily(f"{p}_zookeeper_connected", "1 while the ZooKeeper session is connected.",
                                  labels=names)
            g.add_metric(values, 1 if state == "CONNECTED" else 0)
            yield g
            g = GaugeMetricFamily(f"{p}_zookeeper_state", "1 for the ZooKeeper connection's current state.",
                                  labels=names + ["state"])
            for s in _ZK_STATES:
                g.add_metric(values + [s], 1 if state == s else 0)
            yield g
        if self._hooks is None:
            return
        counts = self._hooks.counters()
        m = CounterMetricFamily(f"{p}_zookeeper_disconnects", "Times the ZooKeeper connection was lost (SUSPENDED).",
                                labels=names)
        m.add_metric(values, counts["zk_transitions"]["SUSPENDED"])
        yield m
        m = CounterMetricFamily(f"{p}_zookeeper_session_expirations", "ZooKeeper sessions that expired (LOST).",
                                labels=names)
        m.add_metric(values, counts["zk_transitions"]["LOST"])
        yield m
        m = CounterMetricFamily(f"{p}_zookeeper_reconnects",
                                "Reconnections to ZooKeeper after a disconnection or an expired session.",
                                labels=names)
        m.add_metric(values, counts["zk_reconnects"])
        yield m
        yield from self._hooks.rebalance_histogram.collect()


class ConnectorInstrumentation:
    """What :func:`instrument_connector` attached; :meth:`close` undoes it (idempotent)."""

    def __init__(self, registry: CollectorRegistry, collector: ConnectorCollector, hooks: ConnectorHooks,
                 server: Optional[MetricsServer], pusher: Optional[Pusher] = None) -> None:
        self.registry = registry
        self.collector = collector
        self.hooks = hooks
        self.server = server
        self.pusher = pusher
        self._closed = False

    @property
    def port(self) -> Optional[int]:
        return None if self.server is None else self.server.port

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.pusher is not None:
            self.pusher.stop()  # a last push while the connector's figures are still readable
        self.hooks.detach()
        if self.server is not None:
            self.server.close()
        try:
            self.registry.unregister(self.collector)
        except KeyError:
            pass


def instrument_connector(connector: Any, *, port: Optional[int] = None,
                         registry: Optional[CollectorRegistry] = None,
                         addr: str = "0.0.0.0", push_gateway: Optional[str] = None,
                         push_interval_s: float = DEFAULT_PUSH_INTERVAL_S) -> ConnectorInstrumentation:
    """Attach hooks and a collector to ``connector``; register on ``registry`` (a new one if ``None``)
    and, if ``port`` is given (0: any free port), serve that registry on ``addr:port``; if
    ``push_gateway`` (``host:port``) is given, push it there every ``push_interval_s`` and at
    :meth:`~ConnectorInstrumentation.close`, under job ``zkconsumer`` with the grouping key
    ``group``, ``consumer_id``.

    May be called before or after the connector joins its group: the histogram
    sees every rebalance completed from then on. Raises
    :class:`~zkconsumer.errors.ConfigurationError` if the port cannot be bound
    (nothing stays attached then).
    """
    registry = registry if registry is not None else CollectorRegistry()
    labels = {"group": connector.config.group_id, "client_id": connector.config.client_id,
              "consumer_id": connector.consumer_id}
    hooks = ConnectorHooks(labels)
    collector = ConnectorCollector(connector, hooks)
    registry.register(collector)
    server = None
    if port is not None:
        try:
            server = MetricsServer(registry, port, addr)
        except BaseException:
            registry.unregister(collector)
            raise
    hooks.attach(connector)
    pusher = None
    if push_gateway:
        pusher = Pusher(registry, push_gateway, grouping_key={"group": labels["group"],
                                                              "consumer_id": labels["consumer_id"]},
                        interval_s=push_interval_s).start()
    return ConnectorInstrumentation(registry, collector, hooks, server, pusher)
