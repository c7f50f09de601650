"""``zkconsumer offsets seek``: a RUNNING group moves to a position (issue 41, item 4), against the real
cluster, under load (a producer running), with members committing on their own (auto-commit every
100 ms) and a member joining while the seek is pending.

The group: members A and B, and a registered member D that never claims its share (a dummy
registration), so D's partitions stay ownerless and the seek stays pending for them until D leaves
and member C joins: the partitions then go to A, B or C, whose claim must start from the target.
The target (offset 2800) is ahead of every member's position (the topic holds a 3000-message
backlog per partition, read slowly, in small chunks), so a stale commit or delivery shows as an
offset below it.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from typing import Dict, List, Tuple

import pytest
from kazoo.client import KazooClient
from support.common import Producer, consumer_props, wait_until

from zkconsumer import ConsumerTimeoutError, ZookeeperConsumerConnector
from zkconsumer.__main__ import main
from zkconsumer.admin import seek as seeking

pytestmark = pytest.mark.integration

PARTITIONS = 6
BACKLOG = 3000
TARGET = 2800


class Recorder:
    """Deliveries and committed offsets, in one global order (``seq``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self.deliveries: List[Tuple[int, str, int, int]] = []  # (seq, member, partition, offset)
        self.commits: List[Tuple[int, int, int]] = []  # (seq, partition, committed offset) as sampled

    def delivered(self, member: str, partition: int, offset: int) -> None:
        with self._lock:
            self.deliveries.append((next(self._seq), member, partition, offset))

    def committed(self, partition: int, offset: int) -> None:
        with self._lock:
            self.commits.append((next(self._seq), partition, offset))

    def mark(self) -> int:
        with self._lock:
            return next(self._seq)


class SlowMember:
    """A connector whose application reads its one stream slowly (5 ms a message) and lets auto-commit commit."""

    def __init__(self, cluster, group: str, topic: str, name: str, recorder: Recorder) -> None:
        self.name = name
        self.connector = ZookeeperConsumerConnector(consumer_props(
            cluster, group, **{"auto.commit.enable": "true", "auto.commit.interval.ms": 100,
                               "fetch.message.max.bytes": 2048, "queued.max.message.chunks": 2,
                               "consumer.timeout.ms": 100}))
        self.stream = self.connector.create_message_streams({topic: 1})[topic][0]
        self._recorder = recorder
        self._stop = threading.Event()
        self.errors: List[BaseException] = []
        self._thread = threading.Thread(target=self._read, daemon=True, name=f"app-{name}")
        self._thread.start()

    def _read(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    for m in self.stream:
                        self._recorder.delivered(self.name, m.partition, m.offset)
                        if self._stop.wait(0.005):
                            return
                    return
                except ConsumerTimeoutError:
                    continue
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            self.errors.append(exc)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.connector.shutdown()


def sample_commits(zk: KazooClient, group: str, topic: str, recorder: Recorder, stop: threading.Event) -> None:
    while not stop.wait(0.02):
        for p in range(PARTITIONS):
            try:
                recorder.committed(p, int(zk.get(f"/consumers/{group}/offsets/{topic}/{p}")[0]))
            except Exception:  # noqa: BLE001 - not committed yet
                pass


def owned(members: List[SlowMember]) -> Dict[int, str]:
    out: Dict[int, str] = {}
    for member in members:
        status = member.connector.status
        for (_, p) in (status.owned if status else {}):
            out[p] = member.name
    return out


def test_a_running_group_seeks_with_a_member_joining_under_load(cluster, zk, make_topic, group_id, capsys,
                                                                caplog) -> None:
    caplog.set_level(logging.INFO, logger="zkconsumer.consumer.seeking")
    topic = make_topic(partitions=PARTITIONS, replication=1)
    for p in range(PARTITIONS):
        cluster.produce(topic, [f"b{p}-{i:05d}" for i in range(BACKLOG)], partition=p)

    recorder = Recorder()
    producer = Producer(cluster, topic)
    stop_sampling = threading.Event()
    sampler = threading.Thread(target=sample_commits, args=(zk, group_id, topic, recorder, stop_sampling),
                               daemon=True)
    members: List[SlowMember] = []
    dummy = f"/consumers/{group_id}/ids/{group_id}_zzzz-dummy"
    try:
        members += [SlowMember(cluster, group_id, topic, name, recorder) for name in ("A", "B")]
        sampler.start()
        wait_until(lambda: len(owned(members)) == PARTITIONS, 60, "A and B to own every partition")
        registration = json.dumps({"version": 1, "subscription": {topic: 1}, "pattern": "static",
                                   "timestamp": str(int(time.time() * 1000))}, separators=(",", ":"))
        zk.create(dummy, registration.encode(), ephemeral=True)
        wait_until(lambda: len(owned(members)) == PARTITIONS - 2, 60, "A and B to give D its share")
        dummy_share = sorted(set(range(PARTITIONS)) - set(owned(members)))
        for p in range(PARTITIONS):  # the premise: every position is behind the target
            committed = int(zk.get(f"/consumers/{group_id}/offsets/{topic}/{p}")[0])
            assert committed < TARGET - 200, (p, committed)

        outcome: Dict[str, object] = {}

        def run_command() -> None:
            outcome["code"] = main(["offsets", "seek", "--group", group_id, "--topic", topic, "--to", str(TARGET),
                                    "--execute", "--timeout-s", "90", "--zookeeper", cluster.zk_connect])

        command = threading.Thread(target=run_command, name="seek-command")
        command.start()

        def acked() -> Dict[Tuple[str, int], str]:
            pending = seeking.pending_seek(zk, group_id)
            return {} if pending is None else seeking.seek_progress(zk, group_id, pending).acked

        wait_until(lambda: len(acked()) == PARTITIONS - 2, 60, "the owned partitions to be acknowledged")
        assert sorted(p for _, p in acked()) == sorted(set(range(PARTITIONS)) - set(dummy_share))
        joined_at = recorder.mark()
        zk.delete(dummy)
        members.append(SlowMember(cluster, group_id, topic, "C", recorder))  # joins while the seek is pending
        command.join(120)
        assert not command.is_alive()
        out = capsys.readouterr().out
        assert outcome.get("code") == 0, out
        assert "Seek done" in out, out
        assert seeking.pending_seek(zk, group_id) is None  # the command removed the finished request
        done_at = recorder.mark()

        def delivered_past_target() -> bool:
            seen = {(member, p) for _, member, p, o in list(recorder.deliveries) if o >= TARGET + 20}
            return {p for _, p in seen} == set(range(PARTITIONS)) and {m for m, _ in seen} == {"A", "B", "C"}

        wait_until(delivered_past_target, 60, "every member to deliver past the target, every partition")
    finally:
        stop_sampling.set()
        for member in members:
            member.stop()
        producer.stop()
        if zk.exists(dummy):
            zk.delete(dummy)
    assert not [e for m in members for e in m.errors]

    deliveries = sorted(recorder.deliveries)
    for p in range(PARTITIONS):
        mine = [(seq, member, o) for seq, member, q, o in deliveries if q == p]
        first = next(i for i, (_, _, o) in enumerate(mine) if o >= TARGET)
        # Delivered from the target: the first delivery at or past it is the target itself, nothing skipped.
        assert mine[first][2] == TARGET, (p, mine[first - 3:first + 3])
        # Once the partition moved, no member delivers an offset below the target again.
        below = [(seq, member, o) for seq, member, o in mine[first:] if o < TARGET]
        assert below == [], (p, below[:5])
        if p in dummy_share:
            # Claimed during the seek: the new owner started from the target (claim-time), not the old commit.
            after_join = [o for seq, _, o in mine if seq > joined_at]
            assert after_join and after_join[0] == TARGET, (p, after_join[:5])
            # ... because its claim read the target, not because a seek after the claim won the race to the
            # first delivery (it usually does: the fetch starts a few ms later).
            assert any(f"claiming {topic}-{p} at the seek target {TARGET}" in r.getMessage()
                       for r in caplog.records), p
        # Committed offsets never go back below the target once it was written ...
        commits = [(seq, o) for seq, q, o in sorted(recorder.commits) if q == p]
        reached = next(i for i, (_, o) in enumerate(commits) if o >= TARGET)
        assert all(o >= TARGET for _, o in commits[reached:]), (p, commits[reached:][:10])
        # ... and every one sampled after the command reported the seek done is at or past it.
        assert all(o >= TARGET for seq, o in commits if seq > done_at), p


def test_seek_dry_run_refusals_timeout_and_cancel(cluster, zk, make_topic, group_id, capsys) -> None:
    """Without --execute nothing is asked; a group without live members is refused; a partition nobody
    claims times the command out (exit 1) and leaves the request pending, which refuses a second seek,
    until --cancel removes it."""
    topic = make_topic(partitions=2, replication=1)
    cluster.produce(topic, [f"m{i}" for i in range(10)], partition=0)

    def run(*argv: str) -> Tuple[int, str]:
        capsys.readouterr()
        code = main(["offsets", "seek", "--group", group_id, *argv, "--zookeeper", cluster.zk_connect])
        return code, capsys.readouterr().out

    code, out = run("--topic", topic, "--to", "latest")
    assert code == 0 and "Dry run" in out and "Seek group" in out, out
    assert seeking.pending_seek(zk, group_id) is None
    code, out = run("--topic", topic, "--to", "latest", "--execute")
    assert code == 1 and seeking.pending_seek(zk, group_id) is None  # no live members: use a reset
    dummy = f"/consumers/{group_id}/ids/{group_id}_never-claims"
    registration = json.dumps({"version": 1, "subscription": {topic: 1}, "pattern": "static",
                               "timestamp": str(int(time.time() * 1000))}, separators=(",", ":"))
    zk.create(dummy, registration.encode(), ephemeral=True, makepath=True)
    try:
        code, out = run("--topic", topic, "--to", "latest", "--execute", "--timeout-s", "1")
        assert code == 1 and "NOT acknowledged (owner: none)" in out and "--cancel" in out, out
        pending = seeking.pending_seek(zk, group_id)
        assert pending is not None and pending.offsets == {(topic, 0): 10, (topic, 1): 0}
        code, _ = run("--topic", topic, "--to", "earliest", "--execute", "--timeout-s", "1")
        assert code == 1 and seeking.pending_seek(zk, group_id) == pending  # refused: one is pending
        code, out = run("--cancel")
        assert code == 0 and f"Cancelled seek {pending.id}" in out, out
        assert seeking.pending_seek(zk, group_id) is None
        assert run("--cancel")[1].startswith(f"Group {group_id} has no pending seek")
    finally:
        zk.delete(dummy)


@pytest.mark.parametrize("interference", ["acknowledged", "removed"])
@pytest.mark.parametrize("removal", ["finish", "cancel"])
def test_a_request_is_removed_at_once_while_a_member_acknowledges(cluster, zk, group_id, removal: str,
                                                                 interference: str) -> None:
    """The command removes a finished or cancelled request with its acknowledgements in one step, even while a
    member acknowledges. Before, kazoo's recursive delete removed them one by one: a member acknowledging in
    between (a rebalance under load) failed the removal, and the command exited 1 after every partition had
    applied the seek; a member claiming a partition in between found the request without its
    acknowledgement, and moved the partition back to the target."""
    path = f"/consumers/{group_id}/seek"
    request = seeking.seek_nodes.SeekRequest("f00d", {("t", p): 100 for p in range(4)}, "100")
    zk.create(path, seeking.seek_nodes.encode_request(request), makepath=True)
    acks = [f"{path}/{seeking.seek_nodes.ack_name(request.id, ('t', p))}" for p in range(4)]
    for ack in acks[:3]:
        zk.create(ack, seeking.seek_nodes.encode_ack("a member", 100))
    member = KazooClient(hosts=cluster.zk_connect)
    member.start()
    seen: List[int] = []
    listing = zk.get_children

    def get_children(node: str, *args, **kwargs):  # kazoo's recursive delete lists every node it removes
        names = listing(node, *args, **kwargs)
        if member.exists(path):  # what a member claiming a partition reads now
            seen.append(len(member.get_children(path)))
        if interference == "acknowledged" and not member.exists(acks[3]):
            member.create(acks[3], seeking.seek_nodes.encode_ack("a member", 100))  # after the listing
        if interference == "removed" and member.exists(acks[0]):
            member.delete(acks[0])  # another command's removal got there first, for one acknowledgement
        return names

    zk.get_children = get_children
    try:
        if removal == "finish":
            assert seeking.finish_seek(zk, group_id, request)
        else:
            assert seeking.cancel_seek(zk, group_id) == request
    finally:
        del zk.get_children
        member.stop()
        member.close()
    assert not zk.exists(path)
    # never the request without an acknowledgement it had (but the one the other removal took)
    assert seen and min(seen) >= (3 if interference == "acknowledged" else 2), seen
