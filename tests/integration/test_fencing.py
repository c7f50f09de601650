"""Fenced offset commits on the real ZooKeeper: only the owner, under its current session, commits."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from support.common import Drainer, consumer_props, owners, produced_values, unique, wait_until

from zkconsumer import ZookeeperConsumerConnector
from zkconsumer.zookeeper.group import GroupClient


@pytest.fixture
def member(cluster):
    group = unique("g")
    client = KazooClient(hosts=cluster.zk_connect, timeout=6)
    client.start()
    yield GroupClient(client, group, f"{group}_me")
    client.stop()
    client.close()


def offset_node(cluster, group: str, topic: str, partition: int):
    zk = cluster.kazoo_client()
    path = f"/consumers/{group}/offsets/{topic}/{partition}"
    return zk.get(path)[0] if zk.exists(path) else None


def test_the_owner_commits_under_its_session(cluster, member: GroupClient) -> None:
    thread = f"{member.consumer_id}-0"
    assert member.claim("t", 0, thread) is None
    assert member.commit_offset_if_owner("t", 0, 42, thread) is True
    assert member.commit_offset_if_owner("t", 0, 43, thread) is True  # set after create
    assert offset_node(cluster, member.group, "t", 0) == b"43"


def test_a_partition_owned_by_another_member_is_not_written(cluster, member: GroupClient) -> None:
    other = cluster.kazoo_client()
    other.create(member.paths.owner("t", 1), b"someone-else-0", ephemeral=True, makepath=True)
    assert member.commit_offset_if_owner("t", 1, 5, f"{member.consumer_id}-0") is False
    assert member.commit_offset_if_owner("t", 2, 5, f"{member.consumer_id}-0") is False  # nobody owns it
    assert offset_node(cluster, member.group, "t", 1) is None
    assert offset_node(cluster, member.group, "t", 2) is None


def test_a_member_whose_session_expired_never_commits_for_what_it_lost(cluster, member: GroupClient) -> None:
    thread = f"{member.consumer_id}-0"
    assert member.claim("t", 3, thread) is None
    assert member.commit_offset_if_owner("t", 3, 10, thread) is True
    cluster.expire_session(member.client)  # frozen past the session timeout: the server dropped it
    wait_until(lambda: member.client.connected, 30, "kazoo to open a new session")
    successor = cluster.kazoo_client()
    successor.create(member.paths.owner("t", 3), b"successor-0", ephemeral=True, makepath=True)
    successor.set(member.paths.offset("t", 3), b"50")
    assert member.commit_offset_if_owner("t", 3, 11, thread) is False
    assert offset_node(cluster, member.group, "t", 3) == b"50"  # the new owner's offset stands


def test_a_connector_stops_delivering_a_partition_taken_from_it_and_reclaims_it(cluster) -> None:
    topic, group = unique("fence"), unique("g")
    cluster.create_topic(topic, partitions=2, replication=1)
    zk = cluster.kazoo_client()
    with ZookeeperConsumerConnector(consumer_props(cluster, group)) as connector:
        drainer = Drainer(connector.create_message_streams({topic: 1})[topic])
        cluster.produce(topic, produced_values(20, "a"))
        drainer.wait_for(20)
        connector.commit_offsets()
        committed = offset_node(cluster, group, topic, 0)

        # An intruder deletes our owner node for partition 0 and takes it.
        path = f"/consumers/{group}/owners/{topic}/0"
        zk.delete(path)
        zk.create(path, b"intruder-0", ephemeral=True)
        later = produced_values(20, "b")
        cluster.produce(topic, later[:10], partition=0)
        cluster.produce(topic, later[10:], partition=1)
        wait_until(lambda: drainer.count() >= 30, 30, "partition 1's half of the new batch")
        connector.commit_offsets()
        assert offset_node(cluster, group, topic, 0) == committed, "committed for a partition it no longer owns"
        wait_until(lambda: ((topic, 0) not in connector.status.owned), 10, "the member to give partition 0 up")

        zk.delete(path)  # the intruder leaves: the member reclaims and resumes from the committed offset
        wait_until(lambda: owners(zk, group, topic).get(0, "").startswith(connector.consumer_id), 30,
                   "partition 0 to be reclaimed")
        everything = set(produced_values(20, "a") + produced_values(20, "b"))
        wait_until(lambda: everything <= {m.message for m in drainer.snapshot()}, 30, "every message to arrive")
        drainer.stop()


def test_a_commit_begun_on_an_expired_session_is_not_written_after_the_partition_is_reclaimed(
        cluster, member: GroupClient) -> None:
    """Found by the simulator (tests/sim, seed 28): a commit that began on a session that then
    expired must not be written on the new session, even once that session re-claimed the
    partition: the new incarnation resumed from the committed offset, and the old one's
    position written over it would let the committed offset move backwards later."""
    thread = f"{member.consumer_id}-0"
    assert member.claim("t", 5, thread) is None
    assert member.commit_offset_if_owner("t", 5, 4, thread) is True
    began_on = member.session_id
    cluster.expire_session(member.client)
    wait_until(lambda: member.client.connected and member.session_id != began_on, 30,
               "kazoo to open a new session")
    assert member.claim("t", 5, thread) is None  # re-claimed on the new session
    assert member.commit_offset_if_owner("t", 5, 9, thread, session=began_on) is False
    assert member.commit_offsets_if_owner([("t", 5, 9)], session=began_on) is False
    assert offset_node(cluster, member.group, "t", 5) == b"4"
    assert member.commit_offset_if_owner("t", 5, 6, thread, session=member.session_id) is True
    assert offset_node(cluster, member.group, "t", 5) == b"6"
