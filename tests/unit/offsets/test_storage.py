"""Offset storages and the committer over them, against in-memory fakes of the coordinator and ZooKeeper."""

from __future__ import annotations

import threading
from collections import deque
from types import SimpleNamespace
from typing import Deque, Dict, List, Optional, Tuple

import pytest

from zkconsumer.commits import NO_GENERATION, CommitEntry, Generation
from zkconsumer.config import ConsumerConfig
from zkconsumer.errors import BrokerUnavailableError, ConfigurationError, OffsetStorageError, ZooKeeperUnavailableError
from zkconsumer.fetch.handoff import ChunkQueue, PartitionTopicInfo
from zkconsumer.offsets.committer import OffsetCommitter, checked_offsets
from zkconsumer.offsets.storage import DualOffsetStorage, KafkaOffsetStorage
from zkconsumer.wire import group_protocol as g
from zkconsumer.zookeeper.offset_nodes import MAX_COMMIT_BATCH
from zkconsumer.zookeeper.offset_storage import ZooKeeperOffsetStorage

TP = Tuple[str, int]


class FakeChannel:
    """A coordinator: stores commits, answers fetches; ``script`` injects per-request outcomes."""

    def __init__(self) -> None:
        self.offsets: Dict[TP, int] = {}
        self.requests: List[object] = []
        self.script: Deque[object] = deque()  # an exception, an int (error code for every partition), or None
        self.invalidations = 0
        self.closed = False

    def send(self, request):  # type: ignore[no-untyped-def]
        self.requests.append(request)
        action = self.script.popleft() if self.script else None
        if isinstance(action, BaseException):
            raise action
        code = action or 0
        if isinstance(request, (g.OffsetCommitRequestV1, g.OffsetCommitRequestV2)):
            if code == 0:
                for e in request.offsets:
                    self.offsets[(e.topic, e.partition)] = e.offset
            return g.OffsetCommitResponse(tuple(g.OffsetCommitPartitionResponse(e.topic, e.partition, code)
                                                for e in request.offsets))
        assert isinstance(request, g.OffsetFetchRequest)
        return g.OffsetFetchResponse(tuple(
            g.OffsetFetchPartitionResponse(t, p, self.offsets.get((t, p), -1) if code == 0 else -1, "", code)
            for t, p in request.partitions))

    def invalidate(self, reason: str = "") -> None:
        self.invalidations += 1

    def close(self) -> None:
        self.closed = True


class FakeGroup:
    """The GroupClient surface offset storages use."""

    group = "grp"
    client = SimpleNamespace(remaining=lambda: None)  # no ZooKeeper deadline (BoundedZooKeeper.remaining)
    session_id = 1  # the ZooKeeper session: fenced writes are fenced to the one they began on

    def __init__(self) -> None:
        self.offsets: Dict[TP, int] = {}
        self.owners: Dict[TP, str] = {}
        self.fail_writes = False
        self.writes = 0

    def read_offsets(self, tps):  # type: ignore[no-untyped-def]
        return {tp: self.offsets.get(tp) for tp in tps}

    def commit_offset(self, topic: str, partition: int, offset: int) -> None:
        if self.fail_writes:
            raise ZooKeeperUnavailableError("down")
        self.writes += 1
        self.offsets[(topic, partition)] = offset

    def commit_offset_if_owner(self, topic: str, partition: int, offset: int, owner: str,
                               session: object = None) -> bool:
        if self.owners.get((topic, partition)) != owner:
            return False
        self.commit_offset(topic, partition, offset)
        return True

    def commit_offsets_if_owner(self, entries: List[Tuple[str, int, int]], session: object = None) -> bool:
        """All or nothing, as GroupClient's one multi-operation: ``False`` if any partition is not owned."""
        if self.fail_writes or any((topic, partition) not in self.owners for topic, partition, _ in entries):
            return False
        for topic, partition, offset in entries:
            self.commit_offset(topic, partition, offset)
        return True

    def owns(self, topic: str, partition: int, owner: str) -> bool:
        return self.owners.get((topic, partition)) == owner


def kafka_storage(channel: FakeChannel, group: Optional[FakeGroup] = None, retries: int = 2) -> KafkaOffsetStorage:
    return KafkaOffsetStorage(channel, "grp", max_retries=retries, backoff_ms=0,  # type: ignore[arg-type]
                              owns=group.owns if group is not None else None)


def entries(*items: Tuple[str, int, int, str]) -> List[CommitEntry]:
    return [CommitEntry(*item) for item in items]


# --------------------------------------------------------------------------- Kafka


def test_zookeeper_membership_commits_v1_with_no_generation_after_checking_ownership() -> None:
    channel, group = FakeChannel(), FakeGroup()
    group.owners = {("t", 0): "me-0", ("t", 1): "other-0"}
    outcome = kafka_storage(channel, group).write(entries(("t", 0, 10, "me-0"), ("t", 1, 11, "me-0")))
    assert (outcome.committed, outcome.fenced, outcome.error) == ([("t", 0)], [("t", 1)], None)
    [request] = channel.requests
    assert isinstance(request, g.OffsetCommitRequestV1)
    assert (request.generation_id, request.member_id) == (-1, "")
    assert channel.offsets == {("t", 0): 10}


def test_owner_checks_that_span_a_new_zookeeper_session_fence_every_partition() -> None:
    # Simulator, switch schedule seed 1483: the check of t-0 ran on the old session, the checks after it on a
    # new one after the old expired (a peer had claimed t-0 and read its offset meanwhile); the batch was sent
    # with t-0's old position and moved the committed offset back.
    channel, group = FakeChannel(), FakeGroup()
    group.owners = {("t", 0): "me-0", ("t", 1): "me-0"}
    sessions = iter([1, 2])
    storage = KafkaOffsetStorage(channel, "grp", max_retries=0, backoff_ms=0,  # type: ignore[arg-type]
                                 owns=group.owns, session=lambda: next(sessions))
    outcome = storage.write(entries(("t", 0, 10, "me-0"), ("t", 1, 11, "me-0")))
    assert (outcome.committed, sorted(outcome.fenced), outcome.error) == ([], [("t", 0), ("t", 1)], None)
    assert channel.requests == [] and channel.offsets == {}
    same = KafkaOffsetStorage(channel, "grp", max_retries=0, backoff_ms=0,  # type: ignore[arg-type]
                              owns=group.owns, session=lambda: 7)
    assert same.write(entries(("t", 0, 10, "me-0"))).committed == [("t", 0)]


def test_coordinator_membership_commits_v2_fenced_by_generation() -> None:
    channel = FakeChannel()
    storage = kafka_storage(channel)
    outcome = storage.write(entries(("t", 0, 5, "m-0")), Generation(7, "m"))
    request = channel.requests[-1]
    assert isinstance(request, g.OffsetCommitRequestV2) and (request.generation_id, request.member_id) == (7, "m")
    assert outcome.committed == [("t", 0)]
    for code in (g.ILLEGAL_GENERATION, g.UNKNOWN_MEMBER, g.REBALANCE_IN_PROGRESS):
        channel.script.append(code)
        outcome = storage.write(entries(("t", 0, 6, "m-0")), Generation(7, "m"))
        assert (outcome.committed, outcome.fenced, outcome.error) == ([], [("t", 0)], None)
    assert channel.offsets == {("t", 0): 5}


def test_a_moved_coordinator_is_looked_up_again_and_the_commit_retried() -> None:
    channel = FakeChannel()
    channel.script.extend([g.NOT_COORDINATOR_FOR_GROUP, BrokerUnavailableError("gone"), None])
    outcome = kafka_storage(channel, retries=2).write(entries(("t", 0, 3, "x")))
    assert outcome.committed == [("t", 0)] and outcome.error is None
    assert channel.invalidations == 1 and len(channel.requests) == 3


def test_retries_are_bounded_by_offsets_commit_max_retries_and_reported() -> None:
    channel = FakeChannel()
    channel.script.extend([g.GROUP_COORDINATOR_NOT_AVAILABLE] * 10)
    outcome = kafka_storage(channel, retries=2).write(entries(("t", 0, 3, "x")))
    assert len(channel.requests) == 3  # 1 + offsets.commit.max.retries
    assert isinstance(outcome.error, OffsetStorageError) and outcome.error.retriable
    assert "offsets.commit.max.retries=2" in str(outcome.error)


def test_a_zookeeper_managed_commit_refused_for_a_coordinator_managed_group_is_not_retried() -> None:
    channel = FakeChannel()
    channel.script.append(g.UNKNOWN_MEMBER)
    outcome = kafka_storage(channel).write(entries(("t", 0, 3, "x")))
    assert isinstance(outcome.error, OffsetStorageError) and not outcome.error.retriable
    assert "group.membership=kafka" in str(outcome.error) and len(channel.requests) == 1


def test_fetch_maps_minus_one_to_none_and_waits_out_a_loading_coordinator() -> None:
    channel = FakeChannel()
    channel.offsets[("t", 0)] = 42
    channel.script.extend([g.GROUP_LOAD_IN_PROGRESS, None])
    assert kafka_storage(channel).read([("t", 0), ("t", 1)]) == {("t", 0): 42, ("t", 1): None}
    assert len(channel.requests) == 2


def test_fetch_that_keeps_failing_raises_a_retriable_error() -> None:
    channel = FakeChannel()
    channel.script.extend([BrokerUnavailableError("down")] * 5)
    with pytest.raises(OffsetStorageError) as raised:
        kafka_storage(channel, retries=1).read([("t", 0)])
    assert raised.value.retriable and len(channel.requests) == 2


def test_fetch_with_a_non_retriable_error_raises_at_once() -> None:
    channel = FakeChannel()
    channel.script.append(g.GROUP_AUTHORIZATION_FAILED)
    with pytest.raises(OffsetStorageError) as raised:
        kafka_storage(channel).read([("t", 0)])
    assert not raised.value.retriable and len(channel.requests) == 1


# --------------------------------------------------------------------------- ZooKeeper and dual


def test_zookeeper_storage_fenced_and_unfenced() -> None:
    group = FakeGroup()
    group.owners[("t", 0)] = "me-0"
    fenced = ZooKeeperOffsetStorage(group).write(entries(("t", 0, 1, "me-0"), ("t", 1, 1, "me-0")))  # type: ignore[arg-type]
    assert (fenced.committed, fenced.fenced) == ([("t", 0)], [("t", 1)])
    plain = ZooKeeperOffsetStorage(group, fenced=False).write(entries(("t", 1, 2, "m-0")))  # type: ignore[arg-type]
    assert plain.committed == [("t", 1)] and group.offsets == {("t", 0): 1, ("t", 1): 2}
    group.fail_writes = True
    failed = ZooKeeperOffsetStorage(group, fenced=False).write(entries(("t", 1, 3, "m-0")))  # type: ignore[arg-type]
    assert failed.committed == [] and isinstance(failed.error, ZooKeeperUnavailableError)


def test_dual_read_takes_the_larger_and_none_only_if_both_have_none() -> None:
    channel, group = FakeChannel(), FakeGroup()
    channel.offsets = {("t", 0): 10, ("t", 1): 3}
    group.offsets = {("t", 0): 7, ("t", 1): 5, ("t", 2): 4}
    dual = DualOffsetStorage(kafka_storage(channel), ZooKeeperOffsetStorage(group))  # type: ignore[arg-type]
    assert dual.read([("t", 0), ("t", 1), ("t", 2), ("t", 3)]) == {("t", 0): 10, ("t", 1): 5, ("t", 2): 4, ("t", 3): None}
    assert dual.out_of_sync() == {("t", 0), ("t", 1), ("t", 2)}


def test_dual_commit_writes_zookeeper_only_for_what_kafka_accepted() -> None:
    channel, group = FakeChannel(), FakeGroup()
    group.owners = {("t", 0): "me-0", ("t", 1): "me-0"}
    dual = DualOffsetStorage(kafka_storage(channel, group), ZooKeeperOffsetStorage(group))  # type: ignore[arg-type]
    channel.script.append(g.GROUP_COORDINATOR_NOT_AVAILABLE)  # first attempt fails, the retry works
    outcome = dual.write(entries(("t", 0, 8, "me-0"), ("t", 1, 9, "me-0")))
    assert sorted(outcome.committed) == [("t", 0), ("t", 1)] and outcome.error is None
    assert channel.offsets == group.offsets == {("t", 0): 8, ("t", 1): 9}
    channel.script.extend([g.GROUP_COORDINATOR_NOT_AVAILABLE] * 3)
    outcome = dual.write(entries(("t", 0, 20, "me-0")))
    assert outcome.committed == [] and outcome.error is not None
    assert group.offsets[("t", 0)] == 8  # ZooKeeper never runs ahead of Kafka


def test_the_committer_resyncs_stores_that_disagreed_even_when_nothing_was_consumed() -> None:
    channel, group = FakeChannel(), FakeGroup()
    group.owners = {("t", 0): "me-0"}
    channel.offsets = {("t", 0): 30}  # Kafka-only history: ZooKeeper is stale
    group.offsets = {("t", 0): 12}
    dual = DualOffsetStorage(kafka_storage(channel, group), ZooKeeperOffsetStorage(group))  # type: ignore[arg-type]
    committer = OffsetCommitter(group, dual)  # type: ignore[arg-type]
    found = committer.read_offsets([("t", 0)])
    assert found == {("t", 0): 30}
    committer.checkpoint("t", 0, 30)  # what the rebalancer does with what it read
    info = PartitionTopicInfo("t", 0, ChunkQueue(1), 30, 1024)
    assert committer.commit([(info, "me-0")]) == []
    assert group.offsets == {("t", 0): 30} and group.writes == 1  # written although unchanged
    committer.commit([(info, "me-0")])
    assert group.writes == 1  # now in sync: ZooKeeper is not rewritten (KAFKA-987)


def test_kafka_is_sent_unchanged_offsets_again_so_they_never_expire() -> None:
    channel, group = FakeChannel(), FakeGroup()
    group.owners = {("t", 0): "me-0"}
    committer = OffsetCommitter(group, kafka_storage(channel, group))  # type: ignore[arg-type]
    info = PartitionTopicInfo("t", 0, ChunkQueue(1), 30, 1024)
    committer.commit([(info, "me-0")])
    committer.commit([(info, "me-0")])  # nothing consumed meanwhile
    commits = [r for r in channel.requests if isinstance(r, g.OffsetCommitRequestV1)]
    assert len(commits) == 2 and commits[1].offsets == commits[0].offsets


def test_zookeeper_offsets_that_did_not_move_are_not_rewritten() -> None:
    group = FakeGroup()
    group.owners = {("t", 0): "me-0"}
    committer = OffsetCommitter(group, ZooKeeperOffsetStorage(group))  # type: ignore[arg-type]
    info = PartitionTopicInfo("t", 0, ChunkQueue(1), 30, 1024)
    committer.commit([(info, "me-0")])
    committer.commit([(info, "me-0")])
    assert group.writes == 1


def test_the_committer_raises_storage_errors_carrying_fenced_partitions() -> None:
    channel, group = FakeChannel(), FakeGroup()
    group.owners = {("t", 0): "me-0"}
    committer = OffsetCommitter(group, kafka_storage(channel, group, retries=0))  # type: ignore[arg-type]
    channel.script.append(g.GROUP_COORDINATOR_NOT_AVAILABLE)
    infos = [(PartitionTopicInfo("t", p, ChunkQueue(1), 5, 1024), "me-0") for p in (0, 1)]
    with pytest.raises(OffsetStorageError) as raised:
        committer.commit(infos)
    assert raised.value.fenced == [("t", 1)]
    assert committer.commit(infos) == [("t", 1)]  # the retry commits partition 0
    assert committer.committed() == {("t", 0): 5}


def test_a_zookeeper_error_is_raised_as_it_is_when_nothing_was_fenced() -> None:
    group = FakeGroup()
    group.owners = {("t", 0): "me-0"}
    group.fail_writes = True
    committer = OffsetCommitter(group, ZooKeeperOffsetStorage(group))  # type: ignore[arg-type]
    with pytest.raises(ZooKeeperUnavailableError):
        committer.commit([(PartitionTopicInfo("t", 0, ChunkQueue(1), 5, 1024), "me-0")])


def test_a_commit_under_a_deadline_waits_for_a_commit_in_flight_no_longer_than_the_deadline() -> None:
    """shutdown()'s final commit runs under a ZooKeeper deadline; another thread's commit may hold the
    committer for many slow steps (the simulator, seed 3063038): the final commit gives up at its
    deadline (retriable, nothing written) instead of waiting for it, and ``committed()`` never waits."""
    group = FakeGroup()
    group.owners = {("t", 0): "me-0", ("t", 1): "me-0"}
    inner = ZooKeeperOffsetStorage(group)  # type: ignore[arg-type]
    entered, release = threading.Event(), threading.Event()

    class SlowStorage:
        name, rewrites_unchanged = inner.name, inner.rewrites_unchanged

        def out_of_sync(self) -> set:  # type: ignore[type-arg]
            return set()

        def write(self, entries, generation):  # type: ignore[no-untyped-def]
            entered.set()
            release.wait(10)
            return inner.write(entries, generation)

    committer = OffsetCommitter(group, SlowStorage())  # type: ignore[arg-type]
    first = threading.Thread(target=committer.commit, args=([(PartitionTopicInfo("t", 0, ChunkQueue(1), 5, 1024),
                                                               "me-0")],))
    first.start()
    try:
        assert entered.wait(10)
        group.client = SimpleNamespace(remaining=lambda: 0.0)  # the caller's deadline has come
        with pytest.raises(ZooKeeperUnavailableError):
            committer.commit([(PartitionTopicInfo("t", 1, ChunkQueue(1), 7, 1024), "me-0")])
        assert committer.committed() == {}  # answered while the first commit is still in flight
    finally:
        release.set()
        first.join(10)
    assert committer.committed() == {("t", 0): 5} and group.offsets == {("t", 0): 5}


def test_no_generation_is_the_zookeeper_membership_marker() -> None:
    assert NO_GENERATION == Generation(-1, "") and not NO_GENERATION.managed and Generation(0, "m").managed


# --------------------------------------------------------------------------- config


BASE = {"zookeeper.connect": "zk:2181", "group.id": "g"}


def test_membership_and_session_properties() -> None:
    config = ConsumerConfig(BASE, **{"group.membership": "kafka", "offsets.storage": "kafka",
                                     "zookeeper.session.timeout.ms": 9000})
    assert (config.group_membership, config.session_timeout_ms, config.heartbeat_interval_ms) == ("kafka", 9000, 3000)
    assert config.dual_commit_enabled  # Kafka's default with offsets.storage=kafka


def test_coordinator_membership_needs_kafka_offsets() -> None:
    with pytest.raises(ConfigurationError) as raised:
        ConsumerConfig(BASE, **{"group.membership": "kafka"})
    assert raised.value.property == "group.membership" and "offsets.storage=kafka" in str(raised.value)


def test_heartbeats_must_be_more_frequent_than_the_session_timeout() -> None:
    with pytest.raises(ConfigurationError) as raised:
        ConsumerConfig(BASE, **{"group.membership": "kafka", "offsets.storage": "kafka",
                                "session.timeout.ms": 6000, "heartbeat.interval.ms": 6000})
    assert raised.value.property == "heartbeat.interval.ms"


def test_zookeeper_storage_writes_a_large_commit_in_multi_operations_of_bounded_size() -> None:
    group = FakeGroup()
    batches: List[int] = []
    real = group.commit_offsets_if_owner
    group.commit_offsets_if_owner = lambda batch, session=None: batches.append(len(batch)) or real(batch)  # type: ignore[method-assign]
    many = [("t", p, 5, "me-0") for p in range(MAX_COMMIT_BATCH + 1)]
    for topic, partition, _, owner in many:
        group.owners[(topic, partition)] = owner
    outcome = ZooKeeperOffsetStorage(group).write(entries(*many))  # type: ignore[arg-type]
    assert batches == [MAX_COMMIT_BATCH, 1] and len(outcome.committed) == MAX_COMMIT_BATCH + 1
    assert outcome.fenced == [] and outcome.error is None and group.writes == MAX_COMMIT_BATCH + 1


def test_explicit_offsets_are_committed_as_given_and_only_for_the_partitions_named() -> None:
    group = FakeGroup()
    group.owners = {("t", 0): "me-0", ("t", 1): "me-0"}
    committer = OffsetCommitter(group, ZooKeeperOffsetStorage(group))  # type: ignore[arg-type]
    infos = [PartitionTopicInfo("t", p, ChunkQueue(1), 30, 1024) for p in (0, 1)]
    assert committer.commit([(info, "me-0") for info in infos], offsets={("t", 0): 12, ("t", 9): 5}) == []
    assert group.offsets == {("t", 0): 12}  # t-1 not named: left alone; t-9 not owned: not written
    committer.commit([(info, "me-0") for info in infos])  # the plain form: what was handed out
    assert group.offsets == {("t", 0): 30, ("t", 1): 30}


@pytest.mark.parametrize(("offsets", "says"), [
    ({("t", 0): -1}, "t-0 must be a whole number >= 0"),
    ({("t", 0): 1.5}, "t-0 must be a whole number >= 0"),
    ({("t", 0): True}, "t-0 must be a whole number >= 0"),
    ({"t": 3}, "'t' is not a (topic, partition) pair"),
    ({("t", -2): 3}, "is not a (topic, partition) pair"),
    ({("", 0): 3}, "is not a (topic, partition) pair"),
])
def test_explicit_offsets_that_are_not_positions_are_refused_naming_the_entry(offsets: dict, says: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        checked_offsets(offsets)
    assert says in str(raised.value) and "nothing was committed" in str(raised.value)
    assert checked_offsets({("t", 0): 0, ("u", 3): 7}) == {("t", 0): 0, ("u", 3): 7}
