"""``create_rdd``: the group's uncommitted messages as an RDD with one Spark partition per Kafka partition.

On the driver, :func:`create_rdd` reads the group's committed offsets where
``offsets.storage`` keeps them (ZooKeeper by default; Kafka, or the larger of
both with ``dual.commit.enabled``: :mod:`~spark_integration.group_view`),
``auto.offset.reset`` where there are none or where they fell outside the log,
and each partition's current log end, and fixes one
:class:`~spark_integration.ranges.OffsetRange` per partition. The RDD's
partition ``i`` holds exactly the messages of ``rdd.offset_ranges[i]`` as
:class:`~zkconsumer.MessageAndMetadata` rows, read on the executor straight
from the partition leader; recomputing a partition reads the same messages
again (as long as retention has not deleted them:
:class:`~spark_integration.range_reader.OffsetRangeUnavailableError`).

Nothing is committed by reading. After processing, call
:func:`commit_offset_ranges` with the ranges to write each ``until_offset``
to the same store(s), so the next :func:`create_rdd` continues there and lag
monitors see the progress::

    rdd = create_rdd(sc, props, ["events"])
    rdd.map(lambda m: m.message).saveAsTextFile(...)
    commit_offset_ranges(props, rdd.offset_ranges)

If the job fails before the commit, the next batch reads the same messages
again (at-least-once). Do not mix with live connector members of the same
group on the same topics: they overwrite offsets at their own commits.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Dict, Iterable, Iterator, List, Optional, Sequence

from zkconsumer import ConsumerConfig, MessageAndMetadata

from .connect import spark_context
from .credentials import consumer_config
from .group_view import BrokerAddress, GroupView
from .options import PropsLike, plain_props
from .range_reader import read_offset_range
from .ranges import OffsetRange

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import RDD, SparkContext

__all__ = ["create_rdd", "plan_offset_ranges", "commit_offset_ranges", "read_ranges", "brokers_from_zookeeper"]


def _config(props: PropsLike) -> ConsumerConfig:
    return consumer_config(props)


def plan_offset_ranges(
    props: PropsLike, topics: Sequence[str], max_messages_per_partition: Optional[int] = None
) -> List[OffsetRange]:
    """The ranges :func:`create_rdd` would read now, without Spark: one per partition of ``topics``.

    Raises :class:`~zkconsumer.admin.UnknownTopicError` for a topic that does
    not exist and :class:`~spark_integration.group_view.LogOffsetsUnavailableError`
    if a partition's log end cannot be looked up.
    """
    if isinstance(topics, str):
        raise TypeError("topics must be a list of topic names, not a string")
    with GroupView(_config(props)) as view:
        return view.plan(list(dict.fromkeys(topics)), max_messages_per_partition=max_messages_per_partition)


def brokers_from_zookeeper(props: Dict[str, str]) -> List[BrokerAddress]:
    """Live broker addresses from ``/brokers/ids`` (a short ZooKeeper session; used when known brokers fail)."""
    with GroupView(consumer_config(props)) as view:
        return view.brokers()


def read_ranges(props: Dict[str, str], brokers: Sequence[BrokerAddress],
                ranges: Iterable[OffsetRange]) -> Iterator[MessageAndMetadata]:
    """Executor side: the messages of each range as :class:`~zkconsumer.MessageAndMetadata`."""
    refresh = functools.partial(brokers_from_zookeeper, props)
    for r in ranges:
        r = OffsetRange(*r)
        for chunk in read_offset_range(props, brokers, r, refresh_brokers=refresh):
            for offset, key, value in chunk:
                yield MessageAndMetadata(r.topic, r.partition, offset, key, value)


def create_rdd(
    sc: "SparkContext", props: PropsLike, topics: Sequence[str], *, max_messages_per_partition: Optional[int] = None
) -> "RDD[MessageAndMetadata]":
    """An RDD of the group's messages from its committed offsets to the current log end of ``topics``.

    One Spark partition per Kafka partition (in ``offset_ranges`` order, even
    when a range is empty), rows :class:`~zkconsumer.MessageAndMetadata`
    ``(topic, partition, offset, key, message)``. The returned RDD has an
    ``offset_ranges`` attribute (``List[OffsetRange]``); derived RDDs do not.
    ``max_messages_per_partition`` caps each range. ``sc`` may also be a
    classic SparkSession; a Spark Connect session (no RDD API) raises
    :class:`~spark_integration.connect.SparkConnectUnsupportedError`.
    """
    sc = spark_context(sc, "create_rdd")
    if isinstance(topics, str):
        raise TypeError("topics must be a list of topic names, not a string")
    plain = plain_props(props)
    with GroupView(consumer_config(plain)) as view:
        ranges = view.plan(list(dict.fromkeys(topics)), max_messages_per_partition=max_messages_per_partition)
        brokers = view.brokers()
    reader = functools.partial(read_ranges, plain, brokers)
    rdd = sc.parallelize([tuple(r) for r in ranges], max(1, len(ranges))).mapPartitions(reader)
    rdd.offset_ranges = ranges  # type: ignore[attr-defined]
    return rdd


def commit_offset_ranges(props: PropsLike, ranges: Iterable[OffsetRange]) -> None:
    """Write each range's ``until_offset`` as the group's next offset to consume, where ``offsets.storage`` says.

    ZooKeeper by default; ``offsets.storage=kafka``: one OffsetCommit v1
    (generation -1) to the group's coordinator, and with ``dual.commit.enabled``
    (its default) then ZooKeeper. While coordinator members hold the group Kafka
    refuses it: :class:`~zkconsumer.errors.OffsetStorageError` naming
    that cause, nothing written. Empty ranges are written too (they record the position ``auto.offset.reset``
    chose). Idempotent; later ranges of the same partition win.
    """
    offsets = {}
    for r in ranges:
        r = OffsetRange(*r)
        offsets[(r.topic, r.partition)] = r.until_offset
    if not offsets:
        return
    with GroupView(_config(props)) as view:
        view.commit(offsets)
