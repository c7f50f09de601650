"""A member's consumer side around a fetch round flattened into one Python frame (issue 44).

``benchmarks.cpu_split``'s ``glue`` kind bounds a round whose Python is one frame and which keeps no consumer
state. Between it and the member's iterator lie two things: the consumer side (the hand-off queue, the
stream's iterator and its C cursor) and the fetcher's round with its bookkeeping (the session fence, whose
turn a round is, the bounds of the broker's wait, the partitions' offsets, parking, the counters), spread
over some forty Python frames. :class:`LeanRound` keeps the first as the member has it and flattens the
second into one frame: it is a *driver* (``zkconsumer.fetch.handoff``) of a real :class:`ChunkQueue`, read
through a real :class:`ConsumerIterator`, and each of its rounds does, in :meth:`LeanRound.drive` alone,
what a consumer-driven round must still do if its bookkeeping stayed in Python:

- take the round's turn (a lock, not blocking) and check a fence instant (``valid_until``, what a lease
  would publish) before the fetch and again before each chunk is queued;
- bound the broker's wait by what is left of the consumer's wait, and the socket's by that plus 50 ms;
- check the response's size and correlation id, walk it (``_speedups.fetch_walk``), check each partition's
  error code, decode its data (``_speedups.decode``);
- queue each partition's data as a :class:`FetchedDataChunk` through :meth:`PartitionTopicInfo.offer` (the
  queue's epoch, ``fetched_offset`` advanced under the partition's lock), parking what does not fit and
  queueing it first in the next round.

It is a measurement, not a consumer: any error, a stall or an odd response ends it with ``SystemExit``
naming the problem (the member hands those to its general path). What it costs beside the ``glue`` kind
and the member's iterator says how much of the iterator's CPU the fetcher's round spreads over its frames,
and so whether a redesign may keep the bookkeeping in Python or must move it into C.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections import deque
from typing import Deque, Dict, Iterator, List, Optional, Tuple

from zkconsumer.consumer.stream import ConsumerIterator, FailureSignal
from zkconsumer.fetch.handoff import ChunkQueue, FetchedDataChunk, PartitionTopicInfo
from zkconsumer.wire.connection import BrokerConnection
from zkconsumer.wire.messageset import speedups
from zkconsumer.wire.protocol import LATEST_TIME, FetchPartitionResponse

__all__ = ["LeanRound", "lean_stream"]

_CORRELATION = struct.Struct(">i")

#: How long past the broker's wait the socket waits for its answer (the member's ``rounds.ANSWER_GRACE_MS``).
_GRACE_MS = 50


class _State:
    """What ``_speedups.fetch_walk`` takes as a partition's state: its info, and where an empty answer's high watermark goes."""

    __slots__ = ("info", "high_watermark")

    def __init__(self, info: PartitionTopicInfo) -> None:
        self.info = info
        self.high_watermark = -1


class LeanRound:
    """The driver of one queue fed by one broker connection; its round is one Python frame (see the module docstring).

    ``valid_until``: the ``time.monotonic()`` instant until which chunks may be queued (a lease would publish it;
    ``inf`` here). :meth:`drive` is the driver protocol of :class:`ChunkQueue`; :meth:`close` closes the socket.
    """

    def __init__(self, host: str, port: int, infos: List[PartitionTopicInfo], client_id: str,
                 wait_max_ms: int = 100, max_bytes: int = 1048576) -> None:
        if speedups is None:
            raise SystemExit("the lean kind needs the C extension (python setup.py build_ext --inplace)")
        self.valid_until = float("inf")
        self._requested: Dict[Tuple[str, int], Tuple[_State, int]] = {
            (info.topic, info.partition): (_State(info), info.fetched_offset) for info in infos}
        self._client_id = client_id
        self._wait_max_ms = wait_max_ms
        self._max_bytes = max_bytes
        self._turn = threading.Lock()
        self._parked: Deque[FetchedDataChunk] = deque()
        self._buffer = bytearray(4 << 20)
        self._view = memoryview(self._buffer)
        self._lowat = 0
        self._correlation = 0
        self._sock = socket.create_connection((host, port), 30)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._fd = self._sock.fileno()

    def close(self) -> None:
        self._sock.close()

    def interrupt(self) -> None:
        """The driver protocol's interrupt: nothing to raise here (a measurement ends by ``SystemExit``)."""

    def drive(self, timeout: Optional[float]) -> bool:
        """One round on the calling (consumer's) thread, its broker wait within ``timeout`` s; ``False``, having done
        nothing, if the turn is taken, the fence lapsed or less than 5 ms are left."""
        left_ms = self._wait_max_ms if timeout is None else int(timeout * 1000)
        if left_ms < 5 or not self._turn.acquire(False):
            return False
        try:
            parked = self._parked
            if parked:  # the queue was empty when the consumer asked: what waited for room goes first
                while parked and parked[0].topic_info.offer(parked[0]):
                    parked.popleft()
                return True
            if time.monotonic() >= self.valid_until:
                return False
            requested = self._requested
            wait = min(self._wait_max_ms, left_ms)
            self._correlation = correlation = (self._correlation + 1) & 0x7FFFFFFF
            frame = speedups.fetch_request(correlation, self._client_id, wait, 1, requested, self._max_bytes)
            state, size, got, self._lowat = speedups.recv_frame(self._fd, self._buffer, wait + _GRACE_MS, frame,
                                                                self._lowat)
            if state != 0 or size < 4 or got < size or size > len(self._buffer):
                raise SystemExit(f"lean: read of a {size}-byte response failed (state {state}, {got} bytes read)")
            answered = _CORRELATION.unpack_from(self._buffer, 0)[0]
            if answered != correlation:
                raise SystemExit(f"lean: response to request {answered}, expected {correlation}")
            walked = speedups.fetch_walk(self._view[4:size], FetchPartitionResponse, requested)
            if walked is None:
                raise SystemExit(f"lean: a {size}-byte fetch response the walk refused")
            for st, offset, part in walked[2]:
                if part.error_code:
                    raise SystemExit(f"lean: fetch error {part.error_code} on partition {part.partition}")
                block, _, _, status, _, reason = speedups.decode(part.message_set, 0, offset, True)
                if status > speedups.TRUNCATED:
                    raise SystemExit(f"lean: partition {part.partition} at {offset}: {reason} (status {status})")
                if not block or time.monotonic() >= self.valid_until:
                    continue
                info = st.info
                chunk = FetchedDataChunk(info, offset, block)
                if parked or not info.offer(chunk):
                    parked.append(chunk)  # queued first next round: fetched_offset moves then
                requested[(info.topic, info.partition)] = (st, block[-1][0] + 1)
            return True
        finally:
            self._turn.release()


@contextlib.contextmanager
def lean_stream(bootstrap: str, topic: str, partitions: int, consumer_timeout_ms: int = 100,
                queued_chunks: int = 2) -> Iterator[ConsumerIterator]:
    """A real :class:`ConsumerIterator` over every partition of ``topic`` from its end, through a real
    :class:`ChunkQueue` (``queued.max.message.chunks`` ``queued_chunks``) whose only driver is a
    :class:`LeanRound` (the member's defaults: ``fetch.wait.max.ms`` 100, ``consumer.timeout.ms`` 100: like a
    stream's, it raises ``ConsumerTimeoutError`` after 100 ms without a message and may be iterated again)."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with BrokerConnection(host, int(port), "cpu-split-lean", 30000, 65536) as conn:
        offsets = {p: conn.list_offsets(topic, p, LATEST_TIME) for p in range(partitions)}
    queue = ChunkQueue(queued_chunks)
    infos = [PartitionTopicInfo(topic, p, queue, offset, 1048576) for p, offset in offsets.items()]
    lean = LeanRound(host, int(port), infos, "cpu-split-lean")
    queue.add_driver(lean)
    try:
        yield ConsumerIterator(queue, consumer_timeout_ms, None, None, FailureSignal())
    finally:
        lean.close()
