"""``python -m benchmarks.latency.producer BOOTSTRAP TOPIC RATE SECONDS PARTITIONS``: the stamped stream.

librdkafka's producer (confluent-kafka, ``acks=1``) sending ``RATE`` messages per second of
100 B for ``SECONDS``, round-robin over ``PARTITIONS``; each value starts with its send time
(:mod:`benchmarks.latency.stamps`). The rate is kept against the clock: every ~1 ms the
messages due so far are sent, so a late wake-up sends a few at once rather than falling
behind; when librdkafka's queue is full (the broker is behind) it waits for room, and the
achieved rate says so.

``linger.ms`` is 1 up to 1,000 msg/s and 5 above (:func:`linger_ms`). A Kafka 0.9 broker
answers one request per connection at a time, and librdkafka sends a request per partition:
at 10,000 msg/s over 6 partitions, 1 ms batches are so small that the requests cannot keep
up, librdkafka's queue grows and the stamps wait seconds before they reach the broker (seen
on an idle machine: acknowledgements 1 to 3 s after the send, growing; with 5 ms, 6 ms at the
median and 11 ms at p99, steady, and the same at 100,000 msg/s). Such a backlog is the
producer's, not any consumer's, and made the floor of every phase above 1,000 msg/s unstable.

Prints one JSON line: sent, acknowledged, failed, times the queue was full, achieved rate,
the linger, and the acknowledgement latency over the whole run, warm-up included (send to
delivery report, p50 and p99 in ms: the producer's own share of the floor).
"""

from __future__ import annotations

import json
import sys
import time
from array import array
from typing import Any

from .stamps import STAMP, now_us, stamped_value

TICK_S = 0.001
#: Rate 0 (the idle phase): nothing is sent; the loop only waits for its end.
IDLE_TICK_S = 0.1


def linger_ms(rate: float) -> int:
    """The producer's ``linger.ms`` at ``rate`` msg/s: 1 up to 1,000 msg/s, 5 above (see the module)."""
    return 1 if rate <= 1000 else 5


def _percentile_ms(sorted_us: "array[int]", q: float) -> float:
    if not sorted_us:
        return 0.0
    return round(sorted_us[min(len(sorted_us) - 1, int(len(sorted_us) * q))] / 1000.0, 1)


def main(bootstrap: str, topic: str, rate: float, seconds: float, partitions: int) -> int:
    from confluent_kafka import Producer

    linger = linger_ms(rate)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger, "acks": 1,
                         "api.version.request": False, "broker.version.fallback": "0.9.0.1",
                         "queue.buffering.max.messages": 1_000_000, "log_level": 3})
    counts = {"acked": 0, "failed": 0, "full": 0}
    acked_us = array("q")
    unpack = STAMP.unpack_from

    def delivered(error: object, message: Any) -> None:
        if error is not None:
            counts["failed"] += 1
            return
        counts["acked"] += 1
        acked_us.append(now_us() - unpack(message.value())[0])

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
            try:
                producer.produce(topic, stamped_value(now_us()), partition=sent % partitions, on_delivery=delivered)
            except BufferError:  # librdkafka's queue is full: the broker is behind; wait for room
                counts["full"] += 1
                producer.poll(0.01)
                break
            sent += 1
        producer.poll(0)
        time.sleep(IDLE_TICK_S if rate <= 0 else TICK_S if rate >= 1000 else min(TICK_S, 1.0 / rate))
    producer.flush(30)
    elapsed = time.monotonic() - start
    ordered = array("q", sorted(acked_us))
    print(json.dumps({"sent": sent, "acked": counts["acked"], "failed": counts["failed"],
                      "queue_full": counts["full"], "rate": round(sent / elapsed, 1), "linger_ms": linger,
                      "ack_p50_ms": _percentile_ms(ordered, 0.5), "ack_p99_ms": _percentile_ms(ordered, 0.99)}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])))
