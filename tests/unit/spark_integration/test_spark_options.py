"""Issue 41 item 6: Spark's Kafka-source options in full (pure parts, and the readers against a fake view).

Option parsing and validation (Spark's names and errors, today's names as
aliases, unknown names refused with the closest known one), Spark's range
split (``minPartitions``/``maxRecordsPerPartition``), Spark's offset JSON and
the checkpoint helper, Spark's schema; the batch and stream readers' planning
with the new options against :class:`FakeView` (no Spark job, no cluster).
"""

from __future__ import annotations

import datetime
import json
import logging
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

import pytest

from spark_integration.checkpoint import checkpoint_offsets, completed_batch, main, starting_offsets_json
from spark_integration.datasource import OffsetRangePartition, ZkConsumerBatchReader, read_rows
from spark_integration.options import SourceOptions, StartingOffsets
from spark_integration.ranges import OffsetRange, split_ranges
from spark_integration.schema import SCHEMA
from spark_integration.spark_json import parse_assign, read_source_offsets, source_offsets, source_offsets_json
from zkconsumer import ConfigurationError, ConsumerConfig

from .test_datasource import CURRENT, FakeView, open_current_view, stream_reader

TP = Tuple[str, int]
BASE = {"zookeeper.connect": "zk:2181", "group.id": "g"}


def options(**extra: str) -> SourceOptions:
    return SourceOptions.from_options({**BASE, **extra})


def refused(extra: Dict[str, str]) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as err:
        SourceOptions.from_options({**BASE, **extra})
    return err.value


# --------------------------------------------------------------------------- subscription: Spark's names, aliases


def test_subscribe_subscribe_pattern_and_assign_with_todays_names_as_aliases() -> None:
    assert options(subscribe="a, b,a").topics == options(topics="a,b").topics == ("a", "b")
    assert options(SubscribePattern="ev.*").whitelist == options(**{"topic.whitelist": "ev.*"}).whitelist == "ev.*"
    assigned = options(assign='{"b":[1],"a":[2,0]}')
    assert (assigned.assign, assigned.topics, assigned.whitelist) == ((("a", 0), ("a", 2), ("b", 1)), (), None)


@pytest.mark.parametrize("extra, prop, message", [
    ({}, "subscribe", "One of the following options must be specified for Kafka source: subscribe, "
                      "subscribePattern, assign"),
    ({"subscribe": "a", "assign": '{"a":[0]}'}, "subscribe", "Only one of the following options can be specified"),
    ({"subscribe": "a", "topics": "a"}, "subscribe", "given: subscribe, topics"),
    ({"subscribePattern": "a.*", "topic.whitelist": "a.*"}, "subscribePattern", "Only one of"),
    ({"subscribe": " , "}, "subscribe", "No topics to subscribe to"),
    ({"assign": "a:0"}, "assign", "No topicpartitions to assign as specified value for option 'assign' is 'a:0'"),
    ({"assign": '{"a":0}'}, "assign", "non-empty list of partitions"),
    ({"assign": '{"a":[-1]}'}, "assign", "not a partition number"),
    ({"assign": '{"a":[0]}', "startingOffsets": '{"a":{"1":5}}'}, "startingOffsets", "not in the option assign: a/1"),
])
def test_subscription_errors_are_sparks(extra, prop, message) -> None:
    err = refused(extra)
    assert err.property == prop and message in str(err)


# --------------------------------------------------------------------------- unknown names


@pytest.mark.parametrize("name, hint", [
    ("startingOffset", "did you mean startingOffsets?"),
    ("minPartition", "did you mean minPartitions?"),
    ("failOnDataLos", "did you mean failOnDataLoss?"),
    ("fetch.message.max.byte", "did you mean fetch.message.max.bytes?"),
    ("kafka.bootstrap.servers", "finds the brokers through zookeeper.connect"),
    ("kafka.fetch.message.max.bytes", "without the prefix; did you mean fetch.message.max.bytes?"),
    ("endingOffsetsByTimestamp", "give endingOffsets"),
    ("zzzzqqq", "the options are listed on the documentation's *Spark* page"),
])
def test_an_unknown_option_is_refused_naming_it_and_the_closest_known_one(name: str, hint: str) -> None:
    err = refused({"subscribe": "a", name: "1"})
    assert err.property == name and hint in str(err), str(err)
    assert "unknown option" in str(err) or "does not take" in str(err) or "do not apply" in str(err)


# --------------------------------------------------------------------------- offsets options, batch vs stream


def test_starting_and_ending_offsets_and_timestamps_are_parsed() -> None:
    parsed = options(subscribe="a", startingOffsets='{"a":{"0":5,"1":-2}}', EndingOffsets='{"a":{"0":9,"1":-1}}',
                     startingOffsetsByTimestamp='{"a":{"0":1700000000000,"1":0}}', minPartitions="8",
                     maxRecordsPerPartition="1000")
    assert parsed.starting_offsets == StartingOffsets("specific", {("a", 0): 5, ("a", 1): -2})
    assert parsed.ending_offsets == StartingOffsets("specific", {("a", 0): 9, ("a", 1): -1})
    assert parsed.starting_timestamps == {("a", 0): 1700000000000, ("a", 1): 0} and parsed.by_timestamp
    assert (parsed.min_partitions, parsed.max_records_per_partition) == (8, 1000)
    assert options(subscribe="a", startingTimestamp="1700000000000").starting_timestamp == 1700000000000
    assert parsed.props == BASE


@pytest.mark.parametrize("extra, prop", [
    ({"minPartitions": "0"}, "minPartitions"),
    ({"maxRecordsPerPartition": "-5"}, "maxRecordsPerPartition"),
    ({"endingOffsets": "soon"}, "endingOffsets"),
    ({"endingOffsets": '{"a":{"0":-3}}'}, "endingOffsets"),
    ({"startingOffsetsByTimestamp": '{"a":{"0":-1}}'}, "startingOffsetsByTimestamp"),
    ({"startingOffsetsByTimestamp": '{"zz":{"0":1}}'}, "startingOffsetsByTimestamp"),
    ({"startingTimestamp": "yesterday"}, "startingTimestamp"),
])
def test_bad_values_of_the_new_options_are_refused_naming_them(extra, prop) -> None:
    assert refused({"subscribe": "a", **extra}).property == prop


@pytest.mark.parametrize("extra, message", [
    ({"startingOffsets": "latest"}, "starting offset can't be latest for batch queries on Kafka"),
    ({"startingOffsets": '{"a":{"0":-1}}'}, "startingOffsets for a-0 can't be latest for batch queries on Kafka"),
    ({"endingOffsets": "earliest"}, "ending offset can't be earliest for batch queries on Kafka"),
    ({"endingOffsets": '{"a":{"0":-2}}'}, "ending offset for a-0 can't be earliest for batch queries on Kafka"),
])
def test_batch_queries_refuse_what_spark_refuses(extra, message) -> None:
    with pytest.raises(ConfigurationError, match=message):
        options(subscribe="a", **extra).check_batch()


def test_streaming_queries_refuse_ending_offsets_and_batches_warn_about_trigger_options(caplog) -> None:
    with pytest.raises(ConfigurationError, match="ending offset not valid in streaming queries"):
        options(subscribe="a", endingOffsets="latest").check_stream()
    with caplog.at_level(logging.WARNING):
        options(subscribe="a", maxOffsetsPerTrigger="5").check_batch(logging.getLogger("t"))
    assert "maxOffsetsPerTrigger option ignored in batch queries" in caplog.text


# --------------------------------------------------------------------------- Spark's range split


def ranges(*spans: Tuple[int, int, int]) -> List[OffsetRange]:
    return [OffsetRange("t", p, a, b) for p, a, b in spans]


@pytest.mark.parametrize("given, min_partitions, expected", [
    # enough ranges already: 1-1, empty ones kept for the caller (no option set) or dropped (an option set)
    (ranges((0, 1, 2), (1, 1, 2), (2, 1, 2)), 3, ranges((0, 1, 2), (1, 1, 2), (2, 1, 2))),
    # one range over 4 tasks
    (ranges((0, 1, 5)), 4, ranges((0, 1, 2), (0, 2, 3), (0, 3, 4), (0, 4, 5))),
    # skewed: the small range's share rounds to 1 and stays whole; the rest gets the other 2 tasks
    (ranges((0, 1, 5), (1, 1, 21)), 3, ranges((0, 1, 5), (1, 1, 11), (1, 11, 21))),
    (ranges((0, 1, 5), (1, 1, 1001)), 3, ranges((0, 1, 5), (1, 1, 501), (1, 501, 1001))),
    # not a multiple: the last piece takes the remainder
    (ranges((0, 1, 11)), 3, ranges((0, 1, 4), (0, 4, 7), (0, 7, 11))),
    # empty ranges are dropped
    (ranges((0, 1, 5), (1, 1, 21), (2, 1, 1)), 3, ranges((0, 1, 5), (1, 1, 11), (1, 11, 21))),
])
def test_min_partitions_splits_ranges_by_sparks_rule(given, min_partitions, expected) -> None:
    assert split_ranges(given, min_partitions=min_partitions) == expected


def test_max_records_per_partition_cuts_every_range_then_min_partitions_applies() -> None:
    assert split_ranges(ranges((0, 0, 100), (1, 0, 40), (2, 0, 0)), max_records_per_partition=40) == \
        ranges((0, 0, 33), (0, 33, 66), (0, 66, 100), (1, 0, 40))
    # 2 pieces of 5 are fewer than minPartitions 4: the minPartitions rule then splits them again
    assert split_ranges(ranges((0, 0, 10)), min_partitions=4, max_records_per_partition=5) == \
        ranges((0, 0, 2), (0, 2, 5), (0, 5, 7), (0, 7, 10))
    assert split_ranges(ranges((0, 0, 3), (1, 4, 4))) == ranges((0, 0, 3), (1, 4, 4))  # neither: as given
    for r in (ranges((0, 7, 1007), (1, 3, 50), (2, 0, 1)),):
        for min_p in (1, 2, 5, 17, 100):
            for max_r in (None, 1, 9, 333):
                pieces = split_ranges(r, min_partitions=min_p, max_records_per_partition=max_r)
                covered = sorted((p.partition, o) for p in pieces for o in range(p.from_offset, p.until_offset))
                assert covered == sorted((x.partition, o) for x in r for o in range(x.from_offset, x.until_offset))
                assert max_r is None or len(pieces) >= min_p or all(p.count <= max_r for p in pieces)


# --------------------------------------------------------------------------- Spark's JSON, the checkpoint helper


def test_offsets_are_written_as_sparks_kafka_source_writes_them_and_the_older_form_is_still_read() -> None:
    offsets = {("t", 1): 456, ("t", 0): 123, ("a", 10): 1}
    assert source_offsets(offsets) == {"a": {"10": 1}, "t": {"0": 123, "1": 456}}
    assert source_offsets_json({("t", 0): 123, ("t", 1): 456}) == '{"t":{"0":123,"1":456}}'
    assert read_source_offsets(json.loads(source_offsets_json(offsets))) == offsets
    assert read_source_offsets({"t/0": 123, "t/1": 456, "a/10": 1}) == offsets
    with pytest.raises(ValueError):
        read_source_offsets({"t": {"x": 1}})
    assert parse_assign('{"t":[1,0,1]}') == (("t", 0), ("t", 1))


def write_batch(checkpoint: Path, batch: int, source_line: str, committed: bool) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{source_line}\n')
    (checkpoint / "offsets" / f".{batch}.crc").write_text("x")
    if committed:
        (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')


def test_checkpoint_helper_prints_the_last_completed_batchs_end_as_starting_offsets(tmp_path: Path, capsys) -> None:
    cp = tmp_path / "cp"
    with pytest.raises(ValueError, match="no micro-batch completed yet"):
        checkpoint_offsets(str(cp))
    write_batch(cp, 0, '{"t/0":5,"t/1":2}', committed=True)  # written before the Spark form
    assert starting_offsets_json(str(cp)) == '{"t":{"0":5,"1":2}}'
    write_batch(cp, 1, '{"t": {"0": 9, "1": 4}}', committed=True)
    write_batch(cp, 2, '{"t": {"0": 20, "1": 8}}', committed=False)  # planned, not completed: read again
    assert completed_batch(str(cp)) == 1 and checkpoint_offsets(str(cp)) == {("t", 0): 9, ("t", 1): 4}
    assert main([str(cp)]) == 0 and capsys.readouterr().out.strip() == '{"t":{"0":9,"1":4}}'
    assert main([str(cp), "--source", "1"]) == 1 and "no offsets for source 1" in capsys.readouterr().err


# --------------------------------------------------------------------------- Spark's schema


def test_schema_is_sparks_kafka_source_schema_and_rows_carry_no_timestamp_as_spark_shows_it() -> None:
    spark_kafka = ["key:binary", "value:binary", "topic:string", "partition:int", "offset:bigint",
                   "timestamp:timestamp", "timestampType:int"]
    assert [f"{f.name}:{f.dataType.simpleString()}" for f in SCHEMA.fields] == spark_kafka

    class Rows(OffsetRangePartition):
        pass

    import spark_integration.datasource as ds

    part = Rows({}, [("b", 1)], OffsetRange("t", 2, 5, 7))
    original = ds.read_offset_range
    ds.read_offset_range = lambda *a, **k: iter([[(5, None, b"x"), (6, b"k", b"y")]])  # type: ignore[assignment]
    try:
        rows = list(read_rows(part))
    finally:
        ds.read_offset_range = original  # type: ignore[assignment]
    minus_one_ms = datetime.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=datetime.timezone.utc)
    assert rows == [(None, b"x", "t", 2, 5, minus_one_ms, -1), (b"k", b"y", "t", 2, 6, minus_one_ms, -1)]


# --------------------------------------------------------------------------- the readers with the new options


class TimedView(FakeView):
    """A FakeView that also answers the offsets-before-time lookup from a table; records what was asked."""

    def __init__(self, ends: Dict[TP, int], before: Mapping[TP, Optional[int]],
                 committed: Optional[Dict[TP, int]] = None) -> None:
        super().__init__(ends, committed)
        self.before = dict(before)
        self.asked: List[Dict[TP, int]] = []

    def offsets_before(self, times: Mapping[TP, int]) -> Dict[TP, Optional[int]]:
        self.asked.append(dict(times))
        return {tp: self.before[tp] for tp in times}


def batch_plan(view: FakeView, **extra: str) -> List[OffsetRange]:
    CURRENT.append(view)
    reader = ZkConsumerBatchReader(SourceOptions.from_options({**BASE, **extra}), view_factory=open_current_view)
    return [p.offset_range for p in reader.partitions()]


def test_batch_reads_from_starting_to_ending_offsets_over_assigned_partitions_split_per_min_partitions() -> None:
    view = FakeView({("t", 0): 100, ("t", 1): 50, ("t", 2): 9}, committed={("t", 0): 40})
    view.starts[("t", 1)] = 10
    got = batch_plan(view, assign='{"t":[0,1]}', startingOffsets='{"t":{"0":20,"1":-2}}',
                     endingOffsets='{"t":{"0":80,"1":-1}}', minPartitions="4")
    # [20, 80) (60 messages: 2.4 of 4 tasks, rounded to 2) and [10, 50) (40: 1.6, rounded to 2); t/2 not assigned
    assert got == [OffsetRange("t", 0, 20, 50), OffsetRange("t", 0, 50, 80), OffsetRange("t", 1, 10, 30),
                   OffsetRange("t", 1, 30, 50)]
    assert view.closed
    # unset: the group's committed offsets (auto.offset.reset=largest where none) to the log end
    assert batch_plan(FakeView({("t", 0): 100, ("t", 1): 50}, committed={("t", 0): 40}), subscribe="t") == \
        [OffsetRange("t", 0, 40, 100), OffsetRange("t", 1, 50, 50)]
    with pytest.raises(ConfigurationError, match="end offset 5 is smaller than its start offset 20"):
        batch_plan(FakeView({("t", 0): 100}), subscribe="t", startingOffsets='{"t":{"0":20}}',
                   endingOffsets='{"t":{"0":5}}')
    with pytest.raises(ConfigurationError, match="after its log end 100"):
        batch_plan(FakeView({("t", 0): 100}), subscribe="t", endingOffsets='{"t":{"0":101}}')
    with pytest.raises(ConfigurationError, match="assign: names partitions that do not exist: t/7"):
        batch_plan(FakeView({("t", 0): 100}), assign='{"t":[0,7]}')


def test_starting_offsets_by_timestamp_go_through_the_offsets_before_time_lookup() -> None:
    ends = {("t", 0): 100, ("t", 1): 50}
    view = TimedView(ends, before={("t", 0): 60, ("t", 1): None})  # t/1: the time is before every segment
    spec = '{"t":{"0":1700000000000,"1":1600000000000}}'
    # it takes precedence over startingOffsets, as in Spark
    assert stream_reader(view, startingOffsetsByTimestamp=spec, startingOffsets="latest").initialOffset() == \
        {"t": {"0": 60, "1": 0}}
    assert view.asked == [{("t", 0): 1700000000000, ("t", 1): 1600000000000}]
    timed = TimedView(ends, before={("t", 0): 70, ("t", 1): 5})
    assert batch_plan(timed, subscribe="t", startingTimestamp="1700000000000") == \
        [OffsetRange("t", 0, 70, 100), OffsetRange("t", 1, 5, 50)]
    with pytest.raises(ConfigurationError, match="must give a timestamp for every subscribed partition: it does "
                                                 "not name t/1"):
        stream_reader(TimedView(ends, {}), startingOffsetsByTimestamp='{"t":{"0":1}}').initialOffset()


def test_micro_batches_are_split_per_min_partitions_and_ending_offsets_is_refused() -> None:
    reader = stream_reader(FakeView({("t", 0): 100, ("t", 1): 10}), minPartitions="3")
    parts = reader.partitions({"t": {"0": 0, "1": 0}}, {"t": {"0": 100, "1": 10}})
    assert [p.offset_range for p in parts] == [OffsetRange("t", 0, 0, 50), OffsetRange("t", 0, 50, 100),
                                               OffsetRange("t", 1, 0, 10)]
    with pytest.raises(ConfigurationError, match="ending offset not valid in streaming queries"):
        stream_reader(FakeView({("t", 0): 1}), endingOffsets="latest")


def test_options_and_readers_still_pickle_as_plain_data() -> None:
    from pyspark import cloudpickle

    parsed = options(assign='{"t":[0]}', startingOffsetsByTimestamp='{"t":{"0":5}}', minPartitions="2")
    assert cloudpickle.loads(cloudpickle.dumps(parsed)) == parsed
    CURRENT.append(FakeView({("t", 0): 1}))
    reader = ZkConsumerBatchReader(parsed, view_factory=open_current_view)
    assert cloudpickle.loads(cloudpickle.dumps(reader)) is not None
    assert isinstance(ConsumerConfig(parsed.props), ConsumerConfig)
