"""spark_integration.datasource: the stream reader's offset planning against a fake group view (no Spark, no cluster)."""

from __future__ import annotations

import logging
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

import pytest
from pyspark import cloudpickle
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import StringType, StructField, StructType

from spark_integration.data_loss import DataLossError
from spark_integration.datasource import (
    SOURCE_NAME,
    OffsetRangePartition,
    ZkConsumerDataSource,
    ZkConsumerStreamReader,
    read_rows,
)
from spark_integration.options import SourceOptions
from spark_integration.ranges import OffsetRange
from spark_integration.schema import SCHEMA
from zkconsumer import ConfigurationError, ConsumerConfig
from zkconsumer.admin import UnknownTopicError

TP = Tuple[str, int]
OPTIONS = {"zookeeper.connect": "zk:2181", "group.id": "g", "topics": "t"}


class FakeView:
    """What the reader asks of a GroupView, over in-memory state; records commits."""

    def __init__(self, ends: Dict[TP, int], committed: Optional[Dict[TP, int]] = None) -> None:
        self.ends = dict(ends)
        self.starts: Dict[TP, int] = {tp: 0 for tp in ends}
        self.stored = dict(committed or {})
        self.commits: List[Dict[TP, int]] = []
        self.closed = False

    def topic_partitions(self, topics: Sequence[str] = (), whitelist: Optional[str] = None) -> List[TP]:
        if whitelist is not None:
            return sorted(self.ends)
        missing = [t for t in topics if not any(tp[0] == t for tp in self.ends)]
        if missing:
            raise UnknownTopicError(missing[0])
        return sorted(tp for tp in self.ends if tp[0] in topics)

    def committed(self, tps: Sequence[TP]) -> Dict[TP, Optional[int]]:
        return {tp: self.stored.get(tp) for tp in tps}

    def log_ends(self, tps: Sequence[TP]) -> Dict[TP, int]:
        return {tp: self.ends[tp] for tp in tps}

    def log_starts(self, tps: Sequence[TP]) -> Dict[TP, int]:
        return {tp: self.starts[tp] for tp in tps}

    def brokers(self) -> List[Tuple[str, int]]:
        return [("b0", 9092)]

    def close(self) -> None:
        self.closed = True

    def __getstate__(self) -> None:
        raise TypeError("a view must never be pickled")


class FakeOwnership:
    """A QueryOwnership writing into the current FakeView; records what is held."""

    def __init__(self, view: FakeView) -> None:
        self.view = view
        self.held: Set[TP] = set()
        self.closed = False

    def hold(self, tps: Iterable[TP]) -> None:
        self.held |= set(tps)

    def keep_only(self, tps: Iterable[TP]) -> None:
        self.held &= set(tps)

    def commit(self, offsets: Mapping[TP, int]) -> None:
        assert set(offsets) <= self.held, "an offset written for a partition the query does not hold"
        self.view.commits.append(dict(offsets))
        self.view.stored.update(offsets)

    def close(self) -> None:
        self.closed = True


#: The view the next reader opens (the factory must be picklable, the view must not be).
CURRENT: List[FakeView] = []
OWNERSHIPS: List[FakeOwnership] = []


def open_current_view(config: ConsumerConfig) -> FakeView:
    assert config.group_id == "g"
    return CURRENT[-1]


def open_ownership(config: ConsumerConfig) -> FakeOwnership:
    OWNERSHIPS.append(FakeOwnership(CURRENT[-1]))
    return OWNERSHIPS[-1]


def stream_reader(view: FakeView, **extra: str) -> ZkConsumerStreamReader:
    CURRENT.append(view)
    return ZkConsumerStreamReader(SourceOptions.from_options({**OPTIONS, **extra}), view_factory=open_current_view,
                                  ownership_factory=open_ownership)


def test_initial_offset_is_the_groups_committed_position() -> None:
    view = FakeView({("t", 0): 10, ("t", 1): 4}, committed={("t", 0): 7})
    assert stream_reader(view, **{"auto.offset.reset": "smallest"}).initialOffset() == {"t": {"0": 7, "1": 0}}
    assert stream_reader(view).initialOffset() == {"t": {"0": 7, "1": 4}}  # auto.offset.reset=largest (default)
    assert OWNERSHIPS[-1].held == {("t", 0), ("t", 1)}


def test_latest_offset_is_the_log_end_and_writes_the_completed_start() -> None:
    view = FakeView({("t", 0): 10, ("t", 1): 4})
    reader = stream_reader(view)
    assert reader.latestOffset({"t/0": 3, "t/1": 4}, ReadAllAvailable()) == {"t": {"0": 10, "1": 4}}
    assert view.stored == {("t", 0): 3, ("t", 1): 4}
    reader.latestOffset({"t/0": 3, "t/1": 4}, ReadAllAvailable())
    assert len(view.commits) == 1  # unchanged offsets are not written again


def test_new_partitions_enter_at_their_log_start() -> None:
    view = FakeView({("t", 0): 6, ("t", 2): 9})
    reader = stream_reader(view)
    assert reader.latestOffset({"t/0": 6}, ReadAllAvailable()) == {"t": {"0": 6, "2": 0}}


def test_available_now_stops_at_the_log_end_seen_when_prepared() -> None:
    view = FakeView({("t", 0): 10})
    reader = stream_reader(view)
    reader.prepareForTriggerAvailableNow()
    view.ends[("t", 0)] = 50
    assert reader.latestOffset({"t/0": 0}, ReadAllAvailable()) == {"t": {"0": 10}}
    assert reader.latestOffset({"t/0": 10}, ReadAllAvailable()) == {"t": {"0": 10}}  # done: end == start


def test_max_messages_per_trigger_becomes_the_default_read_limit() -> None:
    view = FakeView({("t", 0): 100, ("t", 1): 100})
    assert isinstance(stream_reader(view).getDefaultReadLimit(), ReadAllAvailable)
    reader = stream_reader(view, **{"max.messages.per.trigger": "30"})
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMaxRows(30)
    assert reader.latestOffset({"t/0": 0, "t/1": 0}, limit) == {"t": {"0": 15, "1": 15}}
    assert reader.latestOffset({"t/0": 0, "t/1": 0}, ReadAllAvailable()) == {"t": {"0": 100, "1": 100}}


def test_partitions_cover_only_partitions_with_new_messages() -> None:
    view = FakeView({("t", 0): 10, ("t", 1): 4, ("t", 2): 0})
    parts = stream_reader(view).partitions({"t/0": 3, "t/1": 4}, {"t/0": 10, "t/1": 4, "t/2": 0})
    assert [p.offset_range for p in parts] == [OffsetRange("t", 0, 3, 10)]
    assert parts[0].props == {"zookeeper.connect": "zk:2181", "group.id": "g"}
    assert parts[0].brokers == [("b0", 9092)]
    assert stream_reader(view).partitions({"t/0": 3}, {"t/0": 3}) == []


def test_commit_writes_the_end_and_stop_closes_the_view() -> None:
    view = FakeView({("t", 0): 10})
    reader = stream_reader(view)
    reader.latestOffset({"t/0": 0}, ReadAllAvailable())
    reader.commit({"t/0": 8})
    assert view.stored == {("t", 0): 8}
    reader.stop()
    assert view.closed and OWNERSHIPS[-1].closed


def test_readers_and_partitions_pickle_as_plain_data_after_use() -> None:
    view = FakeView({("t", 0): 10})
    reader = stream_reader(view)
    reader.initialOffset()  # opens the (unpicklable) view
    clone = cloudpickle.loads(cloudpickle.dumps(reader))
    assert isinstance(clone, ZkConsumerStreamReader)
    part = OffsetRangePartition({"group.id": "g"}, [("h", 1)], OffsetRange("t", 0, 1, 2))
    again = cloudpickle.loads(cloudpickle.dumps(part))
    assert (again.offset_range, again.brokers, again.props) == (part.offset_range, [("h", 1)], {"group.id": "g"})


def test_data_source_validates_options_and_schema() -> None:
    assert ZkConsumerDataSource.name() == SOURCE_NAME == "zkconsumer"
    source = ZkConsumerDataSource(dict(OPTIONS))
    assert source.schema() == SCHEMA
    assert isinstance(source.streamReader(SCHEMA), ZkConsumerStreamReader)
    with pytest.raises(ConfigurationError, match="fixed schema"):
        source.reader(StructType([StructField("value", StringType())]))
    with pytest.raises(ConfigurationError, match="topics"):
        ZkConsumerDataSource({"zookeeper.connect": "zk:2181", "group.id": "g"}).schema()


def test_read_rows_of_a_placeholder_partition_is_empty() -> None:
    assert list(read_rows(InputPartition(None))) == []


# --------------------------------------------------------------------------- item 12: failOnDataLoss


def test_item12_fail_on_data_loss_option_defaults_to_true_and_is_validated() -> None:
    assert SourceOptions.from_options(OPTIONS).fail_on_data_loss is True
    assert SourceOptions.from_options({**OPTIONS, "failOnDataLoss": "False"}).fail_on_data_loss is False
    assert SourceOptions.from_options({**OPTIONS, "failondataloss": " true "}).fail_on_data_loss is True
    assert "failondataloss" not in SourceOptions.from_options({**OPTIONS, "failOnDataLoss": "false"}).props
    with pytest.raises(ConfigurationError, match="failOnDataLoss"):
        SourceOptions.from_options({**OPTIONS, "failOnDataLoss": "maybe"})


def test_item12_log_end_moving_back_fails_the_query_by_default_naming_partition_and_offsets() -> None:
    view = FakeView({("t", 0): 3, ("t", 1): 20})  # t/0 was re-created: its log now ends at 3
    reader = stream_reader(view)
    with pytest.raises(DataLossError) as raised:
        reader.latestOffset({"t/0": 10, "t/1": 5}, ReadAllAvailable())
    message = str(raised.value)
    assert "t/0" in message and "ends at offset 3" in message and "offset 10" in message
    assert "failOnDataLoss" in message and "group g" in message
    assert [(loss.topic, loss.partition, loss.kind) for loss in raised.value.losses] == [("t", 0, "log-end-moved-back")]
    assert not raised.value.retriable


def test_item12_log_end_moving_back_restarts_from_the_log_start_with_a_warning(caplog) -> None:
    view = FakeView({("t", 0): 3, ("t", 1): 20})
    reader = stream_reader(view, failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="spark_integration.datasource"):
        end = reader.latestOffset({"t/0": 10, "t/1": 5}, ReadAllAvailable())
    assert end == {"t": {"0": 0, "1": 20}}  # t/0 moves back to its log start: an empty batch for it
    assert [p.offset_range for p in reader.partitions({"t/0": 10, "t/1": 5}, end)] == [OffsetRange("t", 1, 5, 20)]
    assert any("t/0" in r.getMessage() and "offset 10" in r.getMessage() and "going on from offset 0" in r.getMessage()
               for r in caplog.records)
    # the next batch reads the re-created partition from its start
    assert reader.latestOffset(end, ReadAllAvailable()) == {"t": {"0": 3, "1": 20}}
    assert [p.offset_range for p in reader.partitions(end, {"t/0": 3, "t/1": 20})] == [OffsetRange("t", 0, 0, 3)]


def test_item12_a_read_limit_never_moves_a_reset_partition_forward_again() -> None:
    view = FakeView({("t", 0): 3, ("t", 1): 100})
    reader = stream_reader(view, failOnDataLoss="false")
    assert reader.latestOffset({"t/0": 10, "t/1": 0}, ReadMaxRows(10)) == {"t": {"0": 0, "1": 10}}


def test_item12_offsets_deleted_by_retention_fail_by_default_and_are_skipped_by_executors_otherwise() -> None:
    view = FakeView({("t", 0): 50})
    view.starts[("t", 0)] = 30
    with pytest.raises(DataLossError, match=r"offsets \[10, 30\) were deleted"):
        stream_reader(view).latestOffset({"t/0": 10}, ReadAllAvailable())
    reader = stream_reader(view, failOnDataLoss="false")
    end = reader.latestOffset({"t/0": 10}, ReadAllAvailable())
    assert end == {"t": {"0": 50}}
    [part] = reader.partitions({"t/0": 10}, end)
    assert part.offset_range == OffsetRange("t", 0, 10, 50) and part.fail_on_data_loss is False


def test_item12_a_vanished_partition_fails_by_default_and_is_dropped_otherwise() -> None:
    view = FakeView({("t", 0): 5})  # t/1 is gone
    with pytest.raises(DataLossError, match="t/1 no longer exists"):
        stream_reader(view).latestOffset({"t/0": 5, "t/1": 3}, ReadAllAvailable())
    reader = stream_reader(view, failOnDataLoss="false")
    assert reader.latestOffset({"t/0": 5, "t/1": 3}, ReadAllAvailable()) == {"t": {"0": 5}}
    assert OWNERSHIPS[-1].held == {("t", 0)}  # released what the query no longer reads


def test_item12_a_deleted_listed_topic_is_a_vanished_partition_not_an_unknown_topic() -> None:
    view = FakeView({("u", 0): 5})
    reader = stream_reader(view, topics="t,u")
    with pytest.raises(DataLossError, match="t/0 no longer exists"):
        reader.latestOffset({"t/0": 2, "u/0": 5}, ReadAllAvailable())


def test_item12_a_committed_offset_outside_the_log_fails_a_new_query_by_default() -> None:
    view = FakeView({("t", 0): 4}, committed={("t", 0): 9})
    with pytest.raises(DataLossError, match="committed offset 9 lies outside the log"):
        stream_reader(view).initialOffset()
    assert stream_reader(view, failOnDataLoss="false", **{"auto.offset.reset": "smallest"}).initialOffset() == {"t": {"0": 0}}


def test_item12_available_now_is_capped_by_the_fresh_log_end() -> None:
    view = FakeView({("t", 0): 10})
    reader = stream_reader(view, failOnDataLoss="false")
    reader.prepareForTriggerAvailableNow()
    view.ends[("t", 0)] = 4  # the log moved back after the run was prepared
    assert reader.latestOffset({"t/0": 2}, ReadAllAvailable()) == {"t": {"0": 4}}


# --------------------------------------------------------------------------- "Spark for real" items 3, 5


def test_item3_read_returns_arrow_batches_and_nothing_for_a_placeholder() -> None:
    from spark_integration.datasource import ZkConsumerBatchReader, read_batches

    assert list(read_batches(InputPartition(None))) == []
    reader = stream_reader(FakeView({("t", 0): 1}))
    assert list(reader.read(InputPartition(None))) == []
    assert list(ZkConsumerBatchReader(SourceOptions.from_options(OPTIONS)).read(InputPartition(None))) == []


def test_item5_starting_offsets_override_the_committed_offsets_of_a_new_query() -> None:
    view = FakeView({("t", 0): 10, ("t", 1): 4}, committed={("t", 0): 7, ("t", 1): 1})
    view.starts[("t", 0)] = 2
    assert stream_reader(view, startingOffsets="earliest").initialOffset() == {"t": {"0": 2, "1": 0}}
    assert stream_reader(view, startingOffsets="latest").initialOffset() == {"t": {"0": 10, "1": 4}}
    assert stream_reader(view, startingOffsets='{"t":{"0":5,"1":-2}}').initialOffset() == {"t": {"0": 5, "1": 0}}
    assert stream_reader(view).initialOffset() == {"t": {"0": 7, "1": 1}}  # unset: the group's committed offsets
    assert OWNERSHIPS[-1].held == {("t", 0), ("t", 1)}
    with pytest.raises(ConfigurationError, match="does not name t/1"):
        stream_reader(view, startingOffsets='{"t":{"0":5}}').initialOffset()


def test_item5_a_starting_offset_outside_the_log_is_a_data_loss() -> None:
    view = FakeView({("t", 0): 10})
    view.starts[("t", 0)] = 3
    with pytest.raises(DataLossError, match="startingOffsets gives offset 1"):
        stream_reader(view, startingOffsets='{"t":{"0":1}}').initialOffset()
    assert stream_reader(view, startingOffsets='{"t":{"0":11}}', failOnDataLoss="false").initialOffset() == {"t": {"0": 3}}


def test_item5_max_offsets_per_trigger_is_the_default_limit_and_splits_by_backlog() -> None:
    view = FakeView({("t", 0): 300, ("t", 1): 100, ("t", 2): 0})
    reader = stream_reader(view, maxOffsetsPerTrigger="40")
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMaxRows(40)
    assert reader.latestOffset({"t/0": 0, "t/1": 0, "t/2": 0}, limit) == {"t": {"0": 30, "1": 10, "2": 0}}
    assert reader.latestOffset({"t/0": 0, "t/1": 0, "t/2": 0}, ReadAllAvailable()) == {"t": {"0": 300, "1": 100, "2": 0}}


def test_item5_min_offsets_per_trigger_waits_until_enough_messages_or_max_trigger_delay() -> None:
    from pyspark.sql.streaming.datasource import ReadMinRows

    view = FakeView({("t", 0): 10})
    now = [1000.0]
    CURRENT.append(view)
    reader = ZkConsumerStreamReader(
        SourceOptions.from_options({**OPTIONS, "minOffsetsPerTrigger": "50", "maxTriggerDelay": "1m"}),
        view_factory=open_current_view, ownership_factory=open_ownership, clock=lambda: now[0])
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMinRows(50)
    assert reader.latestOffset({"t/0": 0}, limit) == {"t": {"0": 10}}  # the first trigger goes ahead
    view.ends[("t", 0)] = 30
    now[0] += 10
    assert reader.latestOffset({"t/0": 10}, limit) == {"t": {"0": 10}}  # 20 < 50 new: no batch
    view.ends[("t", 0)] = 60
    assert reader.latestOffset({"t/0": 10}, limit) == {"t": {"0": 60}}  # 50 new: go
    view.ends[("t", 0)] = 61
    now[0] += 59
    assert reader.latestOffset({"t/0": 60}, limit) == {"t": {"0": 60}}
    now[0] += 1
    assert reader.latestOffset({"t/0": 60}, limit) == {"t": {"0": 61}}  # maxTriggerDelay passed
    assert reader.latestOffset({"t/0": 61}, ReadAllAvailable()) == {"t": {"0": 61}}


def test_item5_min_and_max_offsets_per_trigger_together_and_available_now() -> None:
    view = FakeView({("t", 0): 1000})
    reader = stream_reader(view, minOffsetsPerTrigger="100", maxOffsetsPerTrigger="300")
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMaxRows(300)  # PySpark takes one limit; the minimum is applied by the source
    assert reader.latestOffset({"t/0": 0}, limit) == {"t": {"0": 300}}
    assert reader.latestOffset({"t/0": 950}, limit) == {"t": {"0": 950}}  # 50 < 100 and no delay passed
    reader.prepareForTriggerAvailableNow()
    assert reader.latestOffset({"t/0": 950}, limit) == {"t": {"0": 1000}}  # availableNow must reach its target


def test_item5_lag_is_reported_as_the_latest_offset_and_as_spark_kafka_metrics() -> None:
    from spark_integration.datasource import source_lag

    view = FakeView({("t", 0): 100, ("t", 1): 40})
    reader = stream_reader(view, maxOffsetsPerTrigger="50")
    assert reader.reportLatestOffset() is None
    end = reader.latestOffset({"t/0": 0, "t/1": 0}, reader.getDefaultReadLimit())
    assert reader.reportLatestOffset() == {"t": {"0": 100, "1": 40}}
    metrics = reader.metrics(end)
    assert end == {"t": {"0": 35, "1": 14}}
    assert metrics == {"minOffsetsBehindLatest": "26", "maxOffsetsBehindLatest": "65",
                       "avgOffsetsBehindLatest": "45.5"}
    progress = {"sources": [{"description": "other", "endOffset": "5", "latestOffset": None},
                            {"description": "zkconsumer", "endOffset": '{"t/0":35,"t/1":14}',
                             "latestOffset": '{"t/0":100,"t/1":40}'}]}
    assert source_lag(progress) == metrics
    assert source_lag(None) == {} and source_lag({"sources": []}) == {}
