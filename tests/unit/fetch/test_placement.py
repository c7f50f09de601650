"""zkconsumer.fetch.placement: a partition's position placed per auto.offset.reset, within a deadline."""

from __future__ import annotations

import types
from typing import List, Optional, Tuple

from zkconsumer.errors import BrokerUnavailableError
from zkconsumer.fetch.handoff import ChunkQueue, PartitionTopicInfo
from zkconsumer.fetch.placement import place_offset
from zkconsumer.wire.protocol import EARLIEST_TIME, LATEST_TIME


class OffsetsConnection:
    """Answers ListOffsets with ``answer`` (an offset, or an exception to raise); records each call."""

    def __init__(self, answer: object) -> None:
        self.answer = answer
        self.calls: List[Tuple[int, Optional[int]]] = []

    def list_offsets(self, topic: str, partition: int, time: int, timeout_ms: Optional[int] = None) -> int:
        self.calls.append((time, timeout_ms))
        if isinstance(self.answer, BaseException):
            raise self.answer
        assert isinstance(self.answer, int)
        return self.answer


def timed_out() -> BrokerUnavailableError:
    error = BrokerUnavailableError("broker b1:9001 did not answer within 40 ms")
    error.timed_out = True
    return error


def info_at(offset: int) -> PartitionTopicInfo:
    return PartitionTopicInfo("t", 0, ChunkQueue(1), offset, 1 << 20)


def config(reset: str) -> types.SimpleNamespace:
    return types.SimpleNamespace(auto_offset_reset=reset)


def test_a_partition_without_a_position_starts_at_the_earliest_or_latest_offset() -> None:
    for reset, time, offset in (("smallest", EARLIEST_TIME, 7), ("largest", LATEST_TIME, 42)):
        info, conn = info_at(-1), OffsetsConnection(offset)
        assert place_offset(conn, info, -1, config(reset), "f") is True  # type: ignore[arg-type]
        assert conn.calls == [(time, None)] and (info.fetched_offset, info.consumed_offset) == (offset, offset)


def test_a_position_that_moved_meanwhile_is_left_alone_without_a_lookup() -> None:
    info, conn = info_at(10), OffsetsConnection(0)
    assert place_offset(conn, info, 5, config("smallest"), "f") is True  # type: ignore[arg-type]
    assert conn.calls == [] and info.fetched_offset == 10


def test_a_failed_lookup_leaves_the_position_and_asks_for_the_leader_again() -> None:
    info = info_at(99)
    conn = OffsetsConnection(BrokerUnavailableError("broker b1:9001 unreachable"))
    assert place_offset(conn, info, 99, config("smallest"), "f") is False  # type: ignore[arg-type]
    assert info.fetched_offset == 99


def test_a_lookup_timed_out_at_a_consumers_deadline_is_tried_again_later_not_a_failure() -> None:
    info, conn = info_at(-1), OffsetsConnection(timed_out())
    assert place_offset(conn, info, -1, config("largest"), "f", timeout_ms=40) is None  # type: ignore[arg-type]
    assert conn.calls == [(LATEST_TIME, 40)] and info.fetched_offset == -1
    # without a deadline of its own (the fetcher thread's round), a timeout is socket.timeout.ms: a failure
    assert place_offset(conn, info, -1, config("largest"), "f") is False  # type: ignore[arg-type]
