"""A ``foreach_stream`` job's members expose their Prometheus metrics (Observability: members of Spark jobs).

Real local PySpark (local[2]) against a real 1-broker LocalCluster. Either
each member serves ``/metrics`` on ``metricsPort + partition index`` while it
runs (scraped here from the driver while the handlers wait), or each pushes to
a Pushgateway: a tiny HTTP server in this test records the pushes.

Handlers run in Spark's Python workers: this module is pickled by value, so
they must not use test-only modules such as ``support``.
"""

from __future__ import annotations

import functools
import re
import socket
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import pytest
from support.common import consumer_props, produced_values, unique, wait_until

from spark_integration import KafkaStreamSource
from spark_integration.streams import StreamSpec, run_member
from zkconsumer.testing import LocalCluster
from zkconsumer.testing.ports import free_ports

pytestmark = pytest.mark.spark

SPARK_PICKLE_BY_VALUE = True


@pytest.fixture(scope="module")
def local() -> Iterator[LocalCluster]:
    with LocalCluster(brokers=1, partitions=4) as cluster:
        yield cluster




def consecutive_free_ports(count: int) -> int:
    """A base port such that ``base .. base + count - 1`` were all free a moment ago."""
    for _ in range(50):
        base = free_ports(1)[0]
        if base + count > 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                s.bind(("0.0.0.0", port))
                sockets.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise AssertionError("no run of free ports found")


def scrape(port: int) -> Optional[str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            return response.read().decode()
    except OSError:
        return None


def sample(text: str, name: str) -> Optional[float]:
    match = re.search(rf"^{name}{{[^}}]*}} (\S+)$", text, re.M)
    return float(match.group(1)) if match else None


# --------------------------------------------------------------------------- handlers (run on executors)


def consume_then_wait(marker: str, stream) -> Tuple[int, Optional[int]]:
    """Consume the stream, then stay a member until ``marker`` exists (at most 60 s)."""
    count = sum(1 for _ in stream)
    deadline = time.monotonic() + 60
    while not Path(marker).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return count, stream.metrics_port


def count_messages(stream) -> int:
    return sum(1 for _ in stream)


# --------------------------------------------------------------------------- serving


def test_foreach_stream_members_serve_metrics_on_base_port_plus_partition_index(
        spark, local: LocalCluster, tmp_path: Path) -> None:
    topic = local.create_topic(f"t-metrics-{unique('p')}", partitions=4)
    for p in range(4):
        local.produce(topic, produced_values(10, f"p{p}-"), partition=p)
    group = unique("g-metrics")
    base = consecutive_free_ports(2)
    marker = tmp_path / "scraped"
    source = KafkaStreamSource(consumer_props(local, group, consumer_timeout_ms=2000), {topic: 2},
                               settle_timeout_s=30, metrics_port=base)
    results: List[object] = []
    job = threading.Thread(target=lambda: results.extend(
        source.foreach_stream(spark.sparkContext, functools.partial(consume_then_wait, str(marker)))))
    job.start()
    try:
        def members_own_their_share() -> Optional[Dict[int, str]]:
            # Range over 2 members: 2 of the 4 partitions each (10 messages apiece), once both joined
            # and consumed (before that, one owns all or has handed out fewer).
            texts = {port: scrape(port) for port in (base, base + 1)}
            if any(t is None or sample(t, "zkconsumer_consumer_owned_partitions") != 2
                   or sample(t, "zkconsumer_consumer_messages_total") != 20 for t in texts.values()):
                return None
            return texts  # type: ignore[return-value]

        texts = wait_until(members_own_their_share, 90,
                           "both members' metrics endpoints to show 2 partitions and 20 messages each")
        for text in texts.values():
            assert f'group="{group}"' in text
            assert sample(text, "zkconsumer_consumer_zookeeper_connected") == 1
    finally:
        marker.touch()
        job.join(120)
    assert not job.is_alive()
    assert sorted((r.stream_index, r.metrics_port) for r in results) == [(0, base), (1, base + 1)]
    assert all(r.value == (r.messages, r.metrics_port) for r in results)  # the handler saw its port
    assert sum(r.messages for r in results) == 40
    wait_until(lambda: scrape(base) is None and scrape(base + 1) is None, 10, "the servers to stop with the members")


def test_a_member_on_port_0_or_a_taken_port_serves_on_a_free_port(local: LocalCluster) -> None:
    topic = local.create_topic(f"t-metrics-{unique('z')}", partitions=1)
    local.produce(topic, produced_values(3))
    props = {k: str(v) for k, v in consumer_props(local, unique("g-free"), consumer_timeout_ms=500).items()}
    seen: Dict[str, Optional[str]] = {}

    def handler(stream) -> int:
        seen["text"] = scrape(stream.metrics_port)
        return sum(1 for _ in stream)

    result = run_member(props, StreamSpec(topic, 0), handler, metrics_port=0)
    assert result.metrics_port and result.messages == 3
    assert sample(seen["text"], "zkconsumer_consumer_owned_partitions") == 1

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        props["group.id"] = unique("g-taken")
        result = run_member(props, StreamSpec(topic, 0), handler, metrics_port=busy)
    assert result.metrics_port not in (None, busy) and result.messages == 3  # monitoring never fails the task
    assert sample(seen["text"], "zkconsumer_consumer_owned_partitions") == 1


# --------------------------------------------------------------------------- pushing


def grouping_key(path: str) -> Dict[str, str]:
    """``/metrics/job/J/k1/v1/k2/v2`` → ``{"job": J, "k1": v1, "k2": v2}`` (the Pushgateway's URL scheme)."""
    parts = path.strip("/").split("/")
    assert parts[0] == "metrics", path
    return dict(zip(parts[1::2], parts[2::2]))


class FakePushgateway:
    """Records PUT/POST bodies by path, as a Pushgateway would accept them."""

    def __init__(self) -> None:
        self.pushes: List[Tuple[str, str, str]] = []
        lock = threading.Lock()
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                with lock:
                    gateway.pushes.append((self.command, self.path, body))
                self.send_response(200)
                self.end_headers()

            do_PUT = do_POST = _record

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-pushgateway", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


def test_foreach_stream_members_push_to_a_pushgateway(spark, local: LocalCluster) -> None:
    topic = local.create_topic(f"t-metrics-{unique('push')}", partitions=4)
    local.produce(topic, produced_values(40))
    group = unique("g-push")
    gateway = FakePushgateway()
    try:
        source = KafkaStreamSource(consumer_props(local, group, consumer_timeout_ms=2000), {topic: 2},
                                   settle_timeout_s=30, metrics_pushgateway=gateway.address)
        results = source.foreach_stream(spark.sparkContext, count_messages)
    finally:
        gateway.close()
    assert sum(r.messages for r in results) == 40
    for r in results:
        key = {"job": "zkconsumer", "group": group, "consumer_id": r.consumer_id}
        mine = [(method, body) for method, p, body in gateway.pushes if grouping_key(p) == key]
        assert mine, (key, [p for _, p, _ in gateway.pushes])
        assert {method for method, _ in mine} == {"PUT"}  # each push replaces the member's previous one
        last = mine[-1][1]  # the push as the member left: its final counters
        assert sample(last, "zkconsumer_consumer_messages_total") == r.messages
        assert "zkconsumer_consumer_owned_partitions" in last
