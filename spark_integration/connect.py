"""Spark Connect: what works through a remote session, and a clear error for what cannot.

A Spark Connect client (``SparkSession.builder.remote("sc://host:port")``)
has the DataFrame API but no ``SparkContext`` and no RDDs: its plans run on the
Connect server. So, from a Connect session:

* the ``zkconsumer`` data source works: :func:`~spark_integration.register_data_source`
  sends the source class to the server (``spark.dataSource.register``), whose
  Python workers run it; they must be able to import ``spark_integration`` and
  ``zkconsumer`` (install the package where the server runs, or put the
  checkout on the server's ``PYTHONPATH``);
* :meth:`~spark_integration.KafkaStreamSource.foreach_stream` and
  :func:`~spark_integration.create_rdd` need the RDD API and raise
  :class:`SparkConnectUnsupportedError` (naming the alternative) instead of
  an ``AttributeError`` from deep inside PySpark.

:func:`spark_context` is the gate those two functions pass their first argument
through::

    >>> spark_context(object(), "create_rdd")
    Traceback (most recent call last):
    ...
    TypeError: create_rdd needs a SparkContext (or a classic SparkSession), not object
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zkconsumer.errors import ZkConsumerError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import SparkContext

__all__ = ["SparkConnectUnsupportedError", "is_connect_session", "spark_context"]


class SparkConnectUnsupportedError(ZkConsumerError, TypeError):
    """An RDD-based API was called with a Spark Connect session, which has no RDD API.

    Not retriable: the same call fails again. ``api`` names the function
    called. Use the ``zkconsumer`` data source instead
    (``spark.readStream.format("zkconsumer")``), or a classic session
    (``SparkSession.builder.master(...)``) and its ``sparkContext``.
    """

    retriable = False

    def __init__(self, api: str) -> None:
        self.api = api
        super().__init__(
            f"{api} needs Spark's RDD API, which Spark Connect does not offer (got a Spark Connect session). "
            f"From Spark Connect, read with the zkconsumer data source instead: "
            f"register_data_source(spark); spark.readStream.format(\"zkconsumer\").option(\"zookeeper.connect\", ...)"
            f".option(\"group.id\", ...).option(\"topics\", ...).load() (or spark.read for a batch). "
            f"To use {api}, create a classic session (SparkSession.builder.master(...)) and pass its sparkContext."
        )


def is_connect_session(obj: Any) -> bool:
    """Whether ``obj`` is a Spark Connect ``SparkSession`` (or an object of the Connect client, e.g. its DataFrame).

    Decided by the class's module (``pyspark.sql.connect...``), so PySpark's
    Connect client need not be importable to ask.
    """
    module = type(obj).__module__ or ""
    return module == "pyspark.sql.connect" or module.startswith("pyspark.sql.connect.")


def spark_context(obj: Any, api: str) -> "SparkContext":
    """The ``SparkContext`` to run ``api`` on, from a SparkContext or a classic SparkSession.

    Raises :class:`SparkConnectUnsupportedError` for a Spark Connect session and
    ``TypeError`` for anything else that is neither.
    """
    if is_connect_session(obj):
        raise SparkConnectUnsupportedError(api)
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if isinstance(obj, SparkContext):
        return obj
    if isinstance(obj, SparkSession):
        return obj.sparkContext
    raise TypeError(f"{api} needs a SparkContext (or a classic SparkSession), not {type(obj).__name__}")
