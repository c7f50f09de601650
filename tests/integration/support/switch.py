"""What the live-switch tests share: members that record what they delivered, the command, the referee.

A member (in-process :class:`Recorder`, or :class:`RecorderProcess` for a test that SIGKILLs it)
has a ``name`` and ``delivered``: ``(time, partition, offset, value)`` in the order it handed
them out. :func:`referee` stops the producer, waits for every acknowledged message and then
judges every member's deliveries together (:func:`check_deliveries`).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Collection, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

from benchmarks.migration_members import StreamMember
from support.common import Producer, wait_until
from support.offsets import MEMBER_SCRIPT, ChildProcess
from zkconsumer.admin.stores import CoordinatorOffsets

Delivery = Tuple[float, int, int, bytes]


class Delivering(Protocol):
    """A member as the referee sees it."""

    name: str
    delivered: List[Delivery]


class Recorder(StreamMember):
    """One member in this process (2 streams) and what it delivered."""

    def __init__(self, name: str, props: Dict[str, object], topic: str) -> None:
        self.delivered: List[Delivery] = []
        super().__init__(name, props, topic,
                         lambda m: self.delivered.append((time.monotonic(), m.partition, m.offset, m.message)))

    @property
    def kind(self) -> str:
        return self.connector.membership.kind


class RecorderProcess(ChildProcess):
    """``programs/member.py`` (two streams) as a child process; ``delivered`` is stamped when its line is
    read here, so the referee's order across processes is the order of reading (a line is printed
    as the message is handed out)."""

    def __init__(self, name: str, props: Mapping[str, object], topic: str) -> None:
        import json

        super().__init__(MEMBER_SCRIPT, [json.dumps(dict(props)), topic, "2"])
        self.name = name
        self.consumer_id: Optional[str] = None
        self.delivered: List[Delivery] = []
        self.ready = threading.Event()
        self.armed = threading.Event()
        self.holding = threading.Event()
        self._start_reading()

    def arm_hold(self, timeout: float = 10.0) -> None:
        """Make the member block before its next release of partitions, still registered (see
        ``programs/member.py``); returns once it says it is armed."""
        self._proc.send_signal(signal.SIGUSR1)
        assert self.armed.wait(timeout), f"{self.name} did not arm its hold"

    def on_line(self, line: str) -> None:
        fields = line.split(" ", 2)
        if fields[0] == "READY":
            self.consumer_id = fields[1]
            self.ready.set()
        elif fields[0] == "ARMED":
            self.armed.set()
        elif fields[0] == "HOLDING":
            self.holding.set()
        else:
            self.delivered.append((time.monotonic(), int(fields[0]), int(fields[1]), fields[2].encode()))

    def stop(self) -> None:
        self.kill()


def migrate(cluster, group: str, to: str, *extra: str) -> subprocess.CompletedProcess:
    """``zkconsumer groups migrate`` in a child process."""
    return subprocess.run([sys.executable, "-m", "zkconsumer", "groups", "migrate", "--zookeeper", cluster.zk_connect,
                           "--group", group, "--to", to, *extra], capture_output=True, text=True, timeout=240)


def settled(zk, group: str, to: str, count: int) -> bool:
    """Whether ``count`` members are on ``to`` membership and none on the other."""
    registered = zk.get_children(f"/consumers/{group}/ids") if zk.exists(f"/consumers/{group}/ids") else []
    with CoordinatorOffsets(zk, group) as coordinator:
        at_coordinator = coordinator.live_members()
    if to == "kafka":
        return not registered and len(at_coordinator) == count
    return not at_coordinator and len(registered) == count


def check_deliveries(members: Sequence[Delivering], acked: Collection[bytes],
                     may_redeliver_after: Callable[[str], bool] = lambda name: False) -> Dict[str, int]:
    """0 lost, and per partition, in time order, offsets strictly increase: two members delivering one
    partition at once would go back, or deliver an offset twice.

    ``may_redeliver_after(name)``: whether a member may take a partition over from ``name`` at an
    offset ``name`` already delivered (``name`` was killed, or its final commit could not reach
    the brokers, or was refused in a coordinator rebalance: at-least-once). Such a step back is
    allowed by ``name`` itself (it got the partition back) or as the first delivery of another
    member's run, but not by a member that delivered that partition in the run before (alternating
    short runs are two members at once). Returns counts: ``delivered``,
    ``redelivered`` (deliveries of a (partition, offset) delivered before), ``steps_back``.
    """
    every = sorted((t, p, o, v, m.name) for m in members for t, p, o, v in list(m.delivered))
    seen: Dict[Tuple[int, int], str] = {}
    twice = []
    runs: Dict[int, List[str]] = {}  # per partition: who delivered each run, in order
    last: Dict[int, int] = {}
    back = []
    steps_back = 0
    for _, p, o, _, name in every:
        previous = last.get(p)
        deliverers = runs.setdefault(p, [])
        new_run = not deliverers or deliverers[-1] != name
        if previous is not None and o <= previous:
            allowed = may_redeliver_after(deliverers[-1]) and (
                not new_run  # the member got the partition back after a rebalance: from the last commit
                or len(deliverers) < 2 or deliverers[-2] != name)
            if allowed:
                steps_back += 1
            else:
                back.append(f"partition {p}: offset {o} by {name} after {previous} by {deliverers[-1]}")
        elif (p, o) in seen and not may_redeliver_after(seen[(p, o)]):
            twice.append(f"{p}/{o} by {seen[(p, o)]} and {name}")
        if new_run:
            deliverers.append(name)
        seen[(p, o)] = name
        last[p] = o
    values = {v for _, _, _, v, _ in every}
    lost = set(acked) - values
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged messages never delivered"
    assert not back, f"two members delivered one partition at once: {back[:10]}"
    assert not twice, f"{len(twice)} offsets delivered twice: {twice[:10]}"
    return {"delivered": len(every), "redelivered": len(every) - len({(p, o) for _, p, o, _, _ in every}),
            "steps_back": steps_back}


def referee(producer: Producer, members: Sequence[Delivering],
            may_redeliver_after: Callable[[str], bool] = lambda name: False) -> Dict[str, int]:
    """Stop ``producer``, wait until every acknowledged message was delivered, then :func:`check_deliveries`."""
    acked = producer.stop()
    wait_until(lambda: acked <= {v for m in members for _, _, _, v in list(m.delivered)}, 90,
               "every acknowledged message to be delivered")
    return check_deliveries(members, acked, may_redeliver_after)
