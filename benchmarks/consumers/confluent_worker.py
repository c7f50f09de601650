"""``python -m benchmarks.consumers.confluent_worker BOOTSTRAP TOPIC N``: confluent-kafka's consumer.

Joins a new group (``auto.offset.reset=earliest``) with the settings that are
fastest against a Kafka 0.9 broker here: ``consume(10000)`` batches,
``fetch.queue.backoff.ms=10``, ``api.version.request=false``,
``broker.version.fallback=0.9.0.1``
(and ``session.timeout.ms=10000``: the 0.9 broker's maximum is 30 s). Counts messages until N; the clock starts
when the first non-empty batch arrives and stops at the N-th message. Prints one
JSON line: messages, bytes (sum of value lengths), seconds, msgs_per_sec, mb_per_sec.
"""

from __future__ import annotations

import json
import sys
import time
import uuid


def main(bootstrap: str, topic: str, n: int) -> int:
    from confluent_kafka import Consumer, KafkaError

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-confluent-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "fetch.queue.backoff.ms": 10,
        "api.version.request": False,
        "broker.version.fallback": "0.9.0.1",
        # librdkafka's default (45 s) is over a 0.9 broker's group.max.session.timeout.ms (30 s)
        "session.timeout.ms": 10000,
        "log_level": 3,  # no deprecation warnings for the two 0.9 settings
    })
    consumer.subscribe([topic])
    count = size = 0
    start = 0.0
    idle_since = time.monotonic()
    try:
        while count < n:
            batch = consumer.consume(10000, timeout=1.0)
            if not batch:
                if time.monotonic() - idle_since > 60:
                    raise SystemExit(f"no messages for 60 s after {count}")
                continue
            idle_since = time.monotonic()
            if not start:
                start = time.perf_counter()
            for message in batch:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise SystemExit(f"consume error: {error}")
                value = message.value()
                if value is not None:
                    size += len(value)
                count += 1
                if count >= n:
                    break
        seconds = time.perf_counter() - start
    finally:
        consumer.close()
    print(json.dumps({"messages": count, "bytes": size, "seconds": seconds, "msgs_per_sec": count / seconds,
                      "mb_per_sec": size / 1048576.0 / seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
