"""spark_integration.range_reader over an in-memory fake cluster (connection level).

The fake serves Metadata, Fetch (message sets cut at ``max_bytes``, as a broker
cuts them) and ListOffsets from per-partition logs built with kafka-python's
message-set builder, and can move leaders, take brokers down, apply retention
and truncate. Real-broker behaviour is covered by tests/integration/test_spark.py.
"""

from __future__ import annotations

import logging
import struct
from typing import Dict, List, Optional, Sequence, Set, Tuple

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from spark_integration.range_reader import OffsetRangeUnavailableError, RangeReader
from spark_integration.ranges import OffsetRange
from zkconsumer import BrokerUnavailableError, ConsumerConfig, MessageSizeTooLargeError
from zkconsumer.wire.protocol import (
    EARLIEST_TIME,
    BrokerMetadata,
    FetchPartition,
    FetchPartitionResponse,
    FetchResponse,
    MetadataResponse,
    PartitionMetadata,
    TopicMetadata,
)

TP = Tuple[str, int]
Segment = Tuple[int, bytes]  # (last offset in the entry, encoded entry)


def entry(offsets: Sequence[int], compression: int = 0) -> Segment:
    """One log entry (magic 0) as a broker stores it: a compressed wrapper carries its last inner offset."""
    builder = LegacyRecordBatchBuilder(magic=0, compression_type=compression, batch_size=1 << 20)
    for o in offsets:
        builder.append(o, None, f"k{o}".encode(), f"v{o}".encode())
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, offsets[-1])  # outside the CRC, stamped by the broker
    return offsets[-1], bytes(data)


class FakeCluster:
    def __init__(self, brokers: int = 2) -> None:
        self.addresses = {i: ("b%d" % i, 9090 + i) for i in range(brokers)}
        self.logs: Dict[TP, List[Segment]] = {}
        self.leader: Dict[TP, int] = {}
        self.log_start: Dict[TP, int] = {}
        self.high_watermark: Dict[TP, int] = {}
        self.down: Set[int] = set()
        self.fetches: List[Tuple[int, int]] = []  # (broker, offset)

    def add(self, tp: TP, segments: List[Segment], leader: int = 0, hw: Optional[int] = None) -> None:
        self.logs[tp] = segments
        self.leader[tp] = leader
        self.log_start[tp] = 0
        self.high_watermark[tp] = segments[-1][0] + 1 if hw is None else hw

    def connect(self, host: str, port: int) -> "FakeConnection":
        broker = next(i for i, a in self.addresses.items() if a == (host, port))
        return FakeConnection(self, broker)


class FakeConnection:
    def __init__(self, cluster: FakeCluster, broker: int) -> None:
        self.cluster, self.broker = cluster, broker
        self.address = "%s:%d" % cluster.addresses[broker]

    def _check(self) -> None:
        if self.broker in self.cluster.down:
            raise BrokerUnavailableError(f"broker {self.address} unreachable")

    def metadata(self, topics: Sequence[str]) -> MetadataResponse:
        self._check()
        c = self.cluster
        brokers = tuple(BrokerMetadata(i, h, p) for i, (h, p) in c.addresses.items() if i not in c.down)
        result = []
        for topic in topics:
            parts = tuple(PartitionMetadata(p, 0, c.leader[(t, p)], (0,), (0,)) for (t, p) in sorted(c.logs) if t == topic)
            result.append(TopicMetadata(topic, 0 if parts else 3, parts))
        return MetadataResponse(brokers, tuple(result))

    def fetch(self, partitions: Sequence[FetchPartition], max_wait_ms: int, min_bytes: int,
              timeout_ms: Optional[int] = None) -> FetchResponse:
        self._check()
        c = self.cluster
        out = []
        for fp in partitions:
            tp = (fp.topic, fp.partition)
            c.fetches.append((self.broker, fp.offset))
            hw = c.high_watermark[tp]
            if c.leader[tp] != self.broker:
                out.append(FetchPartitionResponse(fp.topic, fp.partition, 6, -1, memoryview(b"")))
            elif fp.offset < c.log_start[tp] or fp.offset > hw:
                out.append(FetchPartitionResponse(fp.topic, fp.partition, 1, -1, memoryview(b"")))
            else:
                data = b"".join(seg for last, seg in c.logs[tp] if fp.offset <= last < hw)
                out.append(FetchPartitionResponse(fp.topic, fp.partition, 0, hw, memoryview(data[:fp.max_bytes])))
        return FetchResponse(tuple(out))

    def list_offsets(self, topic: str, partition: int, time: int, timeout_ms: Optional[int] = None) -> int:
        self._check()
        tp = (topic, partition)
        return self.cluster.log_start[tp] if time == EARLIEST_TIME else self.cluster.high_watermark[tp]

    def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def reader(cluster: FakeCluster, *, fetch_bytes: int = 1 << 20, brokers: Optional[List[Tuple[str, int]]] = None,
           refresh=None, clock: Optional[Clock] = None, fail_on_data_loss: bool = True) -> RangeReader:
    config = ConsumerConfig({"zookeeper.connect": "zk:2181", "group.id": "g",
                             "fetch.message.max.bytes": fetch_bytes, "refresh.leader.backoff.ms": 100})
    clock = clock or Clock()
    return RangeReader(config, brokers if brokers is not None else list(cluster.addresses.values()),
                       refresh_brokers=refresh, retry_window_s=5.0, connect=cluster.connect,
                       fail_on_data_loss=fail_on_data_loss,
                       sleep=clock.sleep, clock=lambda: clock.now)


def offsets(chunks: List[List[Tuple[int, Optional[bytes], Optional[bytes]]]]) -> List[int]:
    return [m[0] for chunk in chunks for m in chunk]


def test_reads_exactly_the_range_across_fetches_cut_mid_message() -> None:
    cluster = FakeCluster()
    cluster.add(("t", 0), [entry([o]) for o in range(20)])
    one = len(entry([0])[1])
    chunks = list(reader(cluster, fetch_bytes=2 * one + 5).read(OffsetRange("t", 0, 3, 11)))
    assert offsets(chunks) == list(range(3, 11))
    assert all(len(c) <= 2 for c in chunks) and len(chunks) == 4
    assert chunks[0][0] == (3, b"k3", b"v3")


def test_empty_range_makes_no_request() -> None:
    cluster = FakeCluster()
    cluster.add(("t", 0), [entry([0])])
    assert list(reader(cluster).read(OffsetRange("t", 0, 1, 1))) == []
    assert cluster.fetches == []


def test_compressed_wrapper_straddling_both_ends_yields_only_the_range() -> None:
    cluster = FakeCluster()
    cluster.add(("t", 0), [entry([0, 1, 2, 3, 4], compression=1), entry([5, 6, 7], compression=1)])
    r = reader(cluster)
    assert [m[0] for m in r.messages(OffsetRange("t", 0, 2, 6))] == [2, 3, 4, 5]


def test_a_wrapper_with_a_stale_offset_stamp_still_makes_progress() -> None:
    builder = LegacyRecordBatchBuilder(magic=0, compression_type=1, batch_size=1 << 20)
    for o in range(4):
        builder.append(o, None, None, b"v")
    cluster = FakeCluster()
    cluster.add(("t", 0), [(3, bytes(builder.build()))])  # wrapper offset left at 0, not stamped 3
    assert [m[0] for m in reader(cluster).messages(OffsetRange("t", 0, 1, 4))] == [1, 2, 3]


def test_compacted_log_gaps_are_skipped_and_the_range_still_ends() -> None:
    cluster = FakeCluster()
    cluster.add(("t", 0), [entry([0]), entry([2]), entry([3]), entry([7])], hw=8)
    assert [m[0] for m in reader(cluster).messages(OffsetRange("t", 0, 1, 7))] == [2, 3]


def test_follows_a_leader_move_without_duplicates() -> None:
    cluster = FakeCluster()
    cluster.add(("t", 0), [entry([o]) for o in range(10)], leader=0)
    one = len(entry([0])[1])
    got: List[int] = []
    for chunk in reader(cluster, fetch_bytes=3 * one).read(OffsetRange("t", 0, 0, 10)):
        got += [m[0] for m in chunk]
        cluster.leader[("t", 0)] = 1 - cluster.leader[("t", 0)]  # move after every fetch
    assert got == list(range(10))
    assert {b for b, _ in cluster.fetches} == {0, 1}


def test_refreshes_brokers_when_no_bootstrap_broker_answers() -> None:
    cluster = FakeCluster()
    cluster.add(("t", 0), [entry([o]) for o in range(3)], leader=1)
    cluster.down.add(0)
    calls: List[int] = []

    def refresh() -> List[Tuple[str, int]]:
        calls.append(1)
        return [cluster.addresses[1]]

    got = list(reader(cluster, brokers=[cluster.addresses[0]], refresh=refresh).messages(OffsetRange("t", 0, 0, 3)))
    assert [m[0] for m in got] == [0, 1, 2] and calls == [1]


def test_range_deleted_by_retention_is_reported_not_skipped() -> None:
    cluster = FakeCluster()
    cluster.add(("t", 0), [entry([o]) for o in range(10)])
    cluster.log_start[("t", 0)] = 6
    with pytest.raises(OffsetRangeUnavailableError, match="starts at 6 .deleted by retention") as err:
        list(reader(cluster).read(OffsetRange("t", 0, 2, 9)))
    assert (err.value.offset, err.value.log_start, err.value.log_end) == (2, 6, 10)
    assert not err.value.retriable


def test_log_truncated_below_the_range_is_reported_after_the_retry_window() -> None:
    cluster = FakeCluster()
    cluster.add(("t", 0), [entry([o]) for o in range(10)], hw=5)  # a new leader that lost 5..9
    clock = Clock()
    with pytest.raises(OffsetRangeUnavailableError, match="ends at 5"):
        list(reader(cluster, clock=clock).read(OffsetRange("t", 0, 0, 10)))
    assert clock.now >= 5.0


def test_item12_without_fail_on_data_loss_deleted_offsets_are_skipped_with_a_warning(caplog) -> None:
    cluster = FakeCluster()
    cluster.add(("t", 0), [entry([o]) for o in range(10)])
    cluster.log_start[("t", 0)] = 6
    with caplog.at_level(logging.WARNING, logger="spark_integration.range_reader"):
        got = offsets(list(reader(cluster, fail_on_data_loss=False).read(OffsetRange("t", 0, 2, 9))))
    assert got == [6, 7, 8]
    assert any("t/0" in r.getMessage() and "[2, 6)" in r.getMessage() for r in caplog.records)
    cluster.log_start[("t", 0)] = 9  # the whole range is gone: nothing, no error
    assert offsets(list(reader(cluster, fail_on_data_loss=False).read(OffsetRange("t", 0, 2, 9)))) == []


def test_item12_without_fail_on_data_loss_a_truncated_log_ends_the_range() -> None:
    cluster = FakeCluster()
    cluster.add(("t", 0), [entry([o]) for o in range(10)], hw=5)
    got = offsets(list(reader(cluster, fail_on_data_loss=False).read(OffsetRange("t", 0, 0, 10))))
    assert got == [0, 1, 2, 3, 4]


def test_gives_up_with_broker_unavailable_when_nothing_answers_for_the_window() -> None:
    cluster = FakeCluster()
    cluster.add(("t", 0), [entry([0])])
    cluster.down.update({0, 1})
    clock = Clock()
    with pytest.raises(BrokerUnavailableError, match="no progress for 5s"):
        list(reader(cluster, clock=clock).read(OffsetRange("t", 0, 0, 1)))
    assert 5.0 <= clock.now < 5.5


def test_message_larger_than_the_fetch_size_raises() -> None:
    cluster = FakeCluster()
    cluster.add(("t", 0), [entry([0])])
    with pytest.raises(MessageSizeTooLargeError, match="fetch.message.max.bytes"):
        list(reader(cluster, fetch_bytes=10).read(OffsetRange("t", 0, 0, 1)))


# --------------------------------------------------------------------------- Arrow batches ("Spark for real" item 3)


def batch_rows(batches) -> List[Tuple[str, int, int, Optional[bytes], Optional[bytes]]]:
    return [tuple(row.values()) for b in batches for row in b.to_pylist()]


@pytest.mark.parametrize("compression", [0, 1])
def test_item3_batches_hold_exactly_the_range_with_compressed_sets_and_a_range_ending_mid_set(compression) -> None:
    pytest.importorskip("pyarrow")
    cluster = FakeCluster()
    # compressed: wrappers of 4 messages, the range starts inside the first and ends inside the third;
    # uncompressed: one message per entry (a plain message set)
    size = 4 if compression else 1
    cluster.add(("t", 0), [entry(list(range(o, o + size)), compression=compression) for o in range(0, 40, size)])
    one = len(entry(list(range(size)), compression=compression)[1])
    batches = list(reader(cluster, fetch_bytes=2 * one + 7).batches(OffsetRange("t", 0, 2, 10)))
    assert batch_rows(batches) == [("t", 0, o, f"k{o}".encode(), f"v{o}".encode()) for o in range(2, 10)]
    assert all(b.num_rows for b in batches) and len(batches) >= 2  # one batch per fetch, none empty
    # the same messages as the tuple path
    assert [m for c in reader(cluster, fetch_bytes=2 * one + 7).read(OffsetRange("t", 0, 2, 10)) for m in c] == \
        [(o, k, v) for _, _, o, k, v in batch_rows(batches)]


def test_item3_batches_have_the_spark_sources_arrow_schema_exactly() -> None:
    pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    from pyspark.sql.pandas.types import to_arrow_schema

    from spark_integration.schema import SCHEMA, arrow_schema, spark_batch
    from zkconsumer.consumer.arrow import NOT_NULL_SCHEMA

    cluster = FakeCluster()
    cluster.add(("t", 0), [entry([o]) for o in range(5)])
    batches = list(reader(cluster).batches(OffsetRange("t", 0, 1, 4), NOT_NULL_SCHEMA))
    assert all(b.schema.equals(NOT_NULL_SCHEMA) for b in batches)
    # what the source hands Spark: Spark's Kafka-source columns, exactly the Arrow schema PySpark derives
    assert to_arrow_schema(SCHEMA, timezone="UTC").equals(arrow_schema())
    assert all(spark_batch(b).schema.equals(arrow_schema()) for b in batches)
    assert [o for b in batches for o in spark_batch(b).column("offset").to_pylist()] == [1, 2, 3]


def test_item3_batches_of_a_range_ending_mid_chunk_wrap_the_decoders_buffers() -> None:
    """With the C decoder, a chunk cut at the range end becomes a slice of the block's arrays, not a copy."""
    pytest.importorskip("pyarrow")
    from zkconsumer.wire.messageset import ACCELERATED

    if not ACCELERATED:
        pytest.skip("the C decoder is not built")
    cluster = FakeCluster()
    cluster.add(("t", 0), [entry([o]) for o in range(30)])
    batches = list(reader(cluster).batches(OffsetRange("t", 0, 5, 25)))
    assert len(batches) == 1 and batches[0].num_rows == 20
    values = batches[0].column("value")
    assert values.offset == 0 and len(values) == 20 and values.to_pylist()[-1] == b"v24"
