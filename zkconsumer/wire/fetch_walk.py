"""A fetcher's Fetch request whose response is walked as it is read (issue 44).

A fetcher fetches every partition it holds in each request, and at a live stream's rates most of
them come back empty: at a thousand messages a second over six partitions, one has a message and
five only a high watermark. :class:`WalkedFetchRequest` is :class:`~zkconsumer.wire.protocol.FetchRequest`
(the same frame, byte for byte) whose response is decoded straight into what the fetcher acts on,
a :class:`FetchWalk`: with the C extension, one pass in C that builds an item only for a partition
with data or an error (``_speedups.fetch_walk``); without it, or for a body the C reader refuses,
the Python decoder (which raises its own error for a malformed body) and :func:`walk_partitions`,
the reference the C walk follows.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from .messageset import speedups
from .protocol import API_FETCH, FetchPartition, FetchPartitionResponse, FetchRequest, Request, native_fetch_frame

__all__ = ["FetchWalk", "WalkedFetchRequest", "walk_partitions"]

#: ``(topic, partition) -> (state, offset)``: the fetcher's state of each partition asked for, and the
#: offset it was asked from. The state has a writable ``high_watermark``.
Requested = Dict[Tuple[str, int], Tuple[Any, int]]


class FetchWalk(NamedTuple):
    """A Fetch response as a fetcher acts on it."""

    #: Message set bytes over every partition of the response (requested or not).
    size: int
    #: Bytes of the largest partition's message set.
    largest: int
    #: ``(state, offset, partition)`` per requested partition with a message set or an error, in the response's
    #: order. A requested partition that came back empty without an error is not here: its high watermark,
    #: if not negative, was set as its state's ``high_watermark``.
    rows: List[Tuple[Any, int, FetchPartitionResponse]]


def walk_partitions(partitions: Sequence[FetchPartitionResponse], requested: Requested) -> FetchWalk:
    """The :class:`FetchWalk` of a decoded response (the reference of ``_speedups.fetch_walk``)."""
    size = largest = 0
    rows: List[Tuple[Any, int, FetchPartitionResponse]] = []
    for part in partitions:
        n = len(part.message_set)
        size += n
        if n > largest:
            largest = n
        entry = requested.get((part.topic, part.partition))
        if entry is None:
            continue
        if n or part.error_code:
            rows.append((entry[0], entry[1], part))
        elif part.high_watermark >= 0:
            entry[0].high_watermark = part.high_watermark
    return FetchWalk(size, largest, rows)


class WalkedFetchRequest(Request[FetchWalk]):
    """:class:`~zkconsumer.wire.protocol.FetchRequest` of ``requested``'s partitions, each from its offset with
    ``max_bytes``, in ``requested``'s order (the same frame, byte for byte); its response is walked for
    ``requested`` (see the module docstring)."""

    API_KEY = API_FETCH

    def __init__(self, max_wait_ms: int, min_bytes: int, max_bytes: int, requested: Requested) -> None:
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.requested = requested

    def partitions(self) -> List[FetchPartition]:
        """The partitions asked for, as :class:`~zkconsumer.wire.protocol.FetchRequest` takes them."""
        return [FetchPartition(topic, partition, offset, self.max_bytes)
                for (topic, partition), (_, offset) in self.requested.items()]

    def encode_frame(self, correlation_id: int, client_id: Optional[str]) -> bytes:
        """:meth:`FetchRequest.encode_frame`'s frame of :meth:`partitions`."""
        frame = native_fetch_frame(correlation_id, client_id, self.max_wait_ms, self.min_bytes, self.requested,
                                   self.max_bytes)
        if frame is not None:
            return frame
        return FetchRequest(self.max_wait_ms, self.min_bytes, tuple(self.partitions())).encode_frame(
            correlation_id, client_id)

    def decode_response(self, body: memoryview) -> FetchWalk:
        """The response's :class:`FetchWalk`; a malformed body raises what :meth:`FetchRequest.decode_response` raises."""
        if _fetch_walk is not None:
            walked = _fetch_walk(body, FetchPartitionResponse, self.requested)
            if walked is not None:
                return FetchWalk(*walked)
        decoded = FetchRequest(self.max_wait_ms, self.min_bytes, ()).decode_response(body)
        return walk_partitions(decoded.partitions, self.requested)


_fetch_walk: Optional[Callable[[memoryview, Any, Requested], Optional[Tuple[int, int, List[Any]]]]] = getattr(
    speedups, "fetch_walk", None)
