"""The member's side of a live seek (``consumer/seeking.py``) with fakes for ZooKeeper, the offset
storage and the pauses: which partitions move, what is committed and acknowledged, and a claim
during a pending seek. The whole path against the real cluster: tests/integration/test_live_seek.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Dict, List, Optional, Sequence, Set

import pytest
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import EventType, KazooState, KeeperState, WatchedEvent

from zkconsumer.commits import CommitEntry, CommitOutcome
from zkconsumer.consumer.acks import ProcessedOffsets
from zkconsumer.consumer.seeking import GroupSeeks
from zkconsumer.errors import MalformedZnodeError
from zkconsumer.fetch.handoff import ChunkQueue, PartitionTopicInfo
from zkconsumer.offsets.committer import OffsetCommitter
from zkconsumer.structs import TopicPartition
from zkconsumer.zookeeper import seek_nodes

from ..zookeeper.test_path_watch import FakeKazoo

PATH = "/consumers/g/seek"


class FakeZk:
    """The nodes under the seek path, as a dict; ``raw``: the kazoo client the watch uses (the test
    answers its reads), ``gets``: the synchronous reads (the rebalancer thread's)."""

    def __init__(self) -> None:
        self.nodes: Dict[str, bytes] = {}
        self.raw = FakeKazoo()
        self.gets = 0
        self.signals: List[str] = []

    def answer_watch(self) -> None:
        """The watch's latest read is answered with what the node holds now."""
        pending = self.raw.reads[-1][0]
        if PATH in self.nodes:
            pending.answer((self.nodes[PATH], SimpleNamespace(version=0, cversion=0)))
        else:
            pending.fail(NoNodeError())
            if self.raw.exists:
                self.raw.exists[-1][0].answer(None)

    def fire_watch(self) -> None:
        """ZooKeeper fires the watch the latest read set; the read it causes is answered."""
        self.raw.reads[-1][1](WatchedEvent(EventType.CHANGED, KeeperState.CONNECTED, PATH))
        self.answer_watch()

    def get(self, path: str):
        self.gets += 1
        if path not in self.nodes:
            raise NoNodeError(path)
        return self.nodes[path], None

    def get_children(self, path: str) -> List[str]:
        if path not in self.nodes:
            raise NoNodeError(path)
        return [p[len(path) + 1:] for p in self.nodes if p.startswith(path + "/")]

    def create(self, path: str, value: bytes = b"", acl=None) -> None:
        parent = path.rsplit("/", 1)[0]
        if parent not in self.nodes:
            raise NoNodeError(parent)
        if path in self.nodes:
            raise NodeExistsError(path)
        self.nodes[path] = value


class FakeStorage:
    name = "zookeeper"
    rewrites_unchanged = False

    def __init__(self, fenced: Set[TopicPartition] = frozenset()) -> None:
        self.written: List[Dict[TopicPartition, int]] = []
        self.fenced = set(fenced)

    def write(self, entries: Sequence[CommitEntry], generation=None) -> CommitOutcome:
        self.written.append({e.tp: e.offset for e in entries if e.tp not in self.fenced})
        return CommitOutcome(committed=[e.tp for e in entries if e.tp not in self.fenced],
                             fenced=[e.tp for e in entries if e.tp in self.fenced])

    def out_of_sync(self) -> Set[TopicPartition]:
        return set()


class FakePauses:
    def __init__(self) -> None:
        self.moved: List[List[TopicPartition]] = []

    def reposition(self, infos, move) -> None:
        self.moved.append(sorted((i.topic, i.partition) for i in infos))
        move()


def info(partition: int, offset: int) -> PartitionTopicInfo:
    return PartitionTopicInfo("t", partition, ChunkQueue(4), offset, 1024)


def setup(offsets: Dict[TopicPartition, int], acked: Sequence[TopicPartition] = (), fenced=frozenset(),
          processed: Optional[ProcessedOffsets] = None):
    zk = FakeZk()
    request = seek_nodes.SeekRequest("ab12", offsets, "100")
    zk.nodes[PATH] = seek_nodes.encode_request(request)
    for tp in acked:
        zk.nodes[f"{PATH}/{seek_nodes.ack_name('ab12', tp)}"] = b"{}"
    storage = FakeStorage(fenced)
    committer = OffsetCommitter(SimpleNamespace(group="g", client=SimpleNamespace(remaining=lambda: None)),
                                storage)  # type: ignore[arg-type]
    pauses = FakePauses()
    seeks = GroupSeeks(zk, "/consumers/g", committer, pauses, processed)  # type: ignore[arg-type]
    seeks.start(lambda: zk.signals.append("seek"))
    zk.answer_watch()
    assert zk.signals == ["seek"]  # the watch's first read found the request
    return seeks, zk, storage, pauses, committer


def acks_of(zk: FakeZk) -> List[str]:
    return sorted(p.rsplit("/", 1)[1] for p in zk.nodes if p.startswith(PATH + "/"))


def test_owned_unacknowledged_partitions_move_commit_and_acknowledge() -> None:
    seeks, zk, storage, pauses, committer = setup({("t", 0): 100, ("t", 1): 100, ("t", 2): 100}, acked=[("t", 2)])
    a, b, c = info(0, 40), info(1, 250), info(2, 70)
    committer.checkpoint("t", 0, 100)  # the member believes the store holds it: it is written all the same
    lost: List[List[TopicPartition]] = []
    assert seeks.apply([(a, "g_m-0"), (b, "g_m-0"), (c, "g_m-0")], lost.append) is False
    assert pauses.moved == [[("t", 0), ("t", 1)]]  # t-2 was acknowledged (by whoever owned it): left alone
    assert (a.consumed_offset, a.fetched_offset, b.consumed_offset, b.fetched_offset) == (100, 100, 100, 100)
    assert c.consumed_offset == 70
    assert storage.written == [{("t", 0): 100, ("t", 1): 100}]
    assert acks_of(zk) == ["ab12:t:0", "ab12:t:1", "ab12:t:2"]
    assert lost == []
    # Applied once: another signal changes nothing (nothing moves twice, nothing is rewritten).
    assert seeks.apply([(a, "g_m-0"), (b, "g_m-0"), (c, "g_m-0")], lost.append) is False
    assert pauses.moved == [[("t", 0), ("t", 1)]] and len(storage.written) == 1


def test_a_fenced_partition_is_given_up_and_not_acknowledged() -> None:
    seeks, zk, storage, _, _ = setup({("t", 0): 100, ("t", 1): 100}, fenced={("t", 1)})
    lost: List[List[TopicPartition]] = []
    seeks.apply([(info(0, 40), "g_m-0"), (info(1, 40), "g_m-0")], lost.append)
    assert lost == [[("t", 1)]]
    assert acks_of(zk) == ["ab12:t:0"]


def test_a_claim_during_a_pending_seek_starts_from_the_target_and_is_not_moved_again() -> None:
    seeks, zk, storage, pauses, _ = setup({("t", 0): 100, ("t", 1): 100, ("t", 2): 100}, acked=[("t", 1)])
    read = seeks.read_offsets(lambda tps: {tp: 30 for tp in tps})
    found = read([("t", 0), ("t", 1), ("t", 3)])
    assert found == {("t", 0): 100, ("t", 1): 30, ("t", 3): 30}  # acknowledged or not in the request: committed
    claimed = info(0, found[("t", 0)])
    claimed.consumed_offset = 130  # delivered from the target since the claim
    seeks.apply([(claimed, "g_m-1")], lambda lost: None)
    assert pauses.moved == []  # not moved back to the target
    assert storage.written == [{("t", 0): 130}]  # its position (past the target) committed
    assert acks_of(zk) == ["ab12:t:0", "ab12:t:1"]


def test_no_request_no_zookeeper_reads_and_a_finished_request_changes_nothing() -> None:
    seeks, zk, storage, pauses, _ = setup({("t", 0): 100})
    del zk.nodes[PATH]  # finished (the command removed it) before the watch said so
    assert seeks.read_offsets(lambda tps: {tp: 7 for tp in tps})([("t", 0)]) == {("t", 0): 7}
    assert seeks.apply([(info(0, 40), "g_m-0")], lambda lost: None) is False
    assert pauses.moved == [] and storage.written == []
    zk.fire_watch()  # the watch sees the deletion
    zk.get = None  # type: ignore[assignment]  # any read would fail
    assert seeks.apply([(info(0, 40), "g_m-0")], lambda lost: None) is False


def test_a_malformed_request_is_ignored() -> None:
    seeks, zk, _, pauses, _ = setup({("t", 0): 100})
    zk.nodes[PATH] = b"not json"
    assert seeks.read_offsets(lambda tps: {tp: 7 for tp in tps})([("t", 0)]) == {("t", 0): 7}
    assert seeks.apply([(info(0, 40), "g_m-0")], lambda lost: None) is False
    assert pauses.moved == []
    with pytest.raises(MalformedZnodeError):
        seek_nodes.decode_request(PATH, b'{"id": "ab", "offsets": {"t": {"0": -1}}}')


@pytest.mark.parametrize("target", [100, 10])  # forward and backward
def test_processed_only_acks_of_the_old_position_are_ignored_after_the_move(target: int) -> None:
    processed = ProcessedOffsets()
    seeks, _, storage, _, _ = setup({("t", 0): target}, processed=processed)
    moving = info(0, 40)
    processed.note_chunk(moving, [(o, None, b"") for o in range(40, 50)])
    moving.consumed_offset = 45  # 40..44 handed out, not acked
    seeks.apply([(moving, "g_m-0")], lambda lost: None)
    assert storage.written == [{("t", 0): target}]  # not held back at the first unacked old offset (40)
    assert processed.ack("t", 0, 42) is False  # an ack of the old position: ignored
    assert moving.commit_position == target


def test_seek_nodes_round_trip() -> None:
    request = seek_nodes.SeekRequest("ab12", {("t", 0): 5, ("u.v", 3): 9}, "latest")
    assert seek_nodes.decode_request(PATH, seek_nodes.encode_request(request)) == request
    assert seek_nodes.parse_ack_name(seek_nodes.ack_name("ab12", ("my-topic.x", 7))) == ("ab12", ("my-topic.x", 7))
    assert seek_nodes.parse_ack_name("something-else") is None


def test_before_the_watch_first_answers_a_claim_reads_the_request_itself() -> None:
    """The watch's read is sent at start() but answered on kazoo's completion thread, maybe after the
    rebalancer's first claim: that claim reads the node itself, then (no request) nothing does."""
    zk = FakeZk()
    zk.nodes[PATH] = seek_nodes.encode_request(seek_nodes.SeekRequest("ab12", {("t", 0): 100}, "100"))
    committer = OffsetCommitter(SimpleNamespace(group="g", client=SimpleNamespace(remaining=lambda: None)),
                                FakeStorage())  # type: ignore[arg-type]
    seeks = GroupSeeks(zk, "/consumers/g", committer, FakePauses(), None)  # type: ignore[arg-type]
    seeks.start(lambda: zk.signals.append("seek"))
    read = seeks.read_offsets(lambda tps: {tp: 7 for tp in tps})
    assert read([("t", 0)]) == {("t", 0): 100} and zk.gets == 1  # started from the target
    zk.answer_watch()
    assert zk.signals == ["seek"]  # then acknowledged after the rebalance (apply)
    del zk.nodes[PATH]
    zk.fire_watch()
    gets = zk.gets
    assert read([("t", 0)]) == {("t", 0): 7} and zk.gets == gets  # no request: no read of its own


def test_changes_and_a_new_session_signal_while_a_request_is_there() -> None:
    seeks, zk, _, _, _ = setup({("t", 0): 100})
    zk.nodes[PATH] = seek_nodes.encode_request(seek_nodes.SeekRequest("cd34", {("t", 0): 5}, "5"))
    zk.fire_watch()
    assert zk.signals == ["seek", "seek"]
    zk.raw.state(KazooState.SUSPENDED)  # a reconnection to the same session, nothing changed: no signal
    zk.raw.state(KazooState.CONNECTED)
    zk.answer_watch()
    assert zk.signals == ["seek", "seek"]
    zk.raw.state(KazooState.LOST)  # a new session: the request is looked at again
    zk.raw.state(KazooState.CONNECTED)
    zk.answer_watch()
    assert zk.signals == ["seek"] * 3


def test_a_member_back_on_zookeeper_membership_watches_again() -> None:
    """A switch to the coordinator stops the watch, a switch back starts it again (the same GroupSeeks):
    the new watch signals; a late callback of the stopped one does nothing."""
    seeks, zk, _, _, _ = setup({("t", 0): 100})
    seeks.stop()
    stopped_watch = zk.raw.reads[-1][1]
    assert zk.raw.listeners == []
    zk.nodes[PATH] = seek_nodes.encode_request(seek_nodes.SeekRequest("cd34", {("t", 0): 5}, "5"))
    stopped_watch(WatchedEvent(EventType.CHANGED, KeeperState.CONNECTED, PATH))
    assert zk.signals == ["seek"] and len(zk.raw.reads) == 1
    seeks.start(lambda: zk.signals.append("again"))
    zk.answer_watch()
    assert zk.signals == ["seek", "again"]
