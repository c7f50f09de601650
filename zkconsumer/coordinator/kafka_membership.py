"""``CoordinatorMembership``: group membership kept by the brokers' group coordinator.

``ZookeeperConsumerConnector(config)`` uses it when ``group.membership=kafka``: the
streams, ``commit_offsets()``, ``shutdown()``, ``status`` and ``metrics_snapshot()`` all
behave the same as with ZooKeeper membership. What differs is who decides which member
consumes what: the brokers' group coordinator, with Kafka's standard consumer protocol
(``protocol_type`` ``consumer``, assignors ``range`` and ``roundrobin``), so the group may
mix zkconsumer members with Kafka's Java ``KafkaConsumer``, kafka-python and confluent-kafka,
and whichever leads, the assignment is Kafka's; each zkconsumer member spreads its partitions
over its own streams (:mod:`.assignment`).

Wiring (the parts are those of the ZooKeeper connector, plus this package)::

    create_message_streams ──▶ streams + queues (consumer/stream.py, fetch/handoff.py)
          │
          ▼
    JoinSyncLoop (membership.py) ── CoordinatorChannel ×2 (offsets/channel.py): join/sync, heartbeat/leave
          │ assign / revoke                 leader: plan (assignment.py) from ZooKeeper's topic list
          ▼
    Delivery (delivery.py) ── FetcherManager (fetch/manager.py), OffsetCommitter (offsets/committer.py) with
                              KafkaOffsetStorage: OffsetCommit v2 fenced by generation

ZooKeeper is still used, read-only except for dual-committed offsets: to list
live brokers (where to ask for the coordinator, where to fetch) and topics'
partitions (the leader's plan), and to refuse joining while members of the same
group still run with ZooKeeper membership (the two kinds would both consume
every partition; the documentation's *Migration from Kafka's consumer* page switches a group over).

Shutdown order: auto-commit and metrics stop; membership and heartbeat threads
stop (a held JoinGroup is interrupted); fetchers stop and every stream ends;
offsets are committed under the still-valid generation (``auto.commit.enable``);
LeaveGroup, so the others rebalance at once instead of after
``session.timeout.ms``; connections and the ZooKeeper session close.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..commits import Generation
from ..consumer.membership import ConnectorParts, QueueFor, RebalanceStatus, TopicAllowed
from ..consumer.topic_count import StaticTopicCount, TopicCount
from ..errors import OffsetStorageError, RebalanceInProgressError, ZkConsumerError
from ..offsets.channel import CoordinatorChannel, connection_factory
from ..structs import TopicPartition
from ..wire.group_protocol import DescribeGroupsRequest, GroupMember, error_name
from . import consumer_protocol
from .assignment import as_member, decode_share, member_topics, pattern_members, plan, subscribed_topics, subscription_metadata
from .delivery import Delivery
from .join_sync import JoinSyncLoop

__all__ = ["CoordinatorMembership", "coordinator_members"]

log = logging.getLogger(__name__)


class CoordinatorMembership:
    """Membership of a consumer group managed by the brokers' group coordinator (``group.membership=kafka``).

    Built by the connector with the parts it may use (:class:`~zkconsumer.consumer.membership.ConnectorParts`);
    implements :class:`~zkconsumer.consumer.membership.Membership`. Requires
    ``offsets.storage=kafka`` (commits are fenced by the coordinator's generation; the
    configuration checks it). :attr:`member_id`, :attr:`generation` and :attr:`assignment`
    show the coordinator's view of this member once it joined (``connector.membership``).

    ``commit_offsets()`` during a rebalance commits what the revoked
    generation handed out, under that generation, while the coordinator still
    accepts it; otherwise it raises the retriable
    :class:`~zkconsumer.errors.RebalanceInProgressError` (never returns having
    committed nothing), as it does when the coordinator fences a commit.
    """

    kind = "kafka"

    def __init__(self, member: ConnectorParts) -> None:
        self._member = member
        self._membership: Optional[JoinSyncLoop] = None
        self._delivery: Optional[Delivery] = None

    # ------------------------------------------------------------------ the coordinator's view

    @property
    def member_id(self) -> Optional[str]:
        """The id the coordinator gave this member (``None`` before it joined)."""
        return None if self._membership is None else self._membership.member_id

    @property
    def generation(self) -> Optional[Generation]:
        """The group generation whose assignment this member consumes (``None`` while rebalancing)."""
        return None if self._membership is None else self._membership.generation

    @property
    def is_leader(self) -> bool:
        """Whether the coordinator made this member the leader of its current generation (the
        member that computed everyone's assignment); ``False`` before it joined."""
        return self._membership is not None and self._membership.is_leader

    @property
    def assignment(self) -> Dict[Tuple[str, int], str]:
        """This member's partitions in the group's terms: partition -> thread id ``<member id>-<i>``.

        (``connector.status.owned`` maps the same partitions to the connector's
        streams, ``<consumer id>-<i>``, as with ZooKeeper membership.)
        """
        return {} if self._delivery is None else self._delivery.assignment()

    # ------------------------------------------------------------------ Membership

    def status(self) -> Optional[RebalanceStatus]:
        """Membership state, owned partitions (by stream thread id), rebalances, last error."""
        if self._membership is None or self._delivery is None:
            return None
        return self._membership.status(self._delivery.owned_map())

    def stop(self) -> None:
        if self._membership is not None:
            self._membership.stop()

    def joined(self) -> bool:
        return self._delivery is not None

    def leave(self) -> None:
        if self._membership is not None:
            self._membership.leave()

    def uncommitted(self) -> List[Tuple[str, int, int]]:
        """Not tracked for the coordinator's membership (the shutdown warning names none)."""
        return []

    def deliverable(self) -> bool:
        """Always: the coordinator fences commits by generation, not by a ZooKeeper session."""
        return True

    def describe(self) -> str:
        return f"membership=kafka, member={self.member_id}, "

    def join(self, count: TopicCount, queue_for: QueueFor, topic_allowed: TopicAllowed) -> None:
        member = self._member
        cfg = member.config
        self._delivery = Delivery(
            consumer_id=member.consumer_id,
            queue_for=queue_for,
            streams=member.streams,
            fetchers=member.fetchers,
            committer=member.committer,
            auto_commit=cfg.auto_commit_enable,
            fetch_size=cfg.fetch_message_max_bytes,
            listener=member.listener,
        )
        self._membership = JoinSyncLoop(
            group_id=cfg.group_id,
            name=member.consumer_id,
            protocol=cfg.partition_assignment_strategy,
            metadata=functools.partial(self._metadata, count, int(time.time() * 1000)),
            session_timeout_ms=cfg.session_timeout_ms,
            heartbeat_interval_ms=cfg.heartbeat_interval_ms,
            join_channel=self._channel("membership", cfg.session_timeout_ms + cfg.offsets_channel_socket_timeout_ms),
            heartbeat_channel=self._channel("heartbeat", min(cfg.session_timeout_ms, cfg.offsets_channel_socket_timeout_ms)),
            plan=self._plan,
            share_of=functools.partial(self._share_of, count),
            listener=self._delivery,
            precondition=self._zookeeper_members_gone,
            max_retries=cfg.rebalance_max_retries,
            backoff_ms=cfg.rebalance_backoff_ms,
            on_failure=member.on_failure,
            on_rebalanced=member.metrics.record_rebalance,
        )
        self._membership.start()
        self._membership.wait_first_assignment(timeout=None)
        member.failure.raise_if_failed()  # e.g. a strategy or session timeout the coordinator refused
        with member.guard():  # raises ConsumerShutdownError if shutdown() ended the join
            pass

    def _channel(self, name: str, socket_timeout_ms: int) -> CoordinatorChannel:
        cfg = self._member.config
        return CoordinatorChannel(
            cfg.group_id,
            brokers=lambda: self._member.group.brokers(cfg.security_protocol),
            connect=connection_factory(cfg, socket_timeout_ms),
            lookup_connect=connection_factory(cfg, cfg.offsets_channel_socket_timeout_ms),
            name=name,
        )

    def _metadata(self, count: TopicCount, timestamp_ms: int) -> bytes:
        """JoinGroup metadata: Kafka's subscription of the topics ``count`` reads now."""
        static = isinstance(count, StaticTopicCount)
        topics = subscribed_topics(count, () if static else self._member.group.all_topics())
        return subscription_metadata(count, topics, timestamp_ms)

    def _share_of(self, count: TopicCount, data: bytes, member_id: str) -> Dict[Tuple[str, int], str]:
        """This member's partitions (Kafka's assignment) spread over its streams."""
        cfg = self._member.config
        return dict(decode_share(data, as_member(count, member_id, cfg.exclude_internal_topics),
                                 cfg.partition_assignment_strategy))

    def _plan(self, protocol: str, members: Sequence[GroupMember]) -> Tuple[List[Tuple[str, bytes]], Callable[[], bool]]:
        """The leader's job: Kafka's assignment over every member's subscription (any client's),
        with the partition counts ZooKeeper lists.

        ``still_valid()`` is false once a subscribed topic's partition count
        changed, or a zkconsumer member subscribing by pattern would now list
        other topics than it did (a topic created or deleted): the group rejoins,
        and every member sends what it reads then.
        """
        group = self._member.group
        listed = [(m.member_id, m.metadata) for m in members]
        patterns = pattern_members(listed, self._member.config.exclude_internal_topics)

        subscribed = sorted({t for topics in member_topics(listed).values() for t in topics})

        def counts() -> Dict[str, int]:
            return {t: len(ps) for t, ps in group.partitions_for_topics(subscribed).items()}

        def patterns_moved() -> bool:
            if not patterns:
                return False
            every = group.all_topics()
            return any(set(subscribed_topics(count, every)) != topics for count, topics in patterns.values())

        inputs = counts()
        shares = plan(protocol, listed, inputs)
        assignments = [(member_id, consumer_protocol.encode_assignment(share))
                       for member_id, share in sorted(shares.items())]

        def still_valid() -> bool:
            return counts() == inputs and not patterns_moved()

        return assignments, still_valid

    def _zookeeper_members_gone(self) -> Optional[str]:
        """``None`` if no ZooKeeper-membership member of this group is registered, else why we wait.

        Read after a ``sync``: a server behind its leader could show ``/ids`` empty after a member
        registered there (found by the simulator: switch schedule seed 4844, a lagging follower)."""
        group = self._member.group
        group.client.sync(group.paths.ids)
        members = sorted(group.members(fresh=True))
        if not members:
            return None
        shown = ", ".join(members[:3]) + (f" and {len(members) - 3} more" if len(members) > 3 else "")
        return (f"waiting for the group's ZooKeeper-membership members to shut down before joining through the "
                f"coordinator ({shown} registered under {group.paths.ids}; see the documentation's page "
                f"Migration from Kafka's consumer)")

    def positions(self) -> Dict[TopicPartition, int]:
        if self._delivery is None:
            return {}
        _, owned, _ = self._delivery.to_commit()
        return {(info.topic, info.partition): info.commit_position for info, _ in owned if info.commit_position >= 0}

    def commit(self, offsets: Optional[Mapping[TopicPartition, int]] = None) -> List[TopicPartition]:
        """Commit what was handed out (or ``offsets``: those of them this member was assigned), under
        the generation it was assigned in; never a silent no-op. Returns the partitions of ``offsets``
        not assigned to this member (not written).

        While a rebalance is in progress (the assignment revoked, the next one
        not installed), what the revoked generation handed out is committed
        under that generation: the coordinator accepts it while the group is
        still preparing the rebalance. Partitions the coordinator refuses (the
        group moved on: REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION,
        UNKNOWN_MEMBER_ID) raise :class:`~zkconsumer.errors.RebalanceInProgressError`
        (retriable), and a member that still believed its generation current
        rejoins. Returns quietly only when nothing was handed out yet.
        """
        if self._delivery is None or self._membership is None:
            return sorted(offsets or ())
        generation, owned, rebalancing = self._delivery.to_commit()
        held = {(info.topic, info.partition) for info, _ in owned}
        refused = sorted(tp for tp in offsets or () if tp not in held)
        if generation is None or not owned:
            return refused  # nothing was handed out under any generation: nothing to commit
        fenced: List[Tuple[str, int]] = []
        try:
            fenced = self._member.committer.commit(owned, generation, offsets=offsets)
        except OffsetStorageError as exc:
            fenced = exc.fenced
            raise
        finally:
            if fenced and not rebalancing:
                self._membership.request_rejoin(
                    f"the coordinator refused a commit of generation {generation.generation_id}", generation,
                    commit=False)
        if fenced:
            shown = ", ".join(f"{t}-{p}" for t, p in sorted(fenced))
            raise RebalanceInProgressError(
                f"group {self._member.config.group_id} is rebalancing: the coordinator refused to commit {shown} under "
                f"generation {generation.generation_id} (the group has moved on); nothing was committed for them. "
                "Call commit_offsets() again once the rebalance is over: it commits the partitions this member "
                "still owns; the others are consumed again by their new owner from the last committed offset",
                fenced)
        return refused

    def on_zk_state(self, state: str) -> None:
        """kazoo's connection thread: membership does not depend on the ZooKeeper session; only log."""
        log.info("%s: ZooKeeper connection %s (group membership is kept by the coordinator)", self._member.consumer_id,
                 str(state).lower())


#: Coordinator group states in which it has no members (0.9: ``Dead``; later brokers: ``Empty``).
_MEMBERLESS_STATES = ("", "Dead", "Empty")


def coordinator_members(member: ConnectorParts) -> List[str]:
    """The member ids the coordinator lists for the member's group (DescribeGroups v0); empty if none.

    One fresh connection per call (used while a group migrates, not in the steady state).
    Raises a :class:`~zkconsumer.errors.ZkConsumerError` when the coordinator does not answer.
    """
    cfg = member.config
    channel = CoordinatorChannel(
        cfg.group_id,
        brokers=lambda: member.group.brokers(cfg.security_protocol),
        connect=connection_factory(cfg, cfg.offsets_channel_socket_timeout_ms),
        name="migration",
    )
    try:
        found = [g for g in channel.send(DescribeGroupsRequest([cfg.group_id])) if g.group_id == cfg.group_id]
    finally:
        channel.close()
    if not found:
        return []
    if found[0].error_code:
        raise ZkConsumerError(f"DescribeGroups of {cfg.group_id}: {error_name(found[0].error_code)}")
    if found[0].state in _MEMBERLESS_STATES:
        return []
    return sorted(m.member_id for m in found[0].members)
