"""Operations on consumer groups stored in ZooKeeper: what the ``zkconsumer`` CLI runs.

Each operation takes a started :class:`~kazoo.client.KazooClient` and, where log
offsets are needed, a :class:`LogOffsets` source (normally :class:`BrokerOffsets`,
which asks each partition's leader). They read and write exactly the nodes
Kafka's own tools do (see ``DESIGN.md`` section 2), so results agree with
``kafka.tools.ConsumerOffsetChecker``, ``ExportZkOffsets`` and ``ImportZkOffsets``:

=====================  ==================================================================
operation              Kafka counterpart / behaviour
=====================  ==================================================================
:func:`list_groups`    ``kafka-consumer-groups --list``: children of ``/consumers``
:func:`describe_group` ``ConsumerOffsetChecker``: offset, log end, lag, owner per partition
:func:`export_offsets` ``ExportZkOffsets``: ``/consumers/<g>/offsets/<t>/<p>:<offset>`` lines
:func:`import_offsets` ``ImportZkOffsets``: write each line's offset to its path
:func:`plan_reset`     (later Kafka's ``--reset-offsets``): compute, clamp, never write
:func:`apply_reset`    write a plan, refusing while the group has live members
:func:`delete_group`   ``kafka-consumer-groups --delete``: refused while members are live
=====================  ==================================================================

Writes refuse to run while the group has *live members* (children of
``/consumers/<g>/ids``): a live member would overwrite offsets at its next
commit, and deleting its nodes would corrupt its state. The check and the write
are not atomic (ZooKeeper cannot make a multi-op depend on a node's children),
so a member joining in between is not detected; the window is milliseconds.

User errors raise subclasses of :class:`AdminError` (a ``ZkConsumerError``) with
a one-line message; malformed offset nodes raise
:class:`~zkconsumer.errors.MalformedZnodeError` naming the node.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Protocol, Sequence, Set, Tuple

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, NotEmptyError

from . import zkformat
from .connection import BrokerConnection
from .errors import BrokerError, MalformedZnodeError, ZkConsumerError
from .group import GroupClient
from .protocol import EARLIEST_TIME, ERROR_NAMES, LATEST_TIME, NO_LEADER, ListOffsetsRequest
from .topic_count import SubscriptionError, WildcardTopicCount, topic_count_from_registration

__all__ = [
    "AdminError", "UnknownGroupError", "UnknownTopicError", "GroupActiveError", "OffsetFileError",
    "LogOffsets", "BrokerOffsets", "MemberInfo", "PartitionRow", "GroupDescription",
    "OffsetEntry", "ResetTarget", "ResetRow", "ResetPlan", "Progress",
    "list_groups", "live_members", "describe_group", "export_offsets", "format_export",
    "parse_export", "import_offsets", "parse_reset_target", "compute_reset", "plan_reset",
    "apply_reset", "delete_group",
]

TopicPartition = Tuple[str, int]
#: ``progress(done, total)``, called as long operations advance.
Progress = Callable[[int, int], None]

#: Consumer id used for the :class:`GroupClient` of admin operations (never registered).
ADMIN_CLIENT_ID = "zkconsumer-admin"


# --------------------------------------------------------------------------- errors


class AdminError(ZkConsumerError):
    """An admin operation cannot be done as asked; the message says why, in one line."""


class UnknownGroupError(AdminError):
    """``/consumers/<group>`` does not exist."""

    def __init__(self, group: str) -> None:
        self.group = group
        super().__init__(f"consumer group {group!r} does not exist (no /consumers/{group} in ZooKeeper)")


class UnknownTopicError(AdminError):
    """The topic is not under ``/brokers/topics``."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        super().__init__(f"topic {topic!r} does not exist (no /brokers/topics/{topic} in ZooKeeper)")


class GroupActiveError(AdminError):
    """The group has live members, so the requested write is refused."""

    def __init__(self, group: str, members: Sequence[str], action: str) -> None:
        self.group, self.members = group, list(members)
        shown = ", ".join(self.members[:3]) + (", ..." if len(self.members) > 3 else "")
        super().__init__(
            f"refusing to {action}: group {group!r} has {len(self.members)} live member(s) ({shown}); "
            "stop its consumers first"
        )


class OffsetFileError(AdminError):
    """A line of an offsets file is not ``/consumers/<g>/offsets/<t>/<p>:<offset>``."""

    def __init__(self, source: str, line_number: int, line: str, problem: str) -> None:
        self.line_number = line_number
        super().__init__(f"{source}:{line_number}: {problem}: {line!r}")


# --------------------------------------------------------------------------- log offsets


class LogOffsets(Protocol):
    """Where log start/end offsets come from (a fake in unit tests).

    ``fetch`` returns ``(offsets, problems)``: an offset for every partition it
    could look up, and a one-line reason for every one it could not.
    """

    def fetch(self, partitions: Sequence[TopicPartition], time: int) -> Tuple[Dict[TopicPartition, int], Dict[TopicPartition, str]]:
        ...


class BrokerOffsets:
    """:class:`LogOffsets` from the brokers: one ListOffsets request per partition leader.

    The leader comes from ``/brokers/topics/<t>/partitions/<p>/state`` and its
    address from ``/brokers/ids/<leader>`` (as ConsumerOffsetChecker does).
    Connections are kept per broker until :meth:`close` (also a context manager).
    """

    def __init__(self, zk: KazooClient, *, socket_timeout_ms: int = 10000,
                 client_id: str = "zkconsumer-admin", protocol: str = "PLAINTEXT") -> None:
        self._zk = zk
        self._timeout_ms = socket_timeout_ms
        self._client_id = client_id
        self._protocol = protocol
        self._connections: Dict[int, BrokerConnection] = {}
        self._brokers: Dict[int, Optional[zkformat.Broker]] = {}

    def __enter__(self) -> "BrokerOffsets":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def leaders(self, partitions: Sequence[TopicPartition]) -> Tuple[Dict[TopicPartition, int], Dict[TopicPartition, str]]:
        """Leader broker id of each partition, and a reason for each partition without a usable one."""
        state_paths = {tp: zkformat.partition_state_path(*tp) for tp in partitions}
        data = _get_many(self._zk, list(state_paths.values()))
        leaders: Dict[TopicPartition, int] = {}
        problems: Dict[TopicPartition, str] = {}
        for tp, path in state_paths.items():
            raw = data[path]
            if raw is None:
                problems[tp] = f"no partition state at {path}"
                continue
            try:
                state = zkformat.decode_partition_state(path, raw)
            except MalformedZnodeError as exc:
                problems[tp] = str(exc)
                continue
            if state.leader == NO_LEADER:
                problems[tp] = "the partition has no leader"
            else:
                leaders[tp] = state.leader
        return leaders, problems

    def _broker(self, broker_id: int) -> Optional[zkformat.Broker]:
        if broker_id not in self._brokers:
            path = zkformat.broker_path(broker_id)
            try:
                data, _ = self._zk.retry(self._zk.get, path)
                self._brokers[broker_id] = zkformat.decode_broker(path, data, self._protocol)
            except (NoNodeError, MalformedZnodeError):
                self._brokers[broker_id] = None
        return self._brokers[broker_id]

    def _connection(self, broker: zkformat.Broker) -> BrokerConnection:
        if broker.id not in self._connections:
            self._connections[broker.id] = BrokerConnection(
                broker.host, broker.port, self._client_id, self._timeout_ms, 0)
        return self._connections[broker.id]

    def fetch(self, partitions: Sequence[TopicPartition], time: int) -> Tuple[Dict[TopicPartition, int], Dict[TopicPartition, str]]:
        """Offsets before ``time`` (:data:`EARLIEST_TIME`/:data:`LATEST_TIME`) of ``partitions``."""
        offsets: Dict[TopicPartition, int] = {}
        leaders, problems = self.leaders(partitions)
        by_leader: Dict[int, List[TopicPartition]] = {}
        for tp, leader in leaders.items():
            by_leader.setdefault(leader, []).append(tp)
        for leader, tps in sorted(by_leader.items()):
            broker = self._broker(leader)
            if broker is None:
                for tp in tps:
                    problems[tp] = f"leader broker {leader} is not registered under {zkformat.BROKER_IDS_PATH}"
                continue
            try:
                response = self._connection(broker).send(ListOffsetsRequest(tuple((t, p, time) for t, p in tps)))
            except BrokerError as exc:
                for tp in tps:
                    problems[tp] = str(exc)
                continue
            answered = {(r.topic, r.partition): r for r in response.partitions}
            for tp in tps:
                r = answered.get(tp)
                if r is None or (r.error_code == 0 and not r.offsets):
                    problems[tp] = f"broker {leader} returned no offset"
                elif r.error_code != 0:
                    problems[tp] = f"broker {leader}: {ERROR_NAMES.get(r.error_code, r.error_code)}"
                else:
                    offsets[tp] = r.offsets[0]
        return offsets, problems


# --------------------------------------------------------------------------- reading helpers


def _children(zk: KazooClient, path: str) -> List[str]:
    """Children of ``path``, sorted; empty if the node does not exist."""
    try:
        return sorted(zk.retry(zk.get_children, path))
    except NoNodeError:
        return []


def _get(zk: KazooClient, path: str) -> Optional[Tuple[bytes, Any]]:
    """``(data, stat)`` of ``path``, or ``None`` if it does not exist."""
    try:
        return zk.retry(zk.get, path)
    except NoNodeError:
        return None


def _get_many(zk: KazooClient, paths: Sequence[str], progress: Optional[Progress] = None,
              window: int = 256) -> Dict[str, Optional[bytes]]:
    """The data of every node in ``paths`` (``None`` for a missing one), pipelined.

    Up to ``window`` requests are in flight at once, so reading thousands of
    nodes costs a few round trips rather than one each. Connection errors
    propagate (kazoo's ``ConnectionLoss``/``SessionExpiredError``).
    """
    result: Dict[str, Optional[bytes]] = {}
    for start in range(0, len(paths), window):
        batch = [(path, zk.get_async(path)) for path in paths[start:start + window]]
        for path, pending in batch:
            try:
                result[path] = pending.get()[0]
            except NoNodeError:
                result[path] = None
        if progress is not None:
            progress(min(start + window, len(paths)), len(paths))
    return result


def _partition_ids(names: Iterable[str]) -> List[int]:
    """The partition numbers among child node names (others ignored), sorted as integers."""
    return sorted(int(n) for n in names if n.isdigit())


def _require_group(zk: KazooClient, group: str) -> zkformat.GroupPaths:
    try:
        paths = zkformat.GroupPaths(group)
    except ValueError as exc:
        raise AdminError(f"invalid group name {group!r}: {exc}") from None
    if zk.retry(zk.exists, paths.root) is None:
        raise UnknownGroupError(group)
    return paths


def _group_client(zk: KazooClient, group: str) -> GroupClient:
    return GroupClient(zk, group, ADMIN_CLIENT_ID)


def list_groups(zk: KazooClient) -> List[str]:
    """Every consumer group: the children of ``/consumers``, sorted (empty if none)."""
    return _children(zk, zkformat.CONSUMERS_PATH)


def live_members(zk: KazooClient, group: str) -> List[str]:
    """Consumer ids registered under ``/consumers/<group>/ids`` right now, sorted."""
    return _children(zk, zkformat.GroupPaths(group).ids)


def _refuse_if_live(zk: KazooClient, group: str, action: str) -> None:
    members = live_members(zk, group)
    if members:
        raise GroupActiveError(group, members, action)


def _iso_from_ms(ms: int) -> str:
    """Milliseconds since the epoch as ISO 8601 UTC with milliseconds, e.g. ``2024-01-02T03:04:05.678Z``."""
    moment = datetime.datetime.fromtimestamp(ms / 1000.0, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


# --------------------------------------------------------------------------- describe


@dataclass(frozen=True)
class MemberInfo:
    """A registered member (``id`` is its consumer id). ``registered_since`` is ISO 8601 UTC from the registration timestamp
    (the node's creation time if the registration has none); ``error`` is set, and the
    subscription empty, when the node could not be decoded."""

    id: str
    subscription: Dict[str, int]
    pattern: Optional[str]
    registered_since: Optional[str]
    error: Optional[str] = None


@dataclass(frozen=True)
class PartitionRow:
    """One partition of a group: ``offset`` is the committed next offset (``None``: none
    committed), ``log_end_offset`` ``None`` when unknown, ``lag`` ``None`` when either is;
    ``owner`` is the owning thread id or ``None``."""

    topic: str
    partition: int
    offset: Optional[int]
    log_end_offset: Optional[int]
    lag: Optional[int]
    owner: Optional[str]


@dataclass(frozen=True)
class GroupDescription:
    """The result of :func:`describe_group`; :meth:`to_dict` gives the JSON shape."""

    group: str
    members: List[MemberInfo]
    partitions: List[PartitionRow]
    warnings: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        """``{"group", "members": [...], "partitions": [{"topic", "partition", "offset",
        "log_end_offset", "lag", "owner"}], "warnings": [...]}``"""
        return {
            "group": self.group,
            "members": [asdict(m) for m in self.members],
            "partitions": [asdict(p) for p in self.partitions],
            "warnings": list(self.warnings),
        }


def _read_members(zk: KazooClient, paths: zkformat.GroupPaths) -> List[Tuple[MemberInfo, Optional[zkformat.Registration]]]:
    result = []
    for consumer_id in _children(zk, paths.ids):
        path = paths.member(consumer_id)
        got = _get(zk, path)
        if got is None:
            continue  # left while we looked
        data, stat = got
        try:
            registration = zkformat.decode_registration(path, data)
        except MalformedZnodeError as exc:
            created = _iso_from_ms(stat.ctime)
            result.append((MemberInfo(consumer_id, {}, None, created, str(exc)), None))
            continue
        ms: Optional[int] = None
        if registration.timestamp is not None and registration.timestamp.strip().lstrip("-").isdigit():
            ms = int(registration.timestamp)
        registered = _iso_from_ms(ms if ms is not None and ms >= 0 else stat.ctime)
        result.append((MemberInfo(consumer_id, dict(registration.subscription), registration.pattern, registered),
                       registration))
    return result


def _subscribed_topics(
    members: Sequence[Tuple[MemberInfo, Optional[zkformat.Registration]]], all_topics: Sequence[str]
) -> Tuple[Set[str], List[str]]:
    """Topics some member subscribes to (wildcards evaluated against ``all_topics``), and warnings."""
    topics: Set[str] = set()
    warnings: List[str] = []
    for info, registration in members:
        if registration is None:
            continue
        try:
            count = topic_count_from_registration(info.id, registration, True)
        except SubscriptionError as exc:
            warnings.append(f"member {info.id} has an unusable subscription: {exc}")
            continue
        if isinstance(count, WildcardTopicCount):
            topics.update(count.topics(all_topics))
        else:
            topics.update(count.subscription)
    return topics, warnings


def _thread_owner_member(thread_id: str) -> str:
    """The consumer id of a thread id ``<consumerId>-<i>``."""
    head, sep, tail = thread_id.rpartition("-")
    return head if sep and tail.isdigit() else thread_id


def describe_group(
    zk: KazooClient, group: str, log_offsets: LogOffsets, progress: Optional[Progress] = None
) -> GroupDescription:
    """Members and per-partition offset, log end, lag and owner of ``group``.

    Partitions covered: every partition of every topic the group has offsets or
    owners for, or that a member subscribes to; sorted by topic, then partition.
    Lag is ``log end - offset`` (as ConsumerOffsetChecker computes it), ``None``
    when either is unknown or the offset is negative. ``warnings`` flag
    partitions of subscribed topics without an owner, owners that are not
    registered members, subscribed topics that do not exist, offsets of topics
    that no longer exist, and log end offsets that could not be looked up.

    Raises :class:`UnknownGroupError` if ``/consumers/<group>`` does not exist,
    and :class:`~zkconsumer.errors.MalformedZnodeError` for an offset node that
    is not a decimal number.
    """
    paths = _require_group(zk, group)
    client = _group_client(zk, group)
    members = _read_members(zk, paths)
    warnings = [f"member {m.id}: {m.error}" for m, _ in members if m.error]
    all_topics = client.all_topics()
    subscribed, sub_warnings = _subscribed_topics(members, all_topics)
    warnings += sub_warnings
    offset_topics = set(_children(zk, paths.offsets))
    owner_topics = set(_children(zk, paths.owners))
    topics = sorted(offset_topics | owner_topics | subscribed)
    partition_map = client.partitions_for_topics(topics)
    member_ids = {m.id for m, _ in members}

    partitions: List[TopicPartition] = []
    for topic in topics:
        known = partition_map.get(topic)
        found = set(_partition_ids(_children(zk, paths.offsets_topic(topic)))) | set(
            _partition_ids(_children(zk, paths.owners_topic(topic))))
        if known is None:
            if topic in subscribed:
                warnings.append(f"subscribed topic {topic} does not exist")
            if found:
                warnings.append(f"topic {topic} does not exist, but the group has offsets or owners for it")
        partitions += [(topic, p) for p in sorted(set(known or ()) | found)]

    offset_paths = [paths.offset(t, p) for t, p in partitions]
    owner_paths = [paths.owner(t, p) for t, p in partitions]
    data = _get_many(zk, offset_paths + owner_paths, progress)
    committed: Dict[TopicPartition, Optional[int]] = {}
    owners: Dict[TopicPartition, Optional[str]] = {}
    for tp, offset_path, owner_path in zip(partitions, offset_paths, owner_paths):
        raw_offset, raw_owner = data[offset_path], data[owner_path]
        committed[tp] = None if raw_offset is None else zkformat.decode_offset(offset_path, raw_offset)
        owners[tp] = None
        if raw_owner is not None:
            try:
                owners[tp] = zkformat.decode_owner(owner_path, raw_owner)
            except MalformedZnodeError as exc:
                warnings.append(str(exc))

    existing = [tp for tp in partitions if tp[0] in partition_map]
    log_ends, problems = log_offsets.fetch(existing, LATEST_TIME) if existing else ({}, {})
    for tp, why in sorted(problems.items()):
        warnings.append(f"log end offset of {tp[0]}/{tp[1]} unknown: {why}")

    rows: List[PartitionRow] = []
    for topic, p in partitions:
        offset, log_end, owner = committed[(topic, p)], log_ends.get((topic, p)), owners[(topic, p)]
        lag = log_end - offset if offset is not None and offset >= 0 and log_end is not None else None
        rows.append(PartitionRow(topic, p, offset, log_end, lag, owner))
        if owner is None and topic in subscribed and topic in partition_map:
            warnings.append(f"partition {topic}/{p} of a subscribed topic has no owner")
        if owner is not None and _thread_owner_member(owner) not in member_ids:
            warnings.append(f"partition {topic}/{p} is owned by {owner}, which is not a registered member")
    return GroupDescription(group, [m for m, _ in members], rows, warnings)


# --------------------------------------------------------------------------- export / import

_OFFSET_PATH = re.compile(r"/consumers/([^/]+)/offsets/([^/]+)/([0-9]+)")


@dataclass(frozen=True)
class OffsetEntry:
    """One committed offset: ``group``, ``topic``, ``partition`` and the ``offset`` node's value."""

    group: str
    topic: str
    partition: int
    offset: int

    @property
    def path(self) -> str:
        return zkformat.GroupPaths(self.group).offset(self.topic, self.partition)


def export_offsets(zk: KazooClient, groups: Optional[Sequence[str]] = None) -> List[OffsetEntry]:
    """Every committed offset of ``groups`` (all groups when ``None``), sorted.

    As ExportZkOffsets, partitions without an offset node are skipped. Raises
    :class:`UnknownGroupError` for a named group that does not exist, and
    :class:`~zkconsumer.errors.MalformedZnodeError` for an unreadable offset node.
    """
    if groups is None:
        groups = list_groups(zk)
    else:
        for group in groups:
            _require_group(zk, group)
    found: List[Tuple[str, str, int, str]] = []
    for group in groups:
        paths = zkformat.GroupPaths(group)
        for topic in _children(zk, paths.offsets):
            for partition in _partition_ids(_children(zk, paths.offsets_topic(topic))):
                found.append((group, topic, partition, paths.offset(topic, partition)))
    data = _get_many(zk, [path for *_, path in found])
    return [OffsetEntry(group, topic, partition, zkformat.decode_offset(path, data[path]))
            for group, topic, partition, path in found if data[path] is not None]


def format_export(entries: Iterable[OffsetEntry]) -> str:
    """ExportZkOffsets' file format: one ``/consumers/<g>/offsets/<t>/<p>:<offset>`` per line.

    >>> format_export([OffsetEntry("g", "t", 0, 42)])
    '/consumers/g/offsets/t/0:42\\n'
    """
    return "".join(f"{e.path}:{e.offset}\n" for e in entries)


def parse_export(text: str, source: str = "<input>") -> List[OffsetEntry]:
    """Parse an ExportZkOffsets file; ImportZkOffsets' format, validated.

    Each line is ``<path>:<offset>``; blank lines and lines starting with ``#``
    are skipped (ImportZkOffsets stops at the first blank line instead, silently
    ignoring the rest). Unlike ImportZkOffsets, which writes any value to any
    path, the path must be an offset node and the offset a non-negative
    integer: a bad line raises :class:`OffsetFileError` naming ``source`` and the
    line number, before anything is written. A path given twice keeps its last
    value (as ImportZkOffsets' map does).

    >>> parse_export("/consumers/g/offsets/t/0:42\\n")
    [OffsetEntry(group='g', topic='t', partition=0, offset=42)]
    """
    found: Dict[str, OffsetEntry] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        path, sep, value = line.rpartition(":")
        if not sep:
            raise OffsetFileError(source, number, raw, "expected <path>:<offset>")
        match = _OFFSET_PATH.fullmatch(path.strip())
        if match is None:
            raise OffsetFileError(source, number, raw, "the path is not /consumers/<group>/offsets/<topic>/<partition>")
        value = value.strip()
        if not value.isdigit():
            raise OffsetFileError(source, number, raw, "the offset is not a non-negative integer")
        group, topic, partition = match.group(1), match.group(2), int(match.group(3))
        entry = OffsetEntry(group, topic, partition, int(value))
        found[entry.path] = entry
    return list(found.values())


def import_offsets(
    zk: KazooClient, entries: Sequence[OffsetEntry], *, force: bool = False, progress: Optional[Progress] = None
) -> int:
    """Write every entry's offset to its node (created if missing); returns how many were written.

    Refuses (:class:`GroupActiveError`, nothing written) if any group in
    ``entries`` has live members, unless ``force``: ImportZkOffsets does not
    check, but a live member would overwrite the imported offsets at its next commit.
    """
    groups = sorted({e.group for e in entries})
    if not force:
        for group in groups:
            _refuse_if_live(zk, group, "import offsets")
    clients = {group: _group_client(zk, group) for group in groups}
    for i, entry in enumerate(entries):
        clients[entry.group].commit_offset(entry.topic, entry.partition, entry.offset)
        if progress is not None:
            progress(i + 1, len(entries))
    return len(entries)


# --------------------------------------------------------------------------- reset


@dataclass(frozen=True)
class ResetTarget:
    """Where to move offsets: ``kind`` is ``earliest``, ``latest``, ``offset`` (``value``
    is the offset) or ``shift`` (``value`` is the signed distance)."""

    kind: str
    value: int = 0

    def __str__(self) -> str:
        if self.kind == "offset":
            return str(self.value)
        if self.kind == "shift":
            return f"shift:{self.value:+d}"
        return self.kind


def parse_reset_target(text: str) -> ResetTarget:
    """Parse ``earliest``, ``latest``, ``<offset>``, ``shift:+N`` or ``shift:-N``; ``ValueError`` otherwise.

    >>> parse_reset_target("shift:-5"), parse_reset_target("17")
    (ResetTarget(kind='shift', value=-5), ResetTarget(kind='offset', value=17))
    """
    t = text.strip().lower()
    if t in ("earliest", "smallest"):
        return ResetTarget("earliest")
    if t in ("latest", "largest"):
        return ResetTarget("latest")
    if t.isdigit():
        return ResetTarget("offset", int(t))
    match = re.fullmatch(r"shift:([+-]?)([0-9]+)", t)
    if match:
        return ResetTarget("shift", -int(match.group(2)) if match.group(1) == "-" else int(match.group(2)))
    raise ValueError(f"invalid reset target {text!r}: expected earliest, latest, an offset, shift:+N or shift:-N")


def compute_reset(
    target: ResetTarget, current: Optional[int], log_start: int, log_end: int
) -> Tuple[Optional[int], Optional[str]]:
    """The new offset of one partition and a note for the plan (pure).

    Explicit and shifted offsets are clamped into ``[log_start, log_end]`` and
    the note says so; shifting a partition without a committed offset leaves it
    alone (``None``) with a note.

    >>> compute_reset(ResetTarget("shift", -10), 15, 8, 20)
    (8, 'clamped 5 up to the log start 8')
    >>> compute_reset(ResetTarget("latest"), None, 0, 20)
    (20, None)
    """
    if target.kind == "earliest":
        return log_start, None
    if target.kind == "latest":
        return log_end, None
    if target.kind == "shift":
        if current is None or current < 0:
            return None, "no committed offset to shift; left unchanged"
        wanted = current + target.value
    elif target.kind == "offset":
        wanted = target.value
    else:
        raise ValueError(f"unknown reset target kind {target.kind!r}")
    if wanted < log_start:
        return log_start, f"clamped {wanted} up to the log start {log_start}"
    if wanted > log_end:
        return log_end, f"clamped {wanted} down to the log end {log_end}"
    return wanted, None


@dataclass(frozen=True)
class ResetRow:
    """One partition of a reset plan; ``new`` is ``None`` when it is left unchanged."""

    topic: str
    partition: int
    current: Optional[int]
    new: Optional[int]
    log_start: int
    log_end: int
    note: Optional[str] = None

    @property
    def changes(self) -> bool:
        return self.new is not None and self.new != self.current


@dataclass(frozen=True)
class ResetPlan:
    """What :func:`apply_reset` would write; ``rows`` sorted by partition."""

    group: str
    topic: str
    target: ResetTarget
    rows: List[ResetRow]
    group_exists: bool = True

    @property
    def changes(self) -> List[ResetRow]:
        return [r for r in self.rows if r.changes]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "group": self.group, "topic": self.topic, "target": str(self.target),
            "group_exists": self.group_exists,
            "partitions": [dict(asdict(r), changes=r.changes) for r in self.rows],
        }


def plan_reset(
    zk: KazooClient, group: str, topic: str, target: ResetTarget, log_offsets: LogOffsets,
    partitions: Optional[Sequence[int]] = None,
) -> ResetPlan:
    """Compute, without writing anything, the new offset of each partition of ``topic``.

    ``partitions`` restricts the plan (default: every partition of the topic).
    A group that does not exist yet is allowed (a reset can seed its offsets);
    the plan says so in ``group_exists``. Raises :class:`UnknownTopicError`,
    :class:`AdminError` if a partition does not exist or a log offset cannot be
    looked up (the plan could not be clamped), and
    :class:`~zkconsumer.errors.MalformedZnodeError` for an unreadable offset node.
    """
    try:
        paths = zkformat.GroupPaths(group)
    except ValueError as exc:
        raise AdminError(f"invalid group name {group!r}: {exc}") from None
    client = _group_client(zk, group)
    all_partitions = client.partitions_for_topics([topic]).get(topic)
    if all_partitions is None:
        raise UnknownTopicError(topic)
    chosen = sorted(set(partitions)) if partitions is not None else all_partitions
    missing = sorted(set(chosen) - set(all_partitions))
    if missing:
        raise AdminError(f"topic {topic!r} has no partition {', '.join(map(str, missing))} "
                         f"(it has {len(all_partitions)})")
    tps = [(topic, p) for p in chosen]
    starts, start_problems = log_offsets.fetch(tps, EARLIEST_TIME)
    ends, end_problems = log_offsets.fetch(tps, LATEST_TIME)
    problems = {**start_problems, **end_problems}
    if problems:
        (t, p), why = sorted(problems.items())[0]
        raise AdminError(f"cannot look up the log offsets of {t}/{p}: {why}")
    rows = []
    for tp in tps:
        current = client.read_offset(*tp)
        new, note = compute_reset(target, current, starts[tp], ends[tp])
        rows.append(ResetRow(tp[0], tp[1], current, new, starts[tp], ends[tp], note))
    exists = zk.retry(zk.exists, paths.root) is not None
    return ResetPlan(group, topic, target, rows, exists)


def apply_reset(zk: KazooClient, plan: ResetPlan) -> int:
    """Write the plan's changed offsets; returns how many were written.

    Refuses with :class:`GroupActiveError` (nothing written) while the group has
    live members.
    """
    _refuse_if_live(zk, plan.group, "reset offsets")
    client = _group_client(zk, plan.group)
    written = 0
    for row in plan.changes:
        assert row.new is not None
        client.commit_offset(row.topic, row.partition, row.new)
        written += 1
    return written


# --------------------------------------------------------------------------- delete


def delete_group(zk: KazooClient, group: str, topic: Optional[str] = None) -> List[str]:
    """Delete ``/consumers/<group>``, or with ``topic`` only its offsets and owners of that topic.

    Returns the paths deleted (empty when there was nothing for ``topic``).
    Raises :class:`UnknownGroupError` if the group does not exist and
    :class:`GroupActiveError` (nothing deleted) while it has live members.
    """
    paths = _require_group(zk, group)
    _refuse_if_live(zk, group, f"delete topic {topic!r} from the group" if topic else "delete the group")
    if topic is None:
        targets = [paths.root]
    else:
        try:
            targets = [paths.offsets_topic(topic), paths.owners_topic(topic)]
        except ValueError as exc:
            raise AdminError(f"invalid topic name {topic!r}: {exc}") from None
    deleted = []
    for path in targets:
        if zk.retry(zk.exists, path) is None:
            continue
        _delete_tree(zk, path)
        deleted.append(path)
    return deleted


def _delete_tree(zk: KazooClient, path: str, attempts: int = 5) -> None:
    """Delete ``path`` and everything under it; children appearing meanwhile are retried."""
    for _ in range(attempts):
        try:
            zk.retry(zk.delete, path, recursive=True)
            return
        except NoNodeError:
            return
        except NotEmptyError:
            continue
    raise AdminError(f"could not delete {path}: nodes kept being created under it")
