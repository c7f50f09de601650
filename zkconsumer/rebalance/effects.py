"""The effects a rebalance step yields and the plain data it is sent back (:mod:`.machine`).

Every effect is a frozen dataclass naming one thing to do: a ZooKeeper read or write, a call on
the fetchers, the committer or the listener, a change to what the member holds, a wait, a log
line. Its docstring says what the driver sends back as its result (or :class:`Raised`, when
doing it raised).

May import: the standard library's ``typing`` and ``dataclasses``, and :mod:`zkconsumer.structs`;
nothing else. ``tests/unit/rebalance/test_machine.py`` checks the imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Sequence, Set, Tuple

from ..structs import TopicPartition

#: Log levels of :class:`Log` (the values of the :mod:`logging` module's).
DEBUG, INFO, WARNING = 10, 20, 30


# ------------------------------------------------------------------ results and plain state

@dataclass(frozen=True)
class Raised:
    """The result of an effect whose execution raised ``error``. ``expected``: a ZooKeeper or
    zkconsumer error (kazoo's ``KazooException``, :class:`~zkconsumer.errors.ZkConsumerError`),
    which some steps handle; any other is raised on at once where it was met."""

    error: BaseException
    expected: bool


@dataclass(frozen=True)
class Holder:
    """The holder of an owner node a claim met: its thread id, and whether that thread id is
    this member's own (a node of an earlier, expired session of ours)."""

    thread_id: str
    ours: bool


@dataclass
class Books:
    """A plain copy of what the member holds (:class:`ReadBooks`), kept in step by the step that read it.

    ``delivered``: the installed partitions, in installation order; ``owned``: their thread
    ids (a partition a fenced commit reported lost is delivered, not owned); ``nodes``: the
    owner nodes this session may hold; ``carried``: partitions moving between our own streams
    whose consumed offset is kept to resume from; ``fetching``: partitions were given to the fetchers.
    """

    delivered: List[TopicPartition]
    owned: Dict[TopicPartition, str]
    nodes: Dict[TopicPartition, str]
    carried: Set[TopicPartition]
    fetching: bool

    def forget(self, tps: Sequence[TopicPartition]) -> None:
        for tp in tps:
            self.owned.pop(tp, None)
            if tp in self.delivered:
                self.delivered.remove(tp)


@dataclass
class AttemptMemory:
    """What the rebalancer carries from one attempt to the next (changed in place by :func:`attempt`).

    ``needs_register``: a new session, register before reading the group; ``confirm_owners``:
    our member node had vanished, our owner nodes may have gone with it; ``early_supersedes``:
    attempts in a row dropped because a new event came before they acted.
    """

    needs_register: bool = False
    confirm_owners: bool = False
    early_supersedes: int = 0


@dataclass(frozen=True)
class Members:
    """The group's members: registrations as the driver read them (opaque here), and each one's pattern."""

    registrations: Mapping[str, Any]
    patterns: Mapping[str, str]


@dataclass(frozen=True)
class Subscriptions:
    """``consumers_for_topic`` (Kafka's ``consumersPerTopicMap``) and the topics this member consumes."""

    consumers_for_topic: Mapping[str, Any]
    my_topics: Tuple[str, ...]


@dataclass(frozen=True)
class Share:
    """The group's assignment and this member's share of it (partition -> thread id)."""

    assignment: Mapping[TopicPartition, str]
    mine: Mapping[TopicPartition, str]


# ------------------------------------------------------------------ effects: the view

@dataclass(frozen=True)
class ReadMembers:
    """Read the group's member registrations (``fresh``: not from a cache). Result: :class:`Members`."""

    fresh: bool


@dataclass(frozen=True)
class Register:
    """Register this member (again). Result: ``None``."""


@dataclass(frozen=True)
class ReadTopics:
    """Read every topic's name (for wildcard subscriptions). Result: a list of names."""


@dataclass(frozen=True)
class Subscribe:
    """Parse the registrations against ``all_topics`` (a computation of the consumer package: no
    I/O). Result: :class:`Subscriptions`; raises (as :class:`Raised`) on a pattern that blocks
    the rebalance."""

    members: Members
    all_topics: Tuple[str, ...]


@dataclass(frozen=True)
class WatchTopics:
    """Arm the watches of ``topics`` (before their partitions are read). Result: ``None``."""

    topics: Tuple[str, ...]


@dataclass(frozen=True)
class ReadPartitions:
    """Read the partitions of ``topics``. Result: ``{topic: [partition, ...]}``."""

    topics: Tuple[str, ...]


@dataclass(frozen=True)
class Assign:
    """Run the configured assignor (pure, in the assignors module). Result: :class:`Share`."""

    consumers_for_topic: Mapping[str, Any]
    partitions: Mapping[str, Any]


@dataclass(frozen=True)
class CheckNewEvent:
    """Has an event arrived that makes this attempt's view stale? Result: ``bool``."""


# ------------------------------------------------------------------ effects: what is held

@dataclass(frozen=True)
class ReadBooks:
    """A copy of what the member holds. Result: :class:`Books`."""


@dataclass(frozen=True)
class Revoke:
    """Stop fetching ``tps`` and drop their chunks, queued or being iterated (those delivered and not
    revoked yet). Result: ``None``."""

    tps: Tuple[TopicPartition, ...]


@dataclass(frozen=True)
class Commit:
    """Commit the consumed offsets of what is owned (fenced). Result: the partitions the fence found
    owned by someone else."""


@dataclass(frozen=True)
class Holds:
    """Does this session hold the owner node of ``tp`` (under any of our thread ids)? Result: ``bool``."""

    tp: TopicPartition


@dataclass(frozen=True)
class ReadRevoked:
    """The revoked partitions still installed, with their consumed offsets, in installation order.
    Result: ``{tp: offset}``."""


@dataclass(frozen=True)
class Carry:
    """Keep these consumed offsets of partitions moving between our streams, to resume from. Result: ``None``."""

    offsets: Tuple[Tuple[TopicPartition, int], ...]


@dataclass(frozen=True)
class Disown:
    """``tps`` stop counting as owned (they stay installed until the next pause). Result: ``None``."""

    tps: Tuple[TopicPartition, ...]


@dataclass(frozen=True)
class Forget:
    """Uninstall ``tps`` (no longer owned nor delivered). Result: ``None``."""

    tps: Tuple[TopicPartition, ...]
    #: also recompute whether anything is being fetched (after a pause)
    update_fetching: bool = False


@dataclass(frozen=True)
class BeforeReleasing:
    """Call the listener's ``before_releasing_partitions`` (if there is a listener). Result: ``None``."""

    partitions: Mapping[str, Set[int]]


@dataclass(frozen=True)
class PartitionsLost:
    """Call the listener's ``partitions_lost`` (if there is a listener and it has one): partitions taken
    from this member without a hand-over, their last positions not committed. Result: ``None``."""

    partitions: Mapping[str, Set[int]]


@dataclass(frozen=True)
class BeforeStarting:
    """Call the listener's ``before_starting_fetchers`` (if there is a listener). Result: ``None``."""

    consumer_id: str
    assignment: Mapping[str, Mapping[int, str]]


@dataclass(frozen=True)
class ReadOffsets:
    """Read the committed offsets of ``tps``. Result: ``{tp: offset or None}``."""

    tps: Tuple[TopicPartition, ...]


@dataclass(frozen=True)
class Install:
    """Start fetching ``claims`` (tp -> thread id) from their carried or ``committed`` offsets, and
    count them as owned and delivered. Result: ``None``."""

    claims: Mapping[TopicPartition, str]
    committed: Mapping[TopicPartition, Optional[int]]


@dataclass(frozen=True)
class RecordNodes:
    """This session holds these owner nodes (``overwrite=False``: keep a thread id already recorded). Result: ``None``."""

    nodes: Tuple[Tuple[TopicPartition, str], ...]
    overwrite: bool = True


@dataclass(frozen=True)
class DropNodes:
    """These owner nodes were released: forget them and everything about their partitions. Result: ``None``."""

    tps: Tuple[TopicPartition, ...]


# ------------------------------------------------------------------ effects: owner nodes

@dataclass(frozen=True)
class ReleaseMany:
    """Release these owner nodes together. Result: ``None``."""

    tps: Tuple[TopicPartition, ...]


@dataclass(frozen=True)
class Release:
    """Release one owner node (if this session holds it). Result: ``None``."""

    tp: TopicPartition


@dataclass(frozen=True)
class ReleaseStale:
    """Delete our own node of an earlier session that ``thread_id`` still holds. Result: ``None``."""

    tp: TopicPartition
    thread_id: str


@dataclass(frozen=True)
class ConfirmHeld:
    """Are these retained owner nodes still ours? Result: a ``bool`` per partition, in order."""

    tps: Tuple[TopicPartition, ...]


@dataclass(frozen=True)
class Relabel:
    """Move these owner nodes of ours to other thread ids of ours. Result: a ``bool`` per node, in order."""

    relabels: Tuple[Tuple[TopicPartition, str], ...]


@dataclass(frozen=True)
class KnownHolders:
    """Of ``tps``, those a claim last found held by a peer whose node has not changed since (its
    watch is still armed: claiming it again would fail). Result: ``{tp: Holder}``."""

    tps: Tuple[TopicPartition, ...]


@dataclass(frozen=True)
class Claim:
    """Claim these partitions at once, each with a fresh watch on its node (set when a holder's node
    changes). ``look_first``: list a topic's owner nodes before creating. Result: an
    ``Optional[Holder]`` per claim, in order (``None``: ours now)."""

    claims: Tuple[Tuple[TopicPartition, str], ...]
    look_first: bool = False


@dataclass(frozen=True)
class ClaimOne:
    """Claim one partition, without a watch. Result: the holder's thread id, ``None`` if ours now."""

    tp: TopicPartition
    thread_id: str


@dataclass(frozen=True)
class WatchDeletion:
    """Watch the owner node of ``tp`` for its deletion. Result: ``None``."""

    tp: TopicPartition


# ------------------------------------------------------------------ effects: waiting

@dataclass(frozen=True)
class Now:
    """The clock. Result: seconds (``float``)."""


@dataclass(frozen=True)
class BeginWait:
    """A claim wait begins: a new event must end it from now on. Result: ``None``."""


@dataclass(frozen=True)
class EndWait:
    """The claim wait ended. Result: ``None``."""


@dataclass(frozen=True)
class RearmWait:
    """Clear the wake-up, then tell whether a new event has arrived. Result: ``bool``."""


@dataclass(frozen=True)
class Changed:
    """Which of ``tps``' watched nodes changed since their watch was armed. Result: a list, in order."""

    tps: Tuple[TopicPartition, ...]


@dataclass(frozen=True)
class Wait:
    """Block until a watched node changes, a new event arrives, or ``timeout`` s pass. Result: ``None``."""

    timeout: float


@dataclass(frozen=True)
class Log:
    """Log ``text`` at ``level`` (:data:`DEBUG`, :data:`INFO`, :data:`WARNING`). Result: ``None``."""

    level: int
    text: str


def effect_types() -> FrozenSet[type]:
    """Every effect a step may yield (what a driver must execute)."""
    return frozenset({ReadMembers, Register, ReadTopics, Subscribe, WatchTopics, ReadPartitions, Assign,
                      CheckNewEvent, ReadBooks, Revoke, Commit, Holds, ReadRevoked, Carry, Disown, Forget,
                      BeforeReleasing, BeforeStarting, ReadOffsets, Install, RecordNodes, DropNodes, ReleaseMany,
                      Release, ReleaseStale, ConfirmHeld, Relabel, KnownHolders, Claim, ClaimOne, WatchDeletion,
                      Now, BeginWait, EndWait, RearmWait, Changed, Wait, Log})
