"""A group member in its own process, for the heartbeat tests that freeze it or stall its GIL.

Usage::

    python heartbeat_member.py '<properties as JSON>' <topic> [<regex seconds>]

Creates one connector with one stream of ``topic``, drains that stream on a thread of its own
(recording every ``(partition, offset)`` handed out; it never commits) and prints
``READY <consumer id> <session id> <heartbeat>`` (``heartbeat``: what runs, e.g. ``kafka/native``)
once the stream exists. Then it reads commands from stdin, one a line:

``STALL <seconds>``
    Hold the GIL that long in one C call (libc's ``usleep`` called through ``ctypes.PyDLL``,
    which keeps the GIL: no other Python thread of the process runs meanwhile, kazoo's
    included, as in a long C call of an extension that does not release it, a long regular
    expression or a big ``sorted()``) and print ``STALLED <seconds it took>``.
``STALL_REGEX``
    The same with a real application's C call: one ``re.match`` of a pattern that backtracks
    exponentially (Python's regular expression engine keeps the GIL throughout), on an input
    sized before the member connected to take at least ``<regex seconds>`` (about 1.4 to 2.3
    times it); prints ``STALLED <seconds it took>``.
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


PATTERN = re.compile(r"(?:a|aa)+$")  # on "a" * n + "b": Fibonacci(n) ways to fail, ~1.618 times n - 1's
GROWTH = (1 + 5 ** 0.5) / 2


def regex_length(seconds: float) -> int:
    """An input length on which one ``PATTERN.match`` takes at least ``seconds`` (about 1.4 to 2.3
    times it): calls on ever longer inputs until one takes a second, then extrapolated. Called
    before the member connects (a short call does not predict a long one on a shared machine)."""
    n, took = 20, 0.0
    while took < 1.0:
        n += 1
        started = time.monotonic()
        PATTERN.match("a" * n + "b")
        took = time.monotonic() - started
    return n + max(0, math.ceil(math.log(1.4 * seconds / took, GROWTH)))


def regex_holding_gil(length: int) -> float:
    """Hold the GIL in one ``re.match`` that backtracks on an input of ``length``; return how long."""
    started = time.monotonic()
    PATTERN.match("a" * length + "b")
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
    length = regex_length(float(sys.argv[3])) if len(sys.argv) > 3 else 0
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
            elif command[:1] == ["STALL_REGEX"] and length:
                print("STALLED", round(regex_holding_gil(length), 2), flush=True)
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
