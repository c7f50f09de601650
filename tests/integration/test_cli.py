"""The ``zkconsumer`` CLI against the real cluster, refereed by Kafka's own tools.

Offsets are written into ZooKeeper the way a group member writes them
(:class:`zkconsumer.zookeeper.group.GroupClient`), then read back by our CLI and by
``kafka.tools.ConsumerOffsetChecker`` / ``kafka.tools.ExportZkOffsets``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, Tuple

import pytest
from kazoo.client import KazooClient
from support.common import offset_checker, produced_values, unique

import zkconsumer
from harness.ports import refused_port
from zkconsumer.__main__ import main
from zkconsumer.admin import BrokerOffsets
from zkconsumer.wire.protocol import LATEST_TIME
from zkconsumer.zookeeper.group import GroupClient

pytestmark = pytest.mark.integration


def log_ends(zk: KazooClient, topic: str, partitions: int) -> Dict[int, int]:
    with BrokerOffsets(zk) as offsets:
        found, problems = offsets.fetch([(topic, p) for p in range(partitions)], LATEST_TIME)
    assert not problems, problems
    return {p: found[(topic, p)] for p in range(partitions)}


def zk_offsets(zk: KazooClient, group: str, topic: str) -> Dict[int, int]:
    base = f"/consumers/{group}/offsets/{topic}"
    return {int(p): int(zk.get(f"{base}/{p}")[0]) for p in zk.get_children(base)} if zk.exists(base) else {}


def commit(zk: KazooClient, group: str, topic: str, offsets: Dict[int, int]) -> None:
    GroupClient(zk, group, f"{group}_writer").commit_offsets({(topic, p): o for p, o in offsets.items()})


def register_member(zk: KazooClient, group: str, topic: str, name: str = "live") -> str:
    consumer_id = f"{group}_{name}"
    registration = json.dumps({"version": 1, "subscription": {topic: 1}, "pattern": "static",
                               "timestamp": "1700000000000"}, separators=(",", ":"))
    zk.create(f"/consumers/{group}/ids/{consumer_id}", registration.encode(), ephemeral=True, makepath=True)
    return consumer_id


@pytest.fixture
def topic_with_data(cluster, zk, make_topic) -> Tuple[str, Dict[int, int]]:
    """A 4-partition topic (leaders spread over the brokers) with 60 messages; returns (topic, log end per partition)."""
    topic = make_topic(partitions=4, replication=2)
    cluster.produce(topic, produced_values(60))
    return topic, log_ends(zk, topic, 4)


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# --------------------------------------------------------------------------- describe


def test_describe_agrees_with_kafkas_consumer_offset_checker(cluster, zk, cli, topic_with_data) -> None:
    topic, ends = topic_with_data
    group = unique("g")
    committed = {0: ends[0] // 2, 1: ends[1], 2: 0}  # partition 3: nothing committed
    commit(zk, group, topic, committed)

    code, out, err = cli("groups", "describe", "--group", group, "--format", "json")
    assert code == 0, err
    ours = {row["partition"]: row for row in json.loads(out)["partitions"] if row["topic"] == topic}
    kafka = offset_checker(cluster, group, topic)
    assert sorted(ours) == sorted(kafka) == [0, 1, 2, 3]
    for p, (k_offset, k_log_size, k_lag) in kafka.items():
        row = ours[p]
        # Kafka prints -1 (and lag "unknown") for a partition without an offset node.
        assert (row["offset"] if row["offset"] is not None else -1, row["log_end_offset"], row["lag"]) == \
            (k_offset, k_log_size, k_lag), f"partition {p}"
        assert row["log_end_offset"] == ends[p]
        assert row["offset"] == committed.get(p)


def test_describe_shows_members_owners_and_flags_problems(zk, cli, topic_with_data) -> None:
    topic, _ = topic_with_data
    group = unique("g")
    commit(zk, group, topic, {0: 1})
    member = register_member(zk, group, topic)
    zk.create(f"/consumers/{group}/owners/{topic}/0", f"{member}-0".encode(), ephemeral=True, makepath=True)
    zk.create(f"/consumers/{group}/owners/{topic}/1", f"{group}_departed-0".encode(), ephemeral=True, makepath=True)

    code, out, err = cli("groups", "describe", "--group", group, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["members"] == [{"id": member, "subscription": {topic: 1}, "pattern": "static",
                               "registered_since": "2023-11-14T22:13:20.000Z", "error": None}]
    owners = {r["partition"]: r["owner"] for r in doc["partitions"]}
    assert owners == {0: f"{member}-0", 1: f"{group}_departed-0", 2: None, 3: None}
    assert f"partition {topic}/1 is owned by {group}_departed-0, which is not a registered member" in doc["warnings"]
    assert f"partition {topic}/2 of a subscribed topic has no owner" in doc["warnings"]
    assert f"partition {topic}/3 of a subscribed topic has no owner" in doc["warnings"]
    assert not any(f"{topic}/0 " in w for w in doc["warnings"])

    code, out, _ = cli("groups", "describe", "--group", group)  # the table renders too
    assert code == 0 and member in out and "Warnings:" in out


def test_groups_list_includes_a_new_group(zk, cli, topic_with_data) -> None:
    topic, _ = topic_with_data
    group = unique("g")
    commit(zk, group, topic, {0: 0})
    code, out, _ = cli("groups", "list")
    assert code == 0 and group in out.splitlines()
    code, out, _ = cli("groups", "list", "--format", "json")
    assert group in json.loads(out)


# --------------------------------------------------------------------------- export / reset / import


def test_export_reset_to_earliest_and_import_restore_the_exact_offsets(cluster, zk, cli, topic_with_data,
                                                                       tmp_path: Path) -> None:
    topic, ends = topic_with_data
    group = unique("g")
    original = {p: max(0, ends[p] - 1 - p) for p in range(4)}
    commit(zk, group, topic, original)

    exported = tmp_path / "offsets.txt"
    code, _, err = cli("offsets", "export", "--group", group, "--output", str(exported))
    assert code == 0, err
    lines = exported.read_text().splitlines()
    assert lines == [f"/consumers/{group}/offsets/{topic}/{p}:{original[p]}" for p in range(4)]

    kafkas = tmp_path / "kafka-export.txt"
    cluster.run_tool("kafka.tools.ExportZkOffsets", "--zkconnect", cluster.zk_connect, "--group", group,
                     "--output-file", str(kafkas), timeout=60, check=True)
    assert sorted(kafkas.read_text().splitlines()) == lines  # the same file as Kafka's tool, up to order

    code, out, err = cli("offsets", "reset", "--group", group, "--topic", topic, "--to", "earliest")
    assert code == 0, err
    assert "Dry run" in out
    assert zk_offsets(zk, group, topic) == original  # a dry run changes nothing

    code, out, err = cli("offsets", "reset", "--group", group, "--topic", topic, "--to", "earliest", "--execute")
    assert code == 0, err
    assert zk_offsets(zk, group, topic) == {p: 0 for p in range(4)}

    code, out, err = cli("offsets", "import", "--input", str(exported))
    assert code == 0, err
    assert zk_offsets(zk, group, topic) == original


def test_reset_clamps_and_shifts(zk, cli, topic_with_data) -> None:
    topic, ends = topic_with_data
    group = unique("g")
    commit(zk, group, topic, {0: 1, 1: ends[1]})

    code, out, err = cli("offsets", "reset", "--group", group, "--topic", topic, "--to", "shift:-5",
                         "--format", "json", "--execute")
    assert code == 0, err
    rows = {r["partition"]: r for r in json.loads(out)["partitions"]}
    assert rows[0]["new"] == 0 and "clamped -4 up to the log start 0" in rows[0]["note"]
    assert rows[1]["new"] == max(0, ends[1] - 5)
    assert rows[2]["new"] is None and rows[3]["new"] is None  # nothing committed: left alone
    assert zk_offsets(zk, group, topic) == {0: 0, 1: max(0, ends[1] - 5)}

    code, out, err = cli("offsets", "reset", "--group", group, "--topic", topic, "--to", "1000000",
                         "--partitions", "2", "--execute")
    assert code == 0, err
    assert f"clamped 1000000 down to the log end {ends[2]}" in out
    assert zk_offsets(zk, group, topic)[2] == ends[2]


# --------------------------------------------------------------------------- live groups


def test_reset_and_delete_are_refused_while_a_member_is_live(zk, cli, topic_with_data) -> None:
    topic, _ = topic_with_data
    group = unique("g")
    commit(zk, group, topic, {0: 3, 1: 4})
    member = register_member(zk, group, topic)

    for args in (["offsets", "reset", "--group", group, "--topic", topic, "--to", "latest", "--execute"],
                 ["offsets", "reset", "--group", group, "--topic", topic, "--to", "latest"],
                 ["groups", "delete", "--group", group],
                 ["groups", "delete", "--group", group, "--topic", topic]):
        code, out, err = cli(*args)
        assert code == 1, args
        line = one_error_line(err)
        assert "live member" in line and member in line and group in line
    assert zk_offsets(zk, group, topic) == {0: 3, 1: 4}
    assert zk.exists(f"/consumers/{group}/ids/{member}")

    zk.delete(f"/consumers/{group}/ids/{member}")
    code, out, err = cli("groups", "delete", "--group", group, "--topic", topic)
    assert code == 0, err
    assert zk.exists(f"/consumers/{group}") and not zk.exists(f"/consumers/{group}/offsets/{topic}")
    code, out, err = cli("groups", "delete", "--group", group)
    assert code == 0, err
    assert not zk.exists(f"/consumers/{group}")


# --------------------------------------------------------------------------- errors


def test_unknown_group_is_one_line_on_stderr(cli) -> None:
    group = unique("missing")
    for args in (["groups", "describe", "--group", group], ["groups", "delete", "--group", group],
                 ["offsets", "export", "--group", group, "--output", os.devnull]):
        code, out, err = cli(*args)
        assert code == 1 and out == ""
        assert group in one_error_line(err) and "does not exist" in err


def test_unreachable_zookeeper_names_the_address(capsys) -> None:
    with refused_port() as port:
        address = f"127.0.0.1:{port}"
        code = main(["groups", "describe", "--group", "g", "--zookeeper", address, "--zk-timeout-ms", "1000"])
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    assert address in one_error_line(captured.err)


def test_malformed_offset_node_is_named(zk, cli, topic_with_data) -> None:
    topic, _ = topic_with_data
    group = unique("g")
    path = f"/consumers/{group}/offsets/{topic}/0"
    zk.create(path, b"not-a-number", makepath=True)
    for args in (["groups", "describe", "--group", group], ["offsets", "export", "--group", group, "--output", "-"]):
        code, _, err = cli(*args)
        assert code == 1
        assert path in one_error_line(err)


def test_import_names_a_bad_line(cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("/consumers/g/offsets/t/0:5\n/consumers/g/offsets/t/1:five\n")
    code, _, err = cli("offsets", "import", "--input", str(bad))
    assert code == 1
    assert f"{bad}:2" in one_error_line(err)


# --------------------------------------------------------------------------- consume


def test_consume_prints_every_value_commits_and_exits_when_idle(cluster, zk, make_topic, group_id,
                                                                capsysbinary) -> None:
    topic, group = make_topic(partitions=2), group_id
    values = produced_values(25, "c")
    cluster.produce(topic, values)

    def consume(*extra: str) -> Tuple[int, bytes, bytes]:
        capsysbinary.readouterr()
        code = main(["consume", "--zookeeper", cluster.zk_connect, "--group", group, "--topic", topic,
                     "--from-beginning", *extra])
        captured = capsysbinary.readouterr()
        return code, captured.out, captured.err

    code, out, err = consume("--max-messages", "25", "--timeout-ms", "30000")
    assert code == 0, err
    assert sorted(out.splitlines()) == sorted(values)
    assert b"Processed a total of 25 messages" in err
    assert zk_offsets(zk, group, topic) == log_ends(zk, topic, 2)  # committed at exit

    # Everything is consumed: the next run finds nothing and exits 0 once idle for --timeout-ms.
    code, out, err = consume("--timeout-ms", "1000")
    assert code == 0, err
    assert out == b"" and b"Processed a total of 0 messages" in err


def test_consume_stops_after_max_messages(cluster, zk, make_topic, group_id, capsysbinary) -> None:
    topic, group = make_topic(partitions=1), group_id
    cluster.produce(topic, produced_values(10, "m"))
    capsysbinary.readouterr()
    code = main(["consume", "--zookeeper", cluster.zk_connect, "--group", group, "--whitelist", topic,
                 "--from-beginning", "--max-messages", "4", "--timeout-ms", "10000"])
    captured = capsysbinary.readouterr()
    assert code == 0, captured.err
    assert captured.out.splitlines() == produced_values(4, "m")
    assert zk_offsets(zk, group, topic) == {0: 4}


# --------------------------------------------------------------------------- the entry point


def test_python_dash_m_zkconsumer_runs(cluster, zk, topic_with_data) -> None:
    topic, ends = topic_with_data
    group = unique("g")
    commit(zk, group, topic, {1: 2})
    root = Path(zkconsumer.__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    result = subprocess.run(
        [sys.executable, "-m", "zkconsumer", "groups", "describe", "--zookeeper", cluster.zk_connect,
         "--group", group, "--format", "csv"],
        capture_output=True, text=True, timeout=60, env=env, cwd=str(root),
    )
    assert result.returncode == 0, result.stderr
    rows = [line.split(",") for line in result.stdout.splitlines()]
    assert rows[0] == ["group", "topic", "partition", "offset", "log_end_offset", "lag", "owner"]
    assert [group, topic, "1", "2", str(ends[1]), str(ends[1] - 2), ""] in rows

    missing = subprocess.run([sys.executable, "-m", "zkconsumer", "groups", "describe", "--zookeeper",
                              cluster.zk_connect, "--group", unique("missing")],
                             capture_output=True, text=True, timeout=60, env=env, cwd=str(root))
    assert missing.returncode == 1 and "Traceback" not in missing.stderr


def test_groups_protected_by_acls_need_and_accept_zookeeper_auth(cluster, cli, monkeypatch) -> None:
    from kazoo.security import ACL, Id, Permissions, make_digest_acl

    group, topic = f"g-acl-{os.urandom(3).hex()}", f"t-acl-{os.urandom(3).hex()}"
    cluster.create_topic(topic, partitions=1)
    cluster.produce(topic, [b"x"] * 10, partition=0)
    owner = cluster.kazoo_client(auth_data=[("digest", "ops:s3cret")])
    acl = [make_digest_acl("ops", "s3cret", all=True), ACL(Permissions.READ, Id("world", "anyone"))]
    path = f"/consumers/{group}/offsets/{topic}/0"
    owner.create(path, b"5", acl=acl, makepath=True)
    monkeypatch.delenv("ZKCONSUMER_ZOOKEEPER_AUTH", raising=False)

    code, _, err = cli("offsets", "reset", "--group", group, "--topic", topic, "--to", "3", "--execute")
    assert code == 1 and "--zookeeper-auth" in err and "NoAuth" in err
    assert owner.get(path)[0] == b"5"

    code, _, err = cli("offsets", "reset", "--group", group, "--topic", topic, "--to", "3", "--execute",
                       "--zookeeper-auth", "ops:s3cret")
    assert code == 0, err
    assert owner.get(path)[0] == b"3"
