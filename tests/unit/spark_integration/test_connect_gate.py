"""spark_integration.connect: which sessions the RDD-based APIs accept (pure; no Spark started)."""

from __future__ import annotations

import pytest

from spark_integration import KafkaStreamSource, SparkConnectUnsupportedError, create_rdd, is_connect_session
from spark_integration.connect import spark_context
from spark_integration.exactly_once import Batch, create_rdd_for_ranges
from spark_integration.ranges import OffsetRange
from zkconsumer import ZkConsumerError


def _connect_like(module: str) -> object:
    """An object whose class lives in ``module`` (how a Spark Connect session is recognised)."""
    cls = type("SparkSession", (), {"__module__": module})
    return cls()


PROPS = {"zookeeper.connect": "127.0.0.1:1", "group.id": "g", "consumer.timeout.ms": 100}


def test_connect_sessions_are_recognised_by_their_module() -> None:
    assert is_connect_session(_connect_like("pyspark.sql.connect.session"))
    assert is_connect_session(_connect_like("pyspark.sql.connect"))
    assert not is_connect_session(_connect_like("pyspark.sql.session"))
    assert not is_connect_session(_connect_like("pyspark.sql.connectors"))


@pytest.mark.parametrize("call, api", [
    (lambda s: KafkaStreamSource(PROPS, {"t": 1}).foreach_stream(s, lambda stream: None), "foreach_stream"),
    (lambda s: create_rdd(s, PROPS, ["t"]), "create_rdd"),
    (lambda s: create_rdd_for_ranges(s, PROPS, [OffsetRange("t", 0, 0, 1)]), "create_rdd_for_ranges"),
])
def test_rdd_apis_raise_spark_connect_unsupported_before_touching_zookeeper(call, api: str) -> None:
    with pytest.raises(SparkConnectUnsupportedError) as raised:
        call(_connect_like("pyspark.sql.connect.session"))  # ZooKeeper at 127.0.0.1:1 is never contacted
    assert isinstance(raised.value, ZkConsumerError) and not raised.value.retriable
    assert raised.value.api == api and "Spark Connect" in str(raised.value) and "zkconsumer" in str(raised.value)


def test_anything_else_is_a_type_error_naming_what_was_passed() -> None:
    with pytest.raises(TypeError, match="needs a SparkContext.*not str"):
        spark_context("sc", "create_rdd")


def test_batch_changes_offsets_until_caught_up() -> None:
    r0, r1 = OffsetRange("t", 0, 4, 4), OffsetRange("t", 1, 2, 2)
    assert not Batch("g", (r0, r1), {("t", 0): 4, ("t", 1): 2}).changes_offsets
    assert Batch("g", (r0, r1), {("t", 0): 4}).changes_offsets  # partition 1 has no stored offset yet
    moving = Batch("g", (OffsetRange("t", 0, 4, 9), r1), {("t", 0): 4, ("t", 1): 2})
    assert moving.changes_offsets and moving.count == 5


def test_worked_example_in_the_docstring_holds() -> None:
    import doctest

    import spark_integration.connect

    result = doctest.testmod(spark_integration.connect)
    assert result.failed == 0 and result.attempted > 0
