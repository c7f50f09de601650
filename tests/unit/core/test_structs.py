"""zkconsumer.structs: the value types every part of the consumer shares."""

from __future__ import annotations

import dataclasses
import pickle
from typing import List

import pytest

from zkconsumer import structs
from zkconsumer.structs import INVALID_OFFSET, Broker, TopicPartition


def test_a_topic_partition_is_a_plain_tuple() -> None:
    """``(topic, partition)`` as the stores, fetchers and commits key it: ordered by topic, then partition."""
    tps: List[TopicPartition] = [("b", 0), ("a", 10), ("a", 2)]
    assert sorted(tps) == [("a", 2), ("a", 10), ("b", 0)]


def test_the_invalid_offset_is_kafkas() -> None:
    assert INVALID_OFFSET == -1


def test_a_broker_is_an_immutable_value() -> None:
    broker = Broker(1, "127.0.0.1", 9092)
    assert (broker.id, broker.host, broker.port) == (1, "127.0.0.1", 9092)
    assert broker == Broker(1, "127.0.0.1", 9092) and broker != Broker(1, "127.0.0.1", 9093)
    assert {broker: "leader"}[Broker(1, "127.0.0.1", 9092)] == "leader"
    assert pickle.loads(pickle.dumps(broker)) == broker
    with pytest.raises(dataclasses.FrozenInstanceError):
        broker.port = 9093  # type: ignore[misc]


def test_the_module_exports_its_three_names() -> None:
    assert sorted(structs.__all__) == ["Broker", "INVALID_OFFSET", "TopicPartition"]
