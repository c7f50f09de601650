"""A modern Kafka client as a member of a broker-managed group, in a process of its own.

<<<<<<<< HEAD:harness/modern_client.py
    python -m harness.modern_client KIND BOOTSTRAP GROUP TOPIC STRATEGY
========
    python modern_client.py KIND BOOTSTRAP GROUP TOPIC STRATEGY
>>>>>>>> h43:tests/integration/support/programs/modern_client.py

KIND is ``kafka-python`` or ``confluent`` (librdkafka). The member subscribes to TOPIC in
GROUP (Kafka 0.9 brokers: no ApiVersions request), auto-commits every 200 ms, and prints
each message's value on a line of its own as it is consumed (flushed), and
``#assigned <topic>:<p>,...`` whenever its assignment changes. SIGTERM closes it
(committing and leaving the group), as a clean stop of an application does.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any, List


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _assigned(partitions: List[Any]) -> None:
    _say("#assigned " + ",".join(f"{p.topic}:{p.partition}" for p in sorted(partitions, key=lambda p: (p.topic, p.partition))))


def run_kafka_python(bootstrap: str, group: str, topic: str, strategy: str, stop: threading.Event) -> None:
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}[strategy]
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, api_version=(0, 9),
                             auto_offset_reset="earliest", enable_auto_commit=True, auto_commit_interval_ms=200,
                             session_timeout_ms=6000, heartbeat_interval_ms=500,
                             partition_assignment_strategy=[assignor], client_id="kafka-python")
    seen: List[Any] = []
    consumer.subscribe([topic])
    try:
        while not stop.is_set():
            for records in consumer.poll(timeout_ms=200).values():
                for record in records:
                    _say(record.value.decode())
            now = sorted(consumer.assignment(), key=lambda p: (p.topic, p.partition))
            if now != seen:
                seen = now
                _assigned(now)
    finally:
        consumer.close()  # commits, leaves the group


def run_confluent(bootstrap: str, group: str, topic: str, strategy: str, stop: threading.Event) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "api.version.request": False,
                         "broker.version.fallback": "0.9.0.1", "auto.offset.reset": "earliest",
                         "enable.auto.commit": True, "auto.commit.interval.ms": 200, "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 500, "partition.assignment.strategy": strategy,
                         "client.id": "confluent"})
    consumer.subscribe([topic], on_assign=lambda c, ps: _assigned(ps), on_revoke=lambda c, ps: _say("#revoked"))
    try:
        while not stop.is_set():
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            _say(message.value().decode())
    finally:
        consumer.close()  # commits, leaves the group


def main(argv: List[str]) -> int:
    kind, bootstrap, group, topic, strategy = argv
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    _say("#started")
    {"kafka-python": run_kafka_python, "confluent": run_confluent}[kind](bootstrap, group, topic, strategy, stop)
    _say("#closed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
