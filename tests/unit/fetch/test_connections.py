"""zkconsumer.fetch.manager: ``fetcher.connections`` used only while they pay (issue 44).

A fetcher fetches over one connection per broker while responses are small, spreads its
partitions over its connections while a response carries at least half of
``fetch.message.max.bytes`` for a partition, and gathers them back after ``QUIET_S`` without one.
Every move keeps every message exactly once and in order. Over the in-memory fake cluster of
``test_fetcher``.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, Set

import pytest

from zkconsumer.fetch.rounds import large_response

from .test_fetcher import TP, FakeCluster, Harness, our_threads, set_quiet
from .walking import walked_via_fetch


def wait_for(condition: Callable[[], bool], harness: Harness, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out; metrics {harness.manager.metrics()['fetchers']}"
        harness.drain(lambda: True)
        time.sleep(0.01)


def connections_holding(harness: Harness) -> Set[int]:
    """The connections of the fetcher threads that hold partitions now."""
    return {f["connection"] for f in harness.manager.metrics()["fetchers"].values() if f["partitions"]}


@pytest.fixture
def one_broker() -> FakeCluster:
    return FakeCluster(brokers=1)


@pytest.fixture
def harness(one_broker: FakeCluster):
    h = Harness(one_broker, fetcher_connections=3, num_consumer_fetchers=1, fetch_message_max_bytes=200)
    yield h
    h.manager.stop()
    assert our_threads() == []


def test_the_rule_is_half_the_fetch_size() -> None:
    assert large_response(100, 200) and not large_response(99, 200)
    assert large_response(1 << 19, 1 << 20) and not large_response(1000, 1 << 20)


def test_an_idle_or_live_stream_member_fetches_over_one_connection(one_broker: FakeCluster, harness: Harness) -> None:
    one_broker.create("a", 6, per_partition=0)
    harness.manager.start_connections(harness.infos("a", range(6)))
    expected: Dict[TP, int] = {}
    for i in range(5):  # a live stream: one small message per partition at a time
        for p in range(6):
            one_broker.append("a", p, [one_broker.value("a", p, i)])
            expected[("a", p)] = i + 1
        harness.drain(lambda: harness.has_all(expected))
    before = sum(one_broker.fetches.values())
    wait_for(lambda: sum(one_broker.fetches.values()) > before + 60, harness)  # idle long-polls
    harness.check_exact(expected)
    assert one_broker.connections == 1 + 1  # the LeaderFinder's metadata connection and one fetch connection
    assert set(harness.manager.metrics()["fetchers"]) == {"zkconsumer-fetcher-unit-0-broker-1"}


def test_a_backlog_spreads_the_partitions_and_a_quiet_period_gathers_them_without_loss(
        one_broker: FakeCluster, harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    set_quiet(monkeypatch, 3600.0)
    one_broker.create("a", 6, per_partition=100)  # ~40 B a message: every response is cut at 200 B
    harness.manager.start_connections(harness.infos("a", range(6)))
    expected = {("a", p): 100 for p in range(6)}
    harness.drain(lambda: harness.has_all(expected))
    assert connections_holding(harness) == {0, 1, 2}
    assert one_broker.connections == 1 + 3

    set_quiet(monkeypatch, 0.1)  # nothing large comes any more: back onto connection 0
    wait_for(lambda: connections_holding(harness) == {0}, harness)
    for p in range(6):  # small responses: stays on one connection
        one_broker.append("a", p, [one_broker.value("a", p, 100)])
        expected[("a", p)] = 101
    harness.drain(lambda: harness.has_all(expected))
    assert connections_holding(harness) == {0}

    set_quiet(monkeypatch, 3600.0)
    for p in range(6):  # a backlog again: spread again
        one_broker.append("a", p, [one_broker.value("a", p, i) for i in range(101, 200)])
        expected[("a", p)] = 200
    harness.drain(lambda: harness.has_all(expected))
    assert connections_holding(harness) == {0, 1, 2}
    harness.check_exact(expected)
    assert harness.errors == []


def test_a_chunk_whose_response_arrives_after_the_lease_lapsed_is_not_queued_and_comes_once_later(
        one_broker: FakeCluster) -> None:
    """The fence per chunk: the lease lapses while a fetch is in flight; its data is dropped
    (position unchanged), nothing is fetched while lapsed, and once valid again every message comes once.
    Empty partitions of a response skip the per-chunk check; one with data never does."""
    valid = [True]
    lapse_on_data = [True]
    fetches_while_lapsed = [0]

    class Lapsing:
        def __init__(self, inner: object) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

        fetch_walked = walked_via_fetch  # through this fetch

        def fetch(self, partitions, max_wait_ms, min_bytes, timeout_ms=None):  # type: ignore[no-untyped-def]
            if not valid[0]:
                fetches_while_lapsed[0] += 1
            response = self.inner.fetch(partitions, max_wait_ms, min_bytes, timeout_ms)  # type: ignore[attr-defined]
            if lapse_on_data[0] and any(len(p.message_set) for p in response.partitions):
                valid[0] = False  # the lease lapsed while the request was in flight
                lapse_on_data[0] = False
            return response

    from zkconsumer.fetch.manager import FetcherManager

    h = Harness(one_broker, fetcher_connections=1, num_consumer_fetchers=1)
    h.manager = FetcherManager(h.config, one_broker.live, h.errors.append,
                               connection_factory=lambda host, port: Lapsing(one_broker.connect(host, port)),
                               deliverable=lambda: valid[0])
    try:
        one_broker.create("a", 6, per_partition=0)
        h.manager.start_connections(h.infos("a", range(6)))
        time.sleep(0.1)  # idle long-polls (empty partitions)
        one_broker.append("a", 3, [one_broker.value("a", 3, i) for i in range(5)])
        deadline = time.monotonic() + 10
        while valid[0]:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.3)
        assert h.queues["a"].get(0) is None  # dropped: the lease was lost before it was queued
        assert fetches_while_lapsed[0] == 0
        assert h.manager.metrics()["partitions"]["a-3"]["fetched_offset"] == 0
        valid[0] = True
        h.drain(lambda: h.has_all({("a", 3): 5}))
        h.check_exact({("a", 3): 5})
    finally:
        h.manager.stop()
    assert our_threads() == []
