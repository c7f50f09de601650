"""``commit.processed.only``: commits advance each partition only over messages acked processed,
against a real ZooKeeper and real brokers.

* A worker pool that finishes messages out of order, in a member process SIGKILLed at random
  moments, round after round, then a fresh member that finishes the topic: every offset is
  processed at least once (0 lost), each committed offset at a kill is at or below the member's
  first unacked message, and the messages processed twice are at most what was in flight at the
  kills (handed out beyond the committed offset). The numbers are printed (``-s``).
* A rebalance: the old owner's commit before it releases a partition stops at the message still in
  flight there; the shutdown commit likewise; the new owner re-reads from it; the late ack is ignored.
"""

from __future__ import annotations

import json
import random
import time
from typing import Dict, List, Optional, Set, Tuple

import pytest
from support import PROGRAMS
from support.common import consumer_props, owners, unique, wait_until
from support.offsets import ChildProcess, kafka_committed, zookeeper_committed

from zkconsumer import ConsumerTimeoutError, MessageAndMetadata, ZookeeperConsumerConnector

pytestmark = pytest.mark.integration

SCRIPT = PROGRAMS / "ack_member.py"
PARTITIONS = 4
PER_PARTITION = 1000

Offset = Tuple[int, int]


class AckMember(ChildProcess):
    """``support/programs/ack_member.py`` as a child process: what it handed out, processed and acked."""

    def __init__(self, props: Dict[str, object], topic: str, workers: int, max_sleep_ms: int, seed: int) -> None:
        super().__init__(SCRIPT, [json.dumps(props), topic, "2", str(workers), str(max_sleep_ms), str(seed)], stdin=True)
        self.consumer_id: Optional[str] = None
        self.handed: List[Offset] = []
        self.processed: List[Offset] = []
        self.acked: Set[Offset] = set()
        self.done = False
        self._start_reading()

    def on_line(self, line: str) -> None:
        kind, *rest = line.split()
        if kind == "READY":
            self.consumer_id = rest[0]
        elif kind == "DONE":
            self.done = True
        else:
            offset = (int(rest[0]), int(rest[1]))
            {"H": self.handed.append, "P": self.processed.append, "A": self.acked.add}[kind](offset)

    def handed_count(self) -> int:
        with self._lock:
            return len(self.handed)

    def finish(self) -> None:
        """Close stdin: the member shuts down cleanly (its final commit included)."""
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait(60)
        self._reader.join(10)
        assert self.done, "the member did not shut down cleanly"


def test_out_of_order_workers_killed_at_random_lose_nothing_and_replay_at_most_what_was_in_flight(
        cluster, zk) -> None:
    topic, group = unique("acked"), unique("g-acked")
    cluster.create_topic(topic, partitions=PARTITIONS, replication=1)
    for p in range(PARTITIONS):
        cluster.produce(topic, [f"p{p}-{i}".encode() for i in range(PER_PARTITION)], partition=p)
    props = consumer_props(cluster, group, commit_processed_only="true", auto_commit_enable="true",
                           auto_commit_interval_ms=300)
    rng = random.Random(41)
    members: List[AckMember] = []
    kills: List[Dict[str, int]] = []
    try:
        for round_ in range(4):
            member = AckMember(props, topic, workers=6, max_sleep_ms=30, seed=round_)
            members.append(member)
            wait_until(lambda m=member: m.handed_count() > 0, 60, f"round {round_}: a first message handed out")
            time.sleep(rng.uniform(0.3, 2.0))
            member.kill()
            committed = zookeeper_committed(zk, group, topic, range(PARTITIONS))
            held = [p for p, thread in owners(zk, group, topic).items()
                    if member.consumer_id and thread.startswith(member.consumer_id + "-")]
            unacked = [o for o in member.handed if o not in member.acked and o[0] in held]
            for p in held:  # the committed offset never passes a message still in flight
                first_unacked = min((o for q, o in unacked if q == p), default=None)
                if first_unacked is not None:
                    assert (committed[p] or 0) <= first_unacked, (p, committed[p], first_unacked)
            beyond = [(p, o) for p, o in member.handed if p in held and o >= (committed[p] or 0)]
            kills.append({"handed": len(member.handed), "unacked": len(unacked), "in_flight": len(beyond),
                          "processed_beyond": sum(1 for p, o in member.processed
                                                  if p in held and o >= (committed[p] or 0))})
        finisher = AckMember(props, topic, workers=6, max_sleep_ms=2, seed=99)
        members.append(finisher)
        ends = {p: PER_PARTITION for p in range(PARTITIONS)}
        wait_until(lambda: zookeeper_committed(zk, group, topic, range(PARTITIONS)) == ends, 180,
                   "the fresh member's commits reaching the end of every partition")
        finisher.finish()
    finally:
        for member in members:
            member.kill()
    processed = [o for member in members for o in member.processed]
    every = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    lost = every - set(processed)
    duplicates = len(processed) - len(set(processed))
    in_flight = sum(k["in_flight"] for k in kills)
    print(f"\nprocessed-commit kills: {kills}\nproduced {len(every)}, processed {len(processed)}, lost {len(lost)}, "
          f"duplicates {duplicates}, in flight at the kills {in_flight}")
    assert not lost, f"{len(lost)} offsets never processed, e.g. {sorted(lost)[:5]}"
    assert duplicates <= in_flight
    assert any(k["unacked"] for k in kills), "no kill caught a message in flight: the test proved little"


@pytest.mark.parametrize("membership", ["zookeeper", "kafka"])
def test_an_in_flight_message_is_not_committed_by_the_old_owner_at_a_rebalance_or_at_shutdown(
        cluster, zk, membership: str) -> None:
    topic, group = unique("acked-rebalance"), unique("g-acked-rebalance")
    cluster.create_topic(topic, partitions=2, replication=1)
    for p in (0, 1):
        cluster.produce(topic, [f"p{p}-{i}".encode() for i in range(10)], partition=p)
    extra: Dict[str, object] = dict(commit_processed_only="true", auto_commit_enable="true",
                                    auto_commit_interval_ms=600000)
    if membership == "kafka":  # the coordinator's generation fences these commits instead of owner nodes
        extra.update(group_membership="kafka", offsets_storage="kafka", dual_commit_enabled="false",
                     session_timeout_ms=6000, heartbeat_interval_ms=500)

    def committed(partition: int) -> Dict[int, Optional[int]]:
        if membership == "kafka":
            return kafka_committed(cluster, group, topic, [partition])
        return zookeeper_committed(zk, group, topic, [partition])

    # Range assignment in member id order (the consumer id; at the coordinator, the client id and
    # a suffix): "a" takes partition 0 from "b" when it joins.
    old = ZookeeperConsumerConnector(consumer_props(cluster, group, consumer_id="b", client_id="b", **extra))
    new: Optional[ZookeeperConsumerConnector] = None
    try:
        (stream,) = old.create_message_streams({topic: 1})[topic]
        got: Dict[Offset, MessageAndMetadata] = {}
        it = iter(stream)
        while len(got) < 20:
            m = next(it)
            got[(m.partition, m.offset)] = m
        kept = {(0, 3), (1, 5)}  # still being processed
        for key, m in got.items():
            if key not in kept:
                assert stream.ack(m)
        assert old.positions() == {(topic, 0): 3, (topic, 1): 5}

        new = ZookeeperConsumerConnector(consumer_props(cluster, group, consumer_id="a", client_id="a", **extra))
        (new_stream,) = new.create_message_streams({topic: 1})[topic]
        wait_until(lambda: set(old.positions()) == {(topic, 1)}, 60, "the old member releasing partition 0")
        assert committed(0) == {0: 3}, "committed past the message in flight"
        replayed: List[int] = []
        deadline = time.monotonic() + 60
        while len(replayed) < 7 and time.monotonic() < deadline:
            try:
                replayed.extend(m.offset for m in [next(iter(new_stream))])
            except ConsumerTimeoutError:
                continue
        assert replayed == list(range(3, 10)), "the new owner re-reads from the message that was in flight"
        assert stream.ack(got[(0, 3)]) is False, "a late ack of a partition that moved away is ignored"

        old.shutdown()
        assert committed(1) == {1: 5}, "the shutdown commit passed a message in flight"
    finally:
        old.shutdown()
        if new is not None:
            new.shutdown()
