"""``python -m benchmarks.latency.floor_worker --broker HOST:PORT --topic T --partitions P ...``: the floor.

A plain fetch loop on one connection, no consumer around it: every partition in one Fetch
(``fetch.min.bytes`` 1, a 1 s wait, so the broker answers as soon as a message is there),
decoded and stamped on the same thread, the next fetch sent at once. What it measures is the
producer's, the broker's and one round trip's share: a consumer cannot deliver sooner.
"""

from __future__ import annotations

import sys
from typing import Iterator, Sequence, Tuple

from zkconsumer.wire.connection import BrokerConnection
from zkconsumer.wire.messageset import RawMessage, decode_message_set
from zkconsumer.wire.protocol import LATEST_TIME, FetchPartition, FetchResponse

from .stamps import STAMP, Recorder, now_us, ready, worker_arguments

MAX_BYTES = 1048576


class FloorLoop:
    """The floor's fetch loop on ``conn``, from the end of each of ``partitions`` partitions of ``topic``:
    :meth:`fetch` sends one Fetch of every partition and returns its response, :meth:`messages` decodes it and
    moves the offsets on. Apart, so a caller can stamp a response before decoding it."""

    def __init__(self, conn: BrokerConnection, topic: str, partitions: int) -> None:
        self._conn = conn
        self._topic = topic
        self._offsets = {p: conn.list_offsets(topic, p, LATEST_TIME) for p in range(partitions)}

    def fetch(self) -> FetchResponse:
        """One Fetch of every partition from its offset (``fetch.min.bytes`` 1, a 1 s wait)."""
        wanted = [FetchPartition(self._topic, p, o, MAX_BYTES) for p, o in self._offsets.items()]
        return self._conn.fetch(wanted, 1000, 1)

    def messages(self, response: FetchResponse) -> Iterator[Tuple[int, Sequence[RawMessage]]]:
        """``(partition, messages)`` of each partition of ``response``, decoded, its offset moved past them.
        A partition's broker error ends the run (``SystemExit`` naming it)."""
        for part in response.partitions:
            if part.error_code:
                raise SystemExit(f"fetch error {part.error_code} on partition {part.partition}")
            decoded = decode_message_set(part.message_set, self._topic, part.partition,
                                         self._offsets[part.partition])
            if decoded.messages:
                self._offsets[part.partition] = decoded.messages[-1][0] + 1
            yield part.partition, decoded.messages


def main() -> int:
    parser = worker_arguments(__doc__ or "")
    parser.add_argument("--broker", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    args = parser.parse_args()
    host, port = args.broker.rsplit(":", 1)
    with BrokerConnection(host, int(port), "latency-floor", 30000, 65536, reuse_buffer=True) as conn:
        loop = FloorLoop(conn, args.topic, args.partitions)
        t0, t1, deadline = ready(args.window)
        recorder = Recorder(t0, t1, bool(args.trace))
        unpack, add = STAMP.unpack_from, recorder.add
        while now_us() < deadline:
            response = loop.fetch()
            now = now_us()
            for partition, messages in loop.messages(response):
                for _offset, _key, value in messages:
                    add(partition, unpack(value)[0], now)
    recorder.finish("floor", args.setting, args.trace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
