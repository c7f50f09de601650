"""Where committed offsets live: ZooKeeper, Kafka, or both (``offsets.storage``, ``dual.commit.enabled``).

Kafka 0.8.2 let a ZooKeeper consumer keep its offsets in Kafka: commits go to
the group's coordinator broker (OffsetCommit), reads come from it
(OffsetFetch), and with ``dual.commit.enabled`` every offset Kafka accepted is
also written to ZooKeeper, while a read takes the larger of the two. That is
the migration path: a group moves its offsets into Kafka without reprocessing
or skipping anything, and can move back.

Three storages share one small interface (:class:`~zkconsumer.commits.OffsetStorage`); this module
holds the Kafka and the dual one, which know nothing of ZooKeeper. The ZooKeeper one is
:class:`~zkconsumer.zookeeper.offset_storage.ZooKeeperOffsetStorage`, and
:func:`~zkconsumer.consumer.offset_stores.make_offset_storage` builds what a configuration asks for:

=========================  =====================================================================
storage                    behaviour
=========================  =====================================================================
``ZooKeeperOffsetStorage``       ``/consumers/<g>/offsets/<t>/<p>``; *fenced* under ZooKeeper
                           membership (written only while this session owns the partition, one
                           multi-operation), plain writes under coordinator membership
:class:`KafkaOffsetStorage`      OffsetCommit/OffsetFetch to the coordinator (found with a
                           GroupCoordinator request, cached, found again when it moves).
                           Under ZooKeeper membership: OffsetCommit v1, generation -1, member
                           ``""`` (what 0.8.2 sends), each partition first checked to be owned
                           by us in ZooKeeper. Under coordinator membership: OffsetCommit v2
                           with generation and member id, fenced by the coordinator
:class:`DualOffsetStorage`       commit to Kafka, then to ZooKeeper what Kafka accepted; read
                           both and take the larger (``None`` only if both have none)
=========================  =====================================================================

Retries (:class:`KafkaOffsetStorage`): at most ``1 + offsets.commit.max.retries``
attempts, ``offsets.channel.backoff.ms`` apart; the coordinator is looked up
again after NOT_COORDINATOR_FOR_GROUP, GROUP_COORDINATOR_NOT_AVAILABLE or a
connection failure; GROUP_LOAD_IN_PROGRESS is waited out. Unlike Kafka's
consumer, which logs a failed commit and carries on, a commit that still fails
is reported (:class:`OffsetStorageError`), and a read that still fails raises,
so the rebalancer retries its attempt instead of starting from a wrong offset.

Unchanged offsets: ZooKeeper is written only when an offset moved (KAFKA-987:
rewriting every offset every interval was most of a large group's ZooKeeper
write load). Kafka is sent every owned offset at every commit, as Kafka's own
consumer does: a 0.9 broker deletes a committed offset ``offsets.retention.minutes``
(24 h by default) after its last commit, whether or not the group is alive, so
an idle group that stopped re-committing would find its offsets gone.
:attr:`OffsetStorage.rewrites_unchanged` tells the committer which applies;
each :class:`CommitEntry` says whether its offset ``changed``.

Keeping the stores in step: after a dual read that found the two stores
disagreeing, :meth:`OffsetStorage.out_of_sync` names those partitions and the
committer marks them changed at its next commit even if the application
consumed nothing. Without that, a group that was idle while dual commit was on
would have stale offsets in ZooKeeper when rolled back to it.
"""

from __future__ import annotations

import logging
import threading
from typing import (
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Union,
)

from ..commits import NO_GENERATION, CommitEntry, CommitOutcome, Generation, OffsetStorage
from ..errors import BrokerError, OffsetStorageError, ZkConsumerError
from ..structs import TopicPartition
from ..wire.broker_errors import error_for_code
from ..wire.group_protocol import (
    COORDINATOR_MOVED_CODES,
    GROUP_LOAD_IN_PROGRESS,
    MEMBERSHIP_LOST_CODES,
    OffsetCommitEntry,
    OffsetCommitRequestV1,
    OffsetCommitRequestV2,
    OffsetFetchRequest,
    error_name,
)
from .channel import Coordinator, CoordinatorChannel

__all__ = ["DualOffsetStorage", "KafkaOffsetStorage"]

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- Kafka


#: Per-partition read errors worth another attempt (the coordinator moved or is loading the group).
_READ_RETRY_CODES = COORDINATOR_MOVED_CODES | {GROUP_LOAD_IN_PROGRESS}


class KafkaOffsetStorage:
    """Offsets in Kafka's ``__consumer_offsets`` through the group's coordinator.

    ``owns(topic, partition, thread_id)``, given under ZooKeeper membership,
    is checked before each partition is committed (Kafka's own consumer does
    not check; a member that lost a partition would otherwise overwrite the
    new owner's offset). The Kafka write cannot join a ZooKeeper transaction,
    so a partition lost between the check and the write is not caught; the
    window is one round trip instead of Kafka's whole rebalance. ``session()``
    (the ZooKeeper session the checks read under) pins them to one session:
    if it changed while they ran, every partition is fenced.

    A ZooKeeper-membership commit (generation -1) refused with UNKNOWN_MEMBER_ID
    or ILLEGAL_GENERATION means the broker's coordinator manages the group
    (members with ``group.membership=kafka`` are running): reported as a
    non-retriable :class:`OffsetStorageError`, never overwritten.
    """

    name = "kafka"
    rewrites_unchanged = True

    def __init__(self, channel: "CoordinatorChannel", group_id: str, *, max_retries: int, backoff_ms: int,
                 owns: Optional[Callable[[str, int, str], bool]] = None,
                 session: Optional[Callable[[], Optional[int]]] = None) -> None:
        self._channel = channel
        self._group_id = group_id
        self._attempts = 1 + max(0, max_retries)
        self._backoff_s = backoff_ms / 1000.0
        self._owns = owns
        self._session = session
        self._closed = threading.Event()

    @property
    def coordinator(self) -> Optional["Coordinator"]:
        """The coordinator broker last used, or ``None`` (none needed yet, or it moved)."""
        return self._channel.coordinator

    # ------------------------------------------------------------------ read

    def read(self, partitions: Iterable[TopicPartition]) -> Dict[TopicPartition, Optional[int]]:
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        last: Optional[BaseException] = None
        for attempt in range(self._attempts):
            if attempt:
                self._backoff()
            try:
                response = self._channel.send(OffsetFetchRequest(self._group_id, wanted))
            except BrokerError as exc:
                if not exc.retriable:
                    raise
                last = exc
                continue
            codes = sorted({p.error_code for p in response.partitions if p.error_code})
            if not codes:
                found = {(p.topic, p.partition): (p.offset if p.offset >= 0 else None) for p in response.partitions}
                return {tp: found.get(tp) for tp in wanted}
            last = error_for_code(codes[0], f"fetching offsets of group {self._group_id}")
            if set(codes) & COORDINATOR_MOVED_CODES:
                self._channel.invalidate(error_name(codes[0]))
            if not set(codes) <= _READ_RETRY_CODES:
                raise OffsetStorageError(f"cannot fetch the offsets of group {self._group_id} from Kafka: {last}",
                                         retriable=False)
        raise OffsetStorageError(
            f"cannot fetch the offsets of group {self._group_id} from Kafka after {self._attempts} attempts "
            f"(offsets.commit.max.retries={self._attempts - 1}): {last}", retriable=True)

    # ------------------------------------------------------------------ write

    def write(self, entries: Sequence[CommitEntry], generation: Generation = NO_GENERATION) -> CommitOutcome:
        outcome = CommitOutcome()
        pending: Dict[TopicPartition, CommitEntry] = {}
        checked = not generation.managed and self._owns is not None
        pinned = self._session() if checked and self._session is not None else None
        for entry in entries:
            if checked and self._owns is not None and not self._owns(entry.topic, entry.partition, entry.owner):
                outcome.fenced.append(entry.tp)
            else:
                pending[entry.tp] = entry
        if checked and self._session is not None and (pinned is None or self._session() != pinned):
            # The checks read owner nodes one by one, each retried across reconnections: the session
            # changed among them (expired, a new one), so what the earlier reads found proves nothing
            # now; another member may have claimed the partition and read its offset since (found by
            # the simulator: switch schedule seed 1483, 4.4 s between a check and the write).
            outcome.fenced.extend(sorted(pending))
            pending.clear()
        last: Optional[BaseException] = None
        for attempt in range(self._attempts):
            if not pending:
                return outcome
            if attempt and not self._backoff():
                break
            try:
                response = self._channel.send(self._commit_request(list(pending.values()), generation))
            except ZkConsumerError as exc:  # a broker, or ZooKeeper listing the brokers
                last = exc
                if not exc.retriable:
                    break
                continue
            last = self._apply(response.errors(), pending, generation, outcome)
            if outcome.error is not None:
                return outcome
        if pending:
            outcome.error = OffsetStorageError(
                f"{len(pending)} offsets of group {self._group_id} not committed to Kafka after {attempt + 1} "
                f"attempts (offsets.commit.max.retries={self._attempts - 1}): {last}",
                retriable=last is None or bool(getattr(last, "retriable", False)), fenced=outcome.fenced)
        return outcome

    def _commit_request(self, entries: List[CommitEntry],
                        generation: Generation) -> Union[OffsetCommitRequestV1, OffsetCommitRequestV2]:
        offsets = [OffsetCommitEntry(e.topic, e.partition, e.offset) for e in entries]
        if generation.managed:
            return OffsetCommitRequestV2(self._group_id, generation.generation_id, generation.member_id, offsets)
        return OffsetCommitRequestV1(self._group_id, offsets)

    def _apply(self, codes: Mapping[TopicPartition, int], pending: Dict[TopicPartition, CommitEntry],
               generation: Generation, outcome: CommitOutcome) -> Optional[BaseException]:
        """Sort one response's per-partition codes into ``outcome``; return the error to retry on."""
        retry_on: Optional[BaseException] = None
        for tp in list(pending):
            code = codes.get(tp)
            if code is None:
                continue  # missing from the response: send again
            if code == 0:
                outcome.committed.append(tp)
                del pending[tp]
            elif code in MEMBERSHIP_LOST_CODES and generation.managed:
                outcome.fenced.append(tp)
                del pending[tp]
            elif code in MEMBERSHIP_LOST_CODES:
                outcome.error = OffsetStorageError(
                    f"Kafka refused a commit of ZooKeeper-managed group {self._group_id} ({error_name(code)}): the "
                    "broker's group coordinator manages this group, so coordinator members are running "
                    "(group.membership=kafka, or Kafka's new consumers: the Java KafkaConsumer, kafka-python, "
                    "confluent-kafka); commits without a generation (ZooKeeper membership, Spark's commits) are "
                    "refused until they stop (see the documentation's page "
                    "Migration from Kafka's consumer)",
                    retriable=False, fenced=outcome.fenced)
                return None
            else:
                error = error_for_code(code, f"committing offsets of group {self._group_id}", tp[0], tp[1])
                if code in COORDINATOR_MOVED_CODES:
                    self._channel.invalidate(error_name(code))
                elif not error.retriable:
                    outcome.error = OffsetStorageError(str(error), retriable=False, fenced=outcome.fenced)
                    return None
                retry_on = error
        return retry_on

    # ------------------------------------------------------------------ misc

    def _backoff(self) -> bool:
        """Wait ``offsets.channel.backoff.ms``; ``False`` if closed meanwhile."""
        return not self._closed.wait(self._backoff_s)

    def out_of_sync(self) -> Set[TopicPartition]:
        return set()

    def close(self) -> None:
        self._closed.set()
        self._channel.close()


# --------------------------------------------------------------------------- both


class DualOffsetStorage:
    """``dual.commit.enabled``: Kafka first, then ZooKeeper for what Kafka accepted; reads take the larger.

    >>> DualOffsetStorage.merge(5, None), DualOffsetStorage.merge(None, None), DualOffsetStorage.merge(7, 9)
    (5, None, 9)
    """

    name = "kafka+zookeeper"
    rewrites_unchanged = True

    def __init__(self, kafka: OffsetStorage, zookeeper: OffsetStorage) -> None:
        self._kafka = kafka
        self._zookeeper = zookeeper
        self._lock = threading.Lock()
        self._diverged: Set[TopicPartition] = set()

    @staticmethod
    def merge(kafka: Optional[int], zookeeper: Optional[int]) -> Optional[int]:
        """The larger valid offset of the two; ``None`` only if neither store has one.

        Negative offsets (``-1`` written by some tools for "none") lose to any
        valid one; if neither is valid, ZooKeeper's value is kept as it is.
        """
        valid = [v for v in (kafka, zookeeper) if v is not None and v >= 0]
        if valid:
            return max(valid)
        return zookeeper if zookeeper is not None else kafka

    def read(self, partitions: Iterable[TopicPartition]) -> Dict[TopicPartition, Optional[int]]:
        wanted = list(partitions)
        in_kafka = self._kafka.read(wanted)
        in_zookeeper = self._zookeeper.read(wanted)
        merged: Dict[TopicPartition, Optional[int]] = {}
        diverged: Set[TopicPartition] = set()
        for tp in wanted:
            k, z = in_kafka.get(tp), in_zookeeper.get(tp)
            merged[tp] = self.merge(k, z)
            if k != z and merged[tp] is not None:
                diverged.add(tp)
        if diverged:
            log.info("offsets in Kafka and ZooKeeper differ for %s; resuming from the larger",
                     ", ".join(f"{t}-{p} (kafka {in_kafka.get((t, p))}, zookeeper {in_zookeeper.get((t, p))})"
                               for t, p in sorted(diverged)))
        with self._lock:
            self._diverged.difference_update(wanted)
            self._diverged.update(diverged)
        return merged

    def write(self, entries: Sequence[CommitEntry], generation: Generation = NO_GENERATION) -> CommitOutcome:
        first = self._kafka.write(entries, generation)
        accepted = set(first.committed)
        second = self._zookeeper.write([e for e in entries if e.tp in accepted], generation)
        with self._lock:
            self._diverged.difference_update(second.committed)
        error = first.error or second.error
        fenced = first.fenced + second.fenced
        if isinstance(error, OffsetStorageError):
            error.fenced = list(fenced)
        return CommitOutcome(committed=second.committed, fenced=fenced, error=error)

    def out_of_sync(self) -> Set[TopicPartition]:
        with self._lock:
            return set(self._diverged)

    def close(self) -> None:
        try:
            self._kafka.close()
        finally:
            self._zookeeper.close()
