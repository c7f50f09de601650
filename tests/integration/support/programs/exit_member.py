"""A zkconsumer member whose application returns from ``main`` without calling ``shutdown()``.

Usage::

    python exit_member.py '<properties as JSON>' <topic>

Prints ``READY <consumer id>`` once its one stream exists and drains that stream on a daemon
thread. On a line ``EXIT`` on stdin it waits (at most 60 s) until its ZooKeeper connection is
lost (the test stopped ZooKeeper), then one second more, so that kazoo has handed every dropped
watch its event (it tells the state listeners first, then queues those events); prints
``DISCONNECTED`` (or ``STILL CONNECTED``), then ``RETURNING``, and returns from ``main`` with the
connector still running. The interpreter must then exit on its own.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from zkconsumer import ConsumerTimeoutError, KafkaStream, ZookeeperConsumerConnector


def drain(stream: KafkaStream) -> None:
    while True:
        try:
            for _ in stream:
                pass
            return
        except ConsumerTimeoutError:
            continue


def main() -> None:
    props, topic = json.loads(sys.argv[1]), sys.argv[2]
    connector = ZookeeperConsumerConnector(props)
    stream = connector.create_message_streams({topic: 1})[topic][0]
    threading.Thread(target=drain, args=(stream,), name="exit-member-drain", daemon=True).start()
    print("READY", connector.consumer_id, flush=True)
    for line in sys.stdin:
        if line.strip() == "EXIT":
            break
    deadline = time.monotonic() + 60
    while connector.zk_client.connected and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    print("STILL CONNECTED" if connector.zk_client.connected else "DISCONNECTED", flush=True)
    print("RETURNING", flush=True)


if __name__ == "__main__":
    main()
