"""spark_integration.streams: the bounded stream, the start-up barrier and the source's validation (no cluster)."""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Union

import pytest
from pyspark import cloudpickle

from spark_integration.streams import (
    BoundedStream,
    KafkaStreamSource,
    StreamSpec,
    ownership_settled,
    wait_for_peers,
    wave_size,
)
from zkconsumer import ConfigurationError, ConsumerTimeoutError, MessageAndMetadata
from zkconsumer.zookeeper.zkformat import Registration

PROPS = {"zookeeper.connect": "zk:2181", "group.id": "g", "consumer.timeout.ms": 500}

Item = Union[MessageAndMetadata, type]


class FakeStream:
    """Stands in for a KafkaStream: one iterator over messages, ``ConsumerTimeoutError`` markers and an end."""

    def __init__(self, items: List[Item]) -> None:
        self.thread_id = "g_c-0"
        self.pulled = 0
        self._iterator = self._run(items)

    def _run(self, items: List[Item]) -> Iterator[MessageAndMetadata]:
        for item in items:
            self.pulled += 1
            if item is ConsumerTimeoutError:
                raise ConsumerTimeoutError("idle")  # ends this generator, as a real timeout would end a for loop
            yield item  # type: ignore[misc]

    def __iter__(self) -> Iterator[MessageAndMetadata]:
        return self._iterator


def msg(partition: int, offset: int) -> MessageAndMetadata:
    return MessageAndMetadata("t", partition, offset, None, f"{partition}-{offset}".encode())


# --------------------------------------------------------------------------- BoundedStream


def test_bounded_stream_ends_when_idle_instead_of_raising() -> None:
    stream = BoundedStream(FakeStream([msg(0, 0), msg(1, 5), ConsumerTimeoutError, msg(0, 1)]), "t", "g_c")
    assert [m.offset for m in stream] == [0, 5]
    assert stream.ended == "idle" and stream.count == 2
    assert stream.positions == {("t", 0): 1, ("t", 1): 6}
    assert list(stream) == []  # ended for good


def test_bounded_stream_stops_at_max_messages_without_pulling_one_more() -> None:
    fake = FakeStream([msg(0, i) for i in range(10)])
    stream = BoundedStream(fake, "t", "g_c", max_messages=3)
    assert [m.offset for m in stream] == [0, 1, 2]
    assert stream.ended == "max_messages"
    assert fake.pulled == 3  # the 4th message stays uncommitted in Kafka, not lost in our hands


def test_bounded_stream_can_be_resumed_after_break_and_ends_on_shutdown() -> None:
    stream = BoundedStream(FakeStream([msg(0, 0), msg(0, 1), msg(0, 2)]), "t", "g_c")
    for _ in stream:
        break
    assert stream.ended is None and stream.count == 1
    assert [m.offset for m in stream] == [1, 2]
    assert stream.ended == "shutdown" and stream.positions == {("t", 0): 3}
    assert stream.thread_id == "g_c-0"


# --------------------------------------------------------------------------- start-up barrier


@pytest.mark.parametrize(
    "tasks, slots, expected",
    [(2, 2, [2, 2]), (4, 2, [2, 2, 2, 2]), (3, 2, [2, 2, 1]), (1, 8, [1]), (5, 1, [1] * 5), (3, 0, [1, 1, 1])],
)
def test_wave_size(tasks: int, slots: int, expected: List[int]) -> None:
    assert [wave_size(i, tasks, slots) for i in range(tasks)] == expected


def reg(subscription: Dict[str, int], pattern: str = "static") -> Registration:
    return Registration(subscription, pattern, None, 1)


def test_ownership_settled_needs_every_partition_owned_by_current_threads() -> None:
    members = {"a": reg({"t": 1}), "b": reg({"t": 1})}
    assert ownership_settled(members, "t", [0, 1, 2, 3], {0: "a-0", 1: "a-0", 2: "b-0", 3: "b-0"})
    assert not ownership_settled(members, "t", [0, 1, 2, 3], {0: "a-0", 1: "a-0", 2: "a-0", 3: "a-0"})  # b not in yet
    assert not ownership_settled(members, "t", [0, 1, 2, 3], {0: "a-0", 1: "a-0"})  # released, not yet claimed
    assert not ownership_settled(members, "t", [0, 1], {0: "a-0", 1: "gone-0"})  # a member that left
    assert not ownership_settled({}, "t", [0], {})


def test_ownership_settled_with_more_threads_than_partitions_and_multi_stream_members() -> None:
    members = {"a": reg({"t": 2}), "b": reg({"t": 1, "other": 3}), "c": reg({"other": 1})}
    assert ownership_settled(members, "t", [0, 1], {0: "a-0", 1: "a-1"})  # 3 threads, 2 partitions
    assert not ownership_settled(members, "t", [0, 1], {0: "a-0", 1: "a-0"})
    assert not ownership_settled(members, "t", [0, 1], {0: "a-0", 1: "c-0"})  # c does not consume t


def test_ownership_settled_counts_wildcard_members() -> None:
    members = {"a": reg({"t": 1}), "w": reg({"t.*": 1}, "white_list"), "x": reg({"t": 1}, "black_list")}
    assert ownership_settled(members, "t", [0, 1], {0: "a-0", 1: "w-0"})
    assert not ownership_settled(members, "t", [0, 1], {0: "a-0", 1: "x-0"})


class FakeGroup:
    """The three reads wait_for_peers makes, scripted per poll."""

    consumer_id = "a"

    def __init__(self, polls: List[Dict[str, object]]) -> None:
        self._polls = polls
        self._i = -1

    def members(self, fresh: bool = False) -> Dict[str, Registration]:
        self._i = min(self._i + 1, len(self._polls) - 1)
        return self._polls[self._i]["members"]  # type: ignore[return-value]

    def partitions_for_topics(self, topics: List[str]) -> Dict[str, List[int]]:
        return {"t": [0, 1]}

    def owners(self, topic: str) -> Dict[int, str]:
        return self._polls[self._i]["owners"]  # type: ignore[return-value]


def test_wait_for_peers_returns_once_the_expected_members_settled() -> None:
    one = {"a": reg({"t": 1})}
    two = {"a": reg({"t": 1}), "b": reg({"t": 1})}
    group = FakeGroup([
        {"members": one, "owners": {0: "a-0", 1: "a-0"}},
        {"members": two, "owners": {0: "a-0", 1: "a-0"}},
        {"members": two, "owners": {0: "a-0", 1: "b-0"}},
    ])
    now = [0.0]
    sleeps: List[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        now[0] += s

    assert wait_for_peers(group, "t", 2, 10.0, sleep=sleep, clock=lambda: now[0]) is True  # type: ignore[arg-type]
    assert len(sleeps) == 2


def test_wait_for_peers_gives_up_after_the_timeout() -> None:
    group = FakeGroup([{"members": {"a": reg({"t": 1})}, "owners": {0: "a-0", 1: "a-0"}}])
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    assert wait_for_peers(group, "t", 2, 1.0, sleep=sleep, clock=lambda: now[0]) is False  # type: ignore[arg-type]
    assert 1.0 <= now[0] < 1.2


# --------------------------------------------------------------------------- the source


def test_source_plans_one_stream_spec_per_stream_in_topic_order() -> None:
    source = KafkaStreamSource(PROPS, {"b": 1, "a": 2})
    assert source.num_streams == 3
    assert source.specs == (StreamSpec("a", 0), StreamSpec("a", 1), StreamSpec("b", 0))
    assert source.props["consumer.timeout.ms"] == "500"


@pytest.mark.parametrize(
    "props, counts, max_messages",
    [
        (PROPS, {}, None),
        (PROPS, {"t": 0}, None),
        (PROPS, {"t": True}, None),
        (PROPS, {"t": "2"}, None),
        ({**PROPS, "auto.commit.enable": "true"}, {"t": 1}, None),
        ({"zookeeper.connect": "zk:2181", "group.id": "g"}, {"t": 1}, None),  # would never end
        ({**PROPS, "no.such.property": 1}, {"t": 1}, None),
    ],
)
def test_source_validates_on_the_driver(props, counts, max_messages: Optional[int]) -> None:
    with pytest.raises(ConfigurationError):
        KafkaStreamSource(props, counts, max_messages=max_messages)


def test_partition_handler_is_picklable_and_rejects_non_callables() -> None:
    source = KafkaStreamSource(PROPS, {"t": 2}, max_messages=5)
    task = source.partition_handler(len, concurrency=2)
    clone = cloudpickle.loads(cloudpickle.dumps(task))
    assert clone == task
    with pytest.raises(TypeError):
        source.partition_handler("not callable")  # type: ignore[arg-type]
