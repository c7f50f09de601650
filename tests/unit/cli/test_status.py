"""``zkconsumer groups status`` and ``zkconsumer exporter``: parsing and rendering, with plain data."""

from __future__ import annotations

import json

import pytest

from zkconsumer.admin import GroupDescription, MemberInfo, PartitionRow
from zkconsumer.admin.snapshot import GroupSnapshot
from zkconsumer.cli import build_parser
from zkconsumer.cli.output import render_group_lag
from zkconsumer.monitoring.lag import LagMonitor

Z = ["--zookeeper", "127.0.0.1:2181"]


def test_status_and_exporter_options() -> None:
    args = build_parser().parse_args(["groups", "status", *Z, "--group", "g", "--samples", "3",
                                      "--interval-ms", "200", "--format", "json"])
    assert (args.group, args.samples, args.interval_ms, args.format) == ("g", 3, 200, "json")
    args = build_parser().parse_args(["exporter", *Z, "--group", "a", "--group", "b", "--port", "0",
                                      "--interval-s", "0.5", "--window", "4"])
    assert (args.group, args.port, args.interval_s, args.window) == (["a", "b"], 0, 0.5, 4)
    assert build_parser().parse_args(["exporter", *Z]).group is None


@pytest.mark.parametrize("argv", [["groups", "status", *Z, "--group", "g", "--samples", "0"],
                                  ["exporter", *Z, "--interval-s", "0"],
                                  ["exporter", *Z, "--window", "-1"]])
def test_bad_numbers_are_usage_errors(argv) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 2


def stalled_group():
    monitor = LagMonitor(window=2)
    result = None
    for i, log_end in enumerate((15, 18)):
        description = GroupDescription("g", [MemberInfo("g_a", {"t": 1}, "static", None)],
                                       [PartitionRow("t", 0, 10, log_end, log_end - 10, "g_a-0"),
                                        PartitionRow("t", 1, None, 4, None, None)])
        result = monitor.observe(GroupSnapshot(description, {("t", 0): 500}, 1000 * (i + 1)))
    return result


def test_status_table_shows_each_partitions_verdict_and_window() -> None:
    text = render_group_lag(stalled_group(), "table")
    lines = text.splitlines()
    assert lines[:3] == ["Group: g", "Status: ERR", "Members: 1  Owned partitions: 1  Total lag: 8"]
    assert lines[4].split()[:7] == ["TOPIC", "PARTITION", "OFFSET", "LOG-END-OFFSET", "LAG", "OWNER", "STATUS"]
    assert lines[5].split() == ["t", "0", "10", "18", "8", "g_a-0", "STALL", "10@5", "..", "10@8", "(2)"]
    assert lines[6].split() == ["t", "1", "-", "4", "-", "-", "OK", "-"]


def test_status_json() -> None:
    doc = json.loads(render_group_lag(stalled_group(), "json"))
    assert doc["status"] == "ERR" and doc["total_lag"] == 8
    assert doc["max_lag"] == {"topic": "t", "partition": 0, "lag": 8}
    p0 = doc["partitions"][0]
    assert p0["status"] == "STALL" and p0["window"] == [{"offset": 10, "timestamp_ms": 500, "lag": 5},
                                                        {"offset": 10, "timestamp_ms": 2000, "lag": 8}]
