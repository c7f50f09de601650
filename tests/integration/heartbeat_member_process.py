"""A group member in its own process, for the heartbeat tests that freeze it or stall its GIL.

Usage::

    python heartbeat_member_process.py '<properties as JSON>' <topic>

Creates one connector with one stream of ``topic``, drains that stream on a thread of its own
(recording every ``(partition, offset)`` handed out; it never commits) and prints
``READY <consumer id> <session id> <heartbeat>`` (``heartbeat``: what runs, e.g. ``kafka/native``)
once the stream exists. Then it reads commands from stdin, one a line:

``STALL <seconds>``
    Hold the GIL that long in one C call (libc's ``usleep`` called through ``ctypes.PyDLL``,
    which keeps the GIL: no other Python thread of the process runs meanwhile, kazoo's
    included, as in a long C call of an extension that does not release it, a long regular
    expression or a big ``sorted()``) and print ``STALLED <seconds it took>``.
``STALL_REGEX <seconds>``
    The same with a real application's C call: one ``re.match`` of a pattern that backtracks
    exponentially (Python's regular expression engine keeps the GIL throughout), sized from a
    short calibration to take at least ``seconds``; prints ``STALLED <seconds it took>``.
``REPORT``
    Print ``REPORT <json>``: the session id now, the heartbeat, every ZooKeeper connection state
    change seen by a listener since READY, the rebalances so far, the partitions owned, how many
    messages were handed out and how many of them were handed out before (the same partition
    and offset), whether the session lease is valid, the heartbeat's unanswered-server drops, and
    the WARNING (or worse) records logged by zkconsumer since READY.
``QUIT`` (or end of input)
    Shut the connector down.

A SIGSTOPped process answers the commands written meanwhile once it is continued.
"""

from __future__ import annotations

import ctypes
import json
import logging
import math
import re
import sys
import threading
import time
from typing import Any, Dict, List, Set, Tuple

from zkconsumer import ConsumerTimeoutError, ZookeeperConsumerConnector


def hold_gil(seconds: float) -> float:
    """Hold the GIL for ``seconds`` in one C call; return how long it was held."""
    started = time.monotonic()
    ctypes.PyDLL(None).usleep(int(seconds * 1_000_000))
    return time.monotonic() - started


def regex_holding_gil(seconds: float) -> float:
    """Hold the GIL for at least ``seconds`` in one ``re.match`` (exponential backtracking); return how long."""
    pattern = re.compile(r"(a+)+$")
    base, took = 18, 0.0
    while took < 0.05:  # calibrate: each extra character doubles the time
        base += 2
        started = time.monotonic()
        pattern.match("a" * base + "b")
        took = time.monotonic() - started
    extra = max(0, math.ceil(math.log2(seconds / took)))
    started = time.monotonic()
    pattern.match("a" * (base + extra) + "b")
    return time.monotonic() - started


class Recorder(logging.Handler):
    """zkconsumer's WARNING-or-worse records, as text."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}")


def main() -> None:
    props, topic = json.loads(sys.argv[1]), sys.argv[2]
    connector = ZookeeperConsumerConnector(props)
    lock = threading.Lock()
    seen: Set[Tuple[int, int]] = set()
    counts = {"delivered": 0, "duplicates": 0}
    states: List[str] = []
    stop = threading.Event()
    try:
        stream = connector.create_message_streams({topic: 1})[topic][0]

        def drain() -> None:
            while not stop.is_set():
                try:
                    for message in stream:
                        with lock:
                            key = (message.partition, message.offset)
                            counts["delivered"] += 1
                            counts["duplicates"] += key in seen
                            seen.add(key)
                        if stop.is_set():
                            return
                except ConsumerTimeoutError:
                    continue
                except Exception:  # noqa: BLE001 - shut down under it
                    return

        drainer = threading.Thread(target=drain, name="test-drain", daemon=True)
        drainer.start()
        recorder = Recorder()
        logging.getLogger("zkconsumer").addHandler(recorder)
        connector.zk_client.add_listener(lambda state: states.append(str(state)))
        print("READY", connector.consumer_id, connector.zk_client.client_id[0], connector.heartbeat_mode,
              flush=True)
        for line in sys.stdin:
            command = line.split()
            if command[:1] == ["STALL"]:
                print("STALLED", round(hold_gil(float(command[1])), 2), flush=True)
            elif command[:1] == ["STALL_REGEX"]:
                print("STALLED", round(regex_holding_gil(float(command[1])), 2), flush=True)
            elif command[:1] == ["REPORT"]:
                status = connector.status
                lease = getattr(connector.membership, "_lease", None)
                client_id = connector.zk_client.client_id
                with lock:
                    report: Dict[str, Any] = {
                        "session": client_id[0] if client_id else None,
                        "heartbeat": connector.heartbeat_mode,
                        "states": list(states),
                        "rebalances": status.rebalances if status is not None else None,
                        "owned": sorted(f"{t}-{p}" for t, p in (status.owned if status is not None else {})),
                        "delivered": counts["delivered"],
                        "duplicates": counts["duplicates"],
                        "lease_valid": lease.valid() if lease is not None else None,
                        "unanswered_drops": connector.metrics_snapshot()["zookeeper_unanswered_drops"],
                        "warnings": list(recorder.messages),
                    }
                print("REPORT", json.dumps(report), flush=True)
            elif command[:1] == ["QUIT"]:
                break
    finally:
        stop.set()
        connector.shutdown()


if __name__ == "__main__":
    main()
