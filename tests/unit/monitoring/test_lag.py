"""LagMonitor (windows from successive polls) and the exporter's Prometheus collector, with fake polls."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from zkconsumer.admin import GroupDescription, MemberInfo, PartitionRow
from zkconsumer.admin.snapshot import GroupSnapshot
from zkconsumer.monitoring.burrow import GroupStatus, PartitionStatus
from zkconsumer.monitoring.exporter import LagCollector
from zkconsumer.monitoring.lag import GroupLag, LagMonitor

Row = Tuple[Optional[int], Optional[int], Optional[str], Optional[int]]  # offset, log end, owner, mtime


def snap(group: str, now_ms: int, members: List[str], rows: Dict[int, Row]) -> GroupSnapshot:
    parts = []
    times = {}
    for p, (offset, log_end, owner, mtime) in sorted(rows.items()):
        lag = log_end - offset if offset is not None and log_end is not None else None
        parts.append(PartitionRow("t", p, offset, log_end, lag, owner))
        if mtime is not None:
            times[("t", p)] = mtime
    description = GroupDescription(group, [MemberInfo(m, {"t": 1}, "static", None) for m in members], parts)
    return GroupSnapshot(description, times, now_ms)


def test_live_owner_not_moving_is_stalled() -> None:
    monitor = LagMonitor(window=3)
    result = None
    for i, log_end in enumerate((20, 25, 30)):
        result = monitor.observe(snap("g", 10_000 + i * 1000, ["g_a"], {0: (10, log_end, "g_a-0", 5_000)}))
    assert result is not None
    row = result.partitions[0]
    assert [c.offset for c in row.window] == [10, 10, 10]
    assert [c.lag for c in row.window] == [10, 15, 20]
    assert row.status is PartitionStatus.STALL and result.status is GroupStatus.ERR


def test_members_gone_is_stopped_once_the_last_commit_is_older_than_the_window_span() -> None:
    monitor = LagMonitor(window=3)
    # Three real commits (mtime changes) while the member lived: offsets move, lag shrinks.
    for i, (offset, log_end) in enumerate(((10, 30), (20, 30), (25, 30))):
        result = monitor.observe(snap("g", 10_000 + i * 1000, ["g_a"], {0: (offset, log_end, "g_a-0", 9_500 + i * 1000)}))
    assert result.status is GroupStatus.OK
    # The member leaves; the log grows. No new commits enter the window.
    result = monitor.observe(snap("g", 13_000, [], {0: (25, 40, None, 11_500)}))
    assert result.partitions[0].status is PartitionStatus.OK  # 1.5 s since the last commit, span 2 s
    result = monitor.observe(snap("g", 14_000, [], {0: (25, 50, None, 11_500)}))
    assert result.partitions[0].status is PartitionStatus.STOP  # 2.5 s > 2 s
    assert result.status is GroupStatus.ERR
    assert result.partitions[0].ownerless_s == 1.0
    assert result.ownerless_s_total == 1.0


def test_healthy_consumer_is_ok_and_a_rewritten_offset_counts_as_a_commit() -> None:
    monitor = LagMonitor(window=4)
    polls = [(10, 12, 1000), (12, 15, 2000), (15, 15, 3000), (15, 18, 3500)]  # offset, log end, mtime
    for i, (offset, log_end, mtime) in enumerate(polls):
        result = monitor.observe(snap("g", 1000 * (i + 1) + 100, [], {0: (offset, log_end, None, mtime)}))
    row = result.partitions[0]
    assert [c.offset for c in row.window] == [10, 12, 15, 15]  # same offset, new mtime: a new commit
    assert row.status is PartitionStatus.OK  # lag 0 in the window


def test_partitions_without_offsets_are_not_judged_and_forget_drops_a_group() -> None:
    monitor = LagMonitor(window=2)
    result = monitor.observe(snap("g", 1000, ["g_a"], {0: (None, 10, "g_a-0", None)}))
    assert result.status is GroupStatus.NOTFOUND and result.partitions[0].window == ()
    assert monitor.groups() == {"g"}
    monitor.forget("g")
    assert monitor.groups() == set()


def scrape(result: GroupLag) -> Dict[str, list]:
    class Fake:
        def latest(self) -> Dict[str, GroupLag]:
            return {result.group: result}

        def stats(self) -> dict:
            return {"polls": 3, "errors": {"bad": 1}, "last_poll_s": 12.5, "last_duration_s": 0.25}

    registry = CollectorRegistry()
    registry.register(LagCollector(Fake()))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_lag_collector_exposes_partition_and_group_series() -> None:
    monitor = LagMonitor(window=2)
    monitor.observe(snap("g", 1000, ["g_a"], {0: (10, 20, "g_a-0", 900), 1: (5, 5, None, 900)}))
    result = monitor.observe(snap("g", 2000, ["g_a"], {0: (10, 25, "g_a-0", 900), 1: (5, 5, None, 900)}))
    families = scrape(result)
    lag = {s.labels["partition"]: s.value for s in families["zkconsumer_group_partition_lag"]}
    assert lag == {"0": 15.0, "1": 0.0}
    assert [(s.labels["owner"], s.value) for s in families["zkconsumer_group_partition_owned"]] == [("g_a-0", 1.0)]
    status = {(s.labels["partition"], s.labels["status"]): s.value for s in families["zkconsumer_group_partition_status"]}
    assert status[("0", "STALL")] == 1.0 and status[("0", "OK")] == 0.0 and status[("1", "OK")] == 1.0
    assert [s.value for s in families["zkconsumer_group_status_code"]] == [2.0]
    assert [s.value for s in families["zkconsumer_group_owned_partitions"]] == [1.0]
    assert [s.value for s in families["zkconsumer_group_lag"]] == [15.0]
    assert families["zkconsumer_group_ownerless_seconds"][0].name == "zkconsumer_group_ownerless_seconds_total"
    assert families["zkconsumer_exporter_polls"][0].value == 3.0
    assert families["zkconsumer_exporter_poll_errors"][0].labels == {"group": "bad"}


def test_the_grafana_dashboard_uses_only_exported_metric_names() -> None:
    """Every metric a dashboard query names is one the exporter or a connector exposes."""
    import json
    import re
    from pathlib import Path

    from ..metrics import test_prometheus as fake  # its FakeConnector exposes every connector metric

    monitor = LagMonitor(window=2)
    families = scrape(monitor.observe(snap("g", 1000, ["g_a"], {0: (10, 20, "g_a-0", 900)})))
    exported = {s.name for samples in families.values() for s in samples}
    registry = CollectorRegistry()
    from zkconsumer.metrics.prometheus import instrument_connector
    instrument_connector(fake.FakeConnector(), registry=registry)
    exported |= {s.name for f in text_string_to_metric_families(generate_latest(registry).decode()) for s in f.samples}
    dashboard = json.loads((Path(__file__).parents[3] / "docs" / "grafana-dashboard.json").read_text())
    used = {name for panel in dashboard["panels"] for target in panel["targets"]
            for name in re.findall(r"zkconsumer_[a-z_]+", target["expr"])}
    assert used and used <= exported, sorted(used - exported)
    docs = (Path(__file__).parents[3] / "docs" / "MONITORING.md").read_text()
    assert not {n for n in used if n not in docs and not n.endswith("_bucket")}


def test_exporter_keeps_figures_through_zookeeper_errors_and_drops_deleted_groups(monkeypatch) -> None:
    import time

    from kazoo.exceptions import ConnectionLoss

    import zkconsumer.monitoring.exporter as exporter_module
    from zkconsumer.admin import UnknownGroupError
    from zkconsumer.monitoring.exporter import LagExporter

    listing: Dict[str, object] = {"groups": ["a", "b"]}
    failing: set = set()

    def list_groups(zk) -> List[str]:
        value = listing["groups"]
        if isinstance(value, Exception):
            raise value
        return list(value)  # type: ignore[call-overload]

    def snapshot_group(zk, group, offsets, clock=None) -> GroupSnapshot:
        if group in failing:
            raise UnknownGroupError(group)
        return snap(group, 1000, [], {0: (1, 5, None, 900)})

    class NoOffsets:
        def fetch(self, partitions, time):
            return {}, {}

    monkeypatch.setattr(exporter_module, "list_groups", list_groups)
    monkeypatch.setattr(exporter_module, "snapshot_group", snapshot_group)
    exporter = LagExporter(object(), interval_s=0.05, log_offsets=NoOffsets())  # type: ignore[arg-type]
    exporter.poll_once()
    assert sorted(exporter.latest()) == ["a", "b"]

    listing["groups"] = ConnectionLoss()
    exporter.poll_once()  # ZooKeeper unreachable for the listing: nothing forgotten
    assert sorted(exporter.latest()) == ["a", "b"] and exporter.stats()["errors"] == {"": 1}

    listing["groups"] = ["a", "b"]
    failing.add("a")
    exporter.poll_once()  # one group fails: it keeps its previous figures, the other is updated
    assert sorted(exporter.latest()) == ["a", "b"] and exporter.stats()["errors"] == {"": 1, "a": 1}

    listing["groups"] = ["b"]
    exporter.poll_once()  # group a was deleted
    assert sorted(exporter.latest()) == ["b"]

    exporter.start()
    polls = exporter.stats()["polls"]
    deadline = time.monotonic() + 5
    while exporter.stats()["polls"] < polls + 2 and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.02)
    exporter.stop()
    assert exporter.stats()["polls"] >= polls + 2  # type: ignore[operator]
    assert not exporter._thread.is_alive()  # type: ignore[union-attr]
