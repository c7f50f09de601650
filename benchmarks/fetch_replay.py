"""Single-threaded replay of a fetcher thread's per-response path: µs of Python per fetch response (issue 44).

One :class:`~zkconsumer.fetch.fetcher_thread.FetcherThread` (never started) on a real
:class:`~zkconsumer.wire.connection.BrokerConnection` whose round trip returns canned response
frames instead of touching a socket, driven in this thread through ``fetch_round()``, one turn of its ``run()``
loop: the lease check, ``_queue_parked``, ``_next_batch``, ``_fetch_once`` (request encoding,
response decoding, per partition the lock, the lease fence, ``decode_message_set``, the queue
offer) and ``_check_width``; then the queue is drained (``ChunkQueue.get``) so nothing parks.

The lease check goes through a real :class:`~zkconsumer.zookeeper.lease.SessionLease` behind the
same call levels as in a ZooKeeper-membership connector (the connector's ``_deliverable``, the
switching membership, the ZooKeeper membership, ``SessionLease.valid``).

Responses are built before timing: ``--partitions`` partitions of one topic, each response
carrying ``--messages`` messages of ``--value-size`` bytes (magic 0, uncompressed) spread
round-robin over the partitions, offsets advancing as a live stream's do (every other partition
of the response empty, as a broker answers them). One message per response is the 1,000 msg/s
case of issue 44 (every message its own response); 10 is about the 10,000 msg/s case.

Runs ``--rounds`` rounds of ``--responses`` responses per case and prints the median µs per
response of each case (and every round's), plus encoding one request and decoding one response
alone. It drives ``FetcherThread.fetch_round()``, so it runs against checkouts that have that
method (copy it out and run it with that checkout first on ``PYTHONPATH``); for older ones, this
file as of commit fe46bbb repeats the loop's body itself.

Usage: ``python -m benchmarks.fetch_replay [--messages 1,10] [--partitions 6] [--responses 20000] [--rounds 5]``
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import types
from typing import Any, Dict, List, Tuple

from kafka.record.legacy_records import LegacyRecordBatchBuilder

from zkconsumer.fetch.fetcher_thread import FetcherKey, FetcherThread
from zkconsumer.fetch.handoff import ChunkQueue, PartitionTopicInfo
from zkconsumer.wire import messageset
from zkconsumer.wire.connection import BrokerConnection
from zkconsumer.wire.protocol import FetchPartition, FetchRequest, encode_request
from zkconsumer.zookeeper.lease import SessionLease

TOPIC = "events"
#: How many distinct responses are built (then the partitions' positions go back to 0 and they repeat).
CYCLE = 1000


def message_set(offsets: List[int], value: bytes) -> bytes:
    out = b""
    for offset in offsets:  # one wrapper-less entry per message, as a 0.9 broker stores them uncompressed
        builder = LegacyRecordBatchBuilder(magic=0, compression_type=0, batch_size=1 << 30)
        builder.append(offset, None, None, value)
        out += bytes(builder.build())
    return out


def response_frames(partitions: int, messages: int, value_size: int) -> List[bytearray]:
    """``CYCLE`` Fetch v0 response frames (correlation id 0, patched per request) of a live stream."""
    value = b"v" * value_size
    nxt = [0] * partitions
    frames = []
    for i in range(CYCLE):
        per: Dict[int, List[int]] = {}
        for k in range(messages):
            p = (i * messages + k) % partitions
            per.setdefault(p, []).append(nxt[p])
            nxt[p] += 1
        body = bytearray(b"\0\0\0\0" + (1).to_bytes(4, "big") + len(TOPIC).to_bytes(2, "big") + TOPIC.encode()
                         + partitions.to_bytes(4, "big"))
        for p in range(partitions):
            data = message_set(per[p], value) if p in per else b""
            body += (p.to_bytes(4, "big") + (0).to_bytes(2, "big") + (nxt[p]).to_bytes(8, "big")
                     + len(data).to_bytes(4, "big", signed=True) + data)
        frames.append(body)
    return frames


class _Canned(BrokerConnection):
    """A connection whose round trip answers with the next canned frame (the request's correlation id patched in)."""

    def __init__(self, frames: List[bytearray]) -> None:
        super().__init__("replay", 9092, "replay-client", 30000, 0, reuse_buffer=True)
        self.frames = frames
        self.next = 0

    def _round_trip(self, frame: bytes, shared_buffer: bool, timeout_ms: int) -> memoryview:
        out = self.frames[self.next]
        self.next = (self.next + 1) % len(self.frames)
        out[0:4] = frame[8:12]
        return memoryview(out).toreadonly()


class _ZkMembership:
    def __init__(self, lease: SessionLease) -> None:
        self._lease = lease

    def deliverable(self) -> bool:  # as ZookeeperMembership.deliverable
        return self._lease is None or self._lease.valid()


class _Switching:
    def __init__(self, current: _ZkMembership) -> None:
        self.current = current

    def deliverable(self) -> bool:  # as SwitchingMembership.deliverable
        return self.current.deliverable()


class _Connector:
    def __init__(self, membership: _Switching) -> None:
        self._membership = membership

    def _deliverable(self) -> bool:  # as BaseConnector._deliverable
        return self._membership is None or self._membership.deliverable()


def make_fetcher(partitions: int, messages: int, value_size: int) -> Tuple[FetcherThread, List[PartitionTopicInfo],
                                                                           ChunkQueue, _Canned]:
    config = types.SimpleNamespace(client_id="replay-client", fetch_wait_max_ms=100, fetch_min_bytes=1,
                                   fetch_message_max_bytes=1 << 20, refresh_leader_backoff_ms=200,
                                   auto_offset_reset="largest", socket_timeout_ms=30000)
    lease = SessionLease(types.SimpleNamespace(client_id=(1, b"")), "/replay", 3600.0)
    connector = _Connector(_Switching(_ZkMembership(lease)))
    conn = _Canned(response_frames(partitions, messages, value_size))
    errors: List[BaseException] = []
    fetcher = FetcherThread(FetcherKey(1, "replay", 9092, 0), config, conn, lambda infos: None, errors.append,
                            connector._deliverable, resize=lambda f, wide: None)
    queue = ChunkQueue(max(2, messages + 1))
    infos = [PartitionTopicInfo(TOPIC, p, queue, 0, 1 << 20) for p in range(partitions)]
    fetcher.add_partitions(infos)
    return fetcher, infos, queue, conn


def replay(fetcher: FetcherThread, infos: List[PartitionTopicInfo], queue: ChunkQueue, conn: _Canned,
           responses: int, messages: int) -> float:
    """µs per response over ``responses`` iterations of the fetcher loop's body (then draining the queue)."""
    got = 0
    start = time.perf_counter()
    for _ in range(responses):
        if conn.next == 0:  # the canned responses start over: so do the partitions' positions
            for info in infos:
                info.fetched_offset = info.consumed_offset = 0
        if not fetcher.fetch_round():  # what FetcherThread.run() does each turn
            raise RuntimeError("the lease lapsed")
        # --- the consumer side: take what was queued
        while queue._items:
            chunk: Any = queue.get(0)
            got += len(chunk.messages)
    elapsed = time.perf_counter() - start
    if got != responses * messages:
        raise RuntimeError(f"{got} messages delivered, {responses * messages} expected")
    return elapsed / responses * 1e6


def lease_check_us(fetcher: FetcherThread, n: int = 100000) -> float:
    """One session-lease check as the fetcher makes it (µs; it makes one per loop and one per chunk queued)."""
    check = fetcher._deliverable
    start = time.perf_counter()
    for _ in range(n):
        check()
    return (time.perf_counter() - start) / n * 1e6


def encode_decode_us(partitions: int, messages: int, value_size: int, n: int = 20000) -> Tuple[float, float]:
    """Encoding one request frame alone, and decoding one response body alone (µs)."""
    wanted = tuple(FetchPartition(TOPIC, p, 1000 + p, 1 << 20) for p in range(partitions))
    start = time.perf_counter()
    for i in range(n):
        encode_request(FetchRequest(100, 1, wanted), i, "replay-client")
    encode = (time.perf_counter() - start) / n * 1e6
    request = FetchRequest(100, 1, wanted)
    body = memoryview(response_frames(partitions, messages, value_size)[1])[4:].toreadonly()
    start = time.perf_counter()
    for _ in range(n):
        request.decode_response(body)
    decode = (time.perf_counter() - start) / n * 1e6
    return encode, decode


def batch_of_rows_us(rows: int, value_size: int, n: int = 20000) -> float:
    """``KafkaStream.batches()``'s Arrow step alone: ``arrow.record_batch`` of a decoded block of ``rows`` messages (µs)."""
    from zkconsumer.consumer import arrow

    block = messageset.decode_message_set(message_set(list(range(rows)), b"v" * value_size), TOPIC, 0, 0).messages
    for _ in range(1000):
        arrow.record_batch(TOPIC, 0, block, 0, rows)
    start = time.perf_counter()
    for _ in range(n):
        arrow.record_batch(TOPIC, 0, block, 0, rows)
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", default="1,10", help="messages per response, comma-separated cases")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--responses", type=int, default=20000, help="responses per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"C extension: {'yes' if messageset.ACCELERATED else 'no'}; {args.partitions} partitions, "
          f"{args.value_size} B values, {args.responses} responses x {args.rounds} rounds; thread "
          f"{threading.current_thread().name}")
    for messages in [int(m) for m in args.messages.split(",")]:
        fetcher, infos, queue, conn = make_fetcher(args.partitions, messages, args.value_size)
        replay(fetcher, infos, queue, conn, min(2000, args.responses), messages)  # warm-up
        rounds = [replay(fetcher, infos, queue, conn, args.responses, messages) for _ in range(args.rounds)]
        encode, decode = encode_decode_us(args.partitions, messages, args.value_size)
        print(f"messages/response={messages}: per response median {statistics.median(rounds):.2f} us "
              f"(rounds {', '.join(f'{r:.2f}' for r in rounds)}); encode request alone {encode:.2f} us, "
              f"decode response alone {decode:.2f} us, lease check alone {lease_check_us(fetcher):.2f} us, "
              f"Arrow batch of its rows alone {batch_of_rows_us(messages, args.value_size):.2f} us")


if __name__ == "__main__":
    main()
