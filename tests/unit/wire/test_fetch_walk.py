"""A fetcher's walked Fetch request (issue 44) against the reference: ``FetchRequest`` and ``walk_partitions``.

``WalkedFetchRequest`` writes ``FetchRequest``'s frame for a fetcher's ``requested`` dict, and reads
its response straight into a ``FetchWalk`` (``_speedups.fetch_walk`` when the extension is built):
the frame must be the Python encoder's byte for byte, the walk what ``walk_partitions`` makes of the
Python reader's partitions (rows, sizes, the high watermarks set on the states), and a body the
Python reader refuses must raise its error either way.
"""

from __future__ import annotations

import random
from typing import Any, Dict, List, Tuple

import pytest
from kafka.protocol.old.fetch import FetchResponse_v0

from zkconsumer.wire import fetch_walk as w
from zkconsumer.wire import protocol as p
from zkconsumer.wire.messageset import speedups

from .test_fetch_speedups import hostile_bodies, needs_c, null_arrays_and_names, outcome, python_frame, response_bodies


class State:
    """A fetcher's partition state, as far as the walk goes: a writable ``high_watermark``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.high_watermark = -1

    def __repr__(self) -> str:
        return f"State({self.name}, hw={self.high_watermark})"


def requested_for(body: bytes, rng: random.Random) -> Dict[Tuple[str, int], Tuple[State, int]]:
    """Some of the body's partitions (and some it does not have) as a fetcher's requested dict."""
    out: Dict[Tuple[str, int], Tuple[State, int]] = {}
    try:
        parts = p.decode_fetch_response_python(memoryview(body))
    except Exception:  # noqa: BLE001 - a refused body: ask for whatever
        parts = []
    for q in parts:
        if rng.random() < 0.8:
            out[(q.topic, q.partition)] = (State(f"{q.topic}-{q.partition}"), rng.randrange(0, 1 << 40))
    for k in range(rng.randrange(0, 3)):
        out[("absent", k)] = (State(f"absent-{k}"), k)
    return out


def walk_outcome(body: bytes, requested: Dict[Any, Tuple[State, int]], in_python: bool) -> Tuple[str, Any]:
    """The walk (or the error) of ``body``, with the states' high watermarks after it."""
    states = {tp: State(entry[0].name) for tp, entry in requested.items()}
    fresh = {tp: (states[tp], offset) for tp, (_, offset) in requested.items()}
    view = memoryview(bytearray(body)).toreadonly()

    def run() -> Any:
        if in_python:
            walked = w.walk_partitions(p.decode_fetch_response_python(view), fresh)
        else:
            walked = w.WalkedFetchRequest(100, 1, 1 << 20, fresh).decode_response(view)
        rows = [(st.name, offset, q.topic, q.partition, q.error_code, q.high_watermark, type(q), q.message_set.readonly,
                 bytes(q.message_set)) for st, offset, q in walked.rows]
        return walked.size, walked.largest, rows

    got = outcome(run)
    if got[0] != "ok":
        return got
    return "ok", (got[1], sorted((st.name, st.high_watermark) for st in states.values()))


def test_the_walk_is_the_reference_walk_of_the_python_readers_partitions() -> None:
    rng = random.Random(44)
    bodies = response_bodies(44, 300) + null_arrays_and_names()
    walked_rows = 0
    for body in bodies:
        requested = requested_for(body, rng)
        got = walk_outcome(body, requested, in_python=False)
        assert got == walk_outcome(body, requested, in_python=True), body.hex()
        walked_rows += len(got[1][0][2])
    assert walked_rows > 100


def test_an_empty_partition_without_an_error_only_has_its_high_watermark_set() -> None:
    body = FetchResponse_v0(topics=[("t", [(0, 0, 17, b""), (1, 0, -1, b""), (2, 3, 40, b""), (3, 0, 9, b"abc")]),
                                    ("u", [(0, 0, 5, b"")])]).encode()
    states = {tp: State(str(tp)) for tp in [("t", 0), ("t", 1), ("t", 2), ("t", 3)]}
    requested = {tp: (st, 100 + tp[1]) for tp, st in states.items()}  # ("u", 0) not asked for
    walked = w.WalkedFetchRequest(100, 1, 1 << 20, requested).decode_response(memoryview(body))
    assert walked.size == 3 and walked.largest == 3
    assert [(st, offset, q.partition, q.error_code) for st, offset, q in walked.rows] == [
        (states[("t", 2)], 102, 2, 3), (states[("t", 3)], 103, 3, 0)]
    assert bytes(walked.rows[1][2].message_set) == b"abc"
    assert [st.high_watermark for st in states.values()] == [17, -1, -1, -1]  # the rows' are the fetcher's to note


def test_a_body_the_python_reader_refuses_raises_its_error() -> None:
    rng = random.Random(9)
    refused = 0
    for body in hostile_bodies():
        requested = requested_for(body, rng)
        expected = walk_outcome(body, requested, in_python=True)
        assert walk_outcome(body, requested, in_python=False) == expected, body.hex()
        if expected[0] != "ok":
            refused += 1
            if speedups is not None:
                assert speedups.fetch_walk(memoryview(body), p.FetchPartitionResponse, requested) is None
    assert refused > 100


def requested_of(parts: List[p.FetchPartition]) -> Dict[Tuple[str, int], Tuple[State, int]]:
    return {(q.topic, q.partition): (State(""), q.offset) for q in parts}


def test_the_frame_is_the_python_encoders_byte_for_byte() -> None:
    rng = random.Random(5)
    topics = ["a", "events", "ü-topic", "", "t.1_2-3"]
    for _ in range(300):
        max_bytes = rng.choice([0, 1, 1 << 20, 2**31 - 1, -1])
        parts = [p.FetchPartition(rng.choice(topics), rng.randrange(0, 8), rng.choice([0, 1, 2**63 - 1, -2**63,
                                                                                          rng.randrange(0, 2**62)]),
                                  max_bytes) for _ in range(rng.randrange(0, 10))]
        requested = requested_of(parts)
        parts = [p.FetchPartition(t, k, offset, max_bytes) for (t, k), (_, offset) in requested.items()]
        request = w.WalkedFetchRequest(rng.choice([0, 100]), rng.choice([1, 1 << 16]), max_bytes, requested)
        cid, client = rng.choice([0, 7, 2**31 - 1]), rng.choice([None, "c", "zkconsumer-ä"])
        expected = python_frame(p.FetchRequest(request.max_wait_ms, request.min_bytes, parts), cid, client)
        assert request.encode_frame(cid, client) == expected
        assert request.partitions() == parts


@pytest.mark.parametrize("requested, max_bytes", [
    ({("t", 0): (State(""), 2**63)}, 1),          # offset past int64
    ({("t", 2**31): (State(""), 0)}, 1),          # partition past int32
    ({("t", 0): (State(""), 0)}, 2**31),          # max_bytes past int32
    ({("t" * 40000, 0): (State(""), 0)}, 1),      # topic too long for a string
    ({("\udc80", 0): (State(""), 0)}, 1),         # not encodable as UTF-8
    ({("t", 0): (State(""), 1.5)}, 1),            # not an int
], ids=["offset", "partition", "max-bytes", "topic-length", "topic-utf8", "not-an-int"])
def test_a_request_the_c_writer_does_not_take_raises_the_python_encoders_error(requested: Any, max_bytes: int) -> None:
    request = w.WalkedFetchRequest(100, 1, max_bytes, requested)
    expected = outcome(lambda: python_frame(p.FetchRequest(100, 1, request.partitions()), 1, "c"))
    assert expected[0] != "ok"
    assert outcome(lambda: request.encode_frame(1, "c")) == expected
    if speedups is not None:
        assert speedups.fetch_request(1, "c", 100, 1, requested, max_bytes) is None


def test_without_the_extension_the_python_paths_give_the_same_frames_and_walks(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(12)
    bodies = response_bodies(12, 100) + hostile_bodies()[:300]
    cases = [(body, requested_for(body, rng)) for body in bodies]
    requests = [w.WalkedFetchRequest(100, 1, 1 << 20, requested_of([p.FetchPartition("t", k, k * 3, 1)
                                                                     for k in range(n)])) for n in range(8)]
    with_c = ([walk_outcome(body, requested, in_python=False) for body, requested in cases],
              [r.encode_frame(1, "c") for r in requests])
    monkeypatch.setattr(w, "_fetch_walk", None)
    monkeypatch.setattr(p, "_fetch_request", None)
    monkeypatch.setattr(p, "_fetch_response", None)
    assert ([walk_outcome(body, requested, in_python=False) for body, requested in cases],
            [r.encode_frame(1, "c") for r in requests]) == with_c


@needs_c
def test_the_c_walk_is_the_one_used_when_the_extension_is_built() -> None:
    assert w._fetch_walk is speedups.fetch_walk  # type: ignore[union-attr]
    assert p._fetch_request is speedups.fetch_request  # type: ignore[union-attr]
    with pytest.raises(TypeError):
        speedups.fetch_walk(b"", p.FetchPartitionResponse, [])  # type: ignore[union-attr,arg-type]
    body = FetchResponse_v0(topics=[("t", [(0, 0, 17, b"x")])]).encode()
    with pytest.raises(TypeError, match="requested values"):
        speedups.fetch_walk(memoryview(body), p.FetchPartitionResponse, {("t", 0): "not a pair"})  # type: ignore
