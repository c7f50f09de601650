"""``zkconsumer offsets reset --to-datetime / --by-duration`` against the real 0.9 brokers
(issue 41, item 4): a topic whose segments roll every second (topic config ``segment.ms``
1000; a segment rolls when a message arrives more than segment.ms after the segment was
created), written in three bursts a few seconds apart, so each burst starts a segment.
A time between two bursts resolves to the first offset of the newest segment last written
at or before it; a time before every write to the log start; a time after now to the log end.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from kazoo.client import KazooClient

from zkconsumer.__main__ import main
from zkconsumer.admin import NONE_BEFORE, SEGMENT_NOTE, BrokerOffsets, format_time, offsets_for_time
from zkconsumer.zookeeper.group import GroupClient

pytestmark = pytest.mark.integration

GAP_S = 3.0  # between bursts: three times segment.ms, so the midpoint is 1.5 s from either burst


def run(cluster, capsys, *argv: str) -> Tuple[int, str, str]:
    capsys.readouterr()
    code = main([*argv, "--zookeeper", cluster.zk_connect])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def committed(zk: KazooClient, group: str, topic: str) -> int:
    return int(zk.get(f"/consumers/{group}/offsets/{topic}/0")[0])


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
def bursts(cluster, make_topic) -> Tuple[str, List[Tuple[int, int, int]]]:
    """A 1-partition topic rolled by time, written in three bursts of 5 messages.

    Returns the topic and per burst ``(first offset, start ms, end ms)``; the end is
    taken after the broker acknowledged the burst's last message.
    """
    topic = make_topic(partitions=1, replication=1, config={"segment.ms": 1000})
    found = []
    for burst in range(3):
        if burst:
            time.sleep(GAP_S)
        start = now_ms()
        placed = cluster.produce(topic, [f"b{burst}-{i}" for i in range(5)], partition=0)
        found.append((placed[0][1], start, now_ms()))
    time.sleep(1.0)
    return topic, found


def segment_bases(cluster, topic: str) -> List[int]:
    leader = cluster.leader(topic, 0)
    directory = Path(cluster.work_dir) / f"kafka-{leader}" / f"{topic}-0"
    return sorted(int(p.stem) for p in directory.glob("*.log"))


def test_reset_by_time_moves_to_the_segment_boundary_at_or_before_the_time(cluster, capsys, zk, group_id,
                                                                           bursts) -> None:
    topic, found = bursts
    firsts = [first for first, _, _ in found]
    assert firsts == [0, 5, 10]
    # The broker really rolled a segment at each burst (the premise of the test).
    assert segment_bases(cluster, topic) == firsts
    log_end = 15
    GroupClient(zk, group_id, f"{group_id}_writer").commit_offsets({(topic, 0): log_end})

    between_1_2 = (found[0][2] + found[1][1]) // 2
    between_2_3 = (found[1][2] + found[2][1]) // 2
    after_3 = found[2][2] + 500  # before now: the active segment's base offset
    cases: Dict[str, Tuple[int, int]] = {
        "between bursts 1 and 2": (between_1_2, firsts[0]),
        "between bursts 2 and 3": (between_2_3, firsts[1]),
        "after burst 3, before now": (after_3, firsts[2]),
        "before every write": (found[0][1] - 60_000, 0),
        "an hour from now": (now_ms() + 3_600_000, log_end),
    }
    with BrokerOffsets(zk) as offsets:
        raw, problems = offsets.fetch([(topic, 0)], found[0][1] - 60_000, empty=NONE_BEFORE)
        assert not problems and raw == {(topic, 0): NONE_BEFORE}  # the broker answers an empty list
        for what, (at, expected) in cases.items():
            resolved, problems = offsets_for_time(offsets, [(topic, 0)], at)
            assert not problems and resolved == {(topic, 0): expected}, what

    for what, (at, expected) in cases.items():
        previous = committed(zk, group_id, topic)
        when = format_time(at)
        code, out, _ = run(cluster, capsys, "offsets", "reset", "--group", group_id, "--topic", topic,
                           "--to-datetime", when)
        assert code == 0, what
        assert f"to {when}" in out and SEGMENT_NOTE in out and "Dry run" in out, out
        assert committed(zk, group_id, topic) == previous, what  # a dry run writes nothing
        code, out, _ = run(cluster, capsys, "offsets", "reset", "--group", group_id, "--topic", topic,
                           "--to-datetime", when, "--execute")
        assert code == 0, (what, out)
        assert committed(zk, group_id, topic) == expected, (what, out)
        if what == "before every write":
            assert "no segment last written at or before the time: the log start" in out, out

    # --by-duration: an hour ago is before every write; a second ago is after burst 3.
    code, out, _ = run(cluster, capsys, "offsets", "reset", "--group", group_id, "--topic", topic,
                       "--by-duration", "PT1H", "--execute", "--format", "json")
    assert code == 0 and committed(zk, group_id, topic) == 0, out
    code, out, _ = run(cluster, capsys, "offsets", "reset", "--group", group_id, "--topic", topic,
                       "--by-duration", "1s", "--execute")
    assert code == 0 and committed(zk, group_id, topic) == firsts[2], out
