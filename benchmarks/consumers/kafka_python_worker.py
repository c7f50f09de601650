"""``python -m benchmarks.consumers.kafka_python_worker BOOTSTRAP TOPIC N``: kafka-python's KafkaConsumer.

Assigns every partition of TOPIC, seeks to the log start and iterates until N
messages; the clock starts at the first iteration. Prints one JSON line:
messages, bytes, seconds, msgs_per_sec, mb_per_sec.
"""

from __future__ import annotations

import json
import sys
import time


def main(bootstrap: str, topic: str, n: int) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), api_version=(0, 9), group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest", consumer_timeout_ms=10000)
    partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    count = size = 0
    start = time.perf_counter()
    for message in consumer:
        if message.value is not None:
            size += len(message.value)
        count += 1
        if count >= n:
            break
    seconds = time.perf_counter() - start
    consumer.close()
    print(json.dumps({"messages": count, "bytes": size, "seconds": seconds, "msgs_per_sec": count / seconds,
                      "mb_per_sec": size / 1048576.0 / seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
