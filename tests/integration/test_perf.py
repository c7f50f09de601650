"""``zkconsumer perf`` against the real cluster: a small run per mode, counts checked (never timings)."""

from __future__ import annotations

import json
from typing import Dict, List

import pytest
from kazoo.client import KazooClient

from zkconsumer.__main__ import main

pytestmark = pytest.mark.integration

N = 3000


@pytest.fixture
def filled_topic(cluster, make_topic) -> str:
    """A 4-partition topic holding N messages of varied sizes (some with keys, one null value)."""
    topic = make_topic(partitions=4)
    values = [None if i == 17 else (b"v%d-" % i) * (1 + i % 9) for i in range(N)]
    keys = [b"k%d" % i if i % 2 else None for i in range(N)]
    cluster.produce(topic, values, keys=keys)
    return topic


def value_bytes(n_values: int) -> int:
    return sum(len((b"v%d-" % i) * (1 + i % 9)) for i in range(n_values) if i != 17)


def perf(capsys, cluster, *args: str) -> Dict[str, object]:
    capsys.readouterr()
    code = main(["perf", "--zookeeper", cluster.zk_connect, "--warmup-ms", "0", *args])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0, out
    assert out[-3].startswith("start.time, end.time, data.consumed.in.MB")  # Kafka's two lines, then JSON
    result = json.loads(out[-1])
    for key in ("messages", "seconds", "msgs_per_sec", "mb_per_sec", "bytes", "cpu_seconds", "peak_rss_mb"):
        assert key in result
    return result


def committed(cluster, group: str, topic: str) -> List[int]:
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start()
    try:
        path = f"/consumers/{group}/offsets/{topic}"
        return [int(zk.get(f"{path}/{p}")[0]) for p in sorted(zk.get_children(path), key=int)]
    finally:
        zk.stop()
        zk.close()


def test_perf_consumes_exactly_n_messages_and_commits_them(cluster, capsys, filled_topic, group_id) -> None:
    result = perf(capsys, cluster, "--topic", filled_topic, "--messages", "2000", "--group", group_id)
    assert result["messages"] == 2000 and not result["batch"] and not result["timed_out"]
    assert result["group"] == group_id and result["threads"] == 1
    assert 0 < result["bytes"] < value_bytes(N)
    assert sum(committed(cluster, group_id, filled_topic)) == 2000  # what was handed out, and no more


def test_perf_batch_counts_every_message_and_byte(cluster, capsys, filled_topic, group_id) -> None:
    pytest.importorskip("pyarrow")
    result = perf(capsys, cluster, "--topic", filled_topic, "--messages", str(N), "--group", group_id, "--batch")
    assert result["messages"] == N and result["batch"] and result["bytes"] == value_bytes(N)
    assert sum(committed(cluster, group_id, filled_topic)) == N


def test_perf_with_several_threads_stops_at_n(cluster, capsys, filled_topic, group_id) -> None:
    result = perf(capsys, cluster, "--topic", filled_topic, "--messages", "2500", "--threads", "3",
                  "--group", group_id)
    assert result["messages"] == 2500 and result["threads"] == 3
    assert sum(committed(cluster, group_id, filled_topic)) >= 2500


def test_perf_on_a_topic_with_fewer_messages_stops_after_the_timeout(cluster, capsys, filled_topic,
                                                                      group_id) -> None:
    result = perf(capsys, cluster, "--topic", filled_topic, "--messages", str(N + 1000), "--group", group_id,
                  "--timeout-ms", "300", "--batch", "--max-batch-rows", "100")
    assert result["messages"] == N and result["timed_out"] and result["bytes"] == value_bytes(N)


def test_perf_rejects_bad_arguments(capsys) -> None:
    assert main(["perf", "--zookeeper", "127.0.0.1:1", "--topic", "t", "--messages", "0"]) == 2
    assert main(["perf", "--zookeeper", "127.0.0.1:1", "--topic", "t", "--messages", "5", "--warmup-ms", "-1"]) == 2
