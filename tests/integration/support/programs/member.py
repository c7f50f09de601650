"""A zkconsumer group member in its own process, for tests that SIGKILL it.

Usage::

    python member.py '<properties as JSON>' <topic> <streams>

Prints ``READY <member id>`` (the coordinator's member id under
``group.membership=kafka``, else the consumer id) once its streams exist, then
one flushed line ``<partition> <offset> <value>`` per message handed to it.
Runs until killed.
"""

from __future__ import annotations

import json
import sys
import threading

from zkconsumer import ConsumerTimeoutError, KafkaStream, ZookeeperConsumerConnector


def main() -> None:
    props, topic, streams = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    connector = ZookeeperConsumerConnector(props)
    mine = connector.create_message_streams({topic: streams})[topic]
    print("READY", getattr(connector.membership, "member_id", None) or connector.consumer_id, flush=True)
    lock = threading.Lock()

    def drain(stream: KafkaStream) -> None:
        while True:
            try:
                for m in stream:
                    with lock:
                        sys.stdout.write(f"{m.partition} {m.offset} {m.message.decode()}\n")
                        sys.stdout.flush()
                return
            except ConsumerTimeoutError:
                continue

    threads = [threading.Thread(target=drain, args=(s,), daemon=True) for s in mine]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
