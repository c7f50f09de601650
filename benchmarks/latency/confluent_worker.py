"""``python -m benchmarks.latency.confluent_worker --bootstrap B --topic T ...``: confluent-kafka's latency.

One member of a new group (librdkafka's own group protocol on the 0.9 broker), reading with
``poll()`` one message at a time, as an application that wants each message at once does
(``consume(n)`` waits for n messages or its timeout).
"""

from __future__ import annotations

import sys
import uuid

from .settings import CONFLUENT_BASE, settings
from .stamps import STAMP, Recorder, now_us, ready, worker_arguments


def main() -> int:
    from confluent_kafka import Consumer

    parser = worker_arguments(__doc__ or "")
    parser.add_argument("--bootstrap", required=True)
    args = parser.parse_args()
    consumer = Consumer({"bootstrap.servers": args.bootstrap,
                         "group.id": args.group or f"lat-confluent-{uuid.uuid4().hex[:8]}",
                         **CONFLUENT_BASE, **settings("confluent", args.setting),
                         **dict(p.split("=", 1) for p in args.prop)})
    consumer.subscribe([args.topic])
    consumer.poll(0)  # starts joining the group
    t0, t1, deadline = ready(args.window)
    recorder = Recorder(t0, t1, bool(args.trace))
    unpack, add = STAMP.unpack_from, recorder.add
    try:
        while True:
            message = consumer.poll(0.1)
            now = now_us()
            if now >= deadline:
                break
            if message is None or message.error() is not None:
                continue
            add(message.partition(), unpack(message.value())[0], now)
    finally:
        consumer.close()
    recorder.finish("confluent", args.setting, args.trace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
