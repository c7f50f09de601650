"""``metrics_snapshot()`` under concurrent callers (the MetricsReporter thread and Prometheus scrapes)."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any, Dict, Tuple

from zkconsumer.connector import ZookeeperConsumerConnector
from zkconsumer.metrics.consumer import ConsumerMetrics


class Stream:
    thread_id = "g_c-0"
    queue: list = []
    delivered: Tuple[int, int] = (10, 100)


class SlowMetrics(ConsumerMetrics):
    """On thread ``slow``, recording (its delta already computed) waits for another snapshot to finish."""

    def __init__(self, other_done: threading.Event) -> None:
        super().__init__()
        self._other_done = other_done

    def record_messages(self, count: int, size: int) -> None:
        if threading.current_thread().name == "slow":
            self._other_done.wait(0.5)  # with the lock the other caller cannot finish: wait a bounded time
        super().record_messages(count, size)


def bare_connector(other_done: threading.Event) -> Any:
    c = object.__new__(ZookeeperConsumerConnector)  # no ZooKeeper: only what the snapshot reads
    c.metrics = SlowMetrics(other_done)
    c._streams = [Stream()]
    c._recorded = (0, 0)
    c._snapshot_lock = threading.Lock()
    c._membership = None
    c._fetchers = SimpleNamespace(metrics=lambda: {"partitions": {}, "brokers": {}})
    c._heartbeat = None  # as before the first ZooKeeper connection
    return c


def test_observability_d_concurrent_snapshots_count_delivered_messages_once() -> None:
    other_done = threading.Event()
    connector = bare_connector(other_done)
    results: Dict[str, Any] = {}

    def snapshot(name: str) -> None:
        try:
            results[name] = connector.metrics_snapshot()
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            results[name] = exc
        finally:
            if name == "fast":
                other_done.set()

    slow = threading.Thread(target=snapshot, args=("slow",), name="slow")
    slow.start()
    fast = threading.Thread(target=snapshot, args=("fast",), name="fast")
    fast.start()
    fast.join(5)
    slow.join(5)
    assert not slow.is_alive() and not fast.is_alive()
    for name in ("slow", "fast"):  # both callers got a snapshot, not an exception
        assert isinstance(results.get(name), dict), f"{name}: {results.get(name)!r}"
        assert results[name]["zookeeper_heartbeat"] is None and results[name]["zookeeper_unanswered_drops"] == 0
    assert connector.metrics.messages == 10 and connector.metrics.bytes == 100  # not 20 / 200
    assert results["slow"]["messages"] == results["fast"]["messages"] == 10  # the running total, once
