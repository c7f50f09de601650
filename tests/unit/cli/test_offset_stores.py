"""Pure logic of issue 39 item 1: which offset a row shows, disagreement, reset writes per store, rendering."""

from __future__ import annotations

import csv
import io
import json

import pytest

from zkconsumer.admin import GroupDescription, PartitionRow, ResetPlan, ResetRow, ResetTarget
from zkconsumer.admin.copy import CopyPlan, CopyRow
from zkconsumer.admin.stored_io import reset_writes
from zkconsumer.admin.stores import GroupOffsets, StoredOffset
from zkconsumer.cli import run
from zkconsumer.cli.copy import render_copy_plan
from zkconsumer.cli.output import render_description


def test_a_row_shows_its_store_and_both_takes_the_larger_and_flags_a_difference() -> None:
    assert StoredOffset("t", 0, "zookeeper", 5, None).offset == 5
    assert StoredOffset("t", 0, "kafka", None, 7).offset == 7
    both = StoredOffset("t", 0, "both", 5, 7)
    assert (both.offset, both.disagree) == (7, True)
    assert (StoredOffset("t", 0, "both", None, 7).disagree, StoredOffset("t", 0, "both", 7, 7).disagree) == (True, False)
    assert not StoredOffset("t", 0, "kafka", 5, 7).disagree  # only one store read: nothing to compare
    found = GroupOffsets("g", "both", True, [both, StoredOffset("t", 1, "both", 3, 3)])
    assert found.source_note() == ("Offsets read from ZooKeeper and Kafka (detected: where the group has offsets); "
                                   "1 partition(s) disagree")


def test_a_reset_from_both_stores_writes_each_store_only_where_it_differs() -> None:
    plan = ResetPlan("g", "t", ResetTarget("earliest"), [
        ResetRow("t", 0, 9, 0, 0, 20), ResetRow("t", 1, 4, 4, 4, 20), ResetRow("t", 2, None, None, 0, 20)],
        versions={0: 3, 1: 8})
    found = GroupOffsets("g", "both", False, [
        StoredOffset("t", 0, "both", 9, 2), StoredOffset("t", 1, "both", 1, 4), StoredOffset("t", 2, "both")])
    zookeeper, kafka = reset_writes(plan, found)
    assert [(w.partition, w.previous, w.offset, w.version) for w in zookeeper] == [(0, 9, 0, 3), (1, 1, 4, 8)]
    assert kafka == {("t", 0): 0}
    only_kafka = GroupOffsets("g", "kafka", False, [StoredOffset(r.topic, r.partition, "kafka", None, r.kafka)
                                                    for r in found.rows])
    assert reset_writes(plan, only_kafka) == ([], {("t", 0): 0})


def test_describe_with_both_stores_adds_columns_in_every_format() -> None:
    description = GroupDescription("g", [], [PartitionRow("t", 0, 7, 9, 2, None, 5, 7, True),
                                             PartitionRow("t", 1, 3, 9, 6, None, 3, 3, False)],
                                   offsets_storage="both")
    table = render_description(description, "table").splitlines()
    assert table[1] == "Offsets read from ZooKeeper and Kafka; 1 partition(s) disagree"
    assert next(line for line in table if line.startswith("TOPIC")).split()[-3:] == [
        "ZOOKEEPER-OFFSET", "KAFKA-OFFSET", "DISAGREE"]
    assert ["t", "0", "7", "9", "2", "-", "5", "7", "DISAGREE"] in [line.split() for line in table]
    rows = list(csv.reader(io.StringIO(render_description(description, "csv"))))
    assert rows[0][-3:] == ["zookeeper_offset", "kafka_offset", "disagree"] and rows[1][-3:] == ["5", "7", "1"]
    doc = json.loads(render_description(description, "json"))
    assert doc["offsets_storage"] == "both" and doc["partitions"][1]["disagree"] is False
    single = json.loads(render_description(GroupDescription("g", [], [PartitionRow("t", 0, 7, 9, 2, None)],
                                                            offsets_storage="kafka"), "json"))
    assert "kafka_offset" not in single["partitions"][0]


def test_the_copy_plan_names_source_destination_and_action() -> None:
    plan = CopyPlan("g", "zookeeper", "kafka", [CopyRow("t", 0, 5, None), CopyRow("t", 1, 4, 4),
                                                 CopyRow("t", 2, None, 9)])
    lines = render_copy_plan(plan, "table").splitlines()
    assert lines[0].split() == ["TOPIC", "PARTITION", "FROM", "(zookeeper)", "TO", "(kafka)", "NOW", "IN", "KAFKA",
                                "ACTION"]
    assert [line.split() for line in lines[1:]] == [["t", "0", "5", "5", "-", "write"],
                                                    ["t", "1", "4", "4", "4", "unchanged"],
                                                    ["t", "2", "-", "-", "9", "skip", "(no", "offset)"]]
    assert [r.partition for r in plan.changes] == [0]


@pytest.mark.parametrize("argv,message", [
    (["offsets", "copy", "--group", "g", "--from", "kafka", "--to", "s3"], "invalid choice: 's3'"),
    (["groups", "describe", "--group", "g", "--offsets-storage", "etcd"], "invalid choice: 'etcd'"),
    (["offsets", "copy", "--group", "g", "--to", "kafka"], "the following arguments are required: --from"),
])
def test_bad_store_arguments_are_named(argv, message, capsys) -> None:  # type: ignore[no-untyped-def]
    assert run([*argv, "--zookeeper", "127.0.0.1:1"]) == 2
    assert message in capsys.readouterr().err


class _UnreachableKafka:
    def read(self, partitions):  # type: ignore[no-untyped-def]
        from zkconsumer.errors import BrokerUnavailableError

        raise BrokerUnavailableError("broker 1 at h:9092: connection refused")


def test_detect_names_the_way_out_when_kafka_cannot_be_read(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from zkconsumer.admin import AdminError, stores
    from zkconsumer.errors import BrokerUnavailableError

    monkeypatch.setattr(stores, "_zookeeper_offsets", lambda zk, group, partitions: {("t", 0): 4})
    with pytest.raises(AdminError, match=r"cannot tell where the offsets of group g are: Kafka's could not be read "
                                         r"\(broker 1 at h:9092: connection refused\); pass --offsets-storage zookeeper"):
        stores.read_group_offsets(None, "g", [("t", 0)], "detect", _UnreachableKafka())  # type: ignore[arg-type]
    with pytest.raises(BrokerUnavailableError):  # asked for Kafka explicitly: its own error
        stores.read_group_offsets(None, "g", [("t", 0)], "both", _UnreachableKafka())  # type: ignore[arg-type]
    with pytest.raises(AdminError, match="unknown offsets storage 'etcd'"):
        stores.read_group_offsets(None, "g", [("t", 0)], "etcd", None)  # type: ignore[arg-type]
