"""zkconsumer from PySpark: three ways in, each coordinated through the group's ZooKeeper nodes.

1. :class:`KafkaStreamSource` ``(props, {topic: n})`` with
   :meth:`~KafkaStreamSource.foreach_stream` ``(sc, handler)``: one Spark task
   per stream, each a group member calling ``handler(stream)``; offsets are
   committed after the handler returns (:mod:`.streams`).
2. :func:`create_rdd` ``(sc, props, topics)``: the group's uncommitted messages
   as an RDD, one Spark partition per Kafka partition, with ``.offset_ranges``;
   :func:`commit_offset_ranges` writes them to ZooKeeper, Kafka or both, per
   ``offsets.storage`` and ``dual.commit.enabled`` (:mod:`.rdd`).
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
:mod:`.group_view` (driver: committed offsets in ZooKeeper and/or Kafka, log offsets), :mod:`.ownership`
(driver: one streaming query per group, fenced offset writes),
:mod:`.range_reader` (executor: fetch a range from the leader),
:mod:`.streams`, :mod:`.rdd`, :mod:`.datasource`, :mod:`.connect` (Spark
Connect checks), :mod:`.exactly_once` (results and offsets in one database
transaction), :mod:`.testing` and :mod:`.connect_server` (helpers of the
scripts in ``examples/spark_*.py`` and of the tests).
"""

import importlib.util as _importlib_util

#: What zkconsumer's ``spark`` extra brings (setup.cfg) and this package cannot work without,
#: each with its requirement there (tests/unit/test_install_hints.py checks they agree).
_SPARK_EXTRA_MODULES = {"pyspark": "pyspark>=4.0,<5", "pyarrow": "pyarrow>=14"}
_missing = [name for name in _SPARK_EXTRA_MODULES if _importlib_util.find_spec(name) is None]
if _missing:
    raise ImportError(
        f"spark_integration needs {' and '.join(_missing)}, which zkconsumer's 'spark' extra installs: "
        "pip install " + " ".join(f"'{_SPARK_EXTRA_MODULES[name]}'" for name in _missing),
        name=_missing[0],
    )

from .connect import SparkConnectUnsupportedError, is_connect_session  # noqa: E402
from .data_loss import DataLossError  # noqa: E402
from .datasource import ZkConsumerDataSource, register_data_source, source_lag  # noqa: E402
from .group_view import LogOffsetsUnavailableError  # noqa: E402
from .ownership import GroupInUseError  # noqa: E402
from .range_reader import OffsetRangeUnavailableError  # noqa: E402
from .ranges import OffsetRange  # noqa: E402
from .rdd import commit_offset_ranges, create_rdd  # noqa: E402
from .streams import KafkaStreamSource, StreamResult  # noqa: E402

#: The documented API (docs: "API reference"); everything else is imported from the module that defines it.
__all__ = [
    "DataLossError",
    "GroupInUseError",
    "KafkaStreamSource",
    "LogOffsetsUnavailableError",
    "OffsetRange",
    "OffsetRangeUnavailableError",
    "SparkConnectUnsupportedError",
    "StreamResult",
    "ZkConsumerDataSource",
    "commit_offset_ranges",
    "create_rdd",
    "is_connect_session",
    "register_data_source",
    "source_lag",
]
