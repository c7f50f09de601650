"""Observability item 5, pure parts: sparklines, lag history, terminal detection, status lines and watch screens."""

from __future__ import annotations

import io
from typing import List

import pytest

from zkconsumer.admin import GroupDescription, MemberInfo, PartitionRow
from zkconsumer.admin.errors import UnknownGroupError
from zkconsumer.cli import run
from zkconsumer.cli.output import TtyProgress
from zkconsumer.cli.progress import RateTicker, StatusLine, TerminalCaps, format_rate, terminal_caps
from zkconsumer.cli.watch import ASCII_BLOCKS, LagHistory, render_watch, resample, sparkline, watch

XTERM = {"TERM": "xterm"}
PLAIN = TerminalCaps(tty=False, ansi=False, color=False, unicode=True)
COLOR = TerminalCaps(tty=True, ansi=True, color=True, unicode=True)


class FakeTty(io.StringIO):
    def __init__(self, encoding: str = "utf-8") -> None:
        super().__init__()
        self._encoding = encoding

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._encoding

    def isatty(self) -> bool:
        return True


# --------------------------------------------------------------------------- sparkline and history


def test_sparkline_draws_a_growing_lag_as_a_rising_ramp_and_steady_ones_flat() -> None:
    assert sparkline([0, 10, 20, 30, 40, 50, 60, 70]) == "▁▂▃▄▅▆▇█"
    assert sparkline([0, 0, 0, 0]) == "▁▁▁▁"          # caught up
    assert sparkline([500, 500, 500]) == "███"        # a steady backlog: flat, not rising
    assert sparkline([None, 4, None, 0]) == " █ ▁"    # unknown lag: a gap
    assert sparkline([-3, 6]) == "▁█"                 # negative lag counts as none
    assert sparkline([1, 2], top=8) == "▂▃"          # a shared scale
    assert sparkline([0, 7], blocks=ASCII_BLOCKS) == "_#"


def test_sparkline_width_merges_samples_keeping_peaks() -> None:
    values = [0] * 50 + [9] + [0] * 49
    line = sparkline(values, width=10)
    assert len(line) == 10 and line.count("█") == 1 and set(line) == {"▁", "█"}
    assert resample([None, None, 3, None], 2) == [None, 3]
    assert resample([1, 2, 3], 0) == []


def test_lag_history_keeps_only_the_span_and_forgets_vanished_partitions() -> None:
    history = LagHistory(span_s=60, max_samples=100)
    for t in range(0, 100, 10):
        history.record(float(t), {("t", 0): t, ("t", 1): 5})
    assert history.values(("t", 0)) == [30, 40, 50, 60, 70, 80, 90]   # samples older than 60 s dropped
    assert history.change(("t", 0)) == 60 and history.change(("t", 1)) == 0
    assert history.span() == 60
    history.record(200.0, {("t", 1): None})
    assert history.partitions() == [("t", 1)] and history.change(("t", 1)) is None
    bounded = LagHistory(span_s=1000, max_samples=3)
    for t in range(10):
        bounded.record(float(t), {("t", 0): t})
    assert bounded.values(("t", 0)) == [7, 8, 9]
    with pytest.raises(ValueError):
        LagHistory(span_s=0)


# --------------------------------------------------------------------------- terminals


def test_terminal_caps_honour_pipes_term_dumb_no_color_and_the_encoding() -> None:
    assert terminal_caps(io.StringIO(), XTERM) == TerminalCaps(False, False, False, True)
    assert terminal_caps(FakeTty(), XTERM) == TerminalCaps(True, True, True, True)
    assert terminal_caps(FakeTty(), {"TERM": "dumb"}) == TerminalCaps(True, False, False, True)
    assert terminal_caps(FakeTty(), {"TERM": "xterm", "NO_COLOR": "1"}) == TerminalCaps(True, True, False, True)
    assert terminal_caps(FakeTty(), {"TERM": "xterm", "NO_COLOR": ""}).color  # empty NO_COLOR: not set
    assert not terminal_caps(FakeTty("ascii"), XTERM).unicode


def test_status_line_is_inert_when_piped_or_dumb() -> None:
    for stream, env in ((io.StringIO(), XTERM), (FakeTty(), {"TERM": "dumb"})):
        status = StatusLine(stream, env)
        status.draw("consumed: 5 messages")
        status.clear()
        assert stream.getvalue() == "" and not status.enabled


def test_status_line_redraws_in_place_never_wraps_and_erases() -> None:
    stream = FakeTty()
    status = StatusLine(stream, XTERM, width=12)
    status.draw("short")
    status.draw("a much longer line than twelve")
    status.clear()
    status.clear()  # nothing drawn: nothing written
    assert stream.getvalue() == "\rshort\x1b[K\ra much long\x1b[K\r\x1b[K"


def test_tty_progress_stays_silent_on_a_dumb_terminal() -> None:
    stream = FakeTty()
    progress = TtyProgress("resetting", stream, env={"TERM": "dumb"})
    progress(1, 1)
    progress.finish()
    assert stream.getvalue() == "" and not progress.enabled


def test_rate_line_formats_count_rate_bandwidth_and_elapsed() -> None:
    assert format_rate("consumed", 12345, None, 65.0) == "consumed: 12,345 messages  189.9 msg/s  1:05"
    assert format_rate("perf", 10, 3 * 1048576, 1.5, recent=(4, 0.5)) == \
        "perf: 10 messages  8.0 msg/s  2.00 MB/s  0:01"


def test_rate_ticker_reports_the_rate_of_the_last_interval() -> None:
    now = [100.0]
    counts = [0]
    stream = FakeTty()
    status = StatusLine(stream, XTERM, width=200)
    ticker = RateTicker(status, lambda: (counts[0], 0),
                        lambda c, elapsed, recent: f"{c[0]} {elapsed:g}s {recent[0]}/{recent[1]:g}s",
                        clock=lambda: now[0])
    now[0], counts[0] = 101.0, 50
    ticker.tick()
    now[0], counts[0] = 103.0, 70
    ticker.tick()
    assert stream.getvalue() == "\r50 1s 50/1s\x1b[K\r70 3s 20/2s\x1b[K"
    ticker.stop()  # never started: only erases the line
    assert stream.getvalue().endswith("\r\x1b[K")


def test_rate_ticker_starts_no_thread_when_piped() -> None:
    ticker = RateTicker(StatusLine(io.StringIO(), XTERM), lambda: (1, 1), lambda *a: "x", interval_s=0.01)
    ticker.start()
    assert ticker._thread is None
    ticker.stop()


# --------------------------------------------------------------------------- watch screens


def description(lags: List[int]) -> GroupDescription:
    return GroupDescription(
        "g", [MemberInfo("g_a", {"t": 1}, "static", "2024-01-01T00:00:00.000Z")],
        [PartitionRow("t", p, 10, 10 + lag, lag, "g_a-0") for p, lag in enumerate(lags)], [])


def test_watch_screen_shows_each_partition_trend_and_sparkline() -> None:
    history = LagHistory(600)
    for i in range(5):
        history.record(float(i), {("t", 0): 0, ("t", 1): i * 10})
    screen = render_watch(description([0, 40]), history, interval_s=2, when="2024-01-01 00:00:00", caps=PLAIN)
    lines = screen.splitlines()
    assert lines[0].startswith("Group: g    every 2s    2024-01-01 00:00:00")
    assert "LAG, LAST 10 MIN" in screen and "Total lag: 40" in screen
    row0 = next(line for line in lines if line.split()[:2] == ["t", "0"])
    row1 = next(line for line in lines if line.split()[:2] == ["t", "1"])
    assert row0.split()[5:] == ["0", "g_a-0", "▁▁▁▁▁"]
    assert row1.split()[5:] == ["+40", "g_a-0", "▁▃▅▆█"]
    assert "\x1b" not in screen


def test_watch_screen_colours_the_growing_partition_unless_no_color() -> None:
    history = LagHistory(600)
    history.record(0.0, {("t", 0): 0, ("t", 1): 0})
    history.record(1.0, {("t", 0): 0, ("t", 1): 9})
    screen = render_watch(description([0, 9]), history, interval_s=1, when="now", caps=COLOR)
    red = [line for line in screen.splitlines() if line.startswith("\x1b[31m")]
    assert len(red) == 1 and red[0].split()[:2] == ["\x1b[31mt", "1"]
    plain = render_watch(description([0, 9]), history, interval_s=1, when="now",
                         caps=TerminalCaps(True, True, False, False))
    assert "\x1b" not in plain and "_#" in plain  # no colour; ASCII sparkline for an ASCII terminal


def test_watch_prints_successive_screens_when_not_a_terminal() -> None:
    out = io.StringIO()
    lags = iter([[0, 0], [0, 5], [0, 10]])
    drawn = watch(lambda: description(next(lags)), out, PLAIN, 1.0, count=3, sleep=lambda s: None)
    text = out.getvalue()
    assert drawn == 3 and text.count("Group: g") == 3 and "\n\nGroup: g" in text and not text.startswith("\n")
    assert "\x1b" not in text
    assert text.rstrip().endswith("Total lag: 10")


def test_watch_redraws_in_place_on_a_terminal() -> None:
    out = io.StringIO()
    watch(lambda: description([1]), out, COLOR, 1.0, count=2, sleep=lambda s: None)
    text = out.getvalue()
    assert text.startswith("\x1b[H\x1b[2J\x1b[HGroup: g")
    assert text.count("\x1b[H") == 3 and text.endswith("\x1b[J") and "\x1b[K\n" in text


def test_watch_ends_cleanly_on_ctrl_c() -> None:
    def interrupted(_s: float) -> None:
        raise KeyboardInterrupt

    assert watch(lambda: description([1]), io.StringIO(), PLAIN, 1.0, sleep=interrupted) == 1


def test_watch_fails_if_the_first_refresh_fails_and_shows_later_failures() -> None:
    with pytest.raises(UnknownGroupError):
        watch(lambda: (_ for _ in ()).throw(UnknownGroupError("g")), io.StringIO(), PLAIN, 1.0, count=1,
              retriable=(UnknownGroupError,))

    outcomes: List[object] = [description([3]), UnknownGroupError("g"), description([4])]

    def describe() -> GroupDescription:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome  # type: ignore[return-value]

    out = io.StringIO()
    watch(describe, out, PLAIN, 1.0, count=3, sleep=lambda s: None, retriable=(UnknownGroupError,))
    screens = out.getvalue().split("\n\nGroup: ")
    assert len(screens) == 3
    assert "refresh failed: UnknownGroupError" in screens[1] and "Total lag: 3" in screens[1]
    assert "refresh failed" not in screens[2] and "Total lag: 4" in screens[2]


def test_watch_refuses_json_and_csv(capsys: pytest.CaptureFixture[str]) -> None:
    code = run(["groups", "describe", "--zookeeper", "127.0.0.1:1", "--group", "g", "--watch", "1",
                "--format", "json"])
    assert code == 2
    assert "--watch draws a table" in capsys.readouterr().err
    for bad in ("0", "-1", "x"):
        assert run(["groups", "describe", "--zookeeper", "127.0.0.1:1", "--group", "g", "--watch", bad]) == 2
