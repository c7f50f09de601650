"""Positions by time (issue 41, item 4): parsing ``--to-datetime`` / ``--by-duration`` and the
pure resolution of a broker's offsets-before-time answer. The broker's own behaviour (segment
boundaries) is tested against the real cluster in tests/integration/test_reset_by_time.py."""

from __future__ import annotations

import datetime as dt
import time
from typing import Dict, List, Sequence, Tuple

import pytest

from zkconsumer.admin import (
    NONE_BEFORE,
    ResetTarget,
    compute_reset,
    format_time,
    offsets_for_time,
    parse_datetime,
    parse_duration,
)
from zkconsumer.cli import build_parser
from zkconsumer.structs import TopicPartition
from zkconsumer.wire.protocol import EARLIEST_TIME

Z = ("--zookeeper", "127.0.0.1:2181")


@pytest.mark.parametrize("text, ms", [
    ("1970-01-01T00:00:00Z", 0),
    ("1970-01-01T00:00:01.5Z", 1500),
    ("1970-01-01T01:00:00+01:00", 0),
    ("1970-01-01T01:00:00+0100", 0),
    ("2026-11-28T10:00:00Z", 1795860000000),
    ("2026-11-28T10:00:00.123z", 1795860000123),
    ("2026-11-28 10:00Z", 1795860000000),
])
def test_parse_datetime(text: str, ms: int) -> None:
    assert parse_datetime(text) == ms


def test_a_datetime_without_a_zone_is_local_time() -> None:
    zone = dt.timezone(dt.timedelta(hours=-5))
    assert parse_datetime("2026-11-28T05:00:00", zone) == parse_datetime("2026-11-28T10:00:00Z")


@pytest.mark.parametrize("text", ["", "yesterday", "2026-11-28", "2026-13-01T00:00:00Z", "2026-11-28T10:00:00+25",
                                  "1700000000000"])
def test_parse_datetime_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_datetime(text)


@pytest.mark.parametrize("text, ms", [
    ("PT1H", 3600000), ("pt30m", 1800000), ("P1D", 86400000), ("P1DT12H", 129600000),
    ("PT0.25S", 250), ("PT1H30M15S", 5415000),
    ("1h", 3600000), ("30m", 1800000), ("1h30m", 5400000), ("2d", 172800000), ("45s", 45000), ("500ms", 500),
])
def test_parse_duration(text: str, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "P1DT", "PT0S", "0m", "1x", "-PT1H", "1.5h", "T1H", "h"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_format_time_is_utc_with_milliseconds() -> None:
    assert format_time(1795860000123) == "2026-11-28T10:00:00.123Z"
    assert str(ResetTarget("time", 1500)) == "1970-01-01T00:00:01.500Z"


@pytest.mark.parametrize("at_time, expected", [
    (40, (40, None)),                       # a segment boundary inside the log
    (100, (100, None)),                     # the time is now or later: the log end
    (NONE_BEFORE, (10, "no segment last written at or before the time: the log start")),
    (5, (10, "clamped 5 up to the log start 10")),   # retention deleted the segment between the lookups
])
def test_compute_reset_by_time(at_time: int, expected) -> None:
    assert compute_reset(ResetTarget("time", 1000), 50, 10, 100, at_time) == expected


def test_compute_reset_by_time_needs_the_looked_up_offset() -> None:
    with pytest.raises(ValueError):
        compute_reset(ResetTarget("time", 1000), 50, 10, 100)


class FakeOffsets:
    """A LogOffsets answering from tables; records each request."""

    def __init__(self, answers: Dict[int, Dict[TopicPartition, int]]) -> None:
        self.answers = answers
        self.asked: List[Tuple[List[TopicPartition], int]] = []

    def fetch(self, partitions: Sequence[TopicPartition], time: int, empty=None):
        assert empty == (NONE_BEFORE if time >= 0 else None)
        self.asked.append((list(partitions), time))
        table = self.answers[time]
        return ({tp: table[tp] for tp in partitions if tp in table},
                {tp: "no leader" for tp in partitions if tp not in table})


def test_offsets_for_time_resolves_none_before_to_the_log_start_and_keeps_problems() -> None:
    a, b, c = ("t", 0), ("t", 1), ("t", 2)
    fake = FakeOffsets({1000: {a: 40, b: NONE_BEFORE}, EARLIEST_TIME: {a: 0, b: 7}})
    found, problems = offsets_for_time(fake, [a, b, c], 1000)
    assert found == {a: 40, b: 7}
    assert problems == {c: "no leader"}
    assert fake.asked == [([a, b, c], 1000), ([b], EARLIEST_TIME)]


def test_offsets_for_time_refuses_a_negative_time() -> None:
    with pytest.raises(ValueError):
        offsets_for_time(FakeOffsets({}), [("t", 0)], EARLIEST_TIME)


def test_reset_accepts_exactly_one_of_to_to_datetime_and_by_duration() -> None:
    parser = build_parser()
    base = ["offsets", "reset", *Z, "--group", "g", "--topic", "t"]
    args = parser.parse_args([*base, "--to-datetime", "2026-11-28T10:00:00Z"])
    assert args.to == ResetTarget("time", 1795860000000)
    before = int(time.time() * 1000)
    args = parser.parse_args([*base, "--by-duration", "PT1H"])
    after = int(time.time() * 1000)
    assert args.to.kind == "time" and before - 3600000 <= args.to.value <= after - 3600000
    for extra in ([], ["--to", "earliest", "--by-duration", "1h"], ["--to-datetime", "soon"],
                  ["--by-duration", "PT0S"]):
        with pytest.raises(SystemExit):
            parser.parse_args([*base, *extra])
