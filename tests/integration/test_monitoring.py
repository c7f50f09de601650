"""Observability on a real cluster: the lag exporter, ``groups status`` and a connector's metrics port.

Figures are refereed by Kafka's ``kafka.tools.ConsumerOffsetChecker``; Burrow's
verdicts are checked for a healthy group, a stalled one (a live member that
does not move while messages arrive) and a stopped one (members gone, lag
growing). The Prometheus test runs Debian's ``prometheus`` server against the
exporter and a connector's metrics port.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Dict, List

import pytest
from kazoo.client import KazooClient
from support.common import Drainer, ScalaConsoleConsumer, consumer_props, offset_checker, produced_values, unique, wait_until

from harness.cluster import ProjectCluster
from zkconsumer import ZookeeperConsumerConnector
from zkconsumer.__main__ import main
from zkconsumer.monitoring.exporter import LagExporter
from zkconsumer.testing.ports import free_ports
from zkconsumer.zookeeper.group import GroupClient

pytestmark = pytest.mark.integration

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
ROOT = Path(__file__).resolve().parents[2]
#: ``local`` (tests/integration/conftest.py): two partitions per auto-created topic
LOCAL_PARTITIONS = 2


def produce_per_partition(cluster: ProjectCluster, topic: str, counts: Dict[int, int], prefix: str = "m") -> None:
    for partition, n in counts.items():
        cluster.produce(topic, produced_values(n, f"{prefix}{partition}"), partition=partition)


def zk_offsets(local_zk: KazooClient, group: str, topic: str) -> Dict[int, int]:
    base = f"/consumers/{group}/offsets/{topic}"
    return {int(p): int(local_zk.get(f"{base}/{p}")[0]) for p in local_zk.get_children(base)} if local_zk.exists(base) else {}


def status(capsys: pytest.CaptureFixture[str], cluster: ProjectCluster, group: str, fmt: str,
           samples: int = 3, interval_ms: int = 400) -> str:
    capsys.readouterr()
    code = main(["groups", "status", "--zookeeper", cluster.zk_connect, "--group", group, "--format", fmt,
                 "--samples", str(samples), "--interval-ms", str(interval_ms)])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def report(capsys: pytest.CaptureFixture[str], name: str, text: str) -> None:
    """Print an output for the record (visible with ``pytest -s``)."""
    with capsys.disabled():
        sys.stdout.write(f"\n----- {name} -----\n{text}")


# --------------------------------------------------------------------------- figures


def test_exporter_figures_equal_kafkas_consumer_offset_checker(local: ProjectCluster, local_zk: KazooClient,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    topic = local.create_topic(unique("t-lag"), partitions=2)
    produce_per_partition(local, topic, {0: 30, 1: 20})
    group = unique("g-lag")
    GroupClient(local_zk, group, f"{group}_writer").commit_offsets({(topic, 0): 12})  # partition 1: nothing committed

    exporter = LagExporter(local_zk, groups=[group], window=3, interval_s=1.0)
    try:
        ours = exporter.poll_once()[group]
    finally:
        exporter.stop()
    kafka = offset_checker(local, group, topic)
    rows = {p.partition: p for p in ours.partitions if p.topic == topic}
    assert sorted(rows) == sorted(kafka) == [0, 1]
    for p, (k_offset, k_log_size, k_lag) in kafka.items():
        row = rows[p]
        # ConsumerOffsetChecker prints -1 and "unknown" for a partition without an offset node.
        assert (row.offset if row.offset is not None else -1, row.log_end_offset, row.lag) == \
            (k_offset, k_log_size, k_lag), f"partition {p}"
    assert (rows[0].offset, rows[0].log_end_offset, rows[0].lag) == (12, 30, 18)

    doc = json.loads(status(capsys, local, group, "json", samples=1))
    assert [(p["partition"], p["offset"], p["log_end_offset"], p["lag"]) for p in doc["partitions"]] == \
        [(0, 12, 30, 18), (1, None, 20, None)]


def test_exporter_watches_every_group_including_kafkas_own_consumers(local: ProjectCluster, local_zk: KazooClient,
                                                                     tmp_path: Path) -> None:
    topic = local.create_topic(unique("t-scala"), partitions=2)
    produce_per_partition(local, topic, {0: 12, 1: 8})
    group = unique("g-scala")
    scala = ScalaConsoleConsumer(local, group, topic, tmp_path)
    exporter = LagExporter(local_zk, window=3, interval_s=1.0)  # no group named: every group under /consumers
    try:
        wait_until(lambda: len(scala.lines) >= 20, 60, "Kafka's ConsoleConsumer to print 20 messages")
        wait_until(lambda: zk_offsets(local_zk, group, topic) == {0: 12, 1: 8}, 30, "Kafka's consumer to commit")
        results = exporter.poll_once()
        assert group in results
        ours = results[group]
        kafka = offset_checker(local, group, topic)
        assert {p.partition: (p.offset, p.log_end_offset, p.lag) for p in ours.partitions} == kafka == \
            {0: (12, 12, 0), 1: (8, 8, 0)}
        assert len(ours.members) == 1 and ours.owned_partitions == 2
        assert all(p.owner is not None and p.owner.startswith(ours.members[0]) for p in ours.partitions)
        assert ours.status.value == "OK"
    finally:
        exporter.stop()
        scala.stop()


# --------------------------------------------------------------------------- Burrow's verdicts


def test_groups_status_judges_healthy_stalled_and_stopped_groups(local: ProjectCluster, local_zk: KazooClient,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    topic = local.create_topic(unique("t-burrow"), partitions=2)
    produce_per_partition(local, topic, {0: 20, 1: 20})
    group = unique("g-burrow")
    connector = ZookeeperConsumerConnector(consumer_props(local, group, auto_commit_enable="true",
                                                          auto_commit_interval_ms=200))
    try:
        drainer = Drainer(connector.create_message_streams({topic: 1})[topic])
        drainer.wait_for(40)
        wait_until(lambda: zk_offsets(local_zk, group, topic) == {0: 20, 1: 20}, 30, "offsets committed at the log end")

        # Healthy: a live member, caught up.
        healthy = status(capsys, local, group, "table")
        report(capsys, "healthy", healthy)
        doc = json.loads(status(capsys, local, group, "json", samples=2))
        assert doc["status"] == "OK" and {p["status"] for p in doc["partitions"]} == {"OK"}
        assert doc["owned_partitions"] == 2 and len(doc["members"]) == 1

        # Stalled: the member stays (owns its partitions) but stops consuming; messages keep arriving.
        drainer.stop()
        produce_per_partition(local, topic, {0: 10, 1: 10}, prefix="s")
        wait_until(lambda: zk_offsets(local_zk, group, topic) == {0: 20, 1: 20}, 5, "committed offsets unchanged")
        stalled = status(capsys, local, group, "table")
        report(capsys, "stalled", stalled)
        doc = json.loads(status(capsys, local, group, "json"))
        assert doc["status"] == "ERR", doc
        assert [(p["partition"], p["lag"], p["status"]) for p in doc["partitions"]] == [(0, 10, "STALL"),
                                                                                       (1, 10, "STALL")]
        assert all(len(p["window"]) == 3 and {c["offset"] for c in p["window"]} == {20} for p in doc["partitions"])
    finally:
        connector.shutdown()

    # Stopped: the member is gone and the log keeps growing.
    produce_per_partition(local, topic, {0: 5, 1: 5}, prefix="x")
    stopped = status(capsys, local, group, "table")
    report(capsys, "stopped", stopped)
    doc = json.loads(status(capsys, local, group, "json"))
    assert doc["status"] == "ERR" and doc["members"] == [] and doc["owned_partitions"] == 0
    assert [(p["partition"], p["lag"], p["status"]) for p in doc["partitions"]] == [(0, 15, "STOP"),
                                                                                   (1, 15, "STOP")]
    kafka = offset_checker(local, group, topic)
    assert {p: (o, s, lag) for p, (o, s, lag) in kafka.items()} == {0: (20, 35, 15), 1: (20, 35, 15)}


# --------------------------------------------------------------------------- connector metrics port


def scrape(url: str) -> str:
    return urllib.request.urlopen(url, timeout=5).read().decode()


def sample(text: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families
    found = [s.value for f in text_string_to_metric_families(text) for s in f.samples
             if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def by_label(text: str, name: str, label: str, **labels: str) -> Dict[str, float]:
    """``{value of label: sample}`` of the samples called ``name`` with ``labels``."""
    from prometheus_client.parser import text_string_to_metric_families
    return {s.labels[label]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())}


def test_connector_serves_its_metrics_on_metrics_port(local: ProjectCluster, local_zk: KazooClient) -> None:
    topic = local.create_topic(unique("t-metrics"), partitions=2)
    produce_per_partition(local, topic, {0: 15, 1: 5})
    group = unique("g-metrics")
    connector = ZookeeperConsumerConnector(consumer_props(local, group), metrics_port=0)
    port = connector.prometheus.port
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        drainer = Drainer(connector.create_message_streams({topic: 1})[topic])
        drainer.wait_for(20)
        drainer.stop()
        connector.commit_offsets()
        labels = {"group": group, "consumer_id": connector.consumer_id}
        text = scrape(url)
        assert sample(text, "zkconsumer_consumer_owned_partitions", **labels) == 2
        assert sample(text, "zkconsumer_consumer_messages_total", **labels) == 20
        assert sample(text, "zkconsumer_consumer_bytes_total", **labels) > 0
        assert sample(text, "zkconsumer_consumer_rebalances_total", **labels) >= 1
        assert sample(text, "zkconsumer_consumer_rebalance_duration_seconds_count", **labels) >= 1
        assert sample(text, "zkconsumer_consumer_commits_total", **labels) >= 1
        assert sample(text, "zkconsumer_consumer_zookeeper_connected", **labels) == 1
        assert sample(text, "zkconsumer_consumer_partition_lag", topic=topic, partition="0", **labels) == 0
        # Observability item 1: per-broker fetch counters and failed rebalance attempts as counters.
        fetched = by_label(text, "zkconsumer_consumer_fetched_messages_total", "broker", **labels)
        assert sum(fetched.values()) == 20, fetched  # every message consumed was fetched once
        requests = by_label(text, "zkconsumer_consumer_fetch_requests_total", "broker", **labels)
        assert set(requests) == set(fetched) and all(n > 0 for n in requests.values()), requests
        assert sum(by_label(text, "zkconsumer_consumer_fetched_bytes_total", "broker", **labels).values()) > 0
        assert sample(text, "zkconsumer_consumer_rebalance_attempt_failures_total", **labels) >= 0

        # A second member joins: this one pauses (releases, re-fetches) and the pause is counted.
        second = ZookeeperConsumerConnector(consumer_props(local, group))
        try:
            second.create_message_streams({topic: 1})
            wait_until(lambda: sample(scrape(url), "zkconsumer_consumer_owned_partitions", **labels) == 1, 30,
                       "the first member to own one partition")
            text = scrape(url)
            assert sample(text, "zkconsumer_consumer_rebalances_total", **labels) >= 2
            assert sample(text, "zkconsumer_consumer_rebalance_pause_seconds_total", **labels) > 0
        finally:
            second.shutdown()

        # The owner's server survives a session expiry and counts it.
        local.expire_session(connector.zk_client)
        wait_until(lambda: sample(scrape(url), "zkconsumer_consumer_zookeeper_reconnects_total", **labels) >= 1,
                   30, "a reconnect counted")
        assert sample(scrape(url), "zkconsumer_consumer_zookeeper_session_expirations_total", **labels) == 1
    finally:
        connector.shutdown()
    with pytest.raises(OSError):
        scrape(url)  # the server is gone with the connector


# --------------------------------------------------------------------------- a real Prometheus


def prometheus_query(port: int, query: str) -> List[Dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    doc = json.loads(urllib.request.urlopen(url, timeout=5).read().decode())
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


def by_partition(result: List[Dict[str, Any]]) -> Dict[int, float]:
    return {int(r["metric"]["partition"]): float(r["value"][1]) for r in result}


@pytest.mark.skipif(not os.access(PROMETHEUS, os.X_OK),
                    reason=f"{PROMETHEUS} is absent: install Debian's prometheus package "
                           "(apt-get install prometheus) to run this test")
def test_prometheus_scrapes_the_exporter_and_a_connector(local: ProjectCluster, local_zk: KazooClient,
                                                         tmp_path: Path) -> None:
    topic = local.create_topic(unique("t-prom"), partitions=2)
    produce_per_partition(local, topic, {0: 25, 1: 10})
    group = unique("g-prom")
    exporter_port, connector_port, prometheus_port = free_ports(3)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    exporter = subprocess.Popen(
        [sys.executable, "-m", "zkconsumer", "exporter", "--zookeeper", local.zk_connect, "--group", group,
         "--port", str(exporter_port), "--addr", "127.0.0.1", "--interval-s", "1", "--window", "5"],
        env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "exporter.log", "wb"))
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        f"  - job_name: lag-exporter\n    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n"
        f"  - job_name: consumer\n    static_configs:\n      - targets: ['127.0.0.1:{connector_port}']\n")
    prometheus = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prometheus_port}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"))
    connector = ZookeeperConsumerConnector(consumer_props(local, group), metrics_port=connector_port)
    try:
        drainer = Drainer(connector.create_message_streams({topic: 1})[topic])
        drainer.wait_for(35)
        drainer.stop()
        GroupClient(local_zk, group, f"{group}_writer").commit_offsets({(topic, 0): 20, (topic, 1): 4})
        kafka = offset_checker(local, group, topic)
        assert kafka == {0: (20, 25, 5), 1: (4, 10, 6)}

        def settled() -> bool:
            try:
                lags = by_partition(prometheus_query(prometheus_port,
                                                     f'zkconsumer_group_partition_lag{{group="{group}"}}'))
                owned = prometheus_query(prometheus_port, f'zkconsumer_consumer_owned_partitions{{group="{group}"}}')
            except OSError:
                return False
            return lags == {p: float(lag) for p, (_, _, lag) in kafka.items()} and \
                [float(r["value"][1]) for r in owned] == [2.0]

        wait_until(settled, 45, "Prometheus to scrape the exporter's lags and the connector's owned partitions",
                   interval=0.5)
        offsets = by_partition(prometheus_query(prometheus_port, f'zkconsumer_group_partition_offset{{group="{group}"}}'))
        ends = by_partition(prometheus_query(prometheus_port,
                                             f'zkconsumer_group_partition_log_end_offset{{group="{group}"}}'))
        assert offsets == {p: float(o) for p, (o, _, _) in kafka.items()}
        assert ends == {p: float(s) for p, (_, s, _) in kafka.items()}
        owned = prometheus_query(prometheus_port, f'zkconsumer_group_owned_partitions{{group="{group}"}}')
        assert [float(r["value"][1]) for r in owned] == [2.0]
        up = prometheus_query(prometheus_port, "up")
        assert {r["metric"]["job"]: r["value"][1] for r in up} == {"lag-exporter": "1", "consumer": "1"}
    finally:
        connector.shutdown()
        for process in (prometheus, exporter):
            process.terminate()
        for process in (prometheus, exporter):
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
    assert exporter.returncode == 0, (tmp_path / "exporter.log").read_text()


def test_metrics_port_with_broker_managed_membership(local: ProjectCluster) -> None:
    """With ``group.membership=kafka`` the connector takes metrics_port as well."""
    group = unique("g-coord")
    connector = ZookeeperConsumerConnector(consumer_props(local, group, group_membership="kafka", offsets_storage="kafka"),
                                           metrics_port=0)
    try:
        text = scrape(f"http://127.0.0.1:{connector.prometheus.port}/metrics")
        assert sample(text, "zkconsumer_consumer_zookeeper_connected", group=group) == 1
    finally:
        connector.shutdown()
