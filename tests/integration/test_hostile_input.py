"""Bad and hostile input against the real servers: each gives a clear error or a logged skip
naming the node or offset, and no offset is lost or corrupted.

Malformed broker and topic registrations are written under a ZooKeeper chroot, so the
shared Kafka brokers (which watch the real /brokers) never see them.
"""

from __future__ import annotations

import json
import logging

import pytest
from support.common import Drainer, consumer_props, produced_values, unique, wait_until

from harness.ports import refused_port
from zkconsumer import (
    ConfigurationError,
    ConsumerTimeoutError,
    CorruptMessageError,
    RebalanceState,
    ZookeeperConsumerConnector,
    ZooKeeperUnavailableError,
)
from zkconsumer.zookeeper.group import GroupClient


def test_malformed_and_foreign_member_registrations_are_skipped_by_name(cluster, caplog) -> None:
    topic, group = unique("hostile"), unique("g")
    cluster.create_topic(topic, partitions=2, replication=1)
    zk = cluster.kazoo_client()
    ids = f"/consumers/{group}/ids"
    zk.create(f"{ids}/not-json", b"<xml>a foreign client</xml>", makepath=True, ephemeral=True)
    zk.create(f"{ids}/bad-subscription", b'{"version":1,"subscription":"everything","pattern":"static"}',
              ephemeral=True)
    zk.create(f"{ids}/empty", b"", ephemeral=True)
    values = produced_values(30)
    cluster.produce(topic, values)
    caplog.set_level(logging.WARNING, logger="zkconsumer")
    with ZookeeperConsumerConnector(consumer_props(cluster, group)) as connector:
        drainer = Drainer(connector.create_message_streams({topic: 1})[topic])
        got = drainer.wait_for(30)
        drainer.stop()
        assert len(connector.status.owned) == 2  # the unreadable members were not given partitions
    assert sorted(m.message for m in got) == sorted(values)
    for node in ("not-json", "bad-subscription", "empty"):
        assert any(f"{ids}/{node}" in r.getMessage() for r in caplog.records), f"no warning names {ids}/{node}"


def test_malformed_broker_and_topic_znodes_are_skipped_by_name(cluster, caplog) -> None:
    chroot = "/" + unique("hostile-chroot")
    zk = cluster.kazoo_client(chroot)
    zk.ensure_path("/")
    zk.create("/brokers/ids/1", b"{definitely not json", makepath=True)
    zk.create("/brokers/ids/2", json.dumps({"version": 1, "host": "127.0.0.1", "port": 9092}).encode())
    zk.create("/brokers/ids/x", b'{"version":1,"host":"h","port":1}')
    zk.create("/brokers/topics/good", b'{"version":1,"partitions":{"0":[2],"1":[2]}}', makepath=True)
    zk.create("/brokers/topics/bad", b'{"version":1,"partitions":{"zero":"two"}}')
    caplog.set_level(logging.WARNING, logger="zkconsumer")
    group = GroupClient(zk, "g", "g_me")
    assert [b.id for b in group.brokers()] == [2]
    assert group.partitions_for_topics(["good", "bad", "missing"]) == {"good": [0, 1]}
    messages = " ".join(r.getMessage() for r in caplog.records)
    for path in ("/brokers/ids/1", "/brokers/ids/x", "/brokers/topics/bad"):
        assert path in messages, f"no warning names {path}"


def test_a_malformed_offset_node_is_reported_and_never_overwritten(cluster) -> None:
    topic, group = unique("badoffset"), unique("g")
    cluster.create_topic(topic, partitions=1, replication=1)
    zk = cluster.kazoo_client()
    path = f"/consumers/{group}/offsets/{topic}/0"
    zk.create(path, b"twelve", makepath=True)
    props = consumer_props(cluster, group, rebalance_max_retries=2, rebalance_backoff_ms=100)
    with ZookeeperConsumerConnector(props) as connector:
        connector.create_message_streams({topic: 1})
        wait_until(lambda: connector.status.last_error and path in connector.status.last_error, 10,
                   "the rebalancer to report the malformed offset node by path")
        assert connector.status.state in (RebalanceState.RETRYING, RebalanceState.REBALANCING)
        connector.commit_offsets()
    assert zk.get(path)[0] == b"twelve"  # not replaced by a guess


def test_a_corrupt_message_is_raised_with_topic_partition_and_offset(cluster) -> None:
    topic, group = unique("crc"), unique("g")
    cluster.create_topic(topic, partitions=1, replication=1)
    cluster.produce(topic, [b"good-0", b"good-1", b"evil-2", b"good-3"], partition=0)
    leader = cluster.leader(topic, 0)
    segment = next((cluster.work_dir / f"kafka-{leader}" / f"{topic}-0").glob("*.log"))
    data = bytearray(segment.read_bytes())
    at = data.index(b"evil-2")
    data[at] ^= 0xFF  # flip one byte of the value on disk: the CRC no longer matches
    with open(segment, "r+b") as f:
        f.seek(at)
        f.write(bytes([data[at]]))

    with ZookeeperConsumerConnector(consumer_props(cluster, group, consumer_timeout_ms=5000)) as connector:
        stream = connector.create_message_streams({topic: 1})[topic][0]
        it = iter(stream)
        assert [next(it).message, next(it).message] == [b"good-0", b"good-1"]
        with pytest.raises(CorruptMessageError) as raised:
            next(it)
        connector.commit_offsets()
    assert (raised.value.topic, raised.value.partition, raised.value.offset) == (topic, 0, 2)
    assert f"topic {topic} partition 0 at offset 2" in str(raised.value)
    zk = cluster.kazoo_client()
    assert zk.get(f"/consumers/{group}/offsets/{topic}/0")[0] == b"2"  # up to the corrupt one, not past it


def test_unreachable_zookeeper_at_start_names_the_address() -> None:
    with refused_port() as port:
        address = f"127.0.0.1:{port}"
        with pytest.raises(ZooKeeperUnavailableError, match=f"zookeeper.connect='{address}'"):
            ZookeeperConsumerConnector({"zookeeper.connect": address, "group.id": "g",
                                        "zookeeper.connection.timeout.ms": 1000})


def test_unreachable_brokers_at_start_are_logged_by_address_and_nothing_is_committed(cluster, caplog) -> None:
    chroot = "/" + unique("nobrokers")
    zk = cluster.kazoo_client(chroot)
    with refused_port() as port:
        zk.create("/brokers/ids/0", json.dumps({"version": 1, "host": "127.0.0.1", "port": port}).encode(), makepath=True)
        zk.create("/brokers/topics/t", b'{"version":1,"partitions":{"0":[0]}}', makepath=True)
        zk.create("/brokers/topics/t/partitions/0/state",
                  b'{"controller_epoch":1,"leader":0,"version":1,"leader_epoch":0,"isr":[0]}', makepath=True)
        caplog.set_level(logging.WARNING, logger="zkconsumer")
        props = consumer_props(cluster, "g", zookeeper_connect=cluster.zk_connect + chroot, consumer_timeout_ms=1500)
        with ZookeeperConsumerConnector(props) as connector:
            stream = connector.create_message_streams({"t": 1})["t"][0]
            with pytest.raises(ConsumerTimeoutError):
                next(iter(stream))
            connector.commit_offsets()
        assert any(f"127.0.0.1:{port}" in r.getMessage() for r in caplog.records), "no warning names the broker"
    assert not zk.exists("/consumers/g/offsets/t/0")


def test_unknown_and_invalid_properties_are_named() -> None:
    with pytest.raises(ConfigurationError, match="group.idd") as raised:
        ZookeeperConsumerConnector({"zookeeper.connect": "127.0.0.1:1", "group.idd": "g"})
    assert "group.id" in str(raised.value)  # suggests the close name
    with pytest.raises(ConfigurationError, match="auto.offset.reset"):
        ZookeeperConsumerConnector({"zookeeper.connect": "127.0.0.1:1", "group.id": "g",
                                    "auto.offset.reset": "earliest-ish"})
