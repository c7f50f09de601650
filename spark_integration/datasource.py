"""The ``zkconsumer`` Structured Streaming source, on PySpark 4's Python Data Source API.

::

    register_data_source(spark)
    df = (spark.readStream.format("zkconsumer")
          .option("zookeeper.connect", "zk:2181").option("group.id", "g1")
          .option("subscribe", "events,clicks")       # or subscribePattern / assign
          .option("auto.offset.reset", "smallest")     # any consumer property
          .load())                                     # Spark's Kafka-source columns (schema.SCHEMA)
    df.writeStream.trigger(availableNow=True).option("checkpointLocation", path)...

Options (names are case-insensitive, as in Spark; values are strings): Spark's
Kafka-source options with Spark's names and meanings (``subscribe``,
``subscribePattern``, ``assign``, ``startingOffsets``,
``startingOffsetsByTimestamp``, ``startingTimestamp``, ``endingOffsets``,
``minPartitions``, ``maxRecordsPerPartition``, ``maxOffsetsPerTrigger``,
``minOffsetsPerTrigger``, ``maxTriggerDelay``, ``failOnDataLoss``,
``includeHeaders``), this source's older names (``topics``,
``topic.whitelist``, ``max.messages.per.trigger``), ``max.messages.per.partition``
(a batch read's cap per partition), and any consumer property
(``zookeeper.connect`` and ``group.id`` required). The table with each
option's meaning here and in Spark is on the documentation's *Spark* page; parsing and
validation are in :mod:`~spark_integration.options`. Any other name is
refused, naming the closest known one. ``startingOffsets`` and the timestamp
options apply to a query *without* a checkpoint (and to batch reads); unset,
a query starts from the group's committed offsets (where
``offsets.storage`` keeps them; ZooKeeper by default), ``auto.offset.reset``
where it has none. Timestamps go through the brokers'
offsets-before-time lookup, which on 0.8/0.9 brokers answers with log-segment
boundaries (:meth:`~spark_integration.group_view.GroupView.offsets_before`).

Lag: PySpark 4.x gives Python sources no custom-metrics hook, so Spark's
``min/max/avgOffsetsBehindLatest`` are not in the progress as such. The
source reports the log ends it planned against as its ``latestOffset``
(``reportLatestOffset``), next to ``endOffset`` in every progress entry;
:func:`source_lag` computes the three figures from ``query.lastProgress``.

Offsets (what Spark checkpoints) are in the JSON form Spark's own Kafka
source writes, ``{"topic": {"0": next offset}}``
(:mod:`~spark_integration.spark_json`; the older ``{"topic/0": n}`` of
checkpoints written before is still read).

* ``initialOffset()`` (a query without a checkpoint): per ``startingOffsets``;
  unset, the group's committed offsets (``offsets.storage``), or
  ``auto.offset.reset`` where it has none.
* ``latestOffset(start, limit)``: each partition's log end (or, under
  ``trigger(availableNow=True)``, at most the log end recorded by
  ``prepareForTriggerAvailableNow()``), bounded by ``maxOffsetsPerTrigger``
  and held back by ``minOffsetsPerTrigger`` unless Spark asks for all
  available data. A partition that appears later
  (a new partition, or a topic newly matching the whitelist) enters at its log
  *start*, so all of its messages are read from the next micro-batch on.
* Data that Kafka took away is never skipped silently (option
  ``failOnDataLoss``, default true, as in Spark's Kafka source; see
  :mod:`~spark_integration.data_loss`): a log that now ends before the
  query's offset (topic deleted and re-created, unclean leader election), an
  offset below the log start (retention), a partition that vanished, a new
  partition whose log no longer starts at 0, or (no checkpoint) a committed
  offset outside the log fail the query with
  :class:`~spark_integration.data_loss.DataLossError` naming the partitions
  and offsets; with ``failOnDataLoss=false`` each is logged as a warning and
  the query goes on from where the data now starts (a log that moved back is
  read again from its start).
* ``partitions(start, end)``: one input partition per Kafka partition with
  messages in ``[start, end)``; each is read on an executor straight from the
  partition leader (:mod:`~spark_integration.range_reader`) and handed to
  Spark as Arrow record batches, one per fetch, built from the C decoder's
  buffers (no Python object per message). A partition whose
  end lies below its start (moved back to its log start) has no input
  partition in that batch.
* One query per group: the reader holds the group's owner nodes of the
  partitions it reads and writes offsets only while it holds them
  (:mod:`~spark_integration.ownership`), so a second query on the same
  ``group.id`` fails with :class:`~spark_integration.ownership.GroupInUseError`
  instead of overwriting the first one's offsets; a crashed driver's nodes
  expire with its ZooKeeper session.
* ``commit(end)``: writes ``end`` as the group's offsets where
  ``offsets.storage`` and ``dual.commit.enabled`` say (ZooKeeper by default,
  Kafka, or both: :mod:`~spark_integration.group_view`), so lag monitors see
  the progress. Spark calls it only when it
  plans the *following* batch, so the reader also writes ``start`` when
  ``latestOffset(start, ...)`` is called: Spark plans micro-batches one at a
  time, after the previous one completed, so ``start`` has been processed.
  The group's offsets thus trail Spark's commit log by at most the batch in flight, and
  an ``availableNow`` run leaves the group's offsets at what it read.
  Spark's checkpoint, not the group's offsets, is what a restarted query resumes from
  (no loss, no duplicates in the query's output, given an idempotent or
  transactional sink); the group's offsets are used only by a query without a
  checkpoint.

A batch ``spark.read.format("zkconsumer")`` reads from ``startingOffsets``
(or the timestamp options; unset: the group's committed offsets) to
``endingOffsets`` (unset: the log end), capped by
``max.messages.per.partition``, and commits nothing; ``failOnDataLoss``
applies to its executors (a range deleted before it was read). Both kinds of
query split ranges per ``minPartitions``/``maxRecordsPerPartition``
(:func:`~spark_integration.ranges.split_ranges`).

The reader objects hold only plain data when pickled; the driver-side
ZooKeeper sessions (:class:`~spark_integration.group_view.GroupView`,
:class:`~spark_integration.ownership.QueryOwnership`) are opened lazily in the
planner process and closed in ``stop()``.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from zkconsumer import ConfigurationError, ConsumerConfig
from zkconsumer.admin import UnknownTopicError
from zkconsumer.structs import TopicPartition

from .credentials import consumer_config
from .data_loss import DataLoss, initial_positions, plan_latest, report
from .group_view import BrokerAddress, GroupView
from .options import SourceOptions
from .ownership import QueryOwnership
from .range_reader import read_offset_range, read_offset_range_batches
from .ranges import OffsetRange, TriggerDelay, new_messages, plan_ranges, rate_limit, split_ranges
from .rdd import brokers_from_zookeeper
from .schema import SCHEMA, Row, spark_batch, spark_row
from .spark_json import read_source_offsets as decode_offsets
from .spark_json import source_offsets as encode_offsets
from .starting_offsets import ending_positions, starting_positions, timestamp_positions, timestamps_wanted

__all__ = [
    "SOURCE_NAME", "ZkConsumerDataSource", "ZkConsumerStreamReader", "ZkConsumerBatchReader",
    "OffsetRangePartition", "register_data_source", "read_rows", "read_batches", "offsets_behind_latest",
    "source_lag",
]

log = logging.getLogger(__name__)

SOURCE_NAME = "zkconsumer"

class OffsetRangePartition(InputPartition):
    """One Spark input partition: one Kafka partition's offset range, and how to reach the cluster.

    Plain data only: ``props`` (consumer properties as strings), ``brokers``
    (``(host, port)`` to bootstrap from), the range, and ``fail_on_data_loss``
    (the option ``failOnDataLoss``: what the executor does if part of the
    range is gone by the time it reads it).
    """

    def __init__(self, props: Dict[str, str], brokers: Sequence[BrokerAddress], offset_range: OffsetRange,
                 fail_on_data_loss: bool = True) -> None:
        super().__init__(tuple(offset_range))
        self.props = dict(props)
        self.brokers: List[BrokerAddress] = [(str(b[0]), int(b[1])) for b in brokers]
        self.offset_range = OffsetRange(*offset_range)
        self.fail_on_data_loss = fail_on_data_loss

    def __repr__(self) -> str:
        return f"OffsetRangePartition({self.offset_range})"


def read_batches(partition: InputPartition) -> Iterator[Any]:
    """Executor side: one input partition's messages as Arrow record batches (what ``read()`` returns).

    One ``pyarrow.RecordBatch`` per fetched chunk, wrapping the C decoder's
    buffers (no Python object per message), with exactly the Arrow schema of
    :data:`~spark_integration.schema.SCHEMA` (Spark's Kafka-source columns), as
    PySpark requires of a Python data source that yields record batches.
    """
    if not isinstance(partition, OffsetRangePartition):
        return  # Spark's placeholder partition when there was nothing to plan
    from zkconsumer.consumer.arrow import NOT_NULL_SCHEMA

    refresh = lambda: brokers_from_zookeeper(partition.props)  # noqa: E731
    for batch in read_offset_range_batches(partition.props, partition.brokers, partition.offset_range,
                                           refresh_brokers=refresh,
                                           fail_on_data_loss=getattr(partition, "fail_on_data_loss", True),
                                           schema=NOT_NULL_SCHEMA):
        yield spark_batch(batch)


def read_rows(partition: InputPartition) -> Iterator[Row]:
    """Executor side: the rows of one input partition as tuples in :data:`~spark_integration.schema.SCHEMA`'s order.

    The same messages as :func:`read_batches`, one Python tuple each (slower;
    kept for callers that want rows).
    """
    if not isinstance(partition, OffsetRangePartition):
        return  # Spark's placeholder partition when there was nothing to plan
    r = partition.offset_range
    refresh = lambda: brokers_from_zookeeper(partition.props)  # noqa: E731
    fail_on_data_loss = getattr(partition, "fail_on_data_loss", True)
    for chunk in read_offset_range(partition.props, partition.brokers, r, refresh_brokers=refresh,
                                   fail_on_data_loss=fail_on_data_loss):
        for offset, key, value in chunk:
            yield spark_row(r.topic, r.partition, offset, key, value)


def _check_schema(schema: StructType) -> None:
    given = [(f.name, f.dataType) for f in schema.fields]
    expected = [(f.name, f.dataType) for f in SCHEMA.fields]
    if given != expected:
        raise ConfigurationError(
            "schema", f"the zkconsumer source has the fixed schema {SCHEMA.simpleString()}, not {schema.simpleString()}")


#: Offsets as Spark checkpoints them: ``{"topic": {"0": 23}}`` written; the older ``{"topic/0": 23}`` also read.
SourceOffsets = Dict[str, Any]

ViewFactory = Callable[[ConsumerConfig], GroupView]
OwnershipFactory = Callable[[ConsumerConfig], QueryOwnership]


class _Planner:
    """Driver-side state shared by the readers: the options, a lazily opened GroupView and QueryOwnership."""

    def __init__(self, options: SourceOptions, view_factory: ViewFactory,
                 ownership_factory: Optional[OwnershipFactory] = None) -> None:
        self.options = options
        self._view_factory = view_factory
        self._ownership_factory = ownership_factory
        self._view: Optional[GroupView] = None
        self._ownership: Optional[QueryOwnership] = None

    @property
    def group(self) -> str:
        return str(self.options.config.group_id)

    @property
    def view(self) -> GroupView:
        if self._view is None:
            self._view = self._view_factory(consumer_config(self.options.props))
        return self._view

    @property
    def ownership(self) -> QueryOwnership:
        if self._ownership is None:
            if self._ownership_factory is None:
                raise RuntimeError("this reader holds no partitions (batch reads commit nothing)")
            self._ownership = self._ownership_factory(consumer_config(self.options.props))
        return self._ownership

    def topic_partitions(self) -> List[TopicPartition]:
        """Every partition subscribed (or assigned); UnknownTopicError if a listed topic does not exist,
        ConfigurationError (``assign``) for an assigned partition that does not exist."""
        assign = self.options.assign
        if assign:
            exist = set(self.view.topic_partitions(sorted({t for t, _ in assign})))
            missing = [tp for tp in assign if tp not in exist]
            if missing:
                raise ConfigurationError("assign", "names partitions that do not exist: "
                                                   + ", ".join(f"{t}/{p}" for t, p in missing))
            return list(assign)
        return self.view.topic_partitions(self.options.topics, self.options.whitelist)

    def current_partitions(self) -> List[TopicPartition]:
        """Every partition that exists now: a listed topic that vanished contributes none (a data loss check)."""
        if self.options.assign:
            exist = set()
            for topic in sorted({t for t, _ in self.options.assign}):
                try:
                    exist |= set(self.view.topic_partitions((topic,)))
                except UnknownTopicError:
                    continue
            return [tp for tp in self.options.assign if tp in exist]
        if self.options.whitelist is not None:
            return self.view.topic_partitions((), self.options.whitelist)
        found: List[TopicPartition] = []
        for topic in self.options.topics:
            try:
                found += self.view.topic_partitions((topic,))
            except UnknownTopicError:
                continue
        return found

    def start_by_time(self, partitions: Sequence[TopicPartition], starts: Dict[TopicPartition, int],
                      ends: Dict[TopicPartition, int]) -> Optional[Dict[TopicPartition, int]]:
        """Start offsets per ``startingTimestamp``/``startingOffsetsByTimestamp`` (``None`` if neither is set)."""
        wanted = timestamps_wanted(self.options, partitions)
        if not wanted:
            return None
        found = self.view.offsets_before(wanted)
        positions = timestamp_positions(found, starts, ends)
        log.info("offsets before the requested times (log-segment boundaries on 0.8/0.9 brokers): %s",
                 encode_offsets(positions))
        return positions

    def input_partitions(self, ranges: Sequence[OffsetRange], keep_empty: bool) -> List[InputPartition]:
        """One input partition per range, after ``minPartitions``/``maxRecordsPerPartition`` split them (Spark's
        rule, which drops empty ranges; without either, empty ranges stay if ``keep_empty``)."""
        options = self.options
        ranges = split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
        brokers = self.view.brokers()
        fail = options.fail_on_data_loss
        return [OffsetRangePartition(options.props, brokers, r, fail) for r in ranges if keep_empty or r.count]

    def report(self, losses: Sequence[DataLoss]) -> None:
        """Raise DataLossError (``failOnDataLoss``, the default) or log a warning per loss."""
        report(self.group, losses, self.options.fail_on_data_loss, log)

    def close(self) -> None:
        try:
            if self._ownership is not None:
                self._ownership.close()
                self._ownership = None
        finally:
            if self._view is not None:
                self._view.close()
                self._view = None

    def __getstate__(self) -> Dict[str, Any]:
        return {"options": self.options, "_view_factory": self._view_factory,
                "_ownership_factory": self._ownership_factory, "_view": None, "_ownership": None}


class ZkConsumerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader of a group's topics; see the module docstring for each method's contract.

    ``view_factory`` makes the driver-side :class:`GroupView` and
    ``ownership_factory`` the :class:`QueryOwnership` (both injectable for tests).
    """

    def __init__(self, options: SourceOptions, *, view_factory: ViewFactory = GroupView,
                 ownership_factory: OwnershipFactory = QueryOwnership,
                 clock: Callable[[], float] = time.time) -> None:
        self._planner = _Planner(options.check_stream(), view_factory, ownership_factory)
        self._target: Optional[Dict[TopicPartition, int]] = None
        self._committed: Dict[TopicPartition, int] = {}
        self._available: Dict[TopicPartition, int] = {}
        self._delay: Optional[TriggerDelay] = None
        if options.min_messages_per_trigger is not None:
            self._delay = TriggerDelay(options.min_messages_per_trigger, options.max_trigger_delay_ms, clock)

    def initialOffset(self) -> SourceOffsets:
        planner = self._planner
        partitions = planner.topic_partitions()
        planner.ownership.hold(partitions)
        view = planner.view
        starts, ends = view.log_starts(partitions), view.log_ends(partitions)
        spec = planner.options.starting_offsets
        by_time = planner.start_by_time(partitions, starts, ends)
        losses: List[DataLoss] = []
        if by_time is not None:
            positions = by_time
        elif spec is None:
            positions, losses = initial_positions(view.committed(partitions), starts, ends,
                                                  planner.options.config.auto_offset_reset)
        else:
            positions, losses = starting_positions(spec, partitions, starts, ends)
        planner.report(losses)
        return encode_offsets(positions)

    def prepareForTriggerAvailableNow(self) -> None:
        view = self._planner.view
        self._target = view.log_ends(self._planner.current_partitions())
        log.info("availableNow: reading up to %s", encode_offsets(self._target))

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxOffsetsPerTrigger)``, else ``ReadMinRows(minOffsetsPerTrigger)``, else all available.

        PySpark passes one limit only: ``latestOffset`` applies the other
        option (and ``maxTriggerDelay``) itself unless Spark asks for all.
        """
        options = self._planner.options
        if options.max_messages_per_trigger:
            return ReadMaxRows(options.max_messages_per_trigger)
        if options.min_messages_per_trigger:
            return ReadMinRows(options.min_messages_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: SourceOffsets, limit: ReadLimit) -> SourceOffsets:
        planner = self._planner
        begin = decode_offsets(start)
        # Spark plans one micro-batch at a time: ``start`` is the end of a batch that has
        # completed, so it is what the group has consumed (see the module docstring).
        self._write_offsets(begin)
        current = planner.current_partitions()
        view = planner.view
        planned = plan_latest(begin, view.log_starts(current), view.log_ends(current), self._target)
        planner.report(planned.losses)
        latest = planned.latest
        self._available = dict(latest)
        new = sorted(tp for tp in latest if tp not in begin)
        if new:
            log.info("new partitions enter at their log start: %s", encode_offsets({tp: latest[tp] for tp in new}))
        if not isinstance(limit, ReadAllAvailable):
            latest = self._limit(begin, latest, planned.reset, limit)
        planner.ownership.hold(latest)  # before the next write; GroupInUseError if another query has them
        planner.ownership.keep_only(latest)
        return encode_offsets(latest)

    def _limit(self, begin: Dict[TopicPartition, int], latest: Dict[TopicPartition, int],
               reset: Any, limit: ReadLimit) -> Dict[TopicPartition, int]:
        """``latest`` held back per ``minOffsetsPerTrigger``/``maxTriggerDelay`` and cut per ``maxOffsetsPerTrigger``.

        A held-back micro-batch ends where it starts (Spark then runs none).
        ``minOffsetsPerTrigger`` never holds back under ``availableNow``, whose
        run must reach its target. Partitions moved back to their log start
        (``reset``) keep their end.
        """
        options = self._planner.options
        moving_begin = {tp: o for tp, o in begin.items() if tp not in reset}
        moving = {tp: o for tp, o in latest.items() if tp not in reset}
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else options.min_messages_per_trigger
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else options.max_messages_per_trigger
        if min_rows and self._target is None:
            gate = self._delay
            if gate is None or gate.min_messages != min_rows:
                gate = self._delay = TriggerDelay(min_rows, options.max_trigger_delay_ms)
            available = new_messages(moving_begin, moving)
            if gate.skip(available):
                log.debug("minOffsetsPerTrigger: %d new messages, fewer than %d; waiting (maxTriggerDelay %d ms)",
                          available, min_rows, options.max_trigger_delay_ms)
                return {**{tp: begin.get(tp, o) for tp, o in moving.items()}, **{tp: latest[tp] for tp in reset}}
        if max_rows:
            moving = rate_limit(max_rows, moving_begin, moving)
        return {**moving, **{tp: latest[tp] for tp in reset}}

    def reportLatestOffset(self) -> Optional[SourceOffsets]:
        """The log ends seen when the last micro-batch was planned (Spark shows them as the source's
        ``latestOffset`` in the query's progress: with ``endOffset`` they give the lag per partition,
        see :func:`source_lag`); ``None`` before the first plan."""
        return encode_offsets(self._available) if self._available else None

    def metrics(self, consumed: Optional[SourceOffsets]) -> Dict[str, str]:
        """Spark's Kafka-source lag metrics for the offsets ``consumed`` (the last micro-batch's end).

        ``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest``,
        ``avgOffsetsBehindLatest`` against the log ends seen when planning
        (PySpark 4.x has no hook to put these in the progress; see
        :func:`source_lag` for the same figures from a progress report).
        """
        if not consumed or not self._available:
            return {}
        return offsets_behind_latest(decode_offsets(consumed), self._available)

    def partitions(self, start: SourceOffsets, end: SourceOffsets) -> Sequence[InputPartition]:
        begin, finish = decode_offsets(start), decode_offsets(end)
        ranges = [OffsetRange(t, p, begin[(t, p)], until) for (t, p), until in sorted(finish.items())
                  if (t, p) in begin and until > begin[(t, p)]]  # split per minPartitions/maxRecordsPerPartition
        return self._planner.input_partitions(ranges, keep_empty=False) if ranges else []

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_batches(partition)

    def commit(self, end: SourceOffsets) -> None:
        self._write_offsets(decode_offsets(end))

    def _write_offsets(self, offsets: Dict[TopicPartition, int]) -> None:
        """Write the offsets that changed since the last write, fenced by the owner nodes this query holds."""
        changed = {tp: o for tp, o in offsets.items() if self._committed.get(tp) != o}
        if changed:
            self._planner.ownership.hold(changed)
            self._planner.ownership.commit(changed)
            self._committed.update(changed)

    def stop(self) -> None:
        self._planner.close()


class ZkConsumerBatchReader(DataSourceReader):
    """Batch read of the group's uncommitted messages (committed offsets to log end); commits nothing."""

    def __init__(self, options: SourceOptions, *, view_factory: ViewFactory = GroupView) -> None:
        self._planner = _Planner(options.check_batch(log), view_factory)

    def partitions(self) -> List[InputPartition]:
        try:
            return self._planner.input_partitions(self.plan(), keep_empty=True)
        finally:
            self._planner.close()

    def plan(self) -> List[OffsetRange]:
        """The ranges to read, one per partition, before any split (see the module docstring)."""
        planner, options = self._planner, self._planner.options
        partitions = planner.topic_partitions()
        view = planner.view
        starts, ends = view.log_starts(partitions), view.log_ends(partitions)
        begin = planner.start_by_time(partitions, starts, ends)
        if begin is None and options.starting_offsets is not None:
            begin, losses = starting_positions(options.starting_offsets, partitions, starts, ends)
            planner.report(losses)
        elif begin is None:
            # the group's uncommitted messages: a committed offset outside the log is only warned about
            begin, losses = initial_positions(view.committed(partitions), starts, ends, options.config.auto_offset_reset)
            report(planner.group, losses, False, log)
        until = ending_positions(options.ending_offsets, begin, ends)
        return plan_ranges(begin, until, options.max_messages_per_partition)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_batches(partition)


class ZkConsumerDataSource(DataSource):
    """``format("zkconsumer")``: options ``zookeeper.connect``, ``group.id``, ``topics`` or
    ``topic.whitelist``, ``startingOffsets``, ``maxOffsetsPerTrigger`` (alias
    ``max.messages.per.trigger``), ``minOffsetsPerTrigger``, ``maxTriggerDelay``,
    ``max.messages.per.partition``, ``failOnDataLoss``, and any consumer property (see the
    module docstring). Options are validated when the schema or a reader is asked for."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        SourceOptions.from_options(self.options)  # fail at load(), on the driver, for bad options
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema)
        return ZkConsumerBatchReader(SourceOptions.from_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_schema(schema)
        return ZkConsumerStreamReader(SourceOptions.from_options(self.options))


def offsets_behind_latest(consumed: Dict[TopicPartition, int], latest: Dict[TopicPartition, int]) -> Dict[str, str]:
    """Spark's Kafka-source metrics: min/max/avg over partitions of ``latest - consumed`` (``{}`` if none).

    >>> offsets_behind_latest({("t", 0): 5, ("t", 1): 9}, {("t", 0): 10, ("t", 1): 10})
    {'minOffsetsBehindLatest': '1', 'maxOffsetsBehindLatest': '5', 'avgOffsetsBehindLatest': '3.0'}
    """
    behind = [end - consumed[tp] for tp, end in latest.items() if tp in consumed]
    if not behind:
        return {}
    return {"minOffsetsBehindLatest": str(min(behind)), "maxOffsetsBehindLatest": str(max(behind)),
            "avgOffsetsBehindLatest": str(sum(behind) / len(behind))}


def _attribute(obj: Any, name: str) -> Any:
    return getattr(obj, name, None)


def source_lag(progress: Any) -> Dict[str, str]:
    """The zkconsumer source's lag in a query's progress (``query.lastProgress``, a dict or a
    ``StreamingQueryProgress``): Spark's ``min/max/avgOffsetsBehindLatest`` computed from the
    source's ``endOffset`` and ``latestOffset`` (log ends when the batch was planned). ``{}`` when
    the progress has no zkconsumer source with both."""
    if progress is None:
        return {}
    sources = progress["sources"] if isinstance(progress, dict) else progress.sources
    for source in sources:
        get: Callable[[str], Any] = source.get if isinstance(source, dict) else functools.partial(_attribute, source)
        end, latest = get("endOffset"), get("latestOffset")
        if not end or not latest:
            continue
        try:
            end_offsets = decode_offsets(json.loads(end) if isinstance(end, str) else end)
            latest_offsets = decode_offsets(json.loads(latest) if isinstance(latest, str) else latest)
        except (ValueError, TypeError, AttributeError):
            continue  # another source's offsets
        return offsets_behind_latest(end_offsets, latest_offsets)
    return {}


def register_data_source(spark: Any) -> str:
    """Register the ``zkconsumer`` source with ``spark`` (a SparkSession); returns its format name."""
    spark.dataSource.register(ZkConsumerDataSource)
    return SOURCE_NAME
