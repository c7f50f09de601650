"""What each consumer runs with: its defaults, and its settings tuned for latency.

Every consumer reads with its library's defaults except what a latency benchmark needs
(a new group starting at the log end, no offset commits, a short poll so it can stop on
time). ``TUNED`` lists, per kind, what changes for "tuned"; docs/latency.md says why.
"""

from __future__ import annotations

from typing import Dict

#: zkconsumer's and Kafka's ConsumerConfig: what every run sets (not latency settings).
ZK_BASE = {"auto.offset.reset": "largest", "auto.commit.enable": "false", "consumer.timeout.ms": "100"}

#: confluent-kafka: a 0.9 broker needs the version fallback; librdkafka's session timeout is over its maximum.
CONFLUENT_BASE = {"auto.offset.reset": "latest", "enable.auto.commit": False, "api.version.request": False,
                  "broker.version.fallback": "0.9.0.1", "session.timeout.ms": 10000, "log_level": 3}

TUNED: Dict[str, Dict[str, str]] = {
    # zkconsumer and Kafka's consumer share the property names. A fetch that fetch.min.bytes (1)
    # does not satisfy is answered after 10 ms instead of 100, and a stream buffers 16 chunks
    # instead of 2 before its fetcher parks (zkconsumer) or blocks (Kafka): at most 16 x
    # fetch.message.max.bytes per stream.
    "zkconsumer": {"fetch.wait.max.ms": "10", "queued.max.message.chunks": "16"},
    "kafka": {"fetch.wait.max.ms": "10", "queued.max.message.chunks": "16"},
    # librdkafka: answer a fetch within 10 ms (default 500), and back off 1 ms instead of 1 s
    # when its pre-fetch queue is full (fetch.queue.backoff.ms).
    "confluent": {"fetch.wait.max.ms": "10", "fetch.queue.backoff.ms": "1"},
}

def settings(kind: str, setting: str) -> Dict[str, str]:
    """The latency settings of ``kind`` (zkconsumer, kafka, confluent) for ``setting`` (defaults, tuned)."""
    return dict(TUNED.get(kind, {})) if setting == "tuned" else {}
