"""The connector's Prometheus collector and hooks, on a fake connector (no ZooKeeper)."""

from __future__ import annotations

import urllib.request
from types import SimpleNamespace
from typing import Any, Callable, Dict, List

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from zkconsumer.consumer.membership import RebalanceState, RebalanceStatus
from zkconsumer.errors import ConfigurationError
from zkconsumer.fetch.fetch_stats import FetchStats
from zkconsumer.metrics.consumer import EVENT_COUNTERS, ConsumerMetrics, PauseTimingListener
from zkconsumer.metrics.prometheus import instrument_connector


class FakeZk:
    def __init__(self) -> None:
        self.state = "CONNECTED"
        self.listeners: List[Callable[[str], Any]] = []

    def add_listener(self, listener: Callable[[str], Any]) -> None:
        self.listeners.append(listener)

    def remove_listener(self, listener: Callable[[str], Any]) -> None:
        self.listeners.remove(listener)

    def set_state(self, state: str) -> None:
        self.state = state
        for listener in list(self.listeners):
            listener(state)


class FakeConnector:
    def __init__(self) -> None:
        self.config = SimpleNamespace(group_id="g", client_id="app", queued_max_message_chunks=4)
        self.consumer_id = "g_host-1"
        self.metrics = ConsumerMetrics()
        self.zk_client = FakeZk()
        self.status = RebalanceStatus(RebalanceState.STABLE, {("t", 0): "g_host-1-0", ("t", 1): "g_host-1-0"},
                                      rebalances=2, failed_attempts=0, last_error=None, last_duration_s=0.3)
        self.fail_commit = False
        self.fail_snapshot = False
        self.fetch_stats = FetchStats()

    def metrics_snapshot(self, *, restart_interval: bool = True) -> Dict[str, Any]:
        if self.fail_snapshot:
            raise RuntimeError("shutting down")
        self.metrics.record_messages(0, 0)
        snap = self.metrics.read(dict(self.status.owned), {"g_host-1-0": 3}, {("t", 0): 7, ("t", 1): 0},
                                 restart_interval=restart_interval)
        snap["fetch"] = self.fetch_stats.snapshot()
        snap["zookeeper_unanswered_drops"] = 1
        snap["zookeeper_heartbeat"] = "kafka/native"
        return snap

    def _commit(self) -> None:  # as the connector's: one record_commit per attempt
        try:
            if self.fail_commit:
                raise RuntimeError("commit failed")
        except BaseException:
            self.metrics.record_commit(False)
            raise
        self.metrics.record_commit(True)

    def commit_offsets(self) -> None:
        self._commit()


def families(registry: CollectorRegistry) -> Dict[str, list]:
    text = generate_latest(registry).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def one(samples: list, name: str = "", **labels: str) -> float:
    found = [s.value for s in samples if (not name or s.name == name) and all(s.labels.get(k) == v
                                                                              for k, v in labels.items())]
    assert len(found) == 1, (name, labels, samples)
    return found[0]


def test_collector_reads_the_connector_at_scrape_time() -> None:
    connector = FakeConnector()
    registry = CollectorRegistry()
    instrument_connector(connector, registry=registry)
    connector.metrics.record_messages(5, 500)
    f = families(registry)
    common = {"group": "g", "client_id": "app", "consumer_id": "g_host-1"}
    assert one(f["zkconsumer_consumer_owned_partitions"], **common) == 2
    assert one(f["zkconsumer_consumer_partition_lag"], topic="t", partition="0") == 7
    assert one(f["zkconsumer_consumer_partition_owned"], topic="t", partition="1", stream="g_host-1-0") == 1
    assert one(f["zkconsumer_consumer_queue_chunks"], stream="g_host-1-0") == 3
    assert one(f["zkconsumer_consumer_queue_fill_ratio"], stream="g_host-1-0") == 0.75
    assert one(f["zkconsumer_consumer_messages"], "zkconsumer_consumer_messages_total") == 5
    assert one(f["zkconsumer_consumer_bytes"], "zkconsumer_consumer_bytes_total") == 500
    assert one(f["zkconsumer_consumer_rebalances"], "zkconsumer_consumer_rebalances_total") == 2
    assert one(f["zkconsumer_consumer_rebalance_state"], state="stable") == 1
    assert one(f["zkconsumer_consumer_zookeeper_connected"]) == 1
    assert one(f["zkconsumer_consumer_zookeeper_unanswered_drops"],
               "zkconsumer_consumer_zookeeper_unanswered_drops_total") == 1
    assert one(f["zkconsumer_consumer_zookeeper_heartbeat_info"], mode="kafka", pinger="native") == 1


def test_hooks_count_rebalances_commits_and_zookeeper_transitions() -> None:
    connector = FakeConnector()
    registry = CollectorRegistry()
    instrumentation = instrument_connector(connector, registry=registry)
    connector.metrics.record_rebalance(0.2)  # what the rebalancer calls after a successful rebalance
    connector.metrics.record_rebalance(3.0)
    connector.commit_offsets()
    connector.fail_commit = True
    with pytest.raises(RuntimeError):
        connector.commit_offsets()
    for state in ("SUSPENDED", "CONNECTED", "LOST", "CONNECTED"):
        connector.zk_client.set_state(state)
    connector.zk_client.set_state("SUSPENDED")
    f = families(registry)
    assert connector.metrics.rebalances == 2  # the wrapped method still records
    h = f["zkconsumer_consumer_rebalance_duration_seconds"]
    assert one(h, "zkconsumer_consumer_rebalance_duration_seconds_count") == 2
    assert one(h, "zkconsumer_consumer_rebalance_duration_seconds_bucket", le="0.25") == 1
    assert one(h, "zkconsumer_consumer_rebalance_duration_seconds_sum") == pytest.approx(3.2)
    assert one(f["zkconsumer_consumer_commits"], "zkconsumer_consumer_commits_total") == 1
    assert one(f["zkconsumer_consumer_commit_failures"], "zkconsumer_consumer_commit_failures_total") == 1
    assert one(f["zkconsumer_consumer_zookeeper_disconnects"], "zkconsumer_consumer_zookeeper_disconnects_total") == 2
    assert one(f["zkconsumer_consumer_zookeeper_session_expirations"],
               "zkconsumer_consumer_zookeeper_session_expirations_total") == 1
    assert one(f["zkconsumer_consumer_zookeeper_reconnects"], "zkconsumer_consumer_zookeeper_reconnects_total") == 2
    assert one(f["zkconsumer_consumer_zookeeper_connected"]) == 0
    assert one(f["zkconsumer_consumer_zookeeper_state"], state="SUSPENDED") == 1
    instrumentation.close()
    instrumentation.close()  # idempotent
    assert connector.zk_client.listeners == []
    assert "zkconsumer_consumer_owned_partitions" not in families(registry)


def test_a_failing_snapshot_does_not_fail_the_scrape() -> None:
    connector = FakeConnector()
    registry = CollectorRegistry()
    instrument_connector(connector, registry=registry)
    connector.fail_snapshot = True
    f = families(registry)
    assert one(f["zkconsumer_consumer_scrape_errors"], "zkconsumer_consumer_scrape_errors_total") == 1
    assert "zkconsumer_consumer_owned_partitions" not in f


def test_serves_over_http_on_a_free_port_and_close_joins() -> None:
    connector = FakeConnector()
    instrumentation = instrument_connector(connector, port=0, addr="127.0.0.1")
    try:
        assert instrumentation.port
        body = urllib.request.urlopen(f"http://127.0.0.1:{instrumentation.port}/metrics", timeout=5).read().decode()
        assert 'zkconsumer_consumer_owned_partitions{client_id="app",consumer_id="g_host-1",group="g"} 2.0' in body
    finally:
        instrumentation.close()
    assert not instrumentation.server._thread.is_alive()  # type: ignore[union-attr]


def test_a_port_in_use_is_a_configuration_error_and_leaves_nothing_attached() -> None:
    first = instrument_connector(FakeConnector(), port=0, addr="127.0.0.1")
    try:
        connector = FakeConnector()
        with pytest.raises(ConfigurationError, match="metrics_port"):
            instrument_connector(connector, port=first.port, addr="127.0.0.1")
        assert connector.zk_client.listeners == []
    finally:
        first.close()


class FakePushgateway:
    """A loopback HTTP server recording every request (method, path, body), answering 200."""

    def __init__(self) -> None:
        import http.server
        import threading

        requests = self.requests = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PUT(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                requests.append(("PUT", self.path, body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def test_pushes_to_a_pushgateway_periodically_and_once_more_at_close() -> None:
    gateway = FakePushgateway()
    try:
        connector = FakeConnector()
        instrumentation = instrument_connector(connector, push_gateway=gateway.address, push_interval_s=0.1)
        import time
        deadline = time.monotonic() + 10
        while len(gateway.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(gateway.requests) >= 2
        connector.metrics.record_messages(7, 70)
        instrumentation.close()
        method, path, body = gateway.requests[-1]
        assert method == "PUT" and path == "/metrics/job/zkconsumer/consumer_id/g_host-1/group/g"
        assert 'zkconsumer_consumer_messages_total{client_id="app",consumer_id="g_host-1",group="g"} 7.0' in body
        assert not instrumentation.pusher._thread.is_alive()  # type: ignore[union-attr]
    finally:
        gateway.close()


def test_an_unreachable_pushgateway_is_counted_not_raised() -> None:
    from zkconsumer.testing.ports import free_ports
    instrumentation = instrument_connector(FakeConnector(), push_gateway=f"127.0.0.1:{free_ports(1)[0]}",
                                           push_interval_s=60)
    instrumentation.close()
    assert instrumentation.pusher is not None and instrumentation.pusher.failures == 1


def test_rebalance_pause_is_timed_and_the_applications_listener_still_called() -> None:
    now = [100.0]
    calls: List[str] = []

    class AppListener:
        def before_releasing_partitions(self, partitions: Any) -> None:
            calls.append("release")

        def before_starting_fetchers(self, consumer_id: str, assignment: Any) -> None:
            calls.append("start")

    connector = FakeConnector()
    connector.metrics = ConsumerMetrics(clock=lambda: now[0])
    registry = CollectorRegistry()
    instrument_connector(connector, registry=registry)
    listener = PauseTimingListener(AppListener(), connector.metrics)  # what the connector hands its rebalancer
    listener.before_starting_fetchers("g_host-1", {})  # the first join: nothing was released
    listener.before_releasing_partitions({"t": {0}})
    now[0] = 102.5
    f = families(registry)
    assert one(f["zkconsumer_consumer_rebalance_pause_seconds"], "zkconsumer_consumer_rebalance_pause_seconds_total") \
        == 2.5  # the pause under way counts
    listener.before_starting_fetchers("g_host-1", {"t": {0: "g_host-1-0"}})
    now[0] = 110.0
    f = families(registry)
    assert one(f["zkconsumer_consumer_rebalance_pause_seconds"], "zkconsumer_consumer_rebalance_pause_seconds_total") \
        == 2.5
    assert calls == ["start", "release", "start"]


def test_fetch_counters_per_broker_are_exported() -> None:
    """Observability item 1: fetch requests, bytes, messages and errors per broker, as counters."""
    connector = FakeConnector()
    registry = CollectorRegistry()
    instrument_connector(connector, registry=registry)
    stats = connector.fetch_stats
    stats.record_response(1, 1000, 10)
    stats.record_response(1, 500, 4, ["NOT_LEADER_FOR_PARTITION"])
    stats.record_failure(2, "BrokerUnavailableError")
    f = families(registry)
    assert one(f["zkconsumer_consumer_fetch_requests"], "zkconsumer_consumer_fetch_requests_total", broker="1") == 2
    assert one(f["zkconsumer_consumer_fetch_requests"], "zkconsumer_consumer_fetch_requests_total", broker="2") == 1
    assert one(f["zkconsumer_consumer_fetched_bytes"], "zkconsumer_consumer_fetched_bytes_total", broker="1") == 1500
    assert one(f["zkconsumer_consumer_fetched_messages"], "zkconsumer_consumer_fetched_messages_total",
               broker="1") == 14
    assert one(f["zkconsumer_consumer_fetch_errors"], "zkconsumer_consumer_fetch_errors_total", broker="1",
               error="NOT_LEADER_FOR_PARTITION") == 1
    assert one(f["zkconsumer_consumer_fetch_errors"], "zkconsumer_consumer_fetch_errors_total", broker="2",
               error="BrokerUnavailableError") == 1
    assert one(f["zkconsumer_consumer_fetch_requests"], group="g", client_id="app", consumer_id="g_host-1",
               broker="1") == 2


def test_fetch_requests_abandoned_at_a_consumers_deadline_are_requests_and_cuts_not_errors() -> None:
    """A request cut at a consumer's deadline (and one interrupted) was sent: it is counted in the requests;
    the cut is also a deadline cut; neither is an error."""
    connector = FakeConnector()
    registry = CollectorRegistry()
    instrument_connector(connector, registry=registry)
    stats = connector.fetch_stats
    stats.record_response(1, 100, 1)
    stats.record_abandoned(1, True)
    stats.record_abandoned(1, False)
    f = families(registry)
    assert one(f["zkconsumer_consumer_fetch_requests"], "zkconsumer_consumer_fetch_requests_total", broker="1") == 3
    assert one(f["zkconsumer_consumer_fetch_deadline_cuts"], "zkconsumer_consumer_fetch_deadline_cuts_total",
               broker="1") == 1
    assert [s for s in f["zkconsumer_consumer_fetch_errors"] if s.name == "zkconsumer_consumer_fetch_errors_total"] == []
    assert stats.snapshot()[1] == {"requests": 3, "bytes": 100, "messages": 1, "held_back_waits": 0,
                                   "deadline_cuts": 1, "errors": {}}


def test_failed_rebalance_attempts_are_counted_for_good() -> None:
    """Observability item 1: failed attempts as a counter; the status gauge resets on success."""
    connector = FakeConnector()
    registry = CollectorRegistry()
    instrument_connector(connector, registry=registry)
    for _ in range(3):
        connector.metrics.record_failed_rebalance_attempt()  # what the rebalancer's on_attempt_failed calls
    connector.metrics.record_rebalance(0.1)
    f = families(registry)
    assert one(f["zkconsumer_consumer_rebalance_attempt_failures"],
               "zkconsumer_consumer_rebalance_attempt_failures_total") == 3
    assert one(f["zkconsumer_consumer_rebalance_failed_attempts"]) == 0  # the gauge of the status


def test_the_exposition_is_valid_openmetrics_too() -> None:
    """Prometheus negotiates OpenMetrics: every family name must be unique there."""
    from prometheus_client.openmetrics.exposition import generate_latest as om_latest
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
    connector = FakeConnector()
    registry = CollectorRegistry()
    instrument_connector(connector, registry=registry)
    connector.fetch_stats.record_response(1, 10, 1)
    names = [f.name for f in om_parse(om_latest(registry).decode())]
    assert len(names) == len(set(names))
    assert "zkconsumer_consumer_fetched_messages" in names


def test_instrumenting_does_not_patch_the_connectors_private_methods() -> None:
    connector = FakeConnector()
    commit, listener = connector._commit, getattr(connector, "_listener", None)
    instrument_connector(connector, registry=CollectorRegistry())
    assert connector._commit == commit and getattr(connector, "_listener", None) is listener


def test_instrumenting_after_the_join_still_sees_rebalances() -> None:
    """The coordinator hands ``member.metrics.record_rebalance`` to its membership when it joins; a connector
    instrumented after that must still feed the duration histogram (the recorder tells its observers)."""
    connector = FakeConnector()
    on_rebalanced = connector.metrics.record_rebalance  # captured at join time, as KafkaMembership does
    registry = CollectorRegistry()
    instrumentation = instrument_connector(connector, registry=registry)
    on_rebalanced(0.2)
    h = families(registry)["zkconsumer_consumer_rebalance_duration_seconds"]
    assert one(h, "zkconsumer_consumer_rebalance_duration_seconds_count") == 1
    instrumentation.close()  # the observer goes with the instrumentation
    on_rebalanced(0.3)
    assert one(instrumentation.hooks.rebalance_histogram.collect()[0].samples,
               "zkconsumer_consumer_rebalance_duration_seconds_count") == 1
    assert connector.metrics.rebalances == 2


def test_a_scrape_does_not_restart_the_rate_interval() -> None:
    connector = FakeConnector()
    asked: List[bool] = []
    snapshot = connector.metrics_snapshot

    def recording(*, restart_interval: bool = True) -> Dict[str, Any]:
        asked.append(restart_interval)
        return snapshot(restart_interval=restart_interval)

    connector.metrics_snapshot = recording  # type: ignore[method-assign]
    registry = CollectorRegistry()
    instrument_connector(connector, registry=registry)
    families(registry)
    assert asked == [False]


def test_every_event_counter_is_exported() -> None:
    """A new row of EVENT_COUNTERS is a new Prometheus counter, with nothing else to change here."""
    connector = FakeConnector()
    registry = CollectorRegistry()
    instrument_connector(connector, registry=registry)
    for n, counter in enumerate(EVENT_COUNTERS, 1):
        connector.metrics.count(counter.key, n)
    f = families(registry)
    for n, counter in enumerate(EVENT_COUNTERS, 1):
        assert one(f[counter.name], counter.name + "_total") == n
