"""spark_integration.datasource: the stream reader's offset planning against a fake group view (no Spark, no cluster)."""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import pytest
from pyspark import cloudpickle
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import StringType, StructField, StructType

from spark_integration.datasource import (
    SCHEMA, SOURCE_NAME, OffsetRangePartition, ZkConsumerDataSource, ZkConsumerStreamReader, read_rows,
)
from spark_integration.options import SourceOptions
from spark_integration.ranges import OffsetRange
from zkconsumer import ConfigurationError, ConsumerConfig

TP = Tuple[str, int]
OPTIONS = {"zookeeper.connect": "zk:2181", "group.id": "g", "topics": "t"}


class FakeView:
    """What the reader asks of a GroupView, over in-memory state; records commits."""

    def __init__(self, ends: Dict[TP, int], committed: Optional[Dict[TP, int]] = None) -> None:
        self.ends = dict(ends)
        self.starts: Dict[TP, int] = {tp: 0 for tp in ends}
        self.committed = dict(committed or {})
        self.commits: List[Dict[TP, int]] = []
        self.closed = False

    def topic_partitions(self, topics: Sequence[str] = (), whitelist: Optional[str] = None) -> List[TP]:
        return sorted(self.ends)

    def positions(self, tps: Sequence[TP], log_ends: Optional[Mapping[TP, int]] = None) -> Dict[TP, int]:
        return {tp: self.committed.get(tp, self.starts[tp]) for tp in tps}

    def log_ends(self, tps: Sequence[TP]) -> Dict[TP, int]:
        return {tp: self.ends[tp] for tp in tps}

    def log_starts(self, tps: Sequence[TP]) -> Dict[TP, int]:
        return {tp: self.starts[tp] for tp in tps}

    def brokers(self) -> List[Tuple[str, int]]:
        return [("b0", 9092)]

    def commit(self, offsets: Mapping[TP, int]) -> None:
        self.commits.append(dict(offsets))
        self.committed.update(offsets)

    def close(self) -> None:
        self.closed = True

    def __getstate__(self) -> None:
        raise TypeError("a view must never be pickled")


#: The view the next reader opens (the factory must be picklable, the view must not be).
CURRENT: List[FakeView] = []


def open_current_view(config: ConsumerConfig) -> FakeView:
    assert config.group_id == "g"
    return CURRENT[-1]


def stream_reader(view: FakeView, **extra: str) -> ZkConsumerStreamReader:
    CURRENT.append(view)
    return ZkConsumerStreamReader(SourceOptions.from_options({**OPTIONS, **extra}), view_factory=open_current_view)


def test_initial_offset_is_the_groups_committed_position() -> None:
    view = FakeView({("t", 0): 10, ("t", 1): 4}, committed={("t", 0): 7})
    assert stream_reader(view).initialOffset() == {"t/0": 7, "t/1": 0}


def test_latest_offset_is_the_log_end_and_writes_the_completed_start() -> None:
    view = FakeView({("t", 0): 10, ("t", 1): 4})
    reader = stream_reader(view)
    assert reader.latestOffset({"t/0": 3, "t/1": 4}, ReadAllAvailable()) == {"t/0": 10, "t/1": 4}
    assert view.committed == {("t", 0): 3, ("t", 1): 4}
    reader.latestOffset({"t/0": 3, "t/1": 4}, ReadAllAvailable())
    assert len(view.commits) == 1  # unchanged offsets are not written again


def test_new_partitions_enter_at_their_log_start_and_vanished_or_truncated_ones_stay() -> None:
    view = FakeView({("t", 0): 2, ("t", 2): 9})
    view.starts[("t", 2)] = 5
    reader = stream_reader(view)
    # t/0's log now ends below the checkpoint (truncated); t/1 disappeared; t/2 is new
    assert reader.latestOffset({"t/0": 6, "t/1": 3}, ReadAllAvailable()) == {"t/0": 6, "t/1": 3, "t/2": 5}


def test_available_now_stops_at_the_log_end_seen_when_prepared() -> None:
    view = FakeView({("t", 0): 10})
    reader = stream_reader(view)
    reader.prepareForTriggerAvailableNow()
    view.ends[("t", 0)] = 50
    assert reader.latestOffset({"t/0": 0}, ReadAllAvailable()) == {"t/0": 10}
    assert reader.latestOffset({"t/0": 10}, ReadAllAvailable()) == {"t/0": 10}  # done: end == start


def test_max_messages_per_trigger_becomes_the_default_read_limit() -> None:
    view = FakeView({("t", 0): 100, ("t", 1): 100})
    assert isinstance(stream_reader(view).getDefaultReadLimit(), ReadAllAvailable)
    reader = stream_reader(view, **{"max.messages.per.trigger": "30"})
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMaxRows(30)
    assert reader.latestOffset({"t/0": 0, "t/1": 0}, limit) == {"t/0": 15, "t/1": 15}
    assert reader.latestOffset({"t/0": 0, "t/1": 0}, ReadAllAvailable()) == {"t/0": 100, "t/1": 100}


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
    reader.commit({"t/0": 8})
    assert view.committed == {("t", 0): 8}
    reader.stop()
    assert view.closed


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
