"""The properties every simulated run must keep, and where each is checked.

=====================  ========================================================  =======================
name                   property                                                  checked
=====================  ========================================================  =======================
exclusive              a member that delivers a partition holds its owner node   after every event that
                       under its current, live session (so no two live members'  ran one of the member's
                       threads deliver one partition at once); a member whose    tasks, and at every
                       session was lost (stale, or dead on the server) is not    message handed out
                       checked here: what it can still deliver is bounded by
                       ``queued`` and ``handout``
queued                 a chunk is queued for a partition only while the          at every chunk queued
                       session the member's lease vouches for is alive on the    (the fetcher model,
                       leader and holds that partition's owner node; no          :mod:`.fetch`)
                       exemption for a frozen, cut-off or stale member. Excused:
                       a node Kafka 0.8.2's member wrote or deleted (its own);
                       a session whose expiry another client forced (the
                       ``expire`` fault) before kazoo reported it LOST: no lease
                       can see that before its timeout (counted)
handout                no message is handed out by a member whose session is     at every message
                       alive and does not own its partition then; one whose      handed out
                       session is gone hands out only what was queued before
                       (``queued``), at most the queue's depth (DEPTH x CHUNK
                       messages) per partition since its last chunk was queued:
                       the bound on the duplicates of a freeze or a cut
offsets-monotone       no committed offset ever moves backwards                  at every ZooKeeper write
settles                once faults stop, within a bound: every live member       at quiescence
                       STABLE and not given up, every subscribed partition
                       owned, the owners equal to Kafka's assignment over the
                       registered thread ids, each member delivering exactly
                       what it owns
shutdown-ends          every clean leave (``shutdown()``) ends, within a bound   at each leave and at
                                                                                 the end of the run
no-crash               no background task dies, no kazoo-thread callback blocks  after every event
=====================  ========================================================  =======================
"""

from __future__ import annotations

from typing import Dict, List, Optional

from zkconsumer.structs import TopicPartition
from zkconsumer.zookeeper import zkformat

from .expected import expected
from .fetch import Chunk
from .member import GROUP, Member
from .zkmodel import Ensemble, Node

PATHS = zkformat.GroupPaths(GROUP)

class Violation(Exception):
    """An invariant broke: ``name`` (from the table above) and what was seen."""

    def __init__(self, name: str, detail: str, tp: Optional[TopicPartition] = None) -> None:
        super().__init__(f"{name}: {detail}")
        self.name = name
        self.detail = detail
        self.tp = tp  # the partition it broke on, where there is one


#: ``PATHS.owner(topic, partition)`` by partition: the checks look owner nodes up after every event.
_OWNER_PATHS: Dict[TopicPartition, str] = {}


def owner_path(tp: TopicPartition) -> str:
    path = _OWNER_PATHS.get(tp)
    if path is None:
        path = _OWNER_PATHS[tp] = PATHS.owner(tp[0], tp[1])
    return path


def owner_node(ensemble: Ensemble, tp: TopicPartition) -> Optional[Node]:
    return ensemble.leader.tree.get(owner_path(tp))


def check_exclusive(member: Member, ensemble: Ensemble, now: float) -> None:
    """``exclusive`` for one member (see the table)."""
    if not member.live:
        return
    believed = member.believed()  # a pure read: asked once
    if member.stale:
        if believed:
            return
        member.stale = False
    if not believed:
        return
    sid = member.client.sid
    if sid is None or not ensemble.alive(sid):
        return
    tree = ensemble.leader.tree
    prefix = (member.consumer_id + "-").encode()  # a UTF-8 prefix of the bytes iff of the text
    for tp in believed:  # the common case: every node held (in any order)
        node = tree.get(_OWNER_PATHS.get(tp) or owner_path(tp))
        if node is None or node.owner != sid or not node.data.startswith(prefix):
            break
    else:
        return
    for tp, thread in sorted(believed.items()):  # a breach: the first one in order is reported
        node = tree.get(owner_path(tp))
        if node is None or node.owner != sid or not node.data.startswith(prefix):
            holder = "nobody" if node is None else f"{node.data.decode()} (session 0x{node.owner:x})"
            raise Violation("exclusive", f"t={now:.3f} {member.name} ({member.consumer_id}, session 0x{sid:x}) "
                                         f"delivers {tp[0]}-{tp[1]} as {thread} but its owner node is held by {holder}",
                            tp)


def check_queued(member: Member, ensemble: Ensemble, tp: TopicPartition, chunk: Chunk,
                 now: float) -> Optional[Violation]:
    """``queued`` for one chunk (see the table): ``None`` if it holds, else the breach (the caller excuses)."""
    sid = chunk.session
    node = owner_node(ensemble, tp)
    if sid is not None and ensemble.alive(sid) and node is not None and node.owner == sid \
            and node.data.startswith((member.consumer_id + "-").encode()):
        return None
    holder = "nobody" if node is None else f"{node.data.decode()} (session 0x{node.owner:x})"
    state = "no session" if sid is None else f"session 0x{sid:x} {'alive' if ensemble.alive(sid) else 'gone'}"
    return Violation("queued", f"t={now:.3f} {member.name} ({member.consumer_id}, {state}) queued "
                               f"{tp[0]}-{tp[1]}@{chunk.first}..{chunk.end - 1} but its owner node is held by {holder}",
                     tp)


class OffsetWatch:
    """``offsets-monotone``: an observer of every change the leader commits."""

    def __init__(self, ensemble: Ensemble) -> None:
        self.ensemble = ensemble
        self.last: Dict[str, int] = {}
        self.last_kafka: Dict[str, bool] = {}  # was the last value written by a Kafka 0.8.2 member?
        self.writes = 0
        self.violation: Optional[Violation] = None
        self.kafka_caused = False
        self.now = 0.0

    def __call__(self, zxid: int, effects: list) -> None:  # type: ignore[type-arg]
        for _kind, path, node in effects:
            if node is None or "/offsets/" not in path or path.count("/") != 5:
                continue
            value = int(node.data)
            self.writes += 1
            previous = self.last.get(path)
            session = self.ensemble.last_writer.get(path, 0)
            writer = self.ensemble.clients.get(session)
            kafka = bool(getattr(writer, "kafka", False))
            if previous is not None and value < previous and self.violation is None:
                self.violation = Violation("offsets-monotone", f"t={self.now:.3f} {path} went from {previous} to {value}"
                                           + (" (written by Kafka's member)" if kafka else ""))
                # Kafka's own when Kafka's member wrote the lower value, or when it wrote the higher one
                # (its commits are not fenced) and the zkconsumer member that wrote below it held the
                # partition's owner node under the session it wrote with: a rightful owner's position.
                # A zkconsumer write without the owner node fails the run whoever wrote before it.
                self.kafka_caused = kafka or (self.last_kafka.get(path, False) and self._holds(session, path))
            self.last[path] = value
            self.last_kafka[path] = kafka

    def _holds(self, session: int, offset_path: str) -> bool:
        node = self.ensemble.leader.tree.get(_owner_of_offset(offset_path))
        return node is not None and session != 0 and node.owner == session


def _owner_of_offset(path: str) -> str:
    """``/consumers/g/offsets/t/p`` -> ``/consumers/g/owners/t/p``."""
    return path.replace("/offsets/", "/owners/", 1)


def check_settled(members: List[Member], ensemble: Ensemble, strategy: str) -> Optional[str]:
    """``settles``: ``None`` if the group is settled as Kafka's assignment says, else why not."""
    tree = ensemble.leader.tree
    live = [m for m in members if m.state == "joined"]
    for m in live:
        if not m.settled():
            if getattr(m, "kafka", False):
                return f"Kafka's member {m.name} has not settled (gave up: {m.gave_up})"
            status = m.rebalancer.status
            return f"{m.name} is {status.state.value} (gave_up={status.gave_up}, last_error={status.last_error})"
    ids = tree.get(PATHS.ids)
    registrations = {c: tree[f"{PATHS.ids}/{c}"].data for c in sorted(ids.children)} if ids else {}
    joined_ids = {m.consumer_id for m in live}
    if set(registrations) != joined_ids:
        return f"registered {sorted(registrations)} but joined {sorted(joined_ids)}"
    topics_node = tree.get("/brokers/topics")
    partitions = {t: len(zkformat.decode_topic_partitions(f"/brokers/topics/{t}", tree[f"/brokers/topics/{t}"].data))
                  for t in sorted(topics_node.children)} if topics_node else {}
    want = expected(strategy, registrations, partitions)
    if want is None:
        return "RoundRobin precondition does not hold"
    have: Dict[TopicPartition, str] = {}
    for topic in partitions:
        base = tree.get(PATHS.owners_topic(topic))
        for child in sorted(base.children) if base else []:
            have[(topic, int(child))] = tree[f"{PATHS.owners_topic(topic)}/{child}"].data.decode()
    if have != want:
        diff = sorted(set(have.items()) ^ set(want.items()))[:6]
        return f"owner nodes differ from Kafka's assignment: {diff}"
    for m in live:
        mine = {tp: t for tp, t in want.items() if t.startswith(m.consumer_id + "-")}
        if not getattr(m, "kafka", False) and m.believed() != mine:
            return f"{m.name} delivers {sorted(m.believed().items())[:4]}... but owns {sorted(mine.items())[:4]}..."
    return None
