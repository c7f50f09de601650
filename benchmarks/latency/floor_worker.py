"""``python -m benchmarks.latency.floor_worker --broker HOST:PORT --topic T --partitions P ...``: the floor.

A plain fetch loop on one connection, no consumer around it: every partition in one Fetch
(``fetch.min.bytes`` 1, a 1 s wait, so the broker answers as soon as a message is there),
decoded and stamped on the same thread, the next fetch sent at once. What it measures is the
producer's, the broker's and one round trip's share: a consumer cannot deliver sooner.
"""

from __future__ import annotations

import sys

from zkconsumer.wire.connection import BrokerConnection
from zkconsumer.wire.messageset import decode_message_set
from zkconsumer.wire.protocol import LATEST_TIME, FetchPartition

from .stamps import STAMP, Recorder, now_us, ready, worker_arguments

MAX_BYTES = 1048576


def main() -> int:
    parser = worker_arguments(__doc__ or "")
    parser.add_argument("--broker", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    args = parser.parse_args()
    host, port = args.broker.rsplit(":", 1)
    with BrokerConnection(host, int(port), "latency-floor", 30000, 65536, reuse_buffer=True) as conn:
        offsets = {p: conn.list_offsets(args.topic, p, LATEST_TIME) for p in range(args.partitions)}
        t0, t1, deadline = ready(args.window)
        recorder = Recorder(t0, t1, bool(args.trace))
        unpack, add = STAMP.unpack_from, recorder.add
        while now_us() < deadline:
            wanted = [FetchPartition(args.topic, p, o, MAX_BYTES) for p, o in offsets.items()]
            response = conn.fetch(wanted, 1000, 1)
            now = now_us()
            for part in response.partitions:
                if part.error_code:
                    raise SystemExit(f"fetch error {part.error_code} on partition {part.partition}")
                decoded = decode_message_set(part.message_set, args.topic, part.partition, offsets[part.partition])
                for _offset, _key, value in decoded.messages:
                    add(part.partition, unpack(value)[0], now)
                if decoded.messages:
                    offsets[part.partition] = decoded.messages[-1][0] + 1
    recorder.finish("floor", args.setting, args.trace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
