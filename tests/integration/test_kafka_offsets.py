"""offsets.storage=kafka and dual commit against real 0.9 brokers, refereed by kafka-python and ZooKeeper."""

from __future__ import annotations

from support.common import consumer_props, produced_values, unique, wait_until
from support.offsets import consume, kafka_committed, next_offsets, produce_evenly, values, zookeeper_committed

from zkconsumer import ZookeeperConsumerConnector
from zkconsumer.commits import NO_GENERATION, CommitEntry
from zkconsumer.config import ConsumerConfig
from zkconsumer.offsets.channel import CoordinatorChannel, connection_factory
from zkconsumer.offsets.storage import KafkaOffsetStorage
from zkconsumer.zookeeper.group import GroupClient

PARTITIONS = range(4)


def kafka_storage(cluster, group: str, zk_group: GroupClient = None, retries: int = 5) -> KafkaOffsetStorage:
    config = ConsumerConfig({"zookeeper.connect": cluster.zk_connect, "group.id": group})
    brokers = GroupClient(cluster.kazoo_client(), group, f"{group}_probe").brokers
    channel = CoordinatorChannel(group, brokers, connection_factory(config, 10000))
    return KafkaOffsetStorage(channel, group, max_retries=retries, backoff_ms=200,
                              owns=zk_group.owns if zk_group is not None else None)


def test_dual_commit_kafka_and_zookeeper_agree(cluster, zk, make_topic) -> None:
    topic, group = make_topic(partitions=4), unique("g-dual")
    produced = produced_values(60)
    produce_evenly(cluster, topic, produced)
    got = consume(cluster, group, topic, len(produced), offsets_storage="kafka", dual_commit_enabled="true")
    assert values(got) == sorted(produced)
    expected = next_offsets(got)
    assert kafka_committed(cluster, group, topic, PARTITIONS) == expected
    assert zookeeper_committed(zk, group, topic, PARTITIONS) == expected


def test_kafka_only_storage_leaves_zookeeper_alone(cluster, zk, make_topic) -> None:
    topic, group = make_topic(partitions=4), unique("g-konly")
    produce_evenly(cluster, topic, produced_values(20))
    got = consume(cluster, group, topic, 20, offsets_storage="kafka", dual_commit_enabled="false")
    assert kafka_committed(cluster, group, topic, PARTITIONS) == next_offsets(got)
    assert zookeeper_committed(zk, group, topic, PARTITIONS) == {p: None for p in PARTITIONS}


def test_a_group_switched_from_zookeeper_to_kafka_storage_resumes_exactly(cluster, zk, make_topic) -> None:
    topic, group = make_topic(partitions=4), unique("g-switch")
    batches = [produced_values(40, f"b{i}") for i in range(3)]

    produce_evenly(cluster, topic, batches[0])
    assert values(consume(cluster, group, topic, 40)) == sorted(batches[0])  # offsets.storage=zookeeper
    in_zookeeper = zookeeper_committed(zk, group, topic, PARTITIONS)
    assert kafka_committed(cluster, group, topic, PARTITIONS) == {p: None for p in PARTITIONS}

    produce_evenly(cluster, topic, batches[1])  # dual commit: Kafka has nothing, ZooKeeper has everything
    got = consume(cluster, group, topic, 40, offsets_storage="kafka", dual_commit_enabled="true")
    assert values(got) == sorted(batches[1]), "reprocessed or skipped messages across the switch"
    assert all(m.offset >= in_zookeeper[m.partition] for m in got)
    both = kafka_committed(cluster, group, topic, PARTITIONS)
    assert both == zookeeper_committed(zk, group, topic, PARTITIONS)

    produce_evenly(cluster, topic, batches[2])  # Kafka only: ZooKeeper's offsets stay where dual commit left them
    got = consume(cluster, group, topic, 40, offsets_storage="kafka", dual_commit_enabled="false")
    assert values(got) == sorted(batches[2])
    assert zookeeper_committed(zk, group, topic, PARTITIONS) == both
    assert kafka_committed(cluster, group, topic, PARTITIONS) != both


def test_an_idle_group_moved_through_dual_commit_still_resumes_exactly_from_kafka(cluster, zk, make_topic) -> None:
    topic, group = make_topic(partitions=4), unique("g-idle")
    first, later = produced_values(30, "a"), produced_values(30, "b")
    produce_evenly(cluster, topic, first)
    consume(cluster, group, topic, 30)  # ZooKeeper storage

    props = consumer_props(cluster, group, offsets_storage="kafka")
    with ZookeeperConsumerConnector(props) as connector:  # dual commit; no message arrives meanwhile
        connector.create_message_streams({topic: 1})
        connector.commit_offsets()  # unchanged offsets, but Kafka lacked them: written anyway
    assert kafka_committed(cluster, group, topic, PARTITIONS) == zookeeper_committed(zk, group, topic, PARTITIONS)

    produce_evenly(cluster, topic, later)
    got = consume(cluster, group, topic, 30, offsets_storage="kafka", dual_commit_enabled="false")
    assert values(got) == sorted(later)


def test_a_read_takes_the_larger_of_the_two_stores(cluster, zk, make_topic) -> None:
    topic, group = make_topic(partitions=4), unique("g-max")
    for p in PARTITIONS:
        cluster.produce(topic, produced_values(10, f"p{p}"), partition=p)
    consume(cluster, group, topic, 40, offsets_storage="kafka")  # both stores: 10 everywhere
    zk.set(f"/consumers/{group}/offsets/{topic}/0", b"13")  # a ZooKeeper-only member ran further on 0
    zk.set(f"/consumers/{group}/offsets/{topic}/1", b"0")  # and ZooKeeper is stale on 1: Kafka wins there
    for p in PARTITIONS:
        cluster.produce(topic, produced_values(10, f"q{p}"), partition=p)
    got = consume(cluster, group, topic, 37, offsets_storage="kafka")
    first = {p: min(m.offset for m in got if m.partition == p) for p in PARTITIONS}
    assert first == {0: 13, 1: 10, 2: 10, 3: 10}
    assert len(got) == 37


def test_kafka_commits_under_zookeeper_membership_are_fenced_by_ownership(cluster, make_topic) -> None:
    topic, group = make_topic(partitions=2), unique("g-own")
    member = GroupClient(cluster.kazoo_client(), group, f"{group}_me")
    assert member.claim(topic, 0, f"{group}_me-0") is None
    cluster.kazoo_client().create(member.paths.owner(topic, 1), b"someone-else-0", ephemeral=True, makepath=True)
    storage = kafka_storage(cluster, group, member)
    try:
        outcome = storage.write([CommitEntry(topic, 0, 5, f"{group}_me-0"), CommitEntry(topic, 1, 5, f"{group}_me-0")],
                                NO_GENERATION)
    finally:
        storage.close()
    assert (outcome.committed, outcome.fenced, outcome.error) == ([(topic, 0)], [(topic, 1)], None)
    assert kafka_committed(cluster, group, topic, [0, 1]) == {0: 5, 1: None}


def test_commits_and_fetches_follow_the_coordinator_when_its_broker_dies(cluster, make_topic) -> None:
    topic, group = make_topic(partitions=4, replication=3), unique("g-move")
    storage = kafka_storage(cluster, group, retries=150)  # 150 x 200 ms: a broker's session expiry and an election
    victim = None
    try:
        assert storage.write([CommitEntry(topic, p, 10 + p, "x") for p in PARTITIONS]).error is None
        victim = storage.coordinator.broker_id
        cluster.kill_broker(victim)
        outcome = storage.write([CommitEntry(topic, p, 20 + p, "x") for p in PARTITIONS])
        assert outcome.error is None and sorted(outcome.committed) == [(topic, p) for p in PARTITIONS]
        assert storage.coordinator.broker_id != victim
        assert storage.read([(topic, p) for p in PARTITIONS]) == {(topic, p): 20 + p for p in PARTITIONS}
    finally:
        storage.close()
        if victim is not None:
            cluster.start_broker(victim)
            cluster.wait_for_leaders(topic)
    wait_until(lambda: kafka_committed(cluster, group, topic, PARTITIONS) == {p: 20 + p for p in PARTITIONS}, 60,
               "kafka-python to read the offsets committed to the new coordinator")
