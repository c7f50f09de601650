"""The C writer of Fetch requests and reader of Fetch responses (issue 44) against the Python ones.

``FetchRequest.encode_frame`` and ``FetchRequest.decode_response`` use ``_speedups.fetch_request`` /
``fetch_response`` when the extension is built: the frames must be the Python encoder's byte for
byte, the parsed partitions the Python reader's, and whatever the Python side refuses must raise
the same error (type and message) either way; without the extension the Python path alone runs.
"""

from __future__ import annotations

import random
import struct
from typing import Any, List, Optional, Sequence, Tuple

import pytest
from kafka.protocol.old.fetch import FetchResponse_v0

from zkconsumer.wire import protocol as p
from zkconsumer.wire.messageset import ACCELERATED, speedups

needs_c = pytest.mark.skipif(not ACCELERATED, reason="the C extension zkconsumer.wire._speedups is not built")


def python_frame(request: p.FetchRequest, correlation_id: int, client_id: Optional[str]) -> bytes:
    """The pure-Python encoder's frame (the generic ``Request.encode_frame`` over ``encode_body``)."""
    return p.Request.encode_frame(request, correlation_id, client_id)


def outcome(call: Any) -> Tuple[str, Any]:
    try:
        return "ok", call()
    except Exception as exc:  # noqa: BLE001 - compared by type and message
        return type(exc).__name__, str(exc)


def parsed(view: memoryview) -> Tuple[str, Any]:
    """What ``FetchRequest.decode_response`` (C path if built) makes of ``view``: partitions or error."""
    return outcome(lambda: as_plain(p.FetchRequest(0, 0, []).decode_response(view).partitions))


def parsed_in_python(view: memoryview) -> Tuple[str, Any]:
    return outcome(lambda: as_plain(p.decode_fetch_response_python(view)))


def random_requests(seed: int, count: int) -> List[Tuple[p.FetchRequest, int, Optional[str]]]:
    rng = random.Random(seed)
    topics = ["a", "events", "ü-topic", "日本", "x" * 300, "", "t.1_2-3"]
    clients: List[Optional[str]] = [None, "", "c", "zkconsumer-ä", "client-日本", "y" * 1000]
    edges = [0, 1, -1, 2**31 - 1, -2**31, 2**63 - 1, -2**63, 2**62, 2**63 - 2]
    out = []
    for _ in range(count):
        parts = [p.FetchPartition(rng.choice(topics), rng.choice([0, 1, 7, 2**31 - 1, -1]),
                                  rng.choice(edges) if rng.random() < 0.5 else rng.randrange(0, 2**63),
                                  rng.choice([0, 1, 1 << 20, 2**31 - 1, -1]))
                 for _ in range(rng.randrange(0, 12))]
        request = p.FetchRequest(rng.choice([0, 1, 100, 2**31 - 1, -1]), rng.choice([0, 1, 1 << 16, 2**31 - 1]), parts)
        out.append((request, rng.choice([0, 1, 0x7FFFFFFF, -2**31, 12345]), rng.choice(clients)))
    return out


def test_request_frames_are_the_python_encoders_byte_for_byte() -> None:
    for request, cid, client in random_requests(44, 400):
        assert request.encode_frame(cid, client) == python_frame(request, cid, client)
    grouped = p.FetchRequest(100, 1, [p.FetchPartition("b", 1, 5, 9), p.FetchPartition("a", 0, 6, 9),
                                      p.FetchPartition("b", 0, 2**63 - 1, 9)])
    frame = grouped.encode_frame(3, "c")
    assert frame == python_frame(grouped, 3, "c")
    # topics in first-seen order, each topic's partitions in their order
    assert frame.index(b"\x00\x01b") < frame.index(b"\x00\x01a") and frame.count(b"\x00\x01b") == 1


@needs_c
def test_the_c_writer_writes_what_the_python_encoder_writes() -> None:
    for request, cid, client in random_requests(7, 200):
        frame = speedups.fetch_request(cid, client, request.max_wait_ms, request.min_bytes,  # type: ignore[union-attr]
                                       request.partitions)
        assert frame == python_frame(request, cid, client)


BAD_REQUESTS: List[Tuple[Any, Any, Any, Sequence[p.FetchPartition]]] = [
    (0, "c", 100, [p.FetchPartition("t", 0, 2**63, 1)]),             # offset past int64
    (0, "c", 100, [p.FetchPartition("t", 0, -2**63 - 1, 1)]),
    (0, "c", 100, [p.FetchPartition("t", 2**31, 0, 1)]),             # partition past int32
    (0, "c", 100, [p.FetchPartition("t", 0, 0, 2**31)]),             # max_bytes past int32
    (0, "c", 2**31, [p.FetchPartition("t", 0, 0, 1)]),              # max_wait past int32
    (0, "c", 100.0, [p.FetchPartition("t", 0, 0, 1)]),              # not an int
    (0, "c", 100, [p.FetchPartition("t", 0, 1.5, 1)]),               # type: ignore[arg-type]
    (0, "c", 100, [p.FetchPartition("t" * 40000, 0, 0, 1)]),         # topic too long for a string
    (0, "c" * 40000, 100, [p.FetchPartition("t", 0, 0, 1)]),         # client id too long
    (0, "c", 100, [p.FetchPartition("\udc80", 0, 0, 1)]),            # not encodable as UTF-8
    (0, "\udc80", 100, [p.FetchPartition("t", 0, 0, 1)]),
    (0, "c", 100, [p.FetchPartition(None, 0, 0, 1)]),                # type: ignore[arg-type]  # Python: a null string
    (2**31, "c", 100, [p.FetchPartition("t", 0, 0, 1)]),             # correlation id past int32
]


@pytest.mark.parametrize("cid, client, wait, parts", BAD_REQUESTS)
def test_a_request_the_c_writer_does_not_take_is_the_python_encoders_error_or_frame(
        cid: Any, client: Any, wait: Any, parts: Sequence[p.FetchPartition]) -> None:
    request = p.FetchRequest(wait, 1, parts)
    expected = outcome(lambda: python_frame(request, cid, client))
    assert expected[0] != "ok" or parts[0].topic is None
    assert outcome(lambda: request.encode_frame(cid, client)) == expected
    if speedups is not None:  # the C writer hands it to the Python encoder
        assert speedups.fetch_request(cid, client, wait, 1, parts) is None


def as_plain(parts: Sequence[p.FetchPartitionResponse]) -> List[Tuple[Any, ...]]:
    return [(type(q), q.topic, q.partition, q.error_code, q.high_watermark, type(q.message_set), q.message_set.readonly,
             bytes(q.message_set)) for q in parts]


def response_bodies(seed: int, count: int) -> List[bytes]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        topics = [(rng.choice(["t", "ü", "events", ""]),
                   [(rng.randrange(-5, 2**31), rng.choice([0, 1, 6, -1, 32767]),
                     rng.choice([-1, 0, 2**63 - 1, -2**63, rng.randrange(0, 2**40)]),
                     bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 30]))))
                    for _ in range(rng.randrange(0, 5))])
                  for _ in range(rng.randrange(0, 4))]
        out.append(FetchResponse_v0(topics=topics).encode())
    return out


def null_arrays_and_names() -> List[bytes]:
    """Hand-made bodies: a null topic array, a null topic name (reads as ""), a null partition array, trailing bytes."""
    part = struct.pack(">ihqi", 3, 0, 10, 2) + b"ab"
    return [
        struct.pack(">i", -1),
        struct.pack(">ih", 1, -1) + struct.pack(">i", 1) + part,
        struct.pack(">ih", 1, -7) + struct.pack(">i", 1) + part,
        struct.pack(">ih", 1, 1) + b"t" + struct.pack(">i", -1),
        struct.pack(">ih", 1, 1) + b"t" + struct.pack(">i", 1) + part + b"trailing bytes",
    ]


def test_parsed_partitions_are_the_python_readers() -> None:
    for body in response_bodies(44, 300) + null_arrays_and_names():
        view = memoryview(bytearray(body)).toreadonly()
        got = p.FetchRequest(0, 0, []).decode_response(view).partitions
        assert as_plain(got) == as_plain(p.decode_fetch_response_python(view))
        assert all(q.message_set.obj is view.obj for q in got)  # zero-copy views of the one buffer


def hostile_bodies() -> List[bytes]:
    """Every cut of valid bodies, negative sizes and counts, bad UTF-8, random bytes."""
    rng = random.Random(3)
    out: List[bytes] = []
    for body in response_bodies(5, 12) + null_arrays_and_names():
        out += [body[:cut] for cut in range(len(body))]
    base = FetchResponse_v0(topics=[("t", [(0, 0, 100, b"abcdef")])]).encode()
    size_at = 4 + 2 + 1 + 4 + 4 + 2 + 8
    for size in (-1, -2, -2**31, 7, 2**31 - 1):
        out.append(base[:size_at] + struct.pack(">i", size) + base[size_at + 4:])
    for count in (-2, -2**31, 2, 2**31 - 1):
        out.append(struct.pack(">i", count) + base[4:])
        out.append(base[:7] + struct.pack(">i", count) + base[11:])
    out.append(struct.pack(">ih", 1, 2) + b"\xff\xfe" + struct.pack(">i", 0))   # topic name not UTF-8
    out.append(struct.pack(">ih", 1, 2) + b"\xed\xa0" + struct.pack(">i", 0))   # a lone surrogate's first bytes
    out += [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 60))) for _ in range(300)]
    out += [struct.pack(">i", 1) + bytes(rng.randrange(256) for _ in range(rng.randrange(0, 60))) for _ in range(300)]
    return out


def test_a_hostile_body_raises_the_python_readers_error_or_parses_alike() -> None:
    refused = 0
    for body in hostile_bodies():
        view = memoryview(body)
        expected = parsed_in_python(view)
        got = parsed(view)
        assert got == expected, body.hex()
        if expected[0] != "ok":
            refused += 1
            assert expected[0] in ("ProtocolDecodeError", "UnicodeDecodeError"), expected
            if speedups is not None:  # the C reader hands it to the Python one
                assert speedups.fetch_response(view, p.FetchPartitionResponse) is None
    assert refused > 100


def test_without_the_extension_the_python_paths_give_the_same_bytes_and_partitions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    requests = random_requests(11, 100)
    bodies = [memoryview(b) for b in response_bodies(11, 100) + hostile_bodies()[:400]]
    with_c = [r.encode_frame(cid, client) for r, cid, client in requests]
    with_c_parsed = [parsed(b) for b in bodies]
    monkeypatch.setattr(p, "_fetch_request", None)
    monkeypatch.setattr(p, "_fetch_response", None)
    assert [r.encode_frame(cid, client) for r, cid, client in requests] == with_c
    assert [parsed(b) for b in bodies] == with_c_parsed


@needs_c
def test_the_c_paths_are_the_ones_used_when_the_extension_is_built() -> None:
    assert p._fetch_request is speedups.fetch_request  # type: ignore[union-attr]
    assert p._fetch_response is speedups.fetch_response  # type: ignore[union-attr]
    with pytest.raises(TypeError):
        speedups.fetch_response(b"", dict)  # type: ignore[union-attr]


class Bare:
    """A partition without ``offset`` and ``max_bytes``."""

    topic = "t"
    partition = 0


@pytest.mark.parametrize("parts", [
    lambda: [Bare()],
    lambda: [p.FetchPartition("t", 0, 5, 9), Bare()],
    lambda: iter([p.FetchPartition("t", 0, 5, 9), p.FetchPartition("u", 1, 6, 9)]),
    lambda: 42,
], ids=["missing-attributes", "missing-after-a-good-one", "an-iterator", "not-iterable"])
def test_partitions_of_another_shape_give_the_python_encoders_frame_or_error(parts: Any) -> None:
    expected = outcome(lambda: python_frame(p.FetchRequest(100, 1, parts()), 1, "c"))
    assert outcome(lambda: p.FetchRequest(100, 1, parts()).encode_frame(1, "c")) == expected
