"""A zkconsumer group member in its own process, for tests that SIGKILL it.

Usage::

    python member.py '<properties as JSON>' <topic> <streams>

Prints ``READY <member id>`` (the coordinator's member id under
``group.membership=kafka``, else the consumer id) once its streams exist, then
one flushed line ``<partition> <offset> <value>`` per message handed to it.
Runs until killed.

SIGUSR1 arms a hold (the process prints ``ARMED``): the next time this member is about
to release partitions (a rebalance, or a switch of membership), it prints ``HOLDING``
and blocks there, still registered and still owning them, until it is killed. A test
uses it to strike a member that is certain not to have deregistered yet.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from typing import Mapping, Set

from zkconsumer import ConsumerTimeoutError, KafkaStream, ZookeeperConsumerConnector


class HoldWhenArmed:
    """A rebalance listener that blocks the member before its first release once armed."""

    def __init__(self, lock: threading.Lock) -> None:
        self.armed = threading.Event()
        self._lock = lock

    def arm(self, *_: object) -> None:
        self.armed.set()
        with self._lock:
            print("ARMED", flush=True)

    def before_releasing_partitions(self, partitions: Mapping[str, Set[int]]) -> None:
        if self.armed.is_set():
            with self._lock:
                print("HOLDING", flush=True)
            threading.Event().wait()

    def before_starting_fetchers(self, consumer_id: str, assignment: Mapping[str, Mapping[int, str]]) -> None:
        pass


def main() -> None:
    props, topic, streams = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    lock = threading.Lock()
    hold = HoldWhenArmed(lock)
    signal.signal(signal.SIGUSR1, hold.arm)
    connector = ZookeeperConsumerConnector(props, rebalance_listener=hold)
    mine = connector.create_message_streams({topic: streams})[topic]
    with lock:
        print("READY", getattr(connector.membership, "member_id", None) or connector.consumer_id, flush=True)

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
