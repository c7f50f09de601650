"""``python -m benchmarks.latency.producer BOOTSTRAP TOPIC RATE SECONDS PARTITIONS``: the stamped stream.

librdkafka's producer (confluent-kafka) set for latency (``linger.ms=0``, ``acks=1``), sending
``RATE`` messages per second of 100 B for ``SECONDS``, round-robin over ``PARTITIONS``; each
value starts with its send time (:mod:`benchmarks.latency.stamps`). The rate is kept against
the clock: every ~1 ms the messages due so far are sent, so a late wake-up sends a few at once
rather than falling behind. Prints one JSON line: sent, acknowledged, failed, achieved rate.
"""

from __future__ import annotations

import json
import sys
import time

from .stamps import now_us, stamped_value

TICK_S = 0.001


def main(bootstrap: str, topic: str, rate: float, seconds: float, partitions: int) -> int:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": 1,
                         "api.version.request": False, "broker.version.fallback": "0.9.0.1",
                         "queue.buffering.max.messages": 1_000_000, "log_level": 3})
    counts = {"acked": 0, "failed": 0}

    def delivered(error: object, _message: object) -> None:
        counts["failed" if error is not None else "acked"] += 1

    producer.list_topics(topic, timeout=30)  # connected, with the topic's leaders, before the first stamp
    sent = 0
    start = time.monotonic()
    end = start + seconds
    while True:
        now = time.monotonic()
        if now >= end:
            break
        due = int((now - start) * rate) - sent
        for _ in range(due):
            producer.produce(topic, stamped_value(now_us()), partition=sent % partitions, on_delivery=delivered)
            sent += 1
        producer.poll(0)
        time.sleep(TICK_S if rate >= 1000 else min(TICK_S, 1.0 / rate))
    producer.flush(30)
    elapsed = time.monotonic() - start
    print(json.dumps({"sent": sent, "acked": counts["acked"], "failed": counts["failed"],
                      "rate": round(sent / elapsed, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])))
