"""``groups list``: the consumer groups in ZooKeeper and at the brokers' coordinators, and where each keeps
its offsets and its members.

:func:`list_all_groups` reads the children of ``/consumers`` and sends ListGroups v0 to every
live broker (``/brokers/ids``); each broker answers for the groups it coordinates. Kept are
consumer groups: protocol type ``consumer`` (Kafka's consumers and zkconsumer's coordinator
members), ``zkconsumer`` (zkconsumer releases before the standard protocol) or none; other
kinds (Kafka Connect's ``connect``) are left out, as Kafka's own ``kafka-consumer-groups``
does. A broker that cannot be asked is reported in :attr:`GroupListing.problems`, never fatal:
ZooKeeper's groups are still listed.

What a coordinator lists depends on the broker: Kafka 0.9 keeps a group only while it has
coordinator members (it forgets an emptied group, and offsets committed without a generation
create none), so there a group whose offsets alone are in Kafka is found through ZooKeeper
(its owners, registrations or offsets), and one with neither members nor ZooKeeper nodes is
not listed. Later brokers list such groups too (state ``Empty``).

:func:`locate_groups` (``groups list --stores``) then tells, per group, where its committed
offsets are (``/consumers/<g>/offsets`` nodes; OffsetFetch v1 at its coordinator for the topics
ZooKeeper knows the group by, or else every topic) and where its live members are
(``/consumers/<g>/ids``; DescribeGroups v0 for a group a coordinator listed): ``zookeeper``,
``kafka``, ``both`` or ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Set

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from ..errors import MalformedZnodeError, ZkConsumerError
from ..structs import TopicPartition
from ..wire.group_protocol import ListGroupsRequest, error_name
from ..zookeeper import zkformat
from . import reads
from .access import PLAINTEXT, BrokerAccess
from .errors import AdminError
from .stores import CoordinatorOffsets, group_partitions

__all__ = ["CONSUMER_PROTOCOL_TYPES", "GroupListing", "GroupLocation", "list_all_groups", "locate_groups", "where"]

#: Protocol types of the groups :func:`list_all_groups` keeps from the brokers.
CONSUMER_PROTOCOL_TYPES = ("consumer", "zkconsumer", "")
#: Kafka's internal topic, never a consumer group's.
_INTERNAL_TOPICS = ("__consumer_offsets",)


@dataclass(frozen=True)
class GroupListing:
    """The groups found: ``zookeeper`` (children of ``/consumers``), ``kafka`` (group -> the broker
    that coordinates it), and ``problems`` (one line per broker that could not be asked)."""

    zookeeper: List[str]
    kafka: Dict[str, int] = field(default_factory=dict)
    problems: List[str] = field(default_factory=list)

    @property
    def groups(self) -> List[str]:
        """Every group, sorted: ZooKeeper's and the coordinators'."""
        return sorted(set(self.zookeeper) | set(self.kafka))


@dataclass(frozen=True)
class GroupLocation:
    """Where a group's offsets and live members are: ``zookeeper``, ``kafka``, ``both`` or ``None``
    (none found). ``problem``: why Kafka's side could not be read (then only ZooKeeper's is shown)."""

    group: str
    offsets: Optional[str]
    membership: Optional[str]
    problem: Optional[str] = None


def where(in_zookeeper: bool, in_kafka: bool) -> Optional[str]:
    """``both``, ``zookeeper``, ``kafka`` or ``None``.

    >>> where(True, True), where(True, False), where(False, True), where(False, False)
    ('both', 'zookeeper', 'kafka', None)
    """
    if in_zookeeper and in_kafka:
        return "both"
    return "zookeeper" if in_zookeeper else "kafka" if in_kafka else None


def list_all_groups(zk: KazooClient, *, socket_timeout_ms: int = 10000,
                    client_id: str = reads.ADMIN_CLIENT_ID, access: BrokerAccess = PLAINTEXT) -> GroupListing:
    """ZooKeeper's groups and every broker's (ListGroups v0, at ``access.protocol``'s endpoint); see the
    module docstring."""
    in_zookeeper = reads.list_groups(zk)
    kafka: Dict[str, int] = {}
    problems: List[str] = []
    for name in reads.children(zk, zkformat.BROKER_IDS_PATH):
        path = f"{zkformat.BROKER_IDS_PATH}/{name}"
        try:
            data, _ = zk.retry(zk.get, path)
            broker = zkformat.decode_broker(path, data, access.protocol)
        except NoNodeError:
            continue  # the broker went away since the listing
        except MalformedZnodeError as exc:
            problems.append(f"broker {name}: {exc}")
            continue
        connection = access.connection(broker.host, broker.port, client_id, socket_timeout_ms)
        try:
            listed = connection.send(ListGroupsRequest())
        except ZkConsumerError as exc:
            problems.append(f"broker {broker.id} at {broker.host}:{broker.port}: {exc}")
            continue
        finally:
            connection.close()
        if listed.error_code:
            problems.append(f"broker {broker.id} at {broker.host}:{broker.port}: {error_name(listed.error_code)}")
        for group, protocol_type in listed.groups:
            if protocol_type in CONSUMER_PROTOCOL_TYPES:
                kafka[group] = broker.id
    return GroupListing(in_zookeeper, kafka, problems)


def _has_zookeeper_offsets(zk: KazooClient, group: str) -> bool:
    paths = zkformat.GroupPaths(group)
    return any(reads.partition_ids(reads.children(zk, paths.offsets_topic(topic)))
               for topic in reads.children(zk, paths.offsets))


def locate_groups(zk: KazooClient, listing: GroupListing, *, socket_timeout_ms: int = 10000,
                  coordinator: Optional[Callable[[str], CoordinatorOffsets]] = None,
                  access: BrokerAccess = PLAINTEXT) -> List[GroupLocation]:
    """Where each of ``listing.groups`` keeps its offsets and members (one coordinator round per group).

    ``coordinator(group)`` makes the group's :class:`~.stores.CoordinatorOffsets` (injectable).
    """
    connect = coordinator or (lambda group: CoordinatorOffsets(zk, group, socket_timeout_ms=socket_timeout_ms,
                                                               access=access))
    in_zookeeper = set(listing.zookeeper)
    every: List[TopicPartition] = []
    located: List[GroupLocation] = []
    for group in listing.groups:
        zk_offsets = group in in_zookeeper and _has_zookeeper_offsets(zk, group)
        zk_members = group in in_zookeeper and bool(reads.live_members(zk, group))
        partitions: Sequence[TopicPartition] = []
        if group in in_zookeeper:
            try:
                partitions = group_partitions(zk, group)
            except AdminError:
                pass
        if not partitions:  # ZooKeeper knows no topic of the group: ask about every topic
            if not every:
                every = _every_partition(zk)
            partitions = every
        kafka_offsets = kafka_members = False
        problem = None
        try:
            with connect(group) as kafka:
                kafka_offsets = any(v is not None for v in kafka.read(partitions).values())
                kafka_members = group in listing.kafka and bool(kafka.live_members())
        except (ZkConsumerError, ValueError) as exc:  # ValueError: a name ZooKeeper's paths cannot hold
            problem = f"group {group}: its offsets and members in Kafka could not be read ({exc})"
        located.append(GroupLocation(group, where(zk_offsets, kafka_offsets), where(zk_members, kafka_members),
                                     problem))
    return located


def _every_partition(zk: KazooClient) -> List[TopicPartition]:
    client = reads.group_client(zk, reads.ADMIN_CLIENT_ID)  # topics only: the group's name is not used
    topics = [t for t in client.all_topics() if t not in _INTERNAL_TOPICS]
    known = client.partitions_for_topics(topics)
    found: Set[TopicPartition] = {(t, p) for t in topics for p in known.get(t, ())}
    return sorted(found)
