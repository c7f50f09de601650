"""A schedule, and one deterministic run of it: the group, ZooKeeper, the faults, the checks.

A :class:`Schedule` is plain data: the seed (latencies, member ids, the application's
consumption and commits), the group's shape, and a list of timed events. :func:`generate`
draws one from a seed; :func:`run` plays it and returns an :class:`Outcome`. The same
schedule always plays the same way (one OS thread, a virtual clock, seeded generators,
sorted iteration), so a failing schedule replays exactly, and a shrunk one too.

Phases of a run: events until the last one (at most ``HORIZON`` virtual seconds); then
every fault heals (ZooKeeper resumes, links and followers catch up) and the group must
settle within ``SETTLE_S``; then every member leaves cleanly and each leave must end
within ``LEAVE_S``.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import logging
import random
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

from zkconsumer.zookeeper import migration, zkformat

from .coordinator import GroupCoordinator
from .fetch import CHUNK, DEPTH, Chunk
from .invariants import OffsetWatch, Violation, check_exclusive, check_queued, check_settled, owner_node
from .kafka_member import KafkaMember
from .kernel import Kernel
from .member import Member
from .network import ClientFaults, Network
from .servers import SERVER_EVENTS, ServerFaults, server_faults
from .switch_checks import check_across, check_switch_settled
from .zkmodel import Ensemble

HORIZON = 26.0
SETTLE_S = 90.0
LEAVE_S = 30.0
SESSION_TIMEOUT_S = 6.0
#: The leader pings its followers every tickTime/2 (the session tracker ticks every tickTime, 0.5 s).
LEADER_PING_S = 0.25

Event = Tuple[Any, ...]  # (time, kind, *args)


@dataclass(frozen=True)
class Schedule:
    seed: int
    strategy: str
    topics: Tuple[Tuple[str, int], ...]
    #: per member index: (subscription, wildcard regex or None)
    specs: Tuple[Tuple[Tuple[Tuple[str, int], ...], Optional[str]], ...]
    followers: int
    events: Tuple[Event, ...]
    #: member indexes that run Kafka 0.8.2's own consumer (:mod:`.kafka_member`) instead of zkconsumer
    kafka: Tuple[int, ...] = ()
    #: the probability that a thread is descheduled inside a ZooKeeper call, before its request
    #: enters kazoo's queue (:class:`~.client.ClientFaults`); 0: never
    preempt: float = 0.0
    #: the most kazoo's callback and completion threads lag per callback (seconds); 0: none
    callback_lag: float = 0.0
    #: a switch schedule (:func:`generate_switch`): the brokers' group coordinator is modelled, offsets
    #: live in Kafka, and ``migrate`` events move the group between the two memberships
    switch: bool = False
    #: the client model's drop rule as it was until the heartbeat's watch fix: a silent server checked at
    #: each ping only, so dropped up to a third of the timeout late, near it (as production's heartbeat
    #: thread did then); kept for a schedule found with it whose bug needs that timing to show
    late_drop: bool = False

    def describe(self) -> str:
        lines = [f"seed={self.seed} strategy={self.strategy} followers={self.followers} topics={dict(self.topics)}"
                 + (f" preempt={self.preempt}" if self.preempt else "")
                 + (f" callback_lag={self.callback_lag}" if self.callback_lag else "")
                 + (" switch" if self.switch else "")
                 + (" late_drop" if self.late_drop else "")]
        for i, (sub, wildcard) in enumerate(self.specs):
            kind = "Kafka 0.8.2 " if i in self.kafka else ""
            lines.append(f"  {kind}member m{i}: " + (f"wildcard {wildcard!r} x{sub[0][1]}" if wildcard else f"{dict(sub)}"))
        lines += [f"  t={e[0]:7.3f} {e[1]} {' '.join(map(str, e[2:]))}" for e in self.events]
        return "\n".join(lines)

    def to_json(self) -> str:
        d: Dict[str, Any] = {"seed": self.seed, "strategy": self.strategy, "topics": self.topics, "specs": self.specs,
                             "followers": self.followers, "events": self.events, "kafka": self.kafka}
        if self.preempt or self.callback_lag:  # schedules without them stay as they were saved
            d.update(preempt=self.preempt, callback_lag=self.callback_lag)
        if self.switch:
            d.update(switch=True)
        if self.late_drop:
            d.update(late_drop=True)
        return json.dumps(d, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> "Schedule":
        d = json.loads(text)

        def tup(x: Any) -> Any:
            return tuple(tup(i) for i in x) if isinstance(x, list) else x
        return Schedule(d["seed"], d["strategy"], tup(d["topics"]), tup(d["specs"]), d["followers"], tup(d["events"]),
                        tup(d.get("kafka", [])), d.get("preempt", 0.0), d.get("callback_lag", 0.0),
                        bool(d.get("switch", False)), bool(d.get("late_drop", False)))

    def replace_events(self, events: List[Event]) -> "Schedule":
        return dataclasses.replace(self, events=tuple(events))


@dataclass
class Outcome:
    schedule: Schedule
    violation: Optional[Violation] = None
    steps: int = 0
    virtual_s: float = 0.0
    handouts: int = 0
    #: messages handed out by a member whose session was gone (each queued before: ``handout``)
    stale_handouts: int = 0
    #: the most of them one member handed out of one partition after its last chunk was queued
    max_held_over: int = 0
    #: chunks queued; of them, under a session whose expiry another client forced and kazoo had
    #: not reported yet (no lease can see that: see ``queued`` in :mod:`.invariants`)
    queued: int = 0
    forced_queued: int = 0
    offset_writes: int = 0
    settle_s: Optional[float] = None
    #: hand-overs from one membership to the other that members completed (switch schedules)
    switches: int = 0
    trace: List[str] = field(default_factory=list)
    #: Invariants broken by Kafka 0.8.2's own members (documented as Kafka's, not failures): name -> count.
    kafka_findings: Dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.violation is None


FAULTS = ("kill", "leave", "expire", "drop", "cut", "pause", "slow", "lag", "join", "add_partitions", "add_topic",
          "commit")


def generate_mixed(seed: int) -> Schedule:
    """A schedule whose group mixes zkconsumer members with Kafka 0.8.2's own (static subscriptions)."""
    base = generate(seed, max_members=8, wildcard=False)
    rng = random.Random(seed ^ 0x5EED)
    slots = range(len(base.specs))
    kafka = tuple(sorted(rng.sample(list(slots), k=max(1, len(base.specs) // 2))))
    return dataclasses.replace(base, kafka=kafka)


def generate_switch(seed: int) -> Schedule:
    """A switch schedule: a group of up to 8 zkconsumer members (static subscriptions, offsets in Kafka)
    with the faults of :func:`generate` (but for new partitions and topics: the coordinator members'
    leader does not watch them here), moved to coordinator membership by a ``migrate`` event as
    ``zkconsumer groups migrate --to kafka --execute`` writes it, and in a third of them back
    (``--to zookeeper``), sometimes forth again. Drawn from a generator of its own: old seeds unchanged."""
    base = generate(seed, max_members=8, wildcard=False)
    rng = random.Random(seed ^ 0x5A17C4)
    events = [e for e in base.events if e[1] not in ("add_partitions", "add_topic")]
    t = round(rng.uniform(1.5, HORIZON - 8), 3)
    events.append((t, "migrate", "kafka"))
    if rng.random() < 0.35:
        t = round(rng.uniform(t + 0.5, HORIZON - 3), 3)
        events.append((t, "migrate", "zookeeper"))
        if rng.random() < 0.3:
            events.append((round(rng.uniform(t + 0.5, HORIZON - 1), 3), "migrate", "kafka"))
    events.sort(key=lambda e: (e[0], e[1]))
    return dataclasses.replace(base, events=tuple(events), switch=True)


def generate(seed: int, max_members: int = 32, wildcard: bool = True) -> Schedule:
    """A random schedule: mostly small groups, sometimes large ones, both strategies, faults."""
    rng = random.Random(seed)
    strategy = rng.choice(("range", "roundrobin"))
    n_topics = rng.randint(1, 3)
    topics = tuple((f"t{i}", rng.randint(1, 12)) for i in range(n_topics))
    big = rng.random() < 0.05
    n_members = rng.randint(8, max_members) if big else rng.randint(1, min(6, max_members))
    n_slots = n_members + rng.randint(0, 2)
    specs: List[Tuple[Tuple[Tuple[str, int], ...], Optional[str]]] = []
    wildcard_group = rng.random() < 0.25 and wildcard
    for _ in range(n_slots):
        streams = rng.randint(1, 3)
        if wildcard_group and (strategy == "roundrobin" or rng.random() < 0.7):
            specs.append(((("t[0-9]+", streams),), "t[0-9]+"))
        elif strategy == "roundrobin":
            specs.append((tuple((t, streams) for t, _ in topics), None))
        else:
            chosen = [t for t, _ in topics if rng.random() < 0.7] or [topics[0][0]]
            specs.append((tuple((t, rng.randint(1, 3)) for t in chosen), None))
    if strategy == "roundrobin" and wildcard_group:
        specs = [((("t[0-9]+", s[0][0][1]),), "t[0-9]+") for s in specs]
    events: List[Event] = [(round(rng.uniform(0, 1.5), 3), "join", i) for i in range(n_members)]
    for _ in range(rng.randint(0, 8 if not big else 4)):
        t = round(rng.uniform(0.5, HORIZON - 4), 3)
        kind = rng.choice(FAULTS)
        i = rng.randrange(n_slots)
        if kind in ("cut", "pause", "slow", "lag"):
            events.append((t, kind, i, round(rng.uniform(0.5, 10.0), 3)))
        elif kind == "add_partitions":
            topic, n = rng.choice(topics)
            events.append((t, kind, topic, n + rng.randint(1, 4)))
        elif kind == "add_topic":
            events.append((t, kind, f"t{n_topics + rng.randint(0, 1)}", rng.randint(1, 6)))
        else:
            events.append((t, kind, i))
    events.sort(key=lambda e: (e[0], e[1]))
    followers = rng.choice((0, 0, 1, 2))
    preempt, callback_lag = _process_faults(seed, n_slots, events)
    server_faults(seed, n_slots, followers, events, HORIZON)
    return Schedule(seed, strategy, topics, tuple(specs), followers, tuple(events), (), preempt, callback_lag)


#: The share of schedules that draw the faults of the member process (:func:`_process_faults`).
PROCESS_FAULTS_SHARE = 0.5


def _process_faults(seed: int, n_slots: int, events: List[Event]) -> Tuple[float, float]:
    """Faults of a member's process, drawn after everything else from a generator of their own,
    so a schedule that draws none is the schedule the seed made before they existed.

    Returns ``(preempt, callback_lag)`` (see :class:`Schedule`) and adds ``freeze`` events to
    ``events``: the member's whole process (its threads, its client's pings and reads) stops
    for a while, sometimes longer than the session timeout.
    """
    rng = random.Random(seed * 31 + 0x7F)
    if rng.random() >= PROCESS_FAULTS_SHARE:
        return 0.0, 0.0
    preempt = rng.choice((0.0, 0.02, 0.1, 0.3))
    callback_lag = rng.choice((0.0, 0.0, 0.01, 0.3))
    for _ in range(rng.choice((0, 0, 1, 1, 2))):
        seconds = rng.uniform(0.2, 4.0) if rng.random() < 0.6 else rng.uniform(4.0, 12.0)
        events.append((round(rng.uniform(0.5, HORIZON - 4), 3), "freeze", rng.randrange(n_slots), round(seconds, 3)))
    events.sort(key=lambda e: (e[0], e[1]))
    return preempt, callback_lag


class World:
    """One run's state; see :func:`run`."""

    def __init__(self, schedule: Schedule, keep_trace: bool) -> None:
        self.schedule = schedule
        self.kernel = Kernel()
        self.kernel.tracing = keep_trace
        self.rng = random.Random(schedule.seed * 7 + 3)
        #: The ZooKeeper retries' jitter, one stream for every member in the order they draw (it was the
        #: global generator seeded with the schedule's seed; any thread of the process could draw from that).
        self.jitter = random.Random(schedule.seed)
        self.network = Network(random.Random(schedule.seed * 7 + 1))
        self.ensemble = Ensemble(schedule.followers, self.kernel.clock)
        self.offsets = OffsetWatch(self.ensemble)
        self.ensemble.observers.append(self.offsets)
        self.ensemble.observers.append(self._committed)
        self.sync_pending = False
        self.outcome = Outcome(schedule)
        self.keep_trace = keep_trace
        self.slots: Dict[int, Member] = {}
        self.members: List[Member] = []
        self.incarnations: Dict[int, int] = {}
        self.lagging_until = 0.0
        self.leaves: Dict[str, float] = {}  # member name -> leave deadline (virtual)
        self.late_kafka_leaves: Set[str] = set()  # Kafka members past their leave deadline (recorded)
        self.pause_end = 0.0
        self.partitions: Dict[str, int] = dict(schedule.topics)
        self.healed = False
        self.servers = ServerFaults(self)
        self.forced: Set[int] = set()  # sessions the ``expire`` fault ended (another client's close)
        self.breach: Optional[Violation] = None  # found on a member's task (``queued``), raised by check_step
        self.held_over: Dict[Tuple[str, Tuple[str, int]], int] = {}  # (member, partition) -> see Outcome
        self.coordinator: Optional[GroupCoordinator] = None
        self.intent = "zookeeper"  # what the migration node says (switch schedules)
        if schedule.switch:
            self.coordinator = GroupCoordinator(self.kernel, random.Random(schedule.seed * 7 + 5), SESSION_TIMEOUT_S,
                                                self.trace)
            self.coordinator.on_offset = self._kafka_offset

    def trace(self, line: str) -> None:
        if self.keep_trace:
            self.outcome.trace.append(f"{self.kernel.now:9.4f} {line}")

    # ------------------------------------------------------------ setup

    def _admin_write(self, path: str, data: bytes) -> None:
        """Brokers and admin tools write topic nodes (persistent, no session of ours)."""
        tree = self.ensemble.leader.tree
        if path in tree:
            self.ensemble.execute(self.ensemble.leader, 0, "set", {"path": path, "value": data, "version": -1})
        else:
            self.ensemble.execute(self.ensemble.leader, 0, "create", {"path": path, "value": data, "makepath": True})

    def _write_topic(self, topic: str, n: int) -> None:
        body = "{" + ",".join(f'"{p}":[0]' for p in range(n)) + "}"
        self._admin_write(f"/brokers/topics/{topic}", ('{"version":1,"partitions":' + body + "}").encode())
        self.partitions[topic] = n

    def setup(self) -> None:
        for topic, n in self.schedule.topics:
            self._write_topic(topic, n)
        self._sync()
        self._tick_sessions()
        if len(self.ensemble.servers) > 1:  # at a phase of its own (a generator of its own: no other draw moves)
            self.kernel.at(random.Random(self.schedule.seed * 7 + 9).uniform(0.0, LEADER_PING_S), self._leader_ping)
        for event in self.schedule.events:
            self.kernel.at(event[0], lambda e=event: self._apply(e))

    def _committed(self, zxid: int, effects: list) -> None:  # type: ignore[type-arg]
        """Followers apply a committed change a few ms later (unless lagging, or ZooKeeper is paused)."""
        if len(self.ensemble.servers) > 1 and not self.sync_pending:
            self.sync_pending = True
            self.kernel.at(max(self.kernel.now + self.rng.uniform(0.001, 0.02), self.lagging_until), self._sync)

    def _sync(self) -> None:
        self.sync_pending = False
        if self.ensemble.paused or self.ensemble.down or self.kernel.now < self.lagging_until:
            self.sync_pending = True
            self.kernel.at(max(self.kernel.now + 0.25, self.lagging_until), self._sync)
            return
        for server in self.ensemble.servers[1:]:
            if server.index not in self.ensemble.isolated:  # cut off from the leader (servers.py)
                self.ensemble.sync(server)

    def _tick_sessions(self) -> None:
        if not self.ensemble.paused and not self.ensemble.down:
            for sid in self.ensemble.expire_idle():
                self._server_closed(sid)
        self.kernel.at(self.kernel.now + 0.5, self._tick_sessions)

    def _leader_ping(self) -> None:
        """The leader pings its followers every tickTime/2; their answers touch their sessions (zkmodel.py)."""
        self.ensemble.leader_ping()
        self.kernel.at(self.kernel.now + LEADER_PING_S, self._leader_ping)

    def _server_closed(self, sid: int) -> None:
        client = self.ensemble.clients.get(sid)
        if client is not None and client.sid == sid and client.server not in self.ensemble.isolated:
            # (a follower cut off from the leader does not learn of the expiry: servers.py)
            self.kernel.at(self.kernel.now + 0.002, lambda: client.drop_connection("session expired"))

    # ------------------------------------------------------------ events

    def _member(self, i: int) -> Optional[Member]:
        m = self.slots.get(i)
        return m if m is not None and m.state in ("joining", "joined") else None

    def _apply(self, event: Event) -> None:
        if self.healed:
            return
        kind, args = event[1], event[2:]
        self.trace(f"EVENT {kind} {args}")
        if kind == "join":
            i = args[0] % len(self.schedule.specs)
            if self._member(i) is not None or (i in self.slots and self.slots[i].state == "leaving"):
                return
            self.incarnations[i] = self.incarnations.get(i, -1) + 1
            sub, wildcard = self.schedule.specs[i]
            member_seed = self.schedule.seed * 1000 + i * 10 + self.incarnations[i]
            m: Any
            if i in self.schedule.kafka:
                m = KafkaMember(self.kernel, self.ensemble, self.network, i, self.incarnations[i], dict(sub),
                                self.schedule.strategy, member_seed, self.trace, SESSION_TIMEOUT_S)
            else:
                m = Member(self.kernel, self.ensemble, self.network, i, self.incarnations[i], dict(sub), wildcard,
                           self.schedule.strategy, member_seed, self.trace, SESSION_TIMEOUT_S, self.coordinator,
                           jitter=self.jitter)
            m.client.late_drop = self.schedule.late_drop
            if self.schedule.preempt or self.schedule.callback_lag:
                m.client.faults = ClientFaults(random.Random(member_seed * 13 + 5), self.schedule.preempt,
                                               self.schedule.callback_lag)
            if isinstance(m, Member):
                m.fetchers.observer = lambda tp, chunk, m=m: self._queued(m, tp, chunk)
            self.slots[i] = m
            self.members.append(m)
            m.join()
            self._app_tick(m)
        elif kind in ("kill", "leave", "expire", "drop", "cut", "commit", "freeze"):
            m = self._member(args[0] % max(1, len(self.schedule.specs)))
            if m is None:
                return
            if kind == "kill":
                m.kill()
            elif kind == "leave":
                self._leave(m)
            elif kind == "expire":  # kazoo's test harness: a second client with the session's id closes it
                if m.client.sid is not None:
                    self.forced.add(m.client.sid)
                    self.ensemble.expire(m.client.sid)
                    self._server_closed(m.client.sid)
            elif kind == "drop":
                m.client.drop_connection("connection reset")
            elif kind == "cut":
                self.network.partitioned[m.name] = self.kernel.now + args[1]
            elif kind == "freeze":  # SIGSTOP of the whole process: its threads, its pings, its reads
                until = max(m.client.frozen_until, self.kernel.now + args[1])
                m.client.frozen_until = self.kernel.frozen[m.name] = until
            else:
                m.commit()
        elif kind == "migrate":  # zkconsumer groups migrate --to X --execute: create or set the node
            self.intent = args[0]
            self._admin_write(migration.migration_path("g"), migration.encode_intent(args[0], int(self.kernel.now * 1000)))
        elif kind in SERVER_EVENTS:
            self.servers.apply(kind, args)
        elif kind == "pause":
            self._pause(args[1])
        elif kind == "slow":
            self.network.slow_until = max(self.network.slow_until, self.kernel.now + args[1])
        elif kind == "lag":
            self.lagging_until = max(self.lagging_until, self.kernel.now + args[1])
        elif kind == "add_partitions":
            topic, n = args
            if topic in self.partitions and n > self.partitions[topic]:
                self._write_topic(topic, n)
        elif kind == "add_topic":
            topic, n = args
            if topic not in self.partitions:
                self._write_topic(topic, n)

    def _pause(self, seconds: float) -> None:
        if self.ensemble.paused:
            return
        self.ensemble.paused = True
        self.pause_end = self.kernel.now + seconds
        self.kernel.at(self.pause_end, self._resume)

    def _resume(self) -> None:
        if not self.ensemble.paused:
            return
        self.ensemble.paused = False
        backlog, self.ensemble.backlog = self.ensemble.backlog, []
        for request in backlog:
            self.kernel.soon(request)
        now = self.kernel.now
        for sid in sorted(self.ensemble.sessions):
            s = self.ensemble.sessions[sid]
            # The session tracker and the client's reconnection race at resume: a coin decides.
            if s.alive and now - s.last_heard > s.timeout and self.rng.random() < 0.5:
                self.ensemble.expire(sid)
                self._server_closed(sid)

    def _leave(self, m: Member) -> None:
        self.leaves[m.name] = self.kernel.now + LEAVE_S
        m.leave(lambda: self.leaves.pop(m.name, None))

    def _app_tick(self, m: Member) -> None:
        """The application: hand out a few messages, sometimes commit (auto-commit is on too)."""
        if m.state in ("left", "killed", "join-failed"):
            return
        if self.kernel.now < m.client.frozen_until:  # the application's thread is stopped too
            self.kernel.at(m.client.frozen_until, lambda: self._app_tick(m))
            return
        if m.state == "joined":
            for _ in range(self.rng.randint(0, 3)):
                self._handout(m)
            if self.rng.random() < 0.15:
                m.commit()
        self.kernel.at(self.kernel.now + self.rng.uniform(0.3, 1.3), lambda: self._app_tick(m))

    def _handout(self, m: Member) -> None:
        got = m.consume()
        if got is None:
            return
        tp, offset = got
        self.outcome.handouts += 1
        if getattr(m, "mode", "zookeeper") != "zookeeper":
            return  # a coordinator member: exclusive-across covers it (switch_checks)
        sid = m.client.sid
        node = owner_node(self.ensemble, tp)
        held = node is not None and sid is not None and node.owner == sid
        if not held:
            if m.stale or sid is None or not self.ensemble.alive(sid):
                # A session gone: what is handed out was queued while it held the node (``queued``), so
                # at most the queue's depth of it since the partition's last chunk was queued.
                self.outcome.stale_handouts += 1
                if isinstance(m, Member):
                    key = (m.name, tp)
                    n = self.held_over[key] = self.held_over.get(key, 0) + 1
                    self.outcome.max_held_over = max(self.outcome.max_held_over, n)
                    if n > DEPTH * CHUNK:
                        raise Violation("handout", f"t={self.kernel.now:.3f} {m.name} handed out {n} messages of "
                                                   f"{tp[0]}-{tp[1]} after its session was gone, more than it can "
                                                   f"have queued ({DEPTH}x{CHUNK})")
            else:
                holder = "nobody" if node is None else node.data.decode()
                violation = Violation("handout", f"t={self.kernel.now:.3f} {m.name} handed out {tp[0]}-{tp[1]}@{offset} "
                                                 f"while its owner node is held by {holder}")
                path = zkformat.GroupPaths("g").owner(*tp)
                if getattr(m, "kafka", False) or self.kafka_wrote(path) or self.kafka_deleted(path, sid):
                    self.kafka_finding(violation)
                else:
                    raise violation

    # ------------------------------------------------------------ checks

    def _queued(self, m: Member, tp: Tuple[str, int], chunk: Chunk) -> None:
        """``queued``, on the member's fetcher task: a breach is raised by :meth:`check_step`."""
        self.outcome.queued += 1
        self.held_over.pop((m.name, tp), None)
        if m.mode != "zookeeper":
            return  # no owner node to check: a coordinator member delivers by generation (switch_checks)
        violation = check_queued(m, self.ensemble, tp, chunk, self.kernel.now)
        if violation is None:
            return
        path = zkformat.GroupPaths("g").owner(*tp)
        if chunk.session in self.forced and chunk.session not in m.lost_sessions:
            self.outcome.forced_queued += 1  # another client closed the session; kazoo has not said LOST yet
        elif self.kafka_wrote(path) or self.kafka_deleted(path, chunk.session):
            self.kafka_finding(violation)
        elif self.breach is None:
            self.breach = violation

    def kafka_wrote(self, path: str) -> bool:
        """Was ``path`` last changed by a Kafka 0.8.2 member (its request, or its session's expiry)?"""
        client = self.ensemble.clients.get(self.ensemble.last_writer.get(path, 0))
        return bool(getattr(client, "kafka", False))

    def kafka_deleted(self, path: str, session: Optional[int]) -> bool:
        """Did a Kafka 0.8.2 member delete ``session``'s node at ``path`` (its last deletion), and
        ``session`` not create it again since? What other members did with the path after that
        (claimed it in the hole, released it again) does not change who took it from ``session``
        (seed 1002949: the node was deleted by Kafka's member, then claimed and released by a
        peer, and only the last deletion, the peer's, was looked at)."""
        if session is None:
            return False
        client = self.ensemble.clients.get(self.ensemble.deleted_from.get((path, session), 0))
        return bool(getattr(client, "kafka", False))

    def kafka_finding(self, violation: Violation) -> None:
        findings = self.outcome.kafka_findings
        findings[violation.name] = findings.get(violation.name, 0) + 1
        if findings[violation.name] == 1:
            self.trace(f"KAFKA'S OWN: {violation}")

    def check_step(self) -> None:
        kernel, offsets = self.kernel, self.offsets
        offsets.now = kernel.now
        if self.breach is not None:
            raise self.breach
        if offsets.violation is not None:
            violation, offsets.violation = offsets.violation, None
            if not offsets.kafka_caused:
                raise violation
            self.kafka_finding(violation)
        if kernel.failures:
            raise Violation("no-crash", repr(kernel.failures[0]))
        ran = kernel.ran
        if ran:
            for m in self.members:
                if m.name in ran:
                    if m.failures:
                        raise Violation("no-crash", f"{m.name}: rebalancer died: {m.failures[0]!r}")
                    if getattr(m, "mode", "zookeeper") != "zookeeper":
                        continue
                    try:
                        check_exclusive(m, self.ensemble, self.kernel.now)
                    except Violation as violation:
                        # Kafka's own only if Kafka's member last wrote the owner node of the partition
                        # breached, or deleted it from under this member's session (it deletes the nodes
                        # it had "whoever holds them now"; neither Kafka's consumer nor zkconsumer watches
                        # its owner nodes, so the member delivers until its next rebalance).
                        path = zkformat.GroupPaths("g").owner(*violation.tp) if violation.tp is not None else ""
                        if not self.schedule.kafka or not path or not (
                                self.kafka_wrote(path) or self.kafka_deleted(path, m.client.sid)):
                            raise
                        self.kafka_finding(violation)
            ran.clear()
            if self.coordinator is not None:
                check_across(self)
        if not self.leaves:
            return
        for name, deadline in self.leaves.items():
            if self.kernel.now > deadline and name not in self.late_kafka_leaves:
                violation = Violation("shutdown-ends", f"{name}'s shutdown did not end within {LEAVE_S}s")
                if not self._is_kafka(name):
                    raise violation
                # Kafka 0.8.2's shutdown() waits for its rebalance lock, which syncedRebalance
                # holds through every retry and every ZooKeeper request (ZkClient retries those
                # until it reconnects): Kafka's own, recorded once; it is still awaited below.
                self.late_kafka_leaves.add(name)
                self.kafka_finding(violation)

    def _kafka_offset(self, tp: Tuple[str, int], before: Optional[int], after: int, writer: str) -> None:
        """``offsets-monotone`` in Kafka, the authoritative store of a switch schedule."""
        self.outcome.offset_writes += 1
        if before is not None and after < before and self.breach is None:
            self.breach = Violation("offsets-monotone", f"t={self.kernel.now:.3f} {writer} moved the committed offset "
                                                        f"of {tp[0]}-{tp[1]} in Kafka from {before} to {after}", tp)

    def settled_why(self) -> Optional[str]:
        """``settles`` (``None``: settled), on the membership the migration node names in a switch schedule."""
        if self.coordinator is not None:
            return check_switch_settled(self)
        return check_settled(self.members, self.ensemble, self.schedule.strategy)

    def _is_kafka(self, name: str) -> bool:
        return any(getattr(m, "kafka", False) for m in self.members if m.name == name)

    def calm(self, calm: bool) -> None:
        """No thread descheduled for seconds while the group is to settle (see ``ClientFaults.calm``)."""
        for m in self.members:
            m.client.faults.calm = calm

    def heal(self) -> None:
        self.healed = True
        self.trace("HEAL")
        self.calm(True)
        self._resume()
        self.servers.heal()
        # Cut links are left to end by themselves (at most 10 s): what is held back on one is
        # released at its end in order, and ending them early here would let later messages
        # overtake it (seed 102503 was that fault of the model).
        self.network.slow_until = 0.0
        self.lagging_until = 0.0


def run(schedule: Schedule, keep_trace: bool = False) -> Outcome:
    """Play ``schedule``; the outcome holds the first violation, if any.

    The ``zkconsumer`` logger's level is set for the run and restored after it, so the tests that
    run after the simulator in the same process see it as it was. Nothing in a run draws from the
    global random generator (every draw is from a generator the world seeds), so another thread
    of the process cannot change a run.

    The cyclic garbage collector is off during the run and collects the run's young objects
    once at its end. A run builds a world that lives for the whole run, tied in cycles
    (closures, greenlets, bound methods), and drops small cycles as it goes: thousands of
    objects to collect at its end. With the collector on, the world was promoted and traversed
    again by every older-generation collection during the run: a fifth of a run's CPU time.
    When the collector runs does not change the run: the only objects whose collection would
    run simulated code, the suspended greenlets of killed tasks, were never collected during a
    run with it on (checked over 300 seeds), and the traces are the same (``trace_hashes``).
    """
    logger = logging.getLogger("zkconsumer")
    level = logger.level
    collecting = gc.isenabled()
    logger.setLevel(logging.CRITICAL)
    gc.disable()
    try:
        return _play(schedule, keep_trace)
    finally:
        logger.setLevel(level)
        if collecting:
            gc.enable()
            gc.collect(0)


def _play(schedule: Schedule, keep_trace: bool) -> Outcome:
    world = World(schedule, keep_trace)
    kernel = world.kernel
    out = world.outcome
    try:
        world.setup()
        end_events = max([e[0] for e in schedule.events] + [0.0]) + 1.0
        kernel.run_until(None, end_events, world.check_step)
        # Faults heal; the group must settle.
        world.heal()
        healed_at = kernel.now
        settled_at: List[float] = []

        next_look = [healed_at + 1.0]

        def settled() -> bool:
            # Looked at every 0.1 s of virtual time (it reads the whole tree).
            if kernel.now < next_look[0] or any(m.state == "leaving" for m in world.members):
                return False
            next_look[0] = kernel.now + 0.1
            if world.settled_why() is None:
                settled_at.append(kernel.now)
                return True
            return False
        if not kernel.run_until(settled, healed_at + SETTLE_S, world.check_step):
            why = world.settled_why()
            violation = Violation("settles", f"not settled {SETTLE_S}s after the faults stopped: {why}")
            kafka = [m for m in world.members if getattr(m, "kafka", False)]
            if not kafka or not (out.kafka_findings or any(m.ever_gave_up or not m.settled() for m in kafka
                                                           if m.state == "joined")):
                raise violation
            world.kafka_finding(violation)  # a Kafka member gave up, or deleted a node it did not hold
        else:
            out.settle_s = settled_at[0] - healed_at
        # Everyone leaves cleanly; every shutdown must end, also with threads descheduled for seconds.
        world.calm(False)
        for m in list(world.members):
            if m.state in ("joined", "joining"):
                world._leave(m)
        kernel.run_until(lambda: not world.leaves, kernel.now + LEAVE_S + 1, world.check_step)
        if world.leaves:
            violation = Violation("shutdown-ends", f"{sorted(world.leaves)} did not finish shutting down")
            if not all(world._is_kafka(name) for name in world.leaves):
                raise violation
            world.kafka_finding(violation)
    except Violation as violation:
        out.violation = violation
    finally:
        out.steps = kernel.steps
        out.virtual_s = kernel.now
        out.offset_writes += world.offsets.writes
        out.switches = sum(m.switcher.switches for m in world.members if getattr(m, "switcher", None) is not None)
    return out
