"""The rebalancer under faults, on the real ZooKeeper and Kafka ("Correct under faults", rebalancer items).

Each test is named after the issue item it covers. Faults are made for real:
nodes written by other clients (malformed offsets, ACL-protected offsets,
foreign owner nodes), offset nodes deleted by hand, sessions expired, a broker
stopped.
"""

from __future__ import annotations

import threading
import time
from typing import Dict, Iterable, List, Optional, Tuple

import pytest
from kazoo.client import KazooClient
from kazoo.security import make_acl, make_digest_acl
from support.common import Drainer, consumer_props, owners, produced_values, unique, wait_until

from zkconsumer import ConsumerTimeoutError, ZookeeperConsumerConnector, assignors
from zkconsumer.consumer.membership import RebalanceState
from zkconsumer.consumer.stream import KafkaStream
from zkconsumer.consumer.topic_count import StaticTopicCount
from zkconsumer.errors import ConsumerRebalanceFailedError
from zkconsumer.fetch.handoff import ChunkQueue, PartitionTopicInfo
from zkconsumer.offsets.committer import OffsetCommitter
from zkconsumer.rebalance.rebalancer import Rebalancer
from zkconsumer.testing import LocalCluster
from zkconsumer.zookeeper import zkformat
from zkconsumer.zookeeper.group import GroupClient
from zkconsumer.zookeeper.offset_storage import ZooKeeperOffsetStorage

TP = Tuple[str, int]


def offset_path(group: str, topic: str, partition: int) -> str:
    return f"/consumers/{group}/offsets/{topic}/{partition}"


def quiet_owners(connector: ZookeeperConsumerConnector, zk: KazooClient, group: str, topic: str) -> Dict[int, str]:
    """Owner nodes read while the member sat between two failed attempts (not mid-attempt)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        before = connector.status
        if before.state is RebalanceState.RETRYING:
            found = owners(zk, group, topic)
            after = connector.status
            if after.state is RebalanceState.RETRYING and after.failed_attempts == before.failed_attempts:
                return found
        time.sleep(0.02)
    raise AssertionError(f"the member never sat between failed attempts: {connector.status}")


def drain_available(stream: KafkaStream) -> List:
    """Messages a stream hands out until one ``consumer.timeout.ms`` passes with nothing new."""
    got = []
    try:
        for message in stream:
            got.append(message)
    except ConsumerTimeoutError:
        pass
    return got


# --------------------------------------------------------------------------- item 1


def test_item1_orphaned_claims_are_released_when_reading_offsets_fails(cluster, make_topic, zk, group_id) -> None:
    """Claims made before the offsets read raised are released; the member settles once the node is fixed."""
    topic = make_topic(partitions=2)
    cluster.produce(topic, produced_values(10, "p0"), partition=0)
    cluster.produce(topic, produced_values(10, "p1"), partition=1)
    zk.create(offset_path(group_id, topic, 1), b"not an offset", makepath=True)  # another client's garbage
    props = consumer_props(cluster, group_id, consumer_id="m", rebalance_max_retries=2, rebalance_backoff_ms=800)
    with ZookeeperConsumerConnector(props) as connector:
        stream = connector.create_message_streams({topic: 1})[topic][0]  # returns after max retries
        wait_until(lambda: connector.status.failed_attempts >= 2, 20, "failed attempts")
        assert "MalformedZnodeError" in (connector.status.last_error or "")
        for _ in range(3):  # between attempts: no node of ours unless owned and fetched
            held = {p for p, owner in quiet_owners(connector, zk, group_id, topic).items()
                    if owner.startswith(connector.consumer_id + "-")}
            assert held <= {p for t, p in connector.status.owned}, f"orphaned owner nodes {held}"
            assert not connector.status.owned

        zk.set(offset_path(group_id, topic, 1), b"3")  # repaired by hand
        drainer = Drainer([stream])
        wait_until(lambda: connector.status.state is RebalanceState.STABLE, 20, "the member to settle")
        got = drainer.wait_for(17, timeout=30)
        time.sleep(0.5)
        got = drainer.stop()
        assert sorted((m.partition, m.offset) for m in got) == [(0, o) for o in range(10)] + [(1, o) for o in range(3, 10)]
        assert owners(zk, group_id, topic) == {0: f"{connector.consumer_id}-0", 1: f"{connector.consumer_id}-0"}


# --------------------------------------------------------------------------- item 2


def test_item2_a_refused_offset_write_is_an_error_not_a_lost_ownership(cluster, make_topic, group_id) -> None:
    """NoAuth on one offset node: no fencing, no re-delivery, and a joining member still settles."""
    topic = make_topic(partitions=2)
    protector = KazooClient(hosts=cluster.zk_connect, auth_data=[("digest", "intruder:secret")])
    protector.start()
    try:
        acl = [make_digest_acl("intruder", "secret", all=True), make_acl("world", "anyone", read=True)]
        protector.ensure_path(f"/consumers/{group_id}/offsets/{topic}")  # open parents, as the group's own
        protector.create(offset_path(group_id, topic, 0), b"0", acl=acl)
        cluster.produce(topic, produced_values(10, "p0"), partition=0)
        cluster.produce(topic, produced_values(10, "p1"), partition=1)
        props = consumer_props(cluster, group_id, auto_commit_enable="true", auto_commit_interval_ms=100,
                               rebalance_backoff_ms=1000)
        with ZookeeperConsumerConnector({**props, "consumer.id": "b"}) as first:
            drainer = Drainer(first.create_message_streams({topic: 1})[topic])
            drainer.wait_for(20)
            time.sleep(1.5)  # many auto-commits, each refused for partition 0
            got = drainer.snapshot()
            assert len(got) == 20, "re-delivered after a refused commit"
            assert set(first.status.owned) == {(topic, 0), (topic, 1)}
            zk = cluster.kazoo_client()
            assert zk.get(offset_path(group_id, topic, 1))[0] == b"10"
            assert zk.get(offset_path(group_id, topic, 0))[0] == b"0"

            # "g_a-0" sorts first: the joining member takes partition 0, whose commit is refused.
            with ZookeeperConsumerConnector({**props, "consumer.id": "a"}) as second:
                other = Drainer(second.create_message_streams({topic: 1})[topic])
                wait_until(lambda: owners(zk, group_id, topic) == {0: f"{group_id}_a-0", 1: f"{group_id}_b-0"}
                           and first.status.state is RebalanceState.STABLE
                           and second.status.state is RebalanceState.STABLE, 20, "the group to settle")
                assert set(first.status.owned) == {(topic, 1)} and set(second.status.owned) == {(topic, 0)}
                assert drainer.count() == 20
                other.stop()
            drainer.stop()
    finally:
        protector.stop()
        protector.close()


# --------------------------------------------------------------------------- item 3


def test_item3_a_commit_racing_a_relabel_is_not_fenced(cluster) -> None:
    """A commit made with the thread id seen before a relabel still writes: the member owns the partition."""
    group = unique("g")
    client = KazooClient(hosts=cluster.zk_connect, timeout=6)
    client.start()
    try:
        member = GroupClient(client, group, f"{group}_me")
        before, after = f"{group}_me-0", f"{group}_me-1"
        assert member.claim("t", 0, before) is None
        assert member.claim("t", 0, after) is None  # a rebalance moved it to our other stream
        assert member.commit_offset_if_owner("t", 0, 42, before) is True
        assert client.get(member.paths.offset("t", 0))[0] == b"42"
        assert member.owns("t", 0, before) and member.holds("t", 0)

        committer = OffsetCommitter(member, ZooKeeperOffsetStorage(member))
        info = PartitionTopicInfo("t", 0, ChunkQueue(1), 50, 1024)
        assert committer.commit([(info, before)]) == []  # the stale snapshot is not a lost ownership
        assert client.get(member.paths.offset("t", 0))[0] == b"50"

        other = cluster.kazoo_client()  # a real take-over is still fenced
        client.delete(member.paths.owner("t", 0))
        other.create(member.paths.owner("t", 0), b"other-0", ephemeral=True)
        info.consumed_offset = 60
        assert committer.commit([(info, after)]) == [("t", 0)]
        assert client.get(member.paths.offset("t", 0))[0] == b"50"
    finally:
        client.stop()
        client.close()


class RecordingFetchers:
    """Stands in for the fetcher manager: remembers what it was asked to fetch."""

    def __init__(self) -> None:
        self.running: Dict[TP, PartitionTopicInfo] = {}
        self.calls: List[str] = []
        self._lock = threading.Lock()

    def start_connections(self, infos: Iterable[PartitionTopicInfo]) -> None:
        with self._lock:
            for info in infos:
                self.running[(info.topic, info.partition)] = info
            self.calls.append("start")

    def remove_partitions(self, tps: Iterable[TP]) -> None:
        with self._lock:
            for tp in tps:
                self.running.pop(tp, None)
            self.calls.append("remove")

    def stop_connections(self) -> None:
        with self._lock:
            self.running.clear()
            self.calls.append("stop")


def test_item3_ownership_lost_ignores_partitions_this_session_still_holds(cluster, make_topic) -> None:
    """A fence reported for a partition whose owner node is still ours does not drop or re-read it."""
    topic = make_topic(partitions=2)
    group = unique("g")
    client = KazooClient(hosts=cluster.zk_connect, timeout=6)
    client.start()
    member = GroupClient(client, group, f"{group}_me")
    registration = zkformat.encode_registration({topic: 1}, "static", int(time.time() * 1000))
    fetchers = RecordingFetchers()
    queue = ChunkQueue(4)
    failures: List[BaseException] = []
    reads: List[List[TP]] = []

    def read_offsets(tps: List[TP]) -> Dict[TP, Optional[int]]:
        reads.append(sorted(tps))
        return member.read_offsets(tps)

    rebalancer = Rebalancer(
        group=member, topic_count=StaticTopicCount(member.consumer_id, {topic: 1}),
        assignor=assignors.assign_range, queue_for=lambda t, thread: queue, streams=[KafkaStream(queue, 10)],
        fetchers=fetchers, committer=OffsetCommitter(member, ZooKeeperOffsetStorage(member)), auto_commit=False, fetch_size=1024,
        max_retries=2, backoff_ms=200, exclude_internal_topics=True,
        register=lambda: member.register(registration), watch_topics=lambda topics: None,
        on_failure=failures.append, read_offsets=read_offsets,
    )
    try:
        member.register(registration)
        rebalancer.start()
        assert rebalancer.wait_first_assignment(20)
        wait_until(lambda: rebalancer.status.state is RebalanceState.STABLE, 20, "the first assignment")
        infos = dict(fetchers.running)
        assert set(infos) == {(topic, 0), (topic, 1)}
        rebalances, reads_before = rebalancer.status.rebalances, list(reads)

        rebalancer.ownership_lost([(topic, 0)])  # a stale fence: the node is still ours
        wait_until(lambda: rebalancer.status.rebalances > rebalances
                   and rebalancer.status.state is RebalanceState.STABLE, 20, "the follow-up rebalance")
        assert fetchers.running == infos and all(fetchers.running[tp] is infos[tp] for tp in infos)
        assert reads == reads_before, "re-read the committed offset of a partition it never lost"
        assert set(rebalancer.status.owned) == {(topic, 0), (topic, 1)}
        assert owners(client, group, topic) == {0: f"{group}_me-0", 1: f"{group}_me-0"}
    finally:
        rebalancer.stop()
        client.stop()
        client.close()
    assert not failures


# --------------------------------------------------------------------------- item 13


def test_item13a_zero_backoff_does_not_spin_on_a_conflicting_claim(cluster, make_topic, zk, group_id) -> None:
    """rebalance.backoff.ms=0 with a foreign owner node: a bounded attempt rate, then the claim succeeds."""
    topic = make_topic(partitions=2)
    intruder = f"/consumers/{group_id}/owners/{topic}/1"
    zk.create(intruder, b"intruder-0", ephemeral=True, makepath=True)
    props = consumer_props(cluster, group_id, rebalance_backoff_ms=0, rebalance_max_retries=2)
    with ZookeeperConsumerConnector(props) as connector:
        connector.create_message_streams({topic: 1})
        start = connector.status.failed_attempts
        time.sleep(2.0)
        attempts = connector.status.failed_attempts - start
        assert connector.status.state is not RebalanceState.STABLE
        assert 1 <= attempts <= 40, f"{attempts} attempts in 2 s: spinning"
        zk.delete(intruder)
        wait_until(lambda: connector.status.state is RebalanceState.STABLE, 20, "the claim to succeed")
        assert set(connector.status.owned) == {(topic, 0), (topic, 1)}


def test_item13d_a_stale_checkpoint_is_cleared_when_no_offset_is_found(cluster, make_topic, zk, group_id) -> None:
    """The offset node was deleted: after re-claiming, an equal offset is still written."""
    topic = make_topic(partitions=1)
    cluster.produce(topic, produced_values(5), partition=0)
    with ZookeeperConsumerConnector(consumer_props(cluster, group_id)) as connector:
        drainer = Drainer(connector.create_message_streams({topic: 1})[topic])
        drainer.wait_for(5)
        connector.commit_offsets()
        assert zk.get(offset_path(group_id, topic, 0))[0] == b"5"

        zk.delete(offset_path(group_id, topic, 0))  # an operator resets the group's offsets
        rebalances = connector.status.rebalances
        cluster.expire_session(connector.zk_client)  # the member re-claims the partition
        wait_until(lambda: connector.status.rebalances > rebalances
                   and connector.status.state is RebalanceState.STABLE, 30, "the member to rejoin")
        drainer.wait_for(10)  # re-read from the start (auto.offset.reset=smallest), back at 5
        connector.commit_offsets()
        assert zk.exists(offset_path(group_id, topic, 0)), "the commit was skipped against a stale checkpoint"
        assert zk.get(offset_path(group_id, topic, 0))[0] == b"5"
        drainer.stop()


@pytest.fixture(scope="module")
def own_cluster():
    """One broker of our own: this module stops it."""
    with LocalCluster(brokers=1, partitions=2) as local:
        yield local


def test_item13e_retained_partitions_keep_their_prefetched_chunks_when_a_member_joins(own_cluster) -> None:
    """Only the moving partition is stopped: the kept one is still delivered from its queue, broker down."""
    cluster = own_cluster
    topic, group = unique("keep"), unique("g")
    cluster.create_topic(topic, partitions=2)
    cluster.produce(topic, produced_values(30, "p0"), partition=0)
    cluster.produce(topic, produced_values(30, "p1"), partition=1)
    props = consumer_props(cluster, group, queued_max_message_chunks=10)
    zk = cluster.kazoo_client()
    with ZookeeperConsumerConnector({**props, "consumer.id": "b"}) as first:
        stream = first.create_message_streams({topic: 1})[topic][0]
        thread = f"{group}_b-0"
        wait_until(lambda: first.metrics_snapshot()["streams"][thread]["queue_size"] >= 2, 30,
                   "both partitions prefetched")
        cluster.stop_broker(0)
        try:
            # "g_a-0" sorts first: the joining member takes partition 0; we keep partition 1.
            with ZookeeperConsumerConnector({**props, "consumer.id": "a"}) as second:
                other = second.create_message_streams({topic: 1})[topic][0]
                wait_until(lambda: owners(zk, group, topic) == {0: f"{group}_a-0", 1: thread}
                           and first.status.state is RebalanceState.STABLE, 30, "the group to settle")
                kept = drain_available(stream)  # the broker is down: only what was prefetched
                assert [(m.partition, m.offset) for m in kept] == [(1, o) for o in range(30)]
                cluster.start_broker(0)
                moved = Drainer([other]).wait_for(30, timeout=60)
                assert sorted((m.partition, m.offset) for m in moved) == [(0, o) for o in range(30)]
                time.sleep(1.0)
                assert drain_available(stream) == [], "re-delivered a retained partition"
        finally:
            if not cluster.is_running(0):
                cluster.start_broker(0)


def test_item13f_giving_up_is_reported_as_a_typed_error_and_retrying_goes_on(cluster, make_topic, zk,
                                                                             group_id) -> None:
    """After rebalance.max.retries: status and metrics carry a ConsumerRebalanceFailedError; iterators live on."""
    topic = make_topic(partitions=2)
    intruder = f"/consumers/{group_id}/owners/{topic}/1"
    zk.create(intruder, b"intruder-0", ephemeral=True, makepath=True)
    cluster.produce(topic, produced_values(5), partition=0)
    props = consumer_props(cluster, group_id, rebalance_max_retries=2, rebalance_backoff_ms=200)
    with ZookeeperConsumerConnector(props) as connector:
        stream = connector.create_message_streams({topic: 1})[topic][0]
        wait_until(lambda: connector.status.gave_up, 20, "the member to give up")
        status = connector.status
        assert isinstance(status.error, ConsumerRebalanceFailedError) and status.error.retriable
        assert "intruder" in str(status.error) or "claim" in str(status.error)
        section = connector.metrics_snapshot()["rebalance"]
        assert section["gave_up"] is True and section["error"].startswith("ConsumerRebalanceFailedError")
        with pytest.raises(ConsumerTimeoutError):  # the iterator does not die of it
            next(iter(stream))
        failed = status.failed_attempts
        wait_until(lambda: connector.status.failed_attempts > failed, 20, "more attempts (still retrying)")

        zk.delete(intruder)
        wait_until(lambda: connector.status.state is RebalanceState.STABLE, 30, "the member to settle")
        assert connector.status.gave_up is False and connector.status.error is None
        assert connector.metrics_snapshot()["rebalance"]["gave_up"] is False
        assert len(drain_available(stream)) == 5
