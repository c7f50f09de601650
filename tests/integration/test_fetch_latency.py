"""A partition whose chunk waited for room is fetched again as soon as that chunk is queued,
not after the broker waited out ``fetch.wait.max.ms`` on its quiet neighbours (real cluster).

The mechanism, not a latency: a request that leaves out a partition with a parked chunk
asks the broker for a short wait, so no such request sits out the whole
``fetch.wait.max.ms`` while the application keeps reading (``held_back_waits`` in the
per-broker fetch counters stays 0). Without it, every chunk parked while the application
reads a little slower than the fetcher costs one such wait.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import pytest
from support.common import consumer_props, unique

from zkconsumer import ConsumerConfig, ZookeeperConsumerConnector
from zkconsumer.wire.connection import BrokerConnection

MESSAGES = 12
VALUE = 600  # one message per chunk: fetch.message.max.bytes holds one and part of the next
FETCH_WAIT_MAX_MS = 2000


class FetchLog:
    """Every Fetch request sent: the partitions it asked for, the broker wait it asked, and when it
    was sent and answered (monotonic s)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: List[Tuple[frozenset, int, float, float]] = []
        self.recording = True

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        fetch_walked = BrokerConnection.fetch_walked  # what a fetcher sends its requests through

        def recorded(conn: BrokerConnection, requested: Dict[Tuple[str, int], Tuple[Any, int]], max_wait_ms: int,
                     min_bytes: int, max_bytes: int, timeout_ms: Optional[int] = None) -> Any:
            sent = time.monotonic()
            try:
                return fetch_walked(conn, requested, max_wait_ms, min_bytes, max_bytes, timeout_ms)
            finally:
                with self.lock:
                    if self.recording:
                        self.requests.append((frozenset(requested), max_wait_ms, sent, time.monotonic()))

        monkeypatch.setattr(BrokerConnection, "fetch_walked", recorded)

    def leaving_out(self, tp: Tuple[str, int]) -> List[Tuple[int, float]]:
        """``(asked wait ms, seconds it took)`` of each request that left ``tp`` out after ``tp``'s first fetch
        (while the application read: ``tp`` had a parked chunk)."""
        with self.lock:
            requests = list(self.requests)
        first = next((i for i, (asked, _, _, _) in enumerate(requests) if tp in asked), len(requests))
        return [(wait, answered - sent) for asked, wait, sent, answered in requests[first:] if tp not in asked]


def test_a_parked_partition_is_not_held_behind_a_wait_of_fetch_wait_max_ms(cluster, make_topic,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Partition 0 gets a chunk parked again and again (the application reads a little slower
    than its fetcher); partition 3, on the same request, stays empty (the broker waits its whole
    asked wait on it). The longest a parked partition could wait for its next fetch is the
    longest request that left it out: no such request asked the broker for ``fetch.wait.max.ms``
    (the short wait doubles from 1 ms while a chunk stays parked), none took that long, and no
    empty full-length wait is counted (``held_back_waits``)."""
    topic = make_topic(partitions=4)  # replica_assignment puts partitions 0 and 3 on broker 0: one request
    values = [bytes([65 + i]) * VALUE for i in range(MESSAGES)]
    cluster.produce(topic, values, partition=0)  # partition 3 stays empty: its fetches wait at the broker
    props = consumer_props(cluster, unique("parked"), **{
        "queued.max.message.chunks": 1, "fetcher.connections": 1, "fetch.message.max.bytes": 1024,
        "fetch.wait.max.ms": FETCH_WAIT_MAX_MS, "consumer.timeout.ms": 60000})
    fetches = FetchLog()
    fetches.install(monkeypatch)
    got = []
    with ZookeeperConsumerConnector(ConsumerConfig(props)) as connector:
        stream = connector.create_message_streams({topic: 1})[topic][0]
        for message in stream:
            got.append(message.message)
            if len(got) == MESSAGES:
                break
            time.sleep(0.02)  # an application a little slower than its fetcher: chunks park
        with fetches.lock:
            fetches.recording = False  # from here on nobody reads: a parked chunk may wait the whole wait
        counters = connector.metrics_snapshot()["fetch"]
    assert got == values
    assert sum(row["requests"] for row in counters.values()) > MESSAGES
    assert {b: row["held_back_waits"] for b, row in counters.items()} == {b: 0 for b in counters}
    left_out = fetches.leaving_out((topic, 0))
    longest_asked = max(wait for wait, _ in left_out)
    longest_took = max(took for _, took in left_out)
    print(f"\n[parked partition] {len(left_out)} requests left it out; longest asked wait {longest_asked} ms, "
          f"longest took {longest_took * 1000:.0f} ms (fetch.wait.max.ms {FETCH_WAIT_MAX_MS})")
    assert len(left_out) >= 1, "partition 0 never had a chunk parked (the test lost its teeth?)"
    assert longest_asked < FETCH_WAIT_MAX_MS, left_out
    assert longest_took < FETCH_WAIT_MAX_MS / 1000.0, left_out
