"""The throughput benchmark's pure helpers: /proc/stat steal, medians and ratios over rounds, tables."""

from __future__ import annotations

import math

import pytest

from benchmarks.report import (
    CpuTimes,
    cpu_per_million,
    format_table,
    median,
    parse_proc_stat,
    ratios,
    rotate,
    size_map,
    steal_percent,
    summarize,
)

PROC_STAT = """cpu  1000 10 200 5000 50 0 15 100 0 0
cpu0 500 5 100 2500 25 0 7 50 0 0
intr 12345
"""


def test_parse_proc_stat_reads_the_aggregate_line():
    times = parse_proc_stat(PROC_STAT)
    assert times == CpuTimes(user=1000, nice=10, system=200, idle=5000, iowait=50, irq=0, softirq=15, steal=100)
    assert times.total == 6375


def test_parse_proc_stat_old_kernels_without_steal_count_it_as_zero():
    assert parse_proc_stat("cpu 1 2 3 4\n").steal == 0


def test_parse_proc_stat_without_cpu_line_raises():
    with pytest.raises(ValueError):
        parse_proc_stat("intr 1\n")


def test_steal_percent_is_the_stolen_share_of_all_ticks_between_samples():
    before = CpuTimes(user=100, idle=800, steal=100)
    after = CpuTimes(user=200, idle=1500, steal=300)  # 1000 ticks, 200 stolen
    assert steal_percent(before, after) == pytest.approx(20.0)
    assert steal_percent(before, before) == 0.0
    assert steal_percent(None, after) is None


def test_median_and_cpu_per_million():
    assert median([3, 1, 2]) == 2
    assert median([1, 2, 3, 4]) == 2.5
    with pytest.raises(ValueError):
        median([])
    assert cpu_per_million({"messages": 4_000_000, "cpu_seconds": 10.0}) == pytest.approx(2.5)
    assert math.isnan(cpu_per_million({"messages": 0, "cpu_seconds": 1.0}))


def _m(rate, seconds=20.0, steal=1.0, cpu=10.0, messages=1_000_000):
    return {"messages": messages, "msgs_per_sec": rate, "mb_per_sec": rate / 10, "seconds": seconds,
            "cpu_seconds": cpu, "peak_rss_mb": 50.0, "steal_pct": steal}


ROUNDS = [
    {"kafka": _m(100.0), "perf": _m(150.0), "confluent": _m(200.0)},
    {"kafka": _m(200.0), "perf": _m(240.0), "confluent": _m(100.0)},
    {"kafka": _m(100.0), "perf": _m(130.0, seconds=5.0, steal=9.0)},
]


def test_ratios_are_per_round_and_skip_rounds_without_the_reference():
    assert ratios(ROUNDS, "perf", "kafka") == pytest.approx([1.5, 1.2, 1.3])
    assert ratios(ROUNDS, "perf", "confluent") == pytest.approx([0.75, 2.4])


def test_summarize_takes_medians_over_rounds():
    row = summarize(ROUNDS, "perf", "zkconsumer perf", {"× Kafka": "kafka", "× confluent": "confluent"})
    assert row is not None
    assert row.msgs_per_sec == 150.0 and row.msgs_per_sec_min == 130.0 and row.msgs_per_sec_max == 240.0
    assert row.seconds == 20.0 and row.steal_pct == 1.0 and row.cpu_per_million == pytest.approx(10.0)
    assert median(row.ratios["× Kafka"]) == pytest.approx(1.3)
    kafka = summarize(ROUNDS, "kafka", "Kafka", {"× Kafka": "kafka"})
    assert kafka is not None and kafka.ratios["× Kafka"] == []
    assert summarize(ROUNDS, "absent", "x", {}) is None


def test_format_table_has_every_column_and_marks_short_windows():
    rows = [summarize(ROUNDS, t, t, {"× Kafka": "kafka", "× confluent": "confluent"}) for t in ("kafka", "perf")]
    rows[1] = summarize(ROUNDS[2:], "perf", "perf", {"× Kafka": "kafka", "× confluent": "confluent"})
    text = format_table("100-byte messages", [r for r in rows if r is not None], ["× Kafka", "× confluent"])
    lines = text.splitlines()
    assert lines[0] == "#### 100-byte messages"
    assert lines[2] == ("| consumer | N | msgs/s: median (min–max) | MB/s | × Kafka | × confluent | CPU s / M msgs "
                        "| peak RSS MB | timed s | steal % |")
    assert lines[4].startswith("| kafka | 1,000,000 | 100 (0k–0k) | 10.0 | – | 1.25 (0.50–2.00) | 10.00 | 50 | 20.0 | 1.0 |")
    assert lines[5] == "| perf | 1,000,000 | 130 | 13.0 | 1.30 | – | 10.00 | 50 | 5.0 † | 9.0 |"
    assert "† timed window under 10 s" in text


def test_rotate_and_size_map():
    assert rotate(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert rotate(["a", "b", "c"], 4) == ["b", "c", "a"]
    assert rotate([], 3) == []
    assert size_map("100=5,1000=6") == {100: 5, 1000: 6}
    assert size_map("") == {}
    with pytest.raises(ValueError):
        size_map("100")
