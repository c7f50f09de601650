"""Observing a group for the scale benchmark: Kafka's Range computed independently, the owner
nodes mirrored with watches, and the ZooKeeper server's own request counters (``srvr``/``cons``)."""

from __future__ import annotations

import functools
import json
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent

from harness.assignment import expected_range_of_topics
from zkconsumer.testing.core import HOST
from zkconsumer.testing.probes import srvr_fields, zookeeper_command

TP = Tuple[str, int]

# ---------------------------------------------------------------------------- assignment

# ---------------------------------------------------------------------------- observing the group

@dataclass
class Change:
    at: float           # when it happened (mtime for appearances, arrival for deletions)
    seen: float         # when the mirror learned it
    tp: TP
    owner: Optional[str]


class GroupMirror:
    """Mirrors a group's members and owner nodes with watches; every request it sends is counted.

    Callbacks run on kazoo's threads and only record; ``state()`` gives a consistent copy.
    """

    def __init__(self, zk: KazooClient, group: str, topics: Sequence[str]) -> None:
        self.zk = zk
        self.group = group
        self.topics = list(topics)
        self.requests = 0
        self.lock = threading.Lock()
        self.owners: Dict[TP, str] = {}
        self.changes: List[Change] = []
        self.members: Dict[str, Tuple[int, Dict[str, int], int]] = {}  # id -> (ctime ms, subscription, session)
        self.member_sessions: Set[int] = set()
        self.departures: Dict[str, float] = {}  # member id -> when its node's deletion was seen
        self._tracked: Set[TP] = set()
        self._member_reads: Set[str] = set()
        self._stopped = False

    def _count(self) -> None:
        with self.lock:
            self.requests += 1

    def start(self) -> None:
        self._children(f"/consumers/{self.group}/ids", self._on_members)
        for topic in self.topics:
            self._children(f"/consumers/{self.group}/owners/{topic}", functools.partial(self._on_owners, topic))

    def stop(self) -> None:
        self._stopped = True

    # children of a path, re-armed on every change; waits for the path to exist
    def _children(self, path: str, on_children: Callable[[List[str]], None]) -> None:
        if self._stopped:
            return

        def rearm(_event: WatchedEvent) -> None:
            self._children(path, on_children)

        def done(result: Any) -> None:
            try:
                kids = result.get()
            except NoNodeError:
                self._count()
                self.zk.exists_async(path, watch=rearm).rawlink(
                    lambda r: self._children(path, on_children) if _ok(r) is not None else None)
                return
            except KazooException:
                return
            on_children(kids)

        self._count()
        self.zk.get_children_async(path, watch=rearm).rawlink(done)

    def _on_members(self, kids: List[str]) -> None:
        current = set(kids)
        with self.lock:
            for gone in set(self.members) - current:
                del self.members[gone]
                self.departures[gone] = time.time()
            self._member_reads &= current
            new = [k for k in current if k not in self.members and k not in self._member_reads]
            self._member_reads.update(new)
        for member in new:
            path = f"/consumers/{self.group}/ids/{member}"
            self._count()
            self.zk.get_async(path).rawlink(lambda r, m=member: self._on_member(m, r))

    def _on_member(self, member: str, result: Any) -> None:
        try:
            data, stat = result.get()
        except KazooException:
            with self.lock:
                self._member_reads.discard(member)
            return
        subscription = {t: int(n) for t, n in json.loads(data).get("subscription", {}).items()}
        with self.lock:
            self.members[member] = (stat.ctime, subscription, stat.ephemeralOwner)
            self.member_sessions.add(stat.ephemeralOwner)

    def _on_owners(self, topic: str, kids: List[str]) -> None:
        for kid in kids:
            tp = (topic, int(kid))
            with self.lock:
                if tp in self._tracked:
                    continue
                self._tracked.add(tp)
            self._read_owner(tp)

    def _read_owner(self, tp: TP) -> None:
        if self._stopped:
            return
        path = f"/consumers/{self.group}/owners/{tp[0]}/{tp[1]}"

        def on_event(event: WatchedEvent) -> None:
            if event.type == EventType.DELETED:
                self._record(tp, None, time.time())
                with self.lock:
                    self._tracked.discard(tp)
                # re-created meanwhile? the children watch will see it
                self._count()
                self.zk.exists_async(path).rawlink(lambda r: self._recheck(tp, r))
            elif event.type != EventType.NONE:
                self._read_owner(tp)

        def done(result: Any) -> None:
            try:
                data, stat = result.get()
            except NoNodeError:
                self._record(tp, None, time.time())
                with self.lock:
                    self._tracked.discard(tp)
                return
            except KazooException:
                return
            self._record(tp, data.decode(), stat.mtime / 1000.0)

        self._count()
        self.zk.get_async(path, watch=on_event).rawlink(done)

    def _recheck(self, tp: TP, result: Any) -> None:
        if _ok(result) is not None:
            with self.lock:
                if tp in self._tracked:
                    return
                self._tracked.add(tp)
            self._read_owner(tp)

    def _record(self, tp: TP, owner: Optional[str], at: float) -> None:
        now = time.time()
        with self.lock:
            if owner is None:
                if tp not in self.owners:
                    return
                del self.owners[tp]
            else:
                if self.owners.get(tp) == owner:
                    return
                self.owners[tp] = owner
                # an appearance dated before the deletion we learned late: the deletion was earlier
                for change in reversed(self.changes):
                    if change.tp == tp:
                        if change.owner is None and change.at > at:
                            change.at = at
                        break
            self.changes.append(Change(min(at, now), now, tp, owner))

    def state(self) -> Tuple[Dict[TP, str], Dict[str, Tuple[int, Dict[str, int], int]]]:
        with self.lock:
            return dict(self.owners), dict(self.members)

    def expected(self, members: Dict[str, Tuple[int, Dict[str, int], int]], partitions: Dict[str, int]) -> Dict[TP, str]:
        threads: Dict[str, List[str]] = {}
        for member, (_ctime, subscription, _sid) in members.items():
            for topic, n in subscription.items():
                threads.setdefault(topic, []).extend(f"{member}-{i}" for i in range(n))
        return expected_range_of_topics(threads, partitions)


def _ok(result: Any) -> Any:
    try:
        return result.get()
    except KazooException:
        return None


# ---------------------------------------------------------------------------- ZooKeeper counters

@dataclass
class Counters:
    at: float
    received: int
    sessions: Dict[int, int]   # sid -> packets received from it


#: ``srvr`` and ``cons`` each count as one packet received; between two readings, two fall in.
FOUR_LETTER_PACKETS = 2
_CONS = re.compile(r"recved=(\d+).*?sid=0x([0-9a-f]+)")


def read_counters(port: int) -> Counters:
    at = time.time()
    received = int(srvr_fields(zookeeper_command(HOST, port, "srvr")).get("Received", "0"))
    sessions: Dict[int, int] = {}
    for line in zookeeper_command(HOST, port, "cons").splitlines():
        match = _CONS.search(line)
        if match:
            sessions[int(match.group(2), 16)] = int(match.group(1))
    return Counters(at, received, sessions)


def member_packets(before: Counters, after: Counters, members: Set[int]) -> int:
    """Packets the group's members sent between two readings (sessions closed meanwhile included).

    Total received, minus what the non-member sessions present at both readings sent; a
    session closed in between (a member leaving, a dead broker) is counted as a member's.
    """
    total = after.received - before.received - FOUR_LETTER_PACKETS
    others = 0
    for sid, count in after.sessions.items():
        if sid not in members and sid in before.sessions:
            others += max(0, count - before.sessions[sid])
    return total - others

