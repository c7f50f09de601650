"""group.membership=kafka against real 0.9 brokers: join, split, rebalance, session expiry, fencing, shutdown."""

from __future__ import annotations

import threading
from typing import Dict, List, Mapping, Sequence, Set

import pytest
from support.common import Drainer, consumer_props, produced_values, unique, wait_until
from support.offsets import MemberProcess, kafka_committed, produce_evenly, values

from harness.assignment import expected_member_range, expected_member_roundrobin
from zkconsumer import (
    ConfigurationError,
    ConsumerShutdownError,
    RebalanceInProgressError,
    Whitelist,
    ZkConsumerError,
    ZookeeperConsumerConnector,
)
from zkconsumer.commits import CommitEntry
from zkconsumer.config import ConsumerConfig
from zkconsumer.consumer.membership import RebalanceState
from zkconsumer.coordinator.kafka_membership import CoordinatorMembership
from zkconsumer.offsets.channel import CoordinatorChannel, connection_factory
from zkconsumer.offsets.storage import KafkaOffsetStorage
from zkconsumer.zookeeper.group import GroupClient


def coordinator_props(cluster, group: str, **extra: object) -> Dict[str, object]:
    props = consumer_props(cluster, group, group_membership="kafka", offsets_storage="kafka",
                           session_timeout_ms=6000, heartbeat_interval_ms=500)
    props.update({k.replace("_", "."): v for k, v in extra.items()})
    return props


def settled(members: Sequence[ZookeeperConsumerConnector], partitions: int, topic: str) -> bool:
    """Every member stable in the same generation, together owning each partition exactly once."""
    statuses = [m.status for m in members]
    generations = {m.membership.generation for m in members}
    if any(s is None or s.state is not RebalanceState.STABLE for s in statuses) or None in generations:
        return False
    if len({g.generation_id for g in generations}) != 1:
        return False
    owned = [tp for s in statuses for tp in s.owned]
    return sorted(owned) == [(topic, p) for p in range(partitions)]


def group_assignment(members: Sequence[ZookeeperConsumerConnector], topic: str) -> Dict[int, str]:
    return {p: thread for m in members for (t, p), thread in m.membership.assignment.items() if t == topic}


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_members_split_partitions_per_the_assignor_and_a_third_rebalances_them(cluster, strategy: str) -> None:
    topic, group = unique("coord"), unique("g-coord")
    cluster.create_topic(topic, partitions=7, replication=1)
    kafkas = {"range": expected_member_range, "roundrobin": expected_member_roundrobin}[strategy]
    props = coordinator_props(cluster, group, partition_assignment_strategy=strategy)
    produced: List[bytes] = []
    members: List[ZookeeperConsumerConnector] = []
    drainers: List[Drainer] = []
    try:
        for round_, count in enumerate((2, 3)):
            while len(members) < count:
                member = ZookeeperConsumerConnector(props)
                assert isinstance(member.membership, CoordinatorMembership)
                members.append(member)
                drainers.append(Drainer(member.create_message_streams({topic: 2})[topic]))
            wait_until(lambda: settled(members, 7, topic), 60, f"{count} members to settle")
            # Kafka's assignment of partitions to members, each spreading its share over its two streams
            expected = kafkas({m.membership.member_id: [topic] for m in members}, {topic: 7})
            assignment = group_assignment(members, topic)
            for m in members:
                mine = sorted(p for p, thread in assignment.items()
                              if thread.rsplit("-", 1)[0] == m.membership.member_id)
                assert [(topic, p) for p in mine] == expected[m.membership.member_id]
                assert {assignment[p] for p in mine} == {f"{m.membership.member_id}-{i}" for i in range(min(2, len(mine)))}
            for m in members:  # status and metrics name the member's own streams, as with ZooKeeper membership
                streams = {f"{m.consumer_id}-{i}" for i in range(2)}
                assert set(m.status.owned.values()) <= streams and set(m.metrics_snapshot()["streams"]) <= streams
            batch = produced_values(35, f"r{round_}")
            produce_evenly(cluster, topic, batch, 7)
            produced += batch
            wait_until(lambda produced=produced: set(produced) <= {v for d in drainers for v in values(d.snapshot())}, 60,
                       "every message so far to be consumed")
    finally:
        for drainer in drainers:
            drainer.stop()
        for member in members:
            member.shutdown()


def test_a_killed_member_is_removed_after_its_session_timeout_and_nothing_is_lost(cluster) -> None:
    topic, group = unique("coord-kill"), unique("g-kill")
    cluster.create_topic(topic, partitions=4, replication=1)
    props = coordinator_props(cluster, group, auto_commit_enable="true", auto_commit_interval_ms=200)
    survivor = ZookeeperConsumerConnector(props)
    victim = MemberProcess(props, topic)
    try:
        drainer = Drainer(survivor.create_message_streams({topic: 1})[topic])
        wait_until(lambda: victim.member_id and len(survivor.status.owned) == 2 and
                   survivor.status.state is RebalanceState.STABLE, 60, "the two members to split the topic")
        before = survivor.membership.generation
        first = produced_values(40, "before")
        produce_evenly(cluster, topic, first)
        wait_until(lambda: set(first) <= set(values(drainer.snapshot())) | set(victim.values()), 60,
                   "both members to consume their halves")
        victim.kill()
        wait_until(lambda: len(survivor.status.owned) == 4 and survivor.status.state is RebalanceState.STABLE, 60,
                   "the coordinator to expire the killed member and hand its partitions over")
        assert survivor.membership.generation.generation_id > before.generation_id
        second = produced_values(40, "after")
        produce_evenly(cluster, topic, second)
        wait_until(lambda: set(first + second) <= set(values(drainer.snapshot())) | set(victim.values()), 60,
                   "every message to be consumed by someone")
        drainer.stop()
    finally:
        victim.kill()
        survivor.shutdown()


def test_a_clean_handoff_delivers_every_message_exactly_once(cluster) -> None:
    topic, group = unique("coord-handoff"), unique("g-handoff")
    cluster.create_topic(topic, partitions=4, replication=1)
    props = coordinator_props(cluster, group, auto_commit_enable="true", auto_commit_interval_ms=60000)
    first, second = produced_values(40, "first"), produced_values(40, "second")
    with ZookeeperConsumerConnector(props) as stays:
        stays_drainer = Drainer(stays.create_message_streams({topic: 1})[topic])
        leaves = ZookeeperConsumerConnector(props)
        leaves_drainer = Drainer(leaves.create_message_streams({topic: 1})[topic])
        wait_until(lambda: settled([stays, leaves], 4, topic), 60, "the two members to split the topic")
        produce_evenly(cluster, topic, first)
        wait_until(lambda: len(stays_drainer.snapshot()) + len(leaves_drainer.snapshot()) >= 40, 60, "the first batch")
        leaves_drainer.stop()
        leaves.shutdown()  # final commit under its generation, then LeaveGroup
        wait_until(lambda: settled([stays], 4, topic), 60, "the remaining member to take everything")
        produce_evenly(cluster, topic, second)
        wait_until(lambda: len(stays_drainer.snapshot()) + len(leaves_drainer.snapshot()) >= 80, 60, "the second batch")
        got = values(stays_drainer.stop()) + values(leaves_drainer.snapshot())
    assert sorted(got) == sorted(first + second)  # no loss, no duplicate
    assert kafka_committed(cluster, group, topic, range(4)) == {p: 20 for p in range(4)}


def test_commits_of_an_old_generation_are_fenced_by_the_coordinator(cluster) -> None:
    topic, group = unique("coord-fence"), unique("g-fence")
    cluster.create_topic(topic, partitions=2, replication=1)
    props = coordinator_props(cluster, group)
    config = ConsumerConfig(props)
    brokers = GroupClient(cluster.kazoo_client(), group, "probe").brokers
    storage = KafkaOffsetStorage(CoordinatorChannel(group, brokers, connection_factory(config, 10000)), group,
                                 max_retries=5, backoff_ms=200)
    with ZookeeperConsumerConnector(props) as first:
        first.create_message_streams({topic: 1})
        old = first.membership.generation
        assert storage.write([CommitEntry(topic, 0, 3, "")], old).committed == [(topic, 0)]
        with ZookeeperConsumerConnector(props) as second:
            second.create_message_streams({topic: 1})
            wait_until(lambda: settled([first, second], 2, topic), 60, "the second generation")
            outcome = storage.write([CommitEntry(topic, 0, 99, "")], old)
            assert outcome.fenced == [(topic, 0)] and outcome.committed == []
            assert storage.write([CommitEntry(topic, 0, 4, "")], first.membership.generation).committed == [(topic, 0)]
    storage.close()
    assert kafka_committed(cluster, group, topic, [0]) == {0: 4}


def test_a_member_with_another_assignment_strategy_is_refused(cluster) -> None:
    topic, group = unique("coord-proto"), unique("g-proto")
    cluster.create_topic(topic, partitions=2, replication=1)
    with ZookeeperConsumerConnector(coordinator_props(cluster, group)) as first:
        first.create_message_streams({topic: 1})
        odd = ZookeeperConsumerConnector(coordinator_props(cluster, group, partition_assignment_strategy="roundrobin"))
        try:
            with pytest.raises(ConfigurationError) as raised:
                odd.create_message_streams({topic: 1})
            assert raised.value.property == "partition.assignment.strategy"
        finally:
            odd.shutdown()


def test_a_pattern_subscription_picks_up_topics_created_later(cluster) -> None:
    prefix, group = unique("coord-wild"), unique("g-wild")
    cluster.create_topic(f"{prefix}-a", partitions=2, replication=1)
    with ZookeeperConsumerConnector(coordinator_props(cluster, group)) as member:
        drainer = Drainer(member.create_message_streams_by_filter(Whitelist(f"{prefix}-.*"), 2))
        cluster.produce(f"{prefix}-a", [b"a0", b"a1"], partition=0)
        cluster.create_topic(f"{prefix}-b", partitions=2, replication=1)
        wait_until(lambda: (f"{prefix}-b", 1) in member.status.owned, 60, "the leader to replan for the new topic")
        cluster.produce(f"{prefix}-b", [b"b0", b"b1"], partition=1)
        wait_until(lambda: {b"a0", b"a1", b"b0", b"b1"} <= set(values(drainer.snapshot())), 60, "both topics")
        drainer.stop()


def test_the_connector_is_still_a_zookeeper_consumer_connector(cluster) -> None:
    group = unique("g-type")
    connector = ZookeeperConsumerConnector(ConsumerConfig(coordinator_props(cluster, group)))
    try:
        assert isinstance(connector, ZookeeperConsumerConnector)
        assert type(connector) is ZookeeperConsumerConnector
        assert isinstance(connector.membership, CoordinatorMembership) and connector.membership.kind == "kafka"
        assert connector.status is None and connector.membership.member_id is None
        assert "membership=kafka" in repr(connector)
    finally:
        connector.shutdown()
        connector.shutdown()  # idempotent
    plain = ZookeeperConsumerConnector(consumer_props(cluster, group))
    try:
        assert type(plain) is ZookeeperConsumerConnector and plain.membership.kind == "zookeeper"
    finally:
        plain.shutdown()


def test_shutdown_while_the_coordinator_holds_a_join(cluster) -> None:
    """A member blocked in create_message_streams (waiting on a ZooKeeper member) can be shut down."""
    topic, group = unique("coord-stop"), unique("g-stop")
    cluster.create_topic(topic, partitions=1, replication=1)
    with ZookeeperConsumerConnector(consumer_props(cluster, group, offsets_storage="kafka")) as legacy:
        legacy.create_message_streams({topic: 1})
        member = ZookeeperConsumerConnector(coordinator_props(cluster, group, rebalance_max_retries=1000,
                                                              rebalance_backoff_ms=100))
        outcome: List[BaseException] = []

        def join() -> None:
            try:
                member.create_message_streams({topic: 1})
            except ConsumerShutdownError as exc:
                outcome.append(exc)

        joined = threading.Thread(target=join, daemon=True)
        joined.start()
        wait_until(lambda: member.status is not None and "ZooKeeper-membership" in (member.status.last_error or ""),
                   30, "the coordinator member to report that it waits for the ZooKeeper member")
        member.shutdown()
        joined.join(30)
        assert not joined.is_alive() and len(outcome) == 1


class BlockSecondAssignment:
    """A rebalance listener whose second ``before_starting_fetchers`` blocks until released.

    It holds the member inside a rebalance for as long as the test needs: the
    old assignment is revoked, the new one is not installed yet.
    """

    def __init__(self) -> None:
        self.calls = 0
        self.blocked = threading.Event()
        self.release = threading.Event()

    def before_releasing_partitions(self, partitions: Mapping[str, Set[int]]) -> None:
        pass

    def before_starting_fetchers(self, consumer_id: str, assignment: Mapping[str, Mapping[int, str]]) -> None:
        self.calls += 1
        if self.calls == 2:
            self.blocked.set()
            self.release.wait(60)


def test_item11_commit_offsets_during_a_rebalance_commits_or_raises_a_retriable_error(cluster) -> None:
    """Issue item 11: commit_offsets() while a rebalance is in progress is never a silent no-op.

    Member A consumes (auto-commit off), then B joins; A's next assignment is
    held in a rebalance listener, so A is mid-rebalance (old partitions revoked,
    new ones not installed) when the application calls ``commit_offsets()``.
    It must either commit what A consumed (visible through OffsetFetch) or raise
    the retriable RebalanceInProgressError.
    """
    topic, group = unique("coord-commit"), unique("g-commit")
    cluster.create_topic(topic, partitions=2, replication=1)
    produce_evenly(cluster, topic, produced_values(20, "m"), 2)
    listener = BlockSecondAssignment()
    props = coordinator_props(cluster, group)
    a = ZookeeperConsumerConnector(props, rebalance_listener=listener)
    b = None
    joined = threading.Thread(target=lambda: None)
    try:
        stream = a.create_message_streams({topic: 1})[topic][0]
        consumed = [m for _, m in zip(range(20), stream)]
        assert len(consumed) == 20
        expected = {p: 10 for p in range(2)}  # produce_evenly: 10 per partition, all consumed

        b = ZookeeperConsumerConnector(props)
        joined = threading.Thread(target=b.create_message_streams, args=({topic: 1},), daemon=True)
        joined.start()
        assert listener.blocked.wait(60), "A did not reach its second assignment"
        assert a.status.state is not RebalanceState.STABLE

        try:
            a.commit_offsets()
        except RebalanceInProgressError as exc:
            assert isinstance(exc, ZkConsumerError) and exc.retriable
            assert group in str(exc)
        else:
            assert kafka_committed(cluster, group, topic, range(2)) == expected, \
                "commit_offsets() returned during a rebalance without committing"

        # Retriable indeed: once the rebalance is over, the same call commits what A kept,
        # from the position already handed out to the application.
        listener.release.set()
        joined.join(60)
        wait_until(lambda: settled([a, b], 2, topic), 60, "the two members to settle")
        a.commit_offsets()
        kept = [p for (t, p) in a.membership.assignment]
        assert len(kept) == 1
        assert kafka_committed(cluster, group, topic, kept)[kept[0]] == 10
    finally:
        listener.release.set()
        joined.join(60)
        if b is not None:
            b.shutdown()
        a.shutdown()
