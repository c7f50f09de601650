"""Group members whose whole process then stalls on the GIL, for the heartbeat tests.

Usage::

    python gil_stall_process.py '<list of properties as JSON>' <topic>

Creates one connector per properties dict (one stream of ``topic`` each) and prints
``READY <consumer id> <session id> ...`` in that order. Then, for each line ``STALL <seconds>``
read from stdin, holds the GIL that long in one C call (libc's ``usleep`` called through
``ctypes.PyDLL``, which keeps the GIL: no other Python thread of the process runs meanwhile,
kazoo's included, as in a long C call of an extension that does not release it) and prints
``STALLED <seconds it took>``. ``QUIT`` (or end of input) shuts the connectors down.
"""

from __future__ import annotations

import ctypes
import json
import sys
import time

from zkconsumer import ZookeeperConsumerConnector


def hold_gil(seconds: float) -> float:
    """Hold the GIL for ``seconds`` in one C call; return how long it was held."""
    started = time.monotonic()
    ctypes.PyDLL(None).usleep(int(seconds * 1_000_000))
    return time.monotonic() - started


def main() -> None:
    configs, topic = json.loads(sys.argv[1]), sys.argv[2]
    connectors = [ZookeeperConsumerConnector(props) for props in configs]
    try:
        for connector in connectors:
            connector.create_message_streams({topic: 1})
        ready = " ".join(f"{c.consumer_id} {c.zk_client.client_id[0]}" for c in connectors)
        print("READY", ready, flush=True)
        for line in sys.stdin:
            command = line.split()
            if command[:1] == ["STALL"]:
                print("STALLED", round(hold_gil(float(command[1])), 2), flush=True)
            elif command[:1] == ["QUIT"]:
                break
    finally:
        for connector in connectors:
            connector.shutdown()


if __name__ == "__main__":
    main()
