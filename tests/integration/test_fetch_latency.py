"""A partition whose chunk waited for room is fetched again as soon as that chunk is queued,
not after the broker waited out ``fetch.wait.max.ms`` on its quiet neighbours (real cluster).

The mechanism, not a latency: a request that leaves out a partition with a parked chunk
asks the broker for a short wait, so no such request sits out the whole
``fetch.wait.max.ms`` while the application keeps reading (``held_back_waits`` in the
per-broker fetch counters stays 0). Without it, every chunk parked while the application
reads a little slower than the fetcher costs one such wait.
"""

from __future__ import annotations

import time

from support import consumer_props, unique

from zkconsumer import ConsumerConfig, ZookeeperConsumerConnector

MESSAGES = 12
VALUE = 600  # one message per chunk: fetch.message.max.bytes holds one and part of the next


def test_a_parked_partition_is_not_held_behind_a_wait_of_fetch_wait_max_ms(cluster, make_topic) -> None:
    topic = make_topic(partitions=4)  # replica_assignment puts partitions 0 and 3 on broker 0: one request
    values = [bytes([65 + i]) * VALUE for i in range(MESSAGES)]
    cluster.produce(topic, values, partition=0)  # partition 3 stays empty: its fetches wait at the broker
    props = consumer_props(cluster, unique("parked"), **{
        "queued.max.message.chunks": 1, "fetcher.connections": 1, "fetch.message.max.bytes": 1024,
        "fetch.wait.max.ms": 2000, "consumer.timeout.ms": 60000})
    got = []
    with ZookeeperConsumerConnector(ConsumerConfig(props)) as connector:
        stream = connector.create_message_streams({topic: 1})[topic][0]
        for message in stream:
            got.append(message.message)
            if len(got) == MESSAGES:
                break
            time.sleep(0.02)  # an application a little slower than its fetcher: chunks park
        counters = connector.metrics_snapshot()["fetch"]
    assert got == values
    assert sum(row["requests"] for row in counters.values()) > MESSAGES
    assert {b: row["held_back_waits"] for b, row in counters.items()} == {b: 0 for b in counters}
