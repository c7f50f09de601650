"""Rendering of describe results and reset plans as table, JSON and CSV; TTY-only progress."""

from __future__ import annotations

import csv
import io
import json

from zkconsumer.admin import GroupDescription, MemberInfo, PartitionRow, ResetPlan, ResetRow, ResetTarget
from zkconsumer.cli.output import TtyProgress, render_csv, render_description, render_plan, render_table

DESCRIPTION = GroupDescription(
    group="g1",
    members=[MemberInfo("g1_host-1-abcd", {"events": 2}, "static", "2023-11-14T22:13:20.000Z")],
    partitions=[
        PartitionRow("events", 0, 5, 10, 5, "g1_host-1-abcd-0"),
        PartitionRow("events", 1, None, 7, None, None),
        PartitionRow("events", 2, 3, None, None, "g1_gone-1-0"),
    ],
    warnings=["partition events/1 of a subscribed topic has no owner"],
)


def test_json_has_exactly_the_documented_shape() -> None:
    doc = json.loads(render_description(DESCRIPTION, "json"))
    assert doc["group"] == "g1"
    assert doc["members"] == [{"id": "g1_host-1-abcd", "subscription": {"events": 2}, "pattern": "static",
                               "registered_since": "2023-11-14T22:13:20.000Z", "error": None}]
    assert doc["partitions"] == [
        {"topic": "events", "partition": 0, "offset": 5, "log_end_offset": 10, "lag": 5, "owner": "g1_host-1-abcd-0"},
        {"topic": "events", "partition": 1, "offset": None, "log_end_offset": 7, "lag": None, "owner": None},
        {"topic": "events", "partition": 2, "offset": 3, "log_end_offset": None, "lag": None, "owner": "g1_gone-1-0"},
    ]
    assert doc["warnings"] == DESCRIPTION.warnings
    assert doc["total_lag"] == 5


def test_csv_is_one_row_per_partition_with_empty_unknowns() -> None:
    rows = list(csv.reader(io.StringIO(render_description(DESCRIPTION, "csv"))))
    assert rows == [
        ["group", "topic", "partition", "offset", "log_end_offset", "lag", "owner"],
        ["g1", "events", "0", "5", "10", "5", "g1_host-1-abcd-0"],
        ["g1", "events", "1", "", "7", "", ""],
        ["g1", "events", "2", "3", "", "", "g1_gone-1-0"],
    ]


def test_table_shows_members_partitions_and_warnings() -> None:
    text = render_description(DESCRIPTION, "table")
    lines = text.splitlines()
    assert lines[0] == "Group: g1"
    assert any(line.split() == ["g1_host-1-abcd", "static", "events:2", "2023-11-14T22:13:20.000Z"] for line in lines)
    header = next(line for line in lines if line.startswith("TOPIC"))
    assert header.split() == ["TOPIC", "PARTITION", "OFFSET", "LOG-END-OFFSET", "LAG", "OWNER"]
    assert any(line.split() == ["events", "1", "-", "7", "-", "-"] for line in lines)
    assert "Total lag: 5" in text
    assert "  - partition events/1 of a subscribed topic has no owner" in lines


def test_table_of_an_idle_group_says_so() -> None:
    text = render_description(GroupDescription("g", [], []), "table")
    assert "Members: none" in text and "No offsets" in text


def test_table_columns_are_aligned() -> None:
    text = render_table(["A", "B"], [["x", 1], ["longer", None]])
    lines = text.splitlines()
    assert [line.index(c) for line, c in zip(lines, "B1-")] == [8, 8, 8]


def test_csv_quotes_commas() -> None:
    assert render_csv(["a"], [["x,y"]]) == 'a\r\n"x,y"\r\n'


PLAN = ResetPlan("g", "t", ResetTarget("shift", -5), [
    ResetRow("t", 0, 3, 0, 0, 10, "clamped -2 up to the log start 0"),
    ResetRow("t", 1, 10, 5, 0, 10),
    ResetRow("t", 2, None, None, 0, 10, "no committed offset to shift; left unchanged"),
])


def test_plan_table_shows_current_to_new_and_notes() -> None:
    lines = render_plan(PLAN, "table").splitlines()
    assert lines[0] == "Reset group g topic t to shift:-5:"
    assert lines[2].split()[:5] == ["t", "0", "3", "->", "0"] and "clamped -2 up to the log start 0" in lines[2]
    assert lines[3].split() == ["t", "1", "10", "->", "5", "0", "10", "-"]
    assert lines[4].split()[:5] == ["t", "2", "-", "->", "unchanged"]


def test_plan_of_a_new_group_warns_it_would_be_created() -> None:
    plan = ResetPlan("new", "t", ResetTarget("earliest"), [ResetRow("t", 0, None, 0, 0, 4)], group_exists=False)
    assert "this would create its offsets" in render_plan(plan, "table")


def test_plan_json_and_csv() -> None:
    doc = json.loads(render_plan(PLAN, "json"))
    assert doc["partitions"][0] == {"topic": "t", "partition": 0, "current": 3, "new": 0, "log_start": 0,
                                    "log_end": 10, "note": "clamped -2 up to the log start 0", "changes": True}
    rows = list(csv.reader(io.StringIO(render_plan(PLAN, "csv"))))
    assert rows[0] == ["topic", "partition", "current", "new", "log_start", "log_end", "note"]
    assert rows[3] == ["t", "2", "", "", "0", "10", "no committed offset to shift; left unchanged"]


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_silent_when_stderr_is_not_a_terminal() -> None:
    stream = io.StringIO()
    progress = TtyProgress("describing", stream)
    progress(1, 2)
    progress(2, 2)
    progress.finish()
    assert stream.getvalue() == "" and not progress.enabled


def test_progress_redraws_at_most_every_interval_and_always_the_last_step() -> None:
    now = [0.0]
    stream = FakeTty()
    progress = TtyProgress("importing", stream, min_interval_s=1.0, clock=lambda: now[0], env={"TERM": "xterm"})
    progress(1, 3)
    progress(2, 3)   # too soon: skipped
    now[0] = 0.5
    progress(3, 3)   # the last step: always drawn
    progress.finish()
    assert stream.getvalue() == "\rimporting: 1/3\rimporting: 3/3\r\x1b[K"
