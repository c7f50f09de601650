"""spark_integration.ranges and .options: planning offset ranges and validating what users pass (pure)."""

from __future__ import annotations

import itertools
import pickle
import random

import pytest

from spark_integration.options import SourceOptions, member_config, plain_props
from spark_integration.ranges import (
    OffsetRange,
    decode_offsets,
    encode_offsets,
    limit_total,
    offset_key,
    parse_offset_key,
    plan_ranges,
    resolve_start,
)
from zkconsumer import ConfigurationError, ConsumerConfig

BASE = {"zookeeper.connect": "zk:2181/chroot", "group.id": "g1"}


# --------------------------------------------------------------------------- resolve_start / plan_ranges


@pytest.mark.parametrize(
    "committed, reset, expected",
    [
        (None, "smallest", 5), (None, "largest", 20),      # nothing committed
        (12, "smallest", 12), (12, "largest", 12),         # inside the log
        (5, "largest", 5), (20, "smallest", 20),           # at the bounds: still valid
        (2, "smallest", 5), (2, "largest", 20),            # deleted by retention
        (25, "smallest", 5), (25, "largest", 20),          # beyond the log (topic recreated)
    ],
)
def test_resolve_start_follows_kafkas_auto_offset_reset(committed, reset, expected) -> None:
    assert resolve_start(committed, log_start=5, log_end=20, reset=reset) == expected


def test_resolve_start_rejects_unknown_reset() -> None:
    with pytest.raises(ValueError, match="smallest or largest"):
        resolve_start(None, 0, 1, "earliest")


def test_plan_ranges_sorts_caps_and_never_goes_negative() -> None:
    positions = {("b", 0): 7, ("a", 1): 0, ("a", 0): 3}
    ends = {("a", 0): 10, ("a", 1): 2, ("b", 0): 4}   # b/0: log truncated below the position
    assert plan_ranges(positions, ends) == [
        OffsetRange("a", 0, 3, 10), OffsetRange("a", 1, 0, 2), OffsetRange("b", 0, 7, 7)]
    assert plan_ranges(positions, ends, max_messages_per_partition=4) == [
        OffsetRange("a", 0, 3, 7), OffsetRange("a", 1, 0, 2), OffsetRange("b", 0, 7, 7)]
    with pytest.raises(ValueError):
        plan_ranges(positions, ends, max_messages_per_partition=0)


def test_offset_range_is_plain_picklable_data() -> None:
    r = OffsetRange("t", 3, 10, 15)
    assert pickle.loads(pickle.dumps(r)) == r == ("t", 3, 10, 15)
    assert (r.count, r.topic_partition) == (5, ("t", 3))
    assert OffsetRange("t", 0, 9, 4).count == 0


# --------------------------------------------------------------------------- offsets JSON


def test_offsets_round_trip_through_json_keys() -> None:
    offsets = {("my.topic-1", 0): 0, ("my.topic-1", 10): 42, ("x", 2): 7}
    encoded = encode_offsets(offsets)
    assert list(encoded) == ["my.topic-1/0", "my.topic-1/10", "x/2"]
    assert decode_offsets(encoded) == offsets
    assert parse_offset_key(offset_key("a_b", 3)) == ("a_b", 3)


@pytest.mark.parametrize("bad", [{"t": 1}, {"/1": 1}, {"t/x": 1}, {"t/-1": 1}, {"t/1": -1}, {"t/1": "3"}, {"t/1": True}])
def test_decode_offsets_rejects_malformed_entries(bad) -> None:
    with pytest.raises(ValueError):
        decode_offsets(bad)


# --------------------------------------------------------------------------- limit_total


def test_limit_total_returns_end_when_the_backlog_fits() -> None:
    start, end = {("t", 0): 0, ("t", 1): 5}, {("t", 0): 3, ("t", 1): 9}
    assert limit_total(start, end, 7) == end
    assert limit_total(start, end, 100) == end


def test_limit_total_splits_proportionally_with_the_remainder_by_largest_fraction() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    end = {("t", 0): 10, ("t", 1): 10, ("t", 2): 1}
    # shares 4.76, 4.76, 0.47 of 10: floors 4, 4, 0; the two largest fractions get one more
    assert limit_total(start, end, 10) == {("t", 0): 5, ("t", 1): 5, ("t", 2): 0}


def test_limit_total_partitions_only_in_end_stay_at_end() -> None:
    assert limit_total({("t", 0): 0}, {("t", 0): 100, ("t", 1): 7}, 10) == {("t", 0): 10, ("t", 1): 7}


def test_limit_total_properties_on_random_backlogs() -> None:
    rng = random.Random(7)
    for _ in range(300):
        tps = [("t", p) for p in range(rng.randint(1, 6))]
        start = {tp: rng.randint(0, 50) for tp in tps}
        end = {tp: start[tp] + rng.choice([0, 0, 1, rng.randint(0, 200)]) for tp in tps}
        limit = rng.randint(1, 150)
        got = limit_total(start, end, limit)
        moved = sum(got[tp] - start[tp] for tp in tps)
        backlog = sum(end[tp] - start[tp] for tp in tps)
        assert all(start[tp] <= got[tp] <= end[tp] for tp in tps)
        assert moved == min(limit, backlog)  # exact use of the budget: progress whenever there is a backlog
        assert got == limit_total(start, end, limit)


def test_limit_total_rejects_non_positive_limits() -> None:
    with pytest.raises(ValueError):
        limit_total({}, {}, 0)


# --------------------------------------------------------------------------- options


def test_plain_props_keeps_explicit_properties_as_strings() -> None:
    plain = plain_props({**BASE, "auto.commit.enable": False, "consumer.timeout.ms": 250})
    assert plain == {**BASE, "auto.commit.enable": "false", "consumer.timeout.ms": "250"}
    assert ConsumerConfig(plain) == ConsumerConfig({**BASE, "auto.commit.enable": False, "consumer.timeout.ms": 250})
    with pytest.raises(ConfigurationError, match="group.idd"):
        plain_props({**BASE, "group.idd": "x"})


def test_member_config_forces_manual_commits_and_a_stream_that_ends() -> None:
    config = member_config({**BASE, "consumer.timeout.ms": 1000}, None)
    assert config.auto_commit_enable is False and config.consumer_timeout_ms == 1000
    assert member_config({**BASE, "auto.commit.enable": "false"}, 5).auto_commit_enable is False
    with pytest.raises(ConfigurationError) as err:
        member_config({**BASE, "consumer.timeout.ms": 1000, "auto.commit.enable": "true"}, None)
    assert err.value.property == "auto.commit.enable"
    with pytest.raises(ConfigurationError) as err:
        member_config(BASE, None)  # consumer.timeout.ms defaults to -1: the stream would never end
    assert err.value.property == "consumer.timeout.ms"
    assert member_config(BASE, max_messages=10).consumer_timeout_ms == -1
    with pytest.raises(ValueError):
        member_config({**BASE, "consumer.timeout.ms": 1}, max_messages=0)


def test_source_options_split_source_options_from_consumer_properties() -> None:
    options = SourceOptions.from_options({
        **BASE, "topics": " a, b ,a,", "auto.offset.reset": "smallest",
        "max.messages.per.trigger": "100", "MAX.MESSAGES.PER.PARTITION": "7",
    })
    assert options.topics == ("a", "b") and options.whitelist is None
    assert (options.max_messages_per_trigger, options.max_messages_per_partition) == (100, 7)
    assert options.props == {**BASE, "auto.offset.reset": "smallest"}
    assert options.config.auto_offset_reset == "smallest"
    wl = SourceOptions.from_options({**BASE, "topic.whitelist": "ev.*"})
    assert (wl.topics, wl.whitelist) == ((), "ev.*")
    assert pickle.loads(pickle.dumps(wl)) == wl


@pytest.mark.parametrize(
    "extra, prop",
    [
        ({}, "subscribe"),  # none given: named by Spark's name (the error lists the aliases too)
        ({"topics": "a", "topic.whitelist": "a.*"}, "topics"),
        ({"topics": " , "}, "topics"),
        ({"topic.whitelist": "[a-z"}, None),  # not a Java regex
        ({"topics": "a", "max.messages.per.trigger": "0"}, "max.messages.per.trigger"),
        ({"topics": "a", "max.messages.per.partition": "x"}, "max.messages.per.partition"),
        ({"topics": "a", "fetch.max.bytes": "1"}, "fetch.max.bytes"),
        ({"topics": "a", "group.id": "bad group"}, "group.id"),
    ],
)
def test_source_options_reject_bad_options_naming_them(extra, prop) -> None:
    with pytest.raises(ConfigurationError) as err:
        SourceOptions.from_options({**BASE, **extra})
    if prop is not None:
        assert err.value.property == prop


def test_every_combination_of_topics_and_whitelist_presence() -> None:
    for topics, whitelist in itertools.product(["", "a"], ["", "a.*"]):
        given = {**BASE, "topics": topics, "topic.whitelist": whitelist}
        if bool(topics) != bool(whitelist):
            SourceOptions.from_options(given)
        else:
            with pytest.raises(ConfigurationError):
                SourceOptions.from_options(given)


@pytest.mark.parametrize("module", ["spark_integration.ranges", "spark_integration.streams"])
def test_worked_examples_in_docstrings_hold(module: str) -> None:
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0 and result.attempted > 0


# --------------------------------------------------------------------------- "Spark for real" item 5: Kafka-source options


def test_item5_spark_kafka_option_names_are_parsed_case_insensitively() -> None:
    from spark_integration.options import DEFAULT_MAX_TRIGGER_DELAY_MS, StartingOffsets

    options = SourceOptions.from_options({
        **BASE, "topics": "a,b", "StartingOffsets": '{"a":{"0":23,"1":-2},"b":{"0":-1}}',
        "MAXOFFSETSPERTRIGGER": "500", "minOffsetsPerTrigger": "100", "maxTriggerDelay": "30s",
        "includeHeaders": "false",
    })
    assert options.starting_offsets == StartingOffsets("specific", {("a", 0): 23, ("a", 1): -2, ("b", 0): -1})
    assert (options.max_messages_per_trigger, options.min_messages_per_trigger) == (500, 100)
    assert options.max_trigger_delay_ms == 30_000
    assert options.props == BASE  # none of them is taken for a consumer property
    plain = SourceOptions.from_options({**BASE, "topics": "a", "startingOffsets": "Earliest"})
    assert plain.starting_offsets == StartingOffsets("earliest") and plain.max_trigger_delay_ms == \
        DEFAULT_MAX_TRIGGER_DELAY_MS
    assert SourceOptions.from_options({**BASE, "topics": "a"}).starting_offsets is None
    # the shipped name stays an alias of maxOffsetsPerTrigger
    assert SourceOptions.from_options({**BASE, "topics": "a", "max.messages.per.trigger": "7"}) \
        .max_messages_per_trigger == 7


@pytest.mark.parametrize(
    "extra, prop",
    [
        ({"includeHeaders": "true"}, "includeHeaders"),
        ({"startingOffsets": "oldest"}, "startingOffsets"),
        ({"startingOffsets": '{"a":{"x":1}}'}, "startingOffsets"),
        ({"startingOffsets": '{"a":{"0":-3}}'}, "startingOffsets"),
        ({"startingOffsets": '{"a":[0]}'}, "startingOffsets"),
        ({"startingOffsets": '{"zz":{"0":1}}'}, "startingOffsets"),  # a topic not subscribed
        ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({"maxOffsetsPerTrigger": "5", "max.messages.per.trigger": "6"}, "maxOffsetsPerTrigger"),
        ({"minOffsetsPerTrigger": "-1"}, "minOffsetsPerTrigger"),
        ({"minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, "minOffsetsPerTrigger"),
        ({"maxTriggerDelay": "soon"}, "maxTriggerDelay"),
    ],
)
def test_item5_bad_kafka_source_options_are_refused_naming_them(extra, prop) -> None:
    with pytest.raises(ConfigurationError) as err:
        SourceOptions.from_options({**BASE, "topics": "a", **extra})
    assert err.value.property == prop
    if prop == "includeHeaders":
        assert "no headers" in str(err.value)


@pytest.mark.parametrize("raw, ms", [("15m", 900_000), ("10s", 10_000), ("500ms", 500), ("2h", 7_200_000),
                                     ("1d", 86_400_000), ("250", 250), ("3 min", 180_000)])
def test_item5_max_trigger_delay_takes_spark_time_strings(raw, ms) -> None:
    from spark_integration.options import parse_duration_ms

    assert parse_duration_ms("maxTriggerDelay", raw) == ms


def test_item5_rate_limit_splits_like_sparks_kafka_source() -> None:
    from spark_integration.ranges import rate_limit

    start = {("t", 0): 100, ("t", 1): 0, ("t", 2): 5, ("t", 3): 0}
    end = {("t", 0): 400, ("t", 1): 100, ("t", 2): 5, ("t", 3): 1, ("t", 4): 9}
    # backlogs 300, 100, 0, 1 (total 401); t/4 is new (not in start) and stays at its end
    got = rate_limit(40, start, end)
    assert got == {("t", 0): 100 + 29, ("t", 1): 9, ("t", 2): 5, ("t", 3): 1, ("t", 4): 9}
    assert rate_limit(1000, start, end) == end  # everything fits
    assert rate_limit(5, {("t", 0): 0}, {("t", 0): 0}) == {("t", 0): 0}
    with pytest.raises(ValueError):
        rate_limit(0, start, end)


def test_item5_rate_limit_properties_on_random_backlogs() -> None:
    from spark_integration.ranges import rate_limit

    rng = random.Random(5)
    for _ in range(300):
        n = rng.randint(1, 8)
        start = {("t", p): rng.randint(0, 50) for p in range(n)}
        end = {tp: o + rng.choice([0, 0, 1, 3, 50, 1000]) for tp, o in start.items()}
        limit = rng.randint(1, 500)
        got = rate_limit(limit, start, end)
        backlog = sum(end[tp] - start[tp] for tp in start)
        moved = sum(got[tp] - start[tp] for tp in start)
        assert all(start[tp] <= got[tp] <= end[tp] for tp in start)
        assert moved == backlog if backlog <= limit else moved <= limit + n
        if backlog:
            assert moved > 0  # every trigger with a backlog makes progress
            assert all(got[tp] > start[tp] for tp in start if end[tp] > start[tp])  # no partition starved


def test_item5_trigger_delay_follows_min_offsets_and_max_trigger_delay() -> None:
    from spark_integration.ranges import TriggerDelay

    now = [1000.0]
    gate = TriggerDelay(100, 10_000, clock=lambda: now[0])
    assert gate.skip(0) is False  # the first trigger always goes ahead
    now[0] += 5
    assert gate.skip(99) is True and gate.skip(100) is False  # enough messages: go, and restart the delay
    now[0] += 9.9
    assert gate.skip(1) is True
    now[0] += 0.1
    assert gate.skip(1) is False  # maxTriggerDelay passed since the last batch
    assert gate.skip(1) is True


def test_item5_starting_positions_earliest_latest_and_json() -> None:
    from spark_integration.options import StartingOffsets
    from spark_integration.starting_offsets import starting_positions

    tps = [("t", 0), ("t", 1)]
    starts, ends = {("t", 0): 2, ("t", 1): 0}, {("t", 0): 9, ("t", 1): 4}
    assert starting_positions(StartingOffsets("earliest"), tps, starts, ends) == ({("t", 0): 2, ("t", 1): 0}, [])
    assert starting_positions(StartingOffsets("latest"), tps, starts, ends) == ({("t", 0): 9, ("t", 1): 4}, [])
    spec = StartingOffsets("specific", {("t", 0): -2, ("t", 1): 3})
    assert starting_positions(spec, tps, starts, ends) == ({("t", 0): 2, ("t", 1): 3}, [])
    out = StartingOffsets("specific", {("t", 0): 1, ("t", 1): 5})
    positions, losses = starting_positions(out, tps, starts, ends)
    assert positions == {("t", 0): 2, ("t", 1): 0}
    assert [(loss.partition, loss.kind, loss.offset) for loss in losses] == [
        (0, "starting-offset-out-of-range", 1), (1, "starting-offset-out-of-range", 5)]
    assert "startingOffsets gives offset 5" in losses[1].describe()
    with pytest.raises(ConfigurationError, match="does not name t/1"):
        starting_positions(StartingOffsets("specific", {("t", 0): 1}), tps, starts, ends)
    with pytest.raises(ConfigurationError, match="t/7, which are not subscribed"):
        starting_positions(StartingOffsets("specific", {("t", 0): 1, ("t", 1): 1, ("t", 7): 0}), tps, starts, ends)


def test_item5_worked_examples_in_new_docstrings_hold() -> None:
    import doctest
    import importlib

    for module in ("spark_integration.options", "spark_integration.starting_offsets", "spark_integration.datasource"):
        result = doctest.testmod(importlib.import_module(module))
        assert result.failed == 0 and result.attempted > 0, module
