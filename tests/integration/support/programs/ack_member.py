"""A ``commit.processed.only`` member whose worker pool finishes messages out of order, for tests that SIGKILL it.

Usage::

    python ack_member.py '<properties as JSON>' <topic> <streams> <workers> <max sleep ms> <seed>

Prints ``READY <consumer id>`` once its streams exist; then, flushed, ``H <partition> <offset>``
when a stream hands a message out, ``P <partition> <offset>`` when a worker has processed it (after a
random sleep of up to ``max sleep ms``) and ``A <partition> <offset>`` once ``stream.ack()`` returned.
At most ``4 * workers`` messages are in flight. Every 100 acks one worker also calls ``commit_offsets()``
(auto-commit runs as configured). Runs until killed, or until stdin closes (then shuts down cleanly).
"""

from __future__ import annotations

import json
import random
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from zkconsumer import ConsumerTimeoutError, KafkaStream, MessageAndMetadata, ZookeeperConsumerConnector


def main() -> None:
    props, topic, streams = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    workers, max_sleep_ms, seed = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    connector = ZookeeperConsumerConnector(props)
    mine = connector.create_message_streams({topic: streams})[topic]
    print("READY", connector.consumer_id, flush=True)
    out = threading.Lock()
    slots = threading.Semaphore(4 * workers)
    stop = threading.Event()  # never set: a worker's sleep is interruptible in form only
    acks = [0]
    pool = ThreadPoolExecutor(workers)

    def say(kind: str, m: MessageAndMetadata) -> None:
        with out:
            sys.stdout.write(f"{kind} {m.partition} {m.offset}\n")
            sys.stdout.flush()

    def work(stream: KafkaStream, m: MessageAndMetadata, rng: random.Random) -> None:
        try:
            stop.wait(rng.uniform(0, max_sleep_ms) / 1000.0)
            say("P", m)
            stream.ack(m)
            say("A", m)
            with out:
                acks[0] += 1
                commit = acks[0] % 100 == 0
            if commit:
                connector.commit_offsets()
        finally:
            slots.release()

    def dispatch(stream: KafkaStream, index: int) -> None:
        rng = random.Random(seed * 100 + index)
        while not stop.is_set():
            try:
                for m in stream:
                    say("H", m)
                    slots.acquire()
                    pool.submit(work, stream, m, random.Random(rng.random()))
                return
            except ConsumerTimeoutError:
                continue

    threads = [threading.Thread(target=dispatch, args=(s, i), daemon=True) for i, s in enumerate(mine)]
    for thread in threads:
        thread.start()
    sys.stdin.read()  # the test closes stdin to end a member cleanly
    connector.shutdown()  # ends the streams; commits what was acked
    for thread in threads:
        thread.join(10)
    pool.shutdown(wait=True)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
