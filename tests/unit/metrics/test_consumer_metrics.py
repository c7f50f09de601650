"""ConsumerMetrics and MetricsReporter with an injected clock; no network."""

from __future__ import annotations

import json
import logging
import threading
from typing import List, Tuple

import pytest

from zkconsumer.metrics.consumer import EVENT_COUNTERS, REBALANCE, ConsumerMetrics, MetricsReporter, partition_lag


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_counters_start_at_zero() -> None:
    m = ConsumerMetrics(clock=FakeClock())
    assert (m.messages, m.bytes, m.rebalances, m.last_rebalance_s, m.total_rebalance_s) == (0, 0, 0, None, 0.0)


def test_rates_cover_the_interval_since_the_previous_snapshot() -> None:
    clock = FakeClock()
    m = ConsumerMetrics(clock=clock)
    m.record_messages(100, 10_000)
    clock.now += 4.0
    first = m.snapshot({}, {}, {})
    assert first["interval_s"] == 4.0
    assert first["messages_per_s"] == 25.0 and first["bytes_per_s"] == 2500.0

    m.record_message(50)
    m.record_message(150)
    clock.now += 2.0
    second = m.snapshot({}, {}, {})
    assert second["interval_s"] == 2.0
    assert second["messages_per_s"] == 1.0 and second["bytes_per_s"] == 100.0
    assert second["messages"] == 102 and second["bytes"] == 10_200


def test_a_zero_length_interval_reports_zero_rates() -> None:
    m = ConsumerMetrics(clock=FakeClock())
    m.record_messages(3, 30)
    snap = m.snapshot({}, {}, {})
    assert snap["messages_per_s"] == 0.0 and snap["bytes_per_s"] == 0.0


def test_rebalance_durations_are_timed_with_the_clock() -> None:
    clock = FakeClock()
    m = ConsumerMetrics(clock=clock)
    with m.time_rebalance():
        clock.now += 0.5
    m.record_rebalance(1.5)
    assert m.rebalances == 2
    assert m.last_rebalance_s == 1.5
    assert m.total_rebalance_s == 2.0


def test_a_failed_rebalance_is_not_counted() -> None:
    clock = FakeClock()
    m = ConsumerMetrics(clock=clock)
    with pytest.raises(RuntimeError):
        with m.time_rebalance():
            clock.now += 3
            raise RuntimeError("claim conflict")
    assert m.rebalances == 0 and m.last_rebalance_s is None


def test_negative_inputs_are_rejected() -> None:
    m = ConsumerMetrics(clock=FakeClock())
    with pytest.raises(ValueError):
        m.record_messages(-1, 0)
    with pytest.raises(ValueError):
        m.record_rebalance(-0.1)


def test_snapshot_groups_owned_partitions_by_stream_with_queue_sizes_and_lag() -> None:
    clock = FakeClock()
    m = ConsumerMetrics(clock=clock)
    m.record_rebalance(0.25)
    owned = {("t", 1): "g_c-0", ("t", 0): "g_c-0", ("u", 0): "g_c-1"}
    snap = m.snapshot(owned, {"g_c-0": 2, "g_c-1": 0, "g_c-2": 1}, {("t", 0): 5, ("t", 1): 0, ("u", 0): 7})
    assert snap["streams"] == {
        "g_c-0": {"queue_size": 2, "partitions": [["t", 0], ["t", 1]]},
        "g_c-1": {"queue_size": 0, "partitions": [["u", 0]]},
        "g_c-2": {"queue_size": 1, "partitions": []},
    }
    assert snap["owned_partitions"] == 3
    assert snap["rebalances"] == 1 and snap["last_rebalance_s"] == 0.25 and snap["total_rebalance_s"] == 0.25
    assert snap["lag"] == [
        {"topic": "t", "partition": 0, "lag": 5},
        {"topic": "t", "partition": 1, "lag": 0},
        {"topic": "u", "partition": 0, "lag": 7},
    ]
    assert snap["total_lag"] == 12
    json.dumps(snap)  # JSON-ready


def test_lag_uses_the_last_recorded_high_watermarks() -> None:
    m = ConsumerMetrics(clock=FakeClock())
    m.record_high_watermark("t", 0, 10)
    m.record_high_watermark("t", 0, 12)
    m.record_high_watermark("t", 1, -1)  # an error response: ignored
    assert m.lag({("t", 0): 9, ("t", 1): 3}) == {("t", 0): 3}
    m.forget_partitions()
    assert m.lag({("t", 0): 9}) == {}


def test_partition_lag_is_never_negative_and_skips_unknown_positions() -> None:
    assert partition_lag({("t", 0): 15, ("t", 1): -1}, {("t", 0): 10, ("t", 1): 10}) == {("t", 0): 0}


def test_counting_from_many_threads_loses_nothing() -> None:
    m = ConsumerMetrics()

    def work() -> None:
        for _ in range(10_000):
            m.record_message(3)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert m.messages == 80_000 and m.bytes == 240_000


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: List[logging.LogRecord] = []
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.event.set()


@pytest.fixture
def captured_logger():
    logger = logging.getLogger("test_cli_metrics.reporter")
    handler = ListHandler()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, handler
    logger.removeHandler(handler)


def test_reporter_logs_snapshots_periodically_and_stops_promptly(captured_logger) -> None:
    logger, handler = captured_logger
    calls = []

    def snapshot() -> dict:
        calls.append(1)
        return {"messages": len(calls)}

    reporter = MetricsReporter(snapshot, 0.01, logger=logger)
    reporter.start()
    assert handler.event.wait(5), "the reporter logged nothing"
    reporter.stop()
    assert not reporter.running
    n = len(handler.records)
    assert n >= 1 and "consumer metrics" in handler.records[0].getMessage()
    assert json.loads(handler.records[0].getMessage().split(": ", 1)[1]) == {"messages": 1}
    reporter.stop()  # idempotent
    assert len(handler.records) == n


def test_reporter_stop_does_not_wait_for_the_interval(captured_logger) -> None:
    logger, _ = captured_logger
    reporter = MetricsReporter(lambda: {}, 3600, logger=logger)
    reporter.start()
    done = threading.Event()
    stopper = threading.Thread(target=lambda: (reporter.stop(), done.set()))
    stopper.start()
    assert done.wait(5), "stop() waited for the hour-long interval"
    stopper.join()


def test_reporter_survives_a_failing_snapshot(captured_logger) -> None:
    logger, handler = captured_logger

    def broken() -> dict:
        raise RuntimeError("zookeeper went away")

    reporter = MetricsReporter(broken, 60, logger=logger)
    assert reporter.report_once() is None
    assert handler.records[-1].levelno == logging.ERROR
    reporter.stop()  # never started: still fine


def test_reporter_rejects_a_non_positive_interval() -> None:
    with pytest.raises(ValueError):
        MetricsReporter(lambda: {}, 0)


def test_read_leaves_the_rate_interval_to_snapshot() -> None:
    clock = FakeClock()
    m = ConsumerMetrics(clock=clock)
    m.record_messages(10, 100)
    clock.now += 2.0
    assert m.read({}, {}, {})["messages_per_s"] == 5.0  # a scrape: the interval goes on
    m.record_messages(10, 100)
    clock.now += 2.0
    assert m.snapshot({}, {}, {})["messages_per_s"] == 5.0  # 20 messages over the whole 4 s
    clock.now += 1.0
    assert m.read({}, {}, {})["interval_s"] == 1.0
    m.restart_interval()
    assert m.read({}, {}, {})["interval_s"] == 0.0


class Observer:
    def __init__(self) -> None:
        self.events: List[Tuple[str, float]] = []

    def recorded(self, event: str, value: float) -> None:
        self.events.append((event, value))


def test_observers_are_told_every_event_and_a_failing_one_breaks_nothing(caplog: pytest.LogCaptureFixture) -> None:
    m = ConsumerMetrics(clock=FakeClock())

    class Failing:
        def recorded(self, event: str, value: float) -> None:
            raise RuntimeError("observer bug")

    seen = Observer()
    m.add_observer(Failing())
    m.add_observer(seen)
    with caplog.at_level(logging.ERROR, logger="zkconsumer.metrics.consumer"):
        m.record_rebalance(0.5)
        m.record_commit(True)
        m.record_commit(False)
        m.record_failed_rebalance_attempt()
    assert seen.events == [(REBALANCE, 0.5), ("commits", 1), ("commit_failures", 1), ("failed_rebalance_attempts", 1)]
    assert (m.rebalances, m.commits, m.commit_failures, m.failed_rebalance_attempts) == (1, 1, 1, 1)
    assert "observer bug" in caplog.text
    m.remove_observer(seen)
    m.remove_observer(seen)  # not registered any more: nothing happens
    m.record_rebalance(0.1)
    assert len(seen.events) == 4


def test_every_event_counter_is_in_the_snapshot() -> None:
    m = ConsumerMetrics(clock=FakeClock())
    for n, counter in enumerate(EVENT_COUNTERS, 1):
        m.count(counter.key, n)
    snap = m.snapshot({}, {}, {})
    assert [snap[c.key] for c in EVENT_COUNTERS] == list(range(1, len(EVENT_COUNTERS) + 1))
    with pytest.raises(KeyError):
        m.count("not_a_counter")
    with pytest.raises(ValueError):
        m.count(EVENT_COUNTERS[0].key, -1)
