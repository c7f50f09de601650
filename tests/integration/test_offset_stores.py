"""Issue 39 item 1: the admin tools follow the offset storage (ZooKeeper, Kafka, both) against real 0.9 brokers.

Groups commit through zkconsumer connectors with ``offsets.storage=kafka`` (dual commit on or
off); kafka-python's ``KafkaConsumer.committed`` (OffsetFetch v1) and ZooKeeper's nodes referee
what the tools read and write, and a consumer started afterwards on the other store shows that
the copied offsets are the ones it resumes from.
"""

from __future__ import annotations

import json
from typing import List

import pytest
from support.common import Drainer, consumer_props, produced_values, unique, wait_until
from support.offsets import consume, kafka_committed, next_offsets, produce_evenly, values, zookeeper_committed

from zkconsumer import ZookeeperConsumerConnector
from zkconsumer.admin.stores import CoordinatorOffsets, group_partitions, read_group_offsets

pytestmark = pytest.mark.integration

PARTITIONS = range(4)


def test_each_store_is_read_and_both_flags_the_partitions_that_disagree(cluster, zk, make_topic) -> None:
    topic, group = make_topic(partitions=4), unique("g-stores")
    produce_evenly(cluster, topic, produced_values(40))
    expected = next_offsets(consume(cluster, group, topic, 40, offsets_storage="kafka", dual_commit_enabled="true"))
    zk.set(f"/consumers/{group}/offsets/{topic}/2", b"3")  # ZooKeeper now behind Kafka on partition 2
    with CoordinatorOffsets(zk, group) as kafka:
        partitions = group_partitions(zk, group)  # learnt from ZooKeeper's owners/offsets
        assert partitions == [(topic, p) for p in PARTITIONS]
        both = read_group_offsets(zk, group, partitions, "both", kafka)
        only_kafka = read_group_offsets(zk, group, partitions, "kafka", kafka)
        only_zk = read_group_offsets(zk, group, partitions, "zookeeper", None)
        detected = read_group_offsets(zk, group, partitions, "detect", kafka)
    assert {r.partition: (r.zookeeper, r.kafka) for r in both.rows} == {
        p: (3 if p == 2 else expected[p], expected[p]) for p in PARTITIONS}
    assert [r.partition for r in both.disagreements] == [2]
    assert {r.partition: r.offset for r in only_kafka.rows} == expected == kafka_committed(cluster, group, topic,
                                                                                           PARTITIONS)
    assert {r.partition: r.offset for r in only_zk.rows} == zookeeper_committed(zk, group, topic, PARTITIONS)
    assert (detected.store, detected.detected, detected.rows) == ("both", True, both.rows)
    assert "1 partition(s) disagree" in both.source_note()


def test_a_group_committing_only_to_kafka_is_detected_as_kafka(cluster, zk, make_topic) -> None:
    topic, group = make_topic(partitions=4), unique("g-konly")
    produce_evenly(cluster, topic, produced_values(20))
    expected = next_offsets(consume(cluster, group, topic, 20, offsets_storage="kafka", dual_commit_enabled="false"))
    with CoordinatorOffsets(zk, group) as kafka:
        found = read_group_offsets(zk, group, group_partitions(zk, group), "detect", kafka)
    assert found.store == "kafka" and {r.partition: r.offset for r in found.rows} == expected
    assert all(r.zookeeper is None and not r.disagree for r in found.rows)


def test_copy_kafka_to_zookeeper_dry_run_then_execute_and_a_zookeeper_consumer_resumes_exactly(
        cluster, zk, make_topic, cli) -> None:
    topic, group = make_topic(partitions=4), unique("g-k2z")
    produce_evenly(cluster, topic, produced_values(40, "a"))
    in_kafka = next_offsets(consume(cluster, group, topic, 40, offsets_storage="kafka", dual_commit_enabled="false"))
    assert zookeeper_committed(zk, group, topic, PARTITIONS) == {p: None for p in PARTITIONS}

    code, out, _ = cli("offsets", "copy", "--group", group, "--from", "kafka", "--to", "zookeeper")
    assert code == 0, out
    assert "Dry run: nothing changed (4 offset(s) would be written to zookeeper)" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(topic)]
    assert rows == [[topic, str(p), str(in_kafka[p]), str(in_kafka[p]), "-", "write"] for p in PARTITIONS]
    assert zookeeper_committed(zk, group, topic, PARTITIONS) == {p: None for p in PARTITIONS}

    code, out, err = cli("offsets", "copy", "--group", group, "--from", "kafka", "--to", "zookeeper", "--execute")
    assert code == 0, err
    assert "Copied 4 offset(s)" in out and "all in one ZooKeeper transaction" in out
    assert f"{topic}/0: none -> {in_kafka[0]}" in out
    assert zookeeper_committed(zk, group, topic, PARTITIONS) == in_kafka

    later = produced_values(20, "b")
    produce_evenly(cluster, topic, later)
    assert values(consume(cluster, group, topic, 20)) == sorted(later)  # offsets.storage=zookeeper: no replay


def test_copy_zookeeper_to_kafka_and_a_kafka_storage_consumer_resumes_exactly(cluster, zk, make_topic, cli) -> None:
    topic, group = make_topic(partitions=4), unique("g-z2k")
    produce_evenly(cluster, topic, produced_values(40, "a"))
    in_zk = next_offsets(consume(cluster, group, topic, 40))  # ZooKeeper storage
    assert kafka_committed(cluster, group, topic, PARTITIONS) == {p: None for p in PARTITIONS}

    code, out, err = cli("offsets", "copy", "--group", group, "--from", "zookeeper", "--to", "kafka", "--execute",
                         "--format", "json")
    assert code == 0, err
    assert '"action": "write"' in out and "in one OffsetCommit request to the coordinator (broker" in err
    assert kafka_committed(cluster, group, topic, PARTITIONS) == in_zk  # refereed by kafka-python

    code, out, _ = cli("offsets", "copy", "--group", group, "--from", "zookeeper", "--to", "kafka")
    assert code == 0 and "(0 offset(s) would be written to kafka)" in out and "unchanged" in out

    later = produced_values(20, "b")
    produce_evenly(cluster, topic, later)
    got = consume(cluster, group, topic, 20, offsets_storage="kafka", dual_commit_enabled="false")
    assert values(got) == sorted(later)


def test_copy_refuses_while_the_group_has_live_members_in_zookeeper_or_at_the_coordinator(
        cluster, zk, make_topic, cli) -> None:
    topic, group = make_topic(partitions=4), unique("g-live")
    produce_evenly(cluster, topic, produced_values(20))
    in_zk = next_offsets(consume(cluster, group, topic, 20))
    with ZookeeperConsumerConnector(consumer_props(cluster, group)) as member:  # ZooKeeper membership
        member.create_message_streams({topic: 1})
        code, _, err = cli("offsets", "copy", "--group", group, "--from", "zookeeper", "--to", "kafka", "--execute")
        assert code == 1 and "refusing to copy offsets to kafka" in err and "(ZooKeeper)" in err, err
        assert kafka_committed(cluster, group, topic, PARTITIONS) == {p: None for p in PARTITIONS}
        code, _, err = cli("offsets", "copy", "--group", group, "--from", "zookeeper", "--to", "kafka", "--execute",
                           "--force")
        assert code == 0, err
    assert kafka_committed(cluster, group, topic, PARTITIONS) == in_zk

    coordinated = unique("g-live-coord")
    props = consumer_props(cluster, coordinated, group_membership="kafka", offsets_storage="kafka",
                           dual_commit_enabled="false")
    with ZookeeperConsumerConnector(props) as member:  # coordinator membership: only DescribeGroups sees it
        streams = member.create_message_streams({topic: 1})[topic]
        drainer = Drainer(streams)
        drainer.wait_for(20)
        member.commit_offsets()
        code, _, err = cli("offsets", "copy", "--group", coordinated, "--from", "kafka", "--to", "zookeeper",
                           "--topic", topic, "--execute")
        drainer.stop()
    assert code == 1 and "(coordinator)" in err and "refusing to copy offsets to zookeeper" in err, err
    assert not zk.exists(f"/consumers/{coordinated}/offsets/{topic}/0")


def test_copy_bad_input_is_named(cluster, zk, make_topic, cli) -> None:
    topic, group = make_topic(partitions=1), unique("g-bad")
    code, _, err = cli("offsets", "copy", "--group", group, "--from", "kafka", "--to", "kafka")
    assert code == 2 and "nothing to copy: --from and --to are both kafka" in err
    code, _, err = cli("offsets", "copy", "--group", group, "--from", "s3", "--to", "kafka")
    assert code == 2 and "invalid choice: 's3'" in err
    code, _, err = cli("offsets", "copy", "--group", group, "--from", "kafka", "--to", "zookeeper")
    assert code == 1 and f"consumer group '{group}' does not exist" in err
    code, _, err = cli("offsets", "copy", "--group", group, "--from", "kafka", "--to", "zookeeper",
                       "--topic", topic + "-missing")
    assert code == 1 and f"topic '{topic}-missing' does not exist" in err
    code, out, _ = cli("offsets", "copy", "--group", group, "--from", "kafka", "--to", "zookeeper", "--topic", topic)
    assert code == 0 and "skip (no offset)" in out and "(0 offset(s) would be written" in out


# --------------------------------------------------------------------------- --offsets-storage on the other commands


def test_describe_shows_the_store_read_and_both_flags_disagreement(cluster, zk, make_topic, cli) -> None:
    topic, group = make_topic(partitions=4), unique("g-desc")
    produce_evenly(cluster, topic, produced_values(40))
    expected = next_offsets(consume(cluster, group, topic, 40, offsets_storage="kafka", dual_commit_enabled="false"))

    code, out, err = cli("groups", "describe", "--group", group)  # default: detect
    assert code == 0, err
    assert "Offsets read from Kafka (detected: where the group has offsets)" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(topic)]
    assert [(int(r[1]), int(r[2]), int(r[4])) for r in rows] == [(p, expected[p], 0) for p in PARTITIONS]  # lag 0

    code, out, _ = cli("groups", "describe", "--group", group, "--offsets-storage", "zookeeper")
    assert code == 0 and "Offsets read from ZooKeeper" in out
    assert all(r[2] == "-" for r in (line.split() for line in out.splitlines() if line.startswith(topic)))

    zk.create(f"/consumers/{group}/offsets/{topic}/1", b"2", makepath=True)
    code, out, _ = cli("groups", "describe", "--group", group, "--offsets-storage", "both", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["offsets_storage"] == "both" and not doc["offsets_storage_detected"]
    assert [(p["partition"], p["zookeeper_offset"], p["kafka_offset"], p["disagree"]) for p in doc["partitions"]] == [
        (p, 2 if p == 1 else None, expected[p], True) for p in PARTITIONS]
    assert any(f"{topic}/1 (zookeeper 2, kafka {expected[1]})" in w for w in doc["warnings"])

    code, out, _ = cli("groups", "status", "--group", group, "--samples", "1", "--offsets-storage", "kafka")
    assert code == 0 and "Offsets read from Kafka." in out


def test_export_reset_and_import_follow_a_group_whose_offsets_are_in_kafka(cluster, zk, make_topic, cli,
                                                                          tmp_path) -> None:
    topic, group = make_topic(partitions=4), unique("g-io")
    produce_evenly(cluster, topic, produced_values(40))
    expected = next_offsets(consume(cluster, group, topic, 40, offsets_storage="kafka", dual_commit_enabled="false"))

    exported = tmp_path / "offsets.txt"
    code, _, err = cli("offsets", "export", "--group", group, "--output", str(exported))
    assert code == 0 and f"group {group}: Offsets read from Kafka (detected" in err
    assert exported.read_text() == "".join(f"/consumers/{group}/offsets/{topic}/{p}:{expected[p]}\n"
                                           for p in PARTITIONS)

    code, out, err = cli("offsets", "reset", "--group", group, "--topic", topic, "--to", "shift:-3", "--execute")
    assert code == 0, err
    assert "Offsets read from Kafka (detected" in out and "in one OffsetCommit request" in out
    assert kafka_committed(cluster, group, topic, PARTITIONS) == {p: expected[p] - 3 for p in PARTITIONS}
    assert zookeeper_committed(zk, group, topic, PARTITIONS) == {p: None for p in PARTITIONS}

    code, out, err = cli("offsets", "import", "--input", str(exported))  # detect: into Kafka, where they are
    assert code == 0, err
    assert f"Imported 4 offsets into group {group} in Kafka" in out
    assert kafka_committed(cluster, group, topic, PARTITIONS) == expected
    assert zookeeper_committed(zk, group, topic, PARTITIONS) == {p: None for p in PARTITIONS}

    code, out, err = cli("offsets", "reset", "--group", group, "--topic", topic, "--to", "earliest", "--execute",
                         "--offsets-storage", "both")
    assert code == 0, err
    assert zookeeper_committed(zk, group, topic, PARTITIONS) == {p: 0 for p in PARTITIONS}
    assert kafka_committed(cluster, group, topic, PARTITIONS) == {p: 0 for p in PARTITIONS}

    with ZookeeperConsumerConnector(consumer_props(cluster, group, group_membership="kafka", offsets_storage="kafka",
                                                   dual_commit_enabled="false")) as member:
        drainer = Drainer(member.create_message_streams({topic: 1})[topic])
        drainer.wait_for(40)  # from 0 again: the reset reached the store the group reads
        code, _, err = cli("offsets", "reset", "--group", group, "--topic", topic, "--to", "latest", "--execute",
                           "--offsets-storage", "kafka")
        drainer.stop()
    assert code == 1 and "refusing to reset offsets" in err, err


def test_the_lag_exporter_reads_each_group_where_its_offsets_are(cluster, zk, make_topic) -> None:
    from zkconsumer.monitoring.exporter import LagExporter

    topic = make_topic(partitions=4)
    in_kafka, in_zk = unique("g-exp-k"), unique("g-exp-z")
    produce_evenly(cluster, topic, produced_values(40))
    kafka_offsets = next_offsets(consume(cluster, in_kafka, topic, 40, offsets_storage="kafka",
                                         dual_commit_enabled="false"))
    zk_offsets = next_offsets(consume(cluster, in_zk, topic, 40))
    detecting = LagExporter(zk, groups=[in_kafka, in_zk], interval_s=60, offsets_storage="detect")
    found = detecting.poll_once()
    assert {r.partition: r.offset for r in found[in_kafka].partitions} == kafka_offsets
    assert {r.partition: r.offset for r in found[in_zk].partitions} == zk_offsets
    assert all(r.lag == 0 for g in found.values() for r in g.partitions)
    blind = LagExporter(zk, groups=[in_kafka], interval_s=60)  # zookeeper, as before: sees no offsets
    assert all(r.offset is None for r in blind.poll_once()[in_kafka].partitions)
    with pytest.raises(ValueError, match="unknown offsets storage 's3'"):
        LagExporter(zk, offsets_storage="s3")


def test_groups_list_finds_groups_only_in_kafka_and_says_where_each_keeps_offsets_and_members(
        cluster, zk, make_topic, cli) -> None:
    from kafka import KafkaConsumer

    from zkconsumer.zookeeper.group import GroupClient

    topic = make_topic(partitions=4)
    produce_evenly(cluster, topic, produced_values(20))
    in_zookeeper, in_kafka, dual = unique("g-list-zk"), unique("g-list-kafka"), unique("g-list-dual")
    GroupClient(zk, in_zookeeper, f"{in_zookeeper}_writer").commit_offsets({(topic, 0): 2})  # no member
    modern = KafkaConsumer(group_id=in_kafka, bootstrap_servers=cluster.bootstrap_servers, api_version=(0, 9),
                           enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        modern.subscribe([topic])
        seen: List[object] = []
        wait_until(lambda: seen.extend(r for rs in modern.poll(timeout_ms=200).values() for r in rs)
                   or len(seen) == 20, 30, "kafka-python's member to join its group and read the topic")
        modern.commit()  # at its coordinator, under its generation
        assert kafka_committed(cluster, in_kafka, topic, PARTITIONS) == {p: 5 for p in PARTITIONS}
        assert not zk.exists(f"/consumers/{in_kafka}")  # the group exists only at its coordinator
        with ZookeeperConsumerConnector(consumer_props(cluster, dual, offsets_storage="kafka")) as member:
            drainer = Drainer(member.create_message_streams({topic: 1})[topic])
            drainer.wait_for(20)
            member.commit_offsets()  # dual commit: Kafka, then ZooKeeper
            drainer.stop()

            code, out, err = cli("groups", "list")
            assert code == 0 and not err, err
            assert {in_zookeeper, in_kafka, dual} <= set(out.splitlines())  # one name a line, as before
            code, out, _ = cli("groups", "list", "--format", "json")
            assert {in_zookeeper, in_kafka, dual} <= set(json.loads(out))
            code, out, err = cli("groups", "list", "--stores", "--format", "json")
            assert code == 0, err
            rows = {row["group"]: (row["offsets"], row["membership"]) for row in json.loads(out)}
            assert rows[in_zookeeper] == ("zookeeper", None)
            assert rows[in_kafka] == ("kafka", "kafka")
            assert rows[dual] == ("both", "zookeeper")
            code, out, _ = cli("groups", "list", "--stores")
            lines = out.splitlines()
            assert lines[0].split() == ["GROUP", "OFFSETS", "MEMBERSHIP"]
            assert [in_kafka, "kafka", "kafka"] in [line.split() for line in lines]
            assert [in_zookeeper, "zookeeper", "-"] in [line.split() for line in lines]
    finally:
        modern.close()
    # A 0.9 coordinator forgets a group once its last member left (its offsets stay in Kafka):
    # such a group is not listed, as the module docstring of zkconsumer.admin.group_list says.
    wait_until(lambda: in_kafka not in cli("groups", "list")[1].splitlines(), 30,
               "the coordinator to forget the emptied group")
    assert kafka_committed(cluster, in_kafka, topic, PARTITIONS) == {p: 5 for p in PARTITIONS}
