"""A model of the brokers' group coordinator (Kafka 0.9's ``GroupCoordinator``), for switch schedules.

Restated from Kafka 0.9.0's ``kafka.coordinator.GroupCoordinator`` (what a member relies on):

* **JoinGroup** holds its answer until every member the group knows has rejoined, or the
  rebalance timeout (the session timeout in 0.9) passes; members that did not rejoin by then are
  removed. Then the generation moves on, the leader (the earlier leader if still there, else the
  first member) gets every member's metadata, and the group awaits SyncGroup. An unknown member
  id is answered UNKNOWN_MEMBER_ID; an empty one gets a new id.
* **SyncGroup** from the leader stores the assignment and answers every waiting member; a
  follower's waits for the leader's. Wrong generation: ILLEGAL_GENERATION; during a rebalance:
  REBALANCE_IN_PROGRESS.
* **Heartbeat**: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS (while preparing a
  rebalance or awaiting SyncGroup), else it renews the member's session. A member not heard from
  (JoinGroup, SyncGroup, Heartbeat) within the session timeout is removed and the group rebalances.
* **LeaveGroup** removes the member; the group rebalances at once.
* **OffsetCommit**: generation -1 with no member id is stored only while the group has no
  member (0.9 keeps no group then: ``group == null``); with members it is refused
  UNKNOWN_MEMBER_ID. A member's commit needs a known member id (UNKNOWN_MEMBER_ID) and the current
  generation (ILLEGAL_GENERATION); 0.9 checks nothing else, so a commit under the current
  generation is stored while the group prepares its next rebalance.
* **OffsetFetch** answers the stored offsets (-1: none). **DescribeGroups** lists the members.

Every request and every answer takes a few ms (``LATENCY``); a member's task waits for its answer
on the kernel. The brokers themselves do not fail here (no coordinator move, no outage).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from zkconsumer.structs import TopicPartition
from zkconsumer.wire.group_protocol import (
    ILLEGAL_GENERATION,
    NO_ERROR,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER,
    OffsetCommitPartitionResponse,
    OffsetCommitRequestV1,
    OffsetCommitRequestV2,
    OffsetCommitResponse,
    OffsetFetchPartitionResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)

from .kernel import Kernel, SimEvent

LATENCY = (0.001, 0.012)

Reply = Callable[[Any], None]


@dataclass
class CMember:
    member_id: str
    metadata: bytes
    expires: float = 0.0
    join: Optional[Reply] = None
    sync: Optional[Reply] = None
    assignment: bytes = b""


@dataclass
class JoinAnswer:
    error: int
    generation: int = -1
    member_id: str = ""
    leader: str = ""
    members: List[Tuple[str, bytes]] = field(default_factory=list)


class GroupCoordinator:
    """One group's coordinator. ``on_offset(tp, before, after, writer)`` sees every stored offset."""

    def __init__(self, kernel: Kernel, rng: random.Random, session_timeout: float,
                 trace: Callable[[str], None]) -> None:
        self.kernel = kernel
        self.rng = rng
        self.session_timeout = session_timeout
        self.trace = trace
        self.state = "Empty"  # Empty (0.9: no group), PreparingRebalance, AwaitingSync, Stable
        self.generation = 0
        self.members: Dict[str, CMember] = {}
        self.leader = ""
        self.offsets: Dict[TopicPartition, int] = {}
        self.on_offset: Callable[[TopicPartition, Optional[int], int, str], None] = lambda *a: None
        self._ids = 0
        self._rebalance_deadline = 0.0

    # ------------------------------------------------------------ the wire

    def call(self, kind: str, args: Sequence[Any], timeout: float, client: str,
             alive: Callable[[], bool] = lambda: True) -> Optional[Any]:
        """From a member's task: send ``kind(*args)``, wait for the answer (``None``: none within ``timeout``).
        A process killed meanwhile (``alive()`` false) sends nothing and never runs on: a task of a member
        killed while frozen is resumed once by the kernel at the freeze's end, and must not heartbeat."""
        if not alive():
            self.kernel.block(None)
        box: List[Any] = []
        done = SimEvent(self.kernel)

        def reply(value: Any) -> None:
            def deliver() -> None:
                box.append(value)
                done.set()
            self.kernel.at(self.kernel.now + self.rng.uniform(*LATENCY), deliver)
        handler = getattr(self, "_" + kind)
        self.kernel.at(self.kernel.now + self.rng.uniform(*LATENCY), lambda: handler(reply, client, *args))
        done.wait(timeout)
        return box[0] if box else None

    # ------------------------------------------------------------ membership

    def _join(self, reply: Reply, client: str, member_id: str, metadata: bytes) -> None:
        if member_id and member_id not in self.members:
            reply(JoinAnswer(UNKNOWN_MEMBER))
            return
        if not member_id:
            self._ids += 1
            member_id = f"{client}-c{self._ids}"
            self.members[member_id] = CMember(member_id, metadata)
        m = self.members[member_id]
        m.metadata, m.join = metadata, reply
        if self.state != "PreparingRebalance":
            self._prepare(f"{member_id} joins")
        self._try_complete()

    def _prepare(self, why: str) -> None:
        if not self.members:
            self.state = "Empty"
            self.trace(f"COORDINATOR empty ({why})")
            return
        for m in self.members.values():  # followers waiting for the leader's SyncGroup
            if m.sync is not None:
                m.sync(REBALANCE_IN_PROGRESS)
                m.sync = None
        self.state = "PreparingRebalance"
        self._rebalance_deadline = deadline = self.kernel.now + self.session_timeout
        self.trace(f"COORDINATOR preparing a rebalance of generation {self.generation} ({why})")
        self.kernel.at(deadline, lambda: self._rebalance_timeout(deadline))

    def _rebalance_timeout(self, deadline: float) -> None:
        if self.state != "PreparingRebalance" or deadline != self._rebalance_deadline:
            return
        for member_id in [i for i, m in self.members.items() if m.join is None]:
            del self.members[member_id]
            self.trace(f"COORDINATOR {member_id} did not rejoin: removed")
        if not self.members:
            self.state = "Empty"
            return
        self._complete()

    def _try_complete(self) -> None:
        if self.state == "PreparingRebalance" and all(m.join is not None for m in self.members.values()):
            self._complete()

    def _complete(self) -> None:
        self.generation += 1
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        listed = [(m.member_id, m.metadata) for m in self.members.values()]
        self.state = "AwaitingSync"
        self.trace(f"COORDINATOR generation {self.generation}: {sorted(self.members)}, leader {self.leader}")
        for m in self.members.values():
            assert m.join is not None
            m.join(JoinAnswer(NO_ERROR, self.generation, m.member_id, self.leader,
                              listed if m.member_id == self.leader else []))
            m.join = None
            self._renew(m)

    def _renew(self, m: CMember) -> None:
        m.expires = expires = self.kernel.now + self.session_timeout
        self.kernel.at(expires, lambda: self._expire(m.member_id, expires))

    def _expire(self, member_id: str, expires: float) -> None:
        m = self.members.get(member_id)
        if m is None or m.expires != expires or m.join is not None:
            return
        self._remove(member_id, "session timeout")

    def _remove(self, member_id: str, why: str) -> None:
        m = self.members.pop(member_id)
        if m.sync is not None:
            m.sync = None
        self.trace(f"COORDINATOR {member_id} removed: {why}")
        if self.state == "PreparingRebalance":
            if not self.members:
                self.state = "Empty"
            else:
                self._try_complete()
        else:
            self._prepare(f"{member_id} removed")

    def _check(self, member_id: str, generation: int) -> int:
        if member_id not in self.members:
            return UNKNOWN_MEMBER
        if generation != self.generation:
            return ILLEGAL_GENERATION
        return NO_ERROR

    def _sync(self, reply: Reply, client: str, generation: int, member_id: str,
              assignments: Sequence[Tuple[str, bytes]]) -> None:
        code = self._check(member_id, generation)
        if code == NO_ERROR and self.state == "PreparingRebalance":
            code = REBALANCE_IN_PROGRESS
        if code != NO_ERROR:
            reply(code)
            return
        m = self.members[member_id]
        self._renew(m)
        if self.state == "Stable":
            reply(m.assignment)
            return
        m.sync = reply
        if member_id == self.leader:
            given = dict(assignments)
            for other in self.members.values():
                other.assignment = given.get(other.member_id, b"")
            self.state = "Stable"
            self.trace(f"COORDINATOR generation {self.generation} stable")
            for other in self.members.values():
                if other.sync is not None:
                    other.sync(other.assignment)
                    other.sync = None

    def _heartbeat(self, reply: Reply, client: str, generation: int, member_id: str) -> None:
        code = self._check(member_id, generation)
        if code == NO_ERROR:
            self._renew(self.members[member_id])
            if self.state != "Stable":
                code = REBALANCE_IN_PROGRESS
        reply(code)

    def _leave(self, reply: Reply, client: str, member_id: str) -> None:
        if member_id not in self.members:
            reply(UNKNOWN_MEMBER)
            return
        self._remove(member_id, "LeaveGroup")
        reply(NO_ERROR)

    def _describe(self, reply: Reply, client: str) -> None:
        reply(sorted(self.members))

    # ------------------------------------------------------------ offsets

    def _commit(self, reply: Reply, client: str, request: Any) -> None:
        if isinstance(request, OffsetCommitRequestV2):
            code = self._check(request.member_id, request.generation_id)
        else:
            assert isinstance(request, OffsetCommitRequestV1)
            code = UNKNOWN_MEMBER if self.members else NO_ERROR
        if code == NO_ERROR:
            for e in request.offsets:
                tp = (e.topic, e.partition)
                before = self.offsets.get(tp)
                self.offsets[tp] = e.offset
                self.on_offset(tp, before, e.offset, client)
        reply(OffsetCommitResponse(tuple(OffsetCommitPartitionResponse(e.topic, e.partition, code)
                                         for e in request.offsets)))

    def _fetch(self, reply: Reply, client: str, request: OffsetFetchRequest) -> None:
        reply(OffsetFetchResponse(tuple(OffsetFetchPartitionResponse(t, p, self.offsets.get((t, p), -1), "", 0)
                                        for t, p in request.partitions)))


class SimChannel:
    """``CoordinatorChannel``'s surface for the production ``KafkaOffsetStorage``: OffsetCommit and
    OffsetFetch go to the model; no answer within ``timeout`` raises a retriable broker error."""

    def __init__(self, coordinator: GroupCoordinator, client: str, timeout: float = 5.0,
                 alive: Callable[[], bool] = lambda: True) -> None:
        self._coordinator = coordinator
        self._client = client
        self._alive = alive
        self._timeout = timeout
        self.coordinator = None

    def send(self, request: Any) -> Any:
        from zkconsumer.errors import BrokerUnavailableError
        kind = "fetch" if isinstance(request, OffsetFetchRequest) else "commit"
        got = self._coordinator.call(kind, (request,), self._timeout, self._client, self._alive)
        if got is None:
            raise BrokerUnavailableError("no answer from the coordinator")
        return got

    def invalidate(self, reason: str = "") -> None:
        pass

    def interrupt(self) -> None:
        pass

    def close(self) -> None:
        pass
