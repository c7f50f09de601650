"""zkconsumer from PySpark: three ways in, each coordinated through the group's ZooKeeper nodes.

1. :class:`KafkaStreamSource` ``(props, {topic: n})`` with
   :meth:`~KafkaStreamSource.foreach_stream` ``(sc, handler)``: one Spark task
   per stream, each a group member calling ``handler(stream)``; offsets are
   committed after the handler returns (:mod:`.streams`).
2. :func:`create_rdd` ``(sc, props, topics)``: the group's uncommitted messages
   as an RDD, one Spark partition per Kafka partition, with ``.offset_ranges``;
   :func:`commit_offset_ranges` writes them to ZooKeeper (:mod:`.rdd`).
3. :func:`register_data_source` ``(spark)``: the ``zkconsumer`` Structured
   Streaming source (:mod:`.datasource`).

From a Spark Connect client (``SparkSession.builder.remote(...)``) only the
data source works (3.): :func:`register_data_source` sends it to the server,
whose Python workers must be able to import ``spark_integration``. 1. and 2.
need the RDD API, which Connect lacks: they raise
:class:`SparkConnectUnsupportedError` (:mod:`.connect`).

Executors never share a ZooKeeper client or a connector with the driver:
everything sent to them is plain, picklable data (properties as strings,
broker addresses, offset ranges) plus the user's handler.

Module map: :mod:`.ranges` (offset ranges, pure), :mod:`.options` (validation,
pure), :mod:`.data_loss` (``failOnDataLoss`` decisions, pure),
:mod:`.group_view` (driver: ZooKeeper and log offsets), :mod:`.ownership`
(driver: one streaming query per group, fenced offset writes),
:mod:`.range_reader` (executor: fetch a range from the leader),
:mod:`.streams`, :mod:`.rdd`, :mod:`.datasource`, :mod:`.connect` (Spark
Connect checks), :mod:`.exactly_once` (results and offsets in one database
transaction), :mod:`.examples` and :mod:`.connect_server` (helpers of the
scripts in ``scripts/spark_*.py`` and of the tests).
"""

from .connect import SparkConnectUnsupportedError, is_connect_session
from .data_loss import DataLoss, DataLossError
from .datasource import (
    SCHEMA,
    SOURCE_NAME,
    OffsetRangePartition,
    ZkConsumerDataSource,
    ZkConsumerStreamReader,
    register_data_source,
    source_lag,
)
from .group_view import GroupView, LogOffsetsUnavailableError
from .options import SourceOptions
from .ownership import GroupInUseError, QueryOwnership
from .range_reader import OffsetRangeUnavailableError, RangeReader
from .ranges import OffsetRange
from .rdd import commit_offset_ranges, create_rdd, plan_offset_ranges
from .streams import BoundedStream, KafkaStreamSource, StreamResult, StreamSpec

__all__ = [
    "BoundedStream",
    "DataLoss",
    "DataLossError",
    "GroupInUseError",
    "GroupView",
    "KafkaStreamSource",
    "LogOffsetsUnavailableError",
    "OffsetRange",
    "OffsetRangePartition",
    "OffsetRangeUnavailableError",
    "QueryOwnership",
    "RangeReader",
    "SCHEMA",
    "SOURCE_NAME",
    "SourceOptions",
    "SparkConnectUnsupportedError",
    "StreamResult",
    "StreamSpec",
    "ZkConsumerDataSource",
    "ZkConsumerStreamReader",
    "commit_offset_ranges",
    "create_rdd",
    "is_connect_session",
    "plan_offset_ranges",
    "register_data_source",
    "source_lag",
]
