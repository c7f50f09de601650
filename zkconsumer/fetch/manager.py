"""Fetching: Kafka's ConsumerFetcherManager, with its LeaderFinder and fetcher threads.


Threads and who owns what::

    start_connections(infos) ──▶ partitions without a leader ──▶ LeaderFinder (1 thread)
                                         ▲                           │ Metadata request to any live broker
                 hand back on error      │                           ▼
                 (NOT_LEADER, ...) ──────┴──── FetcherThread per (leader, fetcher id, connection)
                                                  │ Fetch at info.fetched_offset
                                                  ▼
                                       PartitionTopicInfo.offer ──▶ ChunkQueue ──▶ iterator
                                          │ queue full?                 │ room appeared
                                          ▼                             │ (room listener)
                                       parked chunk (1 per partition) ◀─┘

* The **LeaderFinder** sleeps on a condition while every partition has a
  fetcher. When some do not, it asks the live brokers (``brokers()``, tried in
  random order until one answers) for Metadata of their topics, gives every
  partition that has a leader to the fetcher thread of ``(leader, fetcher id,
  connection)`` (:func:`fetcher_id`, :func:`spread_over_connections`; starting it on demand), shuts down fetchers
  left without partitions, then waits ``refresh.leader.backoff.ms`` before its next pass.
* **Connections per fetcher** (``fetcher.connections``, default 3): Kafka's broker
  serves one request per connection at a time and a fetcher thread decodes a
  response before it sends its next request, so with one connection the broker
  waits while the response is decoded and the fetcher waits while the broker
  reads its log. Each fetcher's partitions on a broker are therefore shared out over
  several fetcher threads, each with its own connection and disjoint partitions: every
  contract below holds per thread unchanged (a partition belongs to one thread). The
  connections are shared among the brokers the member reads from, at least one each
  (:func:`connections_per_broker`: 3 on one broker, 2 each on two, 1 each on three or more),
  and a new partition takes the least loaded one (:func:`spread_over_connections`).
  Each connection may hold a decoded response at once (large for highly compressible
  compressed topics), which bounds the default; the documentation's *Performance* page has
  the measurements behind it.
* **Extra connections only while they pay**: a fetcher starts *narrow*, all its partitions on
  a broker fetched over connection 0. When a response of one of its threads carries, for some
  partition, at least half of ``fetch.message.max.bytes`` (:func:`large_response`: the
  partition has a backlog the fetch size cut), the fetcher goes *wide*: its partitions on that
  broker are spread over its :func:`connections_per_broker` connections
  (:func:`spread_over_connections`, threads started on demand). When none of its threads has
  had such a response for :data:`QUIET_S` seconds it goes narrow again: every partition back
  to connection 0; the emptied threads fetch nothing (no request, no CPU) until the next wide
  spell or until idle fetchers are stopped. A member following a live stream or idle thus
  sends one long-poll per ``fetch.wait.max.ms`` per broker, as Kafka's consumer does, and a
  catching-up member fetches over all its connections. A move is a removal and an add
  (as a rebalance's): the position is ``fetched_offset``, a parked chunk of a moved
  partition is dropped and fetched again, nothing is lost or delivered twice. A partition
  moved onto connection 0 waits for that connection's request in flight (at most
  ``fetch.wait.max.ms``) once.
* A **FetcherThread** fetches its partitions in one request from their
  ``fetched_offset``: every partition whose stream queue has room and that has
  no parked chunk (back-pressure per partition, below). Per partition: data is
  decoded and queued, or parked if the queue is full; OFFSET_OUT_OF_RANGE resets the
  position per ``auto.offset.reset``; a message over the fetch size or a corrupt
  message becomes an error chunk the iterator raises (once; the partition then
  stops fetching); any other error (NOT_LEADER_FOR_PARTITION,
  UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, ...) hands the partition
  back to the LeaderFinder; a connection failure hands back all of them.
* A partition whose position is negative (no committed offset) is first placed
  per ``auto.offset.reset`` (Kafka's ``PartitionTopicInfo.isOffsetInvalid``).

Fetcher threads (back-pressure per partition, memory bound) are described in
:mod:`zkconsumer.fetch.fetcher_thread`; the LeaderFinder in :mod:`zkconsumer.fetch.leader_finder`.

Exactly-once delivery across re-homing: ``info.fetched_offset`` is the only
fetch position; it advances only after a chunk is queued (not when parked), and a fetcher only
gives a partition back after it finished processing it, so the next fetcher
starts exactly where the previous one stopped. A partition's data is processed
(fetch result or parked chunk) under a per-partition lock that removal also
takes after flagging the partition: once removal returns, no chunk for that
partition can be queued any more.

Failures: expected ones (brokers down, metadata unavailable) are logged and
retried after the backoff. An unexpected exception in a thread is passed to
``on_error`` (the connector re-raises it to the application) and ends that
thread; its partitions stay with it until ``stop_connections``.

Lock order (outer first): ``_lifecycle`` > ``_fetchers_lock`` > ``_cond`` (manager
state) > a fetcher's ``_lock`` > a queue's lock. A fetcher thread never holds a
partition lock while taking a manager lock. Room listeners run with no queue
lock held and take only the fetcher's ``_lock``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ..assignors import java_string_hash
from ..errors import ConsumerShutdownError
from ..kerberos import broker_authenticator
from ..structs import Broker, TopicPartition
from ..threads import ShutdownableThread
from ..wire.connection import BrokerConnection
from ..wire.protocol import MetadataResponse
from ..wire.tls import broker_ssl_context
from .fetch_stats import FetchStats
from .fetcher_thread import FetcherKey, FetcherThread
from .handoff import ChunkQueue, PartitionTopicInfo
from .leader_finder import LeaderFinder, LeaderFinderHost
from .rounds import QUIET_S, large_response

__all__ = ["FetcherManager", "QUIET_S", "connections_per_broker", "fetcher_id", "large_response",
           "spread_over_connections"]

log = logging.getLogger(__name__)

#: A fetcher: ``(leader's broker id, fetcher id)``; each of its connections has a thread.
FetcherGroup = Tuple[int, int]
#: ``(host, port) -> BrokerConnection`` (not yet connected; it connects lazily).
ConnectionFactory = Callable[[str, int], BrokerConnection]

_INT32_MIN = -(1 << 31)

def fetcher_id(topic: str, partition: int, num_fetchers: int) -> int:
    """Which of a broker's ``num.consumer.fetchers`` threads fetches ``topic``/``partition``.

    Kafka's ``AbstractFetcherManager.getFetcherId``:
    ``Utils.abs(31 * topic.hashCode() + partition) % numFetchers`` in Java ``int``
    arithmetic (wrapping at 32 bits; ``Utils.abs(Integer.MIN_VALUE)`` is 0).

    >>> fetcher_id("events", 0, 2), fetcher_id("events", 1, 2)   # hashCode("events") = -1291329255
    (1, 0)
    """
    return _java_abs_hash(topic, partition) % num_fetchers


def connections_per_broker(connections: int, brokers: int) -> int:
    """How many of a fetcher's ``fetcher.connections`` go to each of the ``brokers`` it reads from.

    The connections are shared among the brokers, at least one each: a second request in
    flight is worth a thread while one broker serves a fetcher, but with several brokers
    their requests already overlap, and more threads only compete for the GIL and the
    cores. ``zkconsumer perf`` at 1000 B, 6 partitions on 3 brokers, 2 cores: one
    connection per broker 1.69-1.74M msgs/s, two per broker 1.51-1.55M.

    >>> [connections_per_broker(3, b) for b in (1, 2, 3, 4)]
    [3, 2, 1, 1]
    """
    return max(1, -(-connections // max(1, brokers)))


def spread_over_connections(new: Iterable[Tuple[FetcherGroup, TopicPartition]],
                            load: Dict[Tuple[FetcherGroup, int], int], connections: int) -> Dict[TopicPartition, int]:
    """Which of its fetcher's first ``connections`` connections fetches each new partition.

    ``new`` pairs each partition with its fetcher (``(leader id, fetcher id)``); ``load``
    counts the partitions each ``(fetcher, connection)`` already fetches, and is updated.
    Taken in sorted order, each partition goes to the least loaded connection of its
    fetcher (the lowest-numbered one on a tie). Partitions already fetched never move, so a
    rebalance or a leader move elsewhere leaves their connection, position and parked data
    alone. (A hash of the partition would not do: leaders placed round-robin over B brokers
    give one broker partitions ``p``, ``p + B``, ..., which with B connections all hash to
    the same one.)

    >>> spread_over_connections([((0, 0), ("t", p)) for p in (0, 3, 6)], {}, 3)
    {('t', 0): 0, ('t', 3): 1, ('t', 6): 2}
    >>> spread_over_connections([((0, 0), ("t", 9))], {((0, 0), 0): 1, ((0, 0), 1): 0}, 2)
    {('t', 9): 1}
    """
    out: Dict[TopicPartition, int] = {}
    for group, tp in sorted(new):
        connection = min(range(max(1, connections)), key=lambda c: (load.get((group, c), 0), c))
        load[(group, connection)] = load.get((group, connection), 0) + 1
        out[tp] = connection
    return out


def _java_abs_hash(topic: str, partition: int) -> int:
    """``Utils.abs(31 * topic.hashCode() + partition)`` in Java ``int`` arithmetic."""
    h = (31 * java_string_hash(topic) + partition) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return 0 if h == _INT32_MIN else abs(h)


class FetcherManager:
    """Runs the LeaderFinder and the fetcher threads for a set of owned partitions.

    Usage (by the rebalancer): ``start_connections(infos)`` after claiming
    partitions, ``stop_connections()`` before releasing them (and before clearing
    the queues), repeated any number of times; :meth:`stop` at the end.

    ``brokers()`` returns the live brokers (from ZooKeeper ``/brokers/ids``) to
    bootstrap metadata requests; it is called on every LeaderFinder pass and may
    raise (retried after the backoff). ``on_error(exc)`` receives unexpected
    exceptions from the background threads. ``sleep`` replaces the LeaderFinder's
    backoff wait (tests); by default that wait ends early when stopping.
    ``connection_factory(host, port)`` replaces :class:`BrokerConnection` (tests).
    While ``deliverable()`` is false (the connector's session lease lapsed),
    fetcher threads neither fetch nor queue; positions do not move, so nothing
    is skipped when it becomes true again.
    """

    def __init__(self, config: Any, brokers: Callable[[], Sequence["Broker"]],
                 on_error: Callable[[BaseException], None], *, sleep: Callable[[float], None] = time.sleep,
                 connection_factory: Optional[ConnectionFactory] = None,
                 deliverable: Callable[[], bool] = lambda: True) -> None:
        self._config = config
        self._brokers = brokers
        self._on_error = on_error
        self._sleep = sleep
        self._ssl_context = broker_ssl_context(config)
        self._authenticate = broker_authenticator(config)
        self._connection_factory = connection_factory
        self._deliverable = deliverable
        self._lifecycle = threading.RLock()
        self._fetchers_lock = threading.Lock()
        self._fetchers: Dict[FetcherKey, FetcherThread] = {}
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._partitions: Dict[TopicPartition, PartitionTopicInfo] = {}
        self._leaderless: Set[TopicPartition] = set()
        self._leaders: Dict[TopicPartition, int] = {}
        self._announced: Dict[TopicPartition, int] = {}  # last leader logged per partition (LeaderFinder only)
        self._leader_finder: Optional[LeaderFinder] = None
        #: What the application paused (:meth:`pause`): kept across stop/start, never fetched while here.
        self._paused: Set[TopicPartition] = set()
        self._paused_queues: Set[int] = set()  # ``id()`` of paused streams' queues
        self._shut_down = False
        self._generation = 0
        #: Fetchers whose partitions are spread over their connections (guarded by ``_fetchers_lock``).
        self._wide: Set[FetcherGroup] = set()
        #: Cumulative per-broker fetch counters of every fetcher thread this manager ran.
        self.fetch_stats = FetchStats()

    # ------------------------------------------------------------------ public

    def start_connections(self, infos: Iterable[PartitionTopicInfo]) -> None:
        """Begin fetching ``infos`` (each from its ``fetched_offset``); starts the LeaderFinder.

        May be called again without :meth:`stop_connections` to add partitions; a
        partition given again with a different info object is removed first.
        Raises ConsumerShutdownError after :meth:`stop`.
        """
        infos = list(infos)
        with self._lifecycle:
            if self._shut_down:
                raise ConsumerShutdownError("the fetcher manager was shut down")
            with self._fetchers_lock:
                with self._cond:
                    replaced = [tp for tp, info in self._by_tp(infos).items()
                                if tp in self._partitions and self._partitions[tp] is not info]
                for fetcher in self._fetchers.values():
                    fetcher.remove_partitions(replaced)
                with self._cond:
                    for tp, info in self._by_tp(infos).items():
                        if self._partitions.get(tp) is not info:
                            self._partitions[tp] = info
                            self._leaders.pop(tp, None)
                            if not self._is_paused(tp, info):
                                self._leaderless.add(tp)
                    self._cond.notify_all()
            if self._leader_finder is None:
                self._generation += 1
                self._leader_finder = LeaderFinder(
                    self._finder_host(), f"zkconsumer-leader-finder-{self._config.client_id}-{self._generation}")
                self._leader_finder.start()

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching ``tps`` (and forget them) while the others go on.

        Used by the rebalancer for partitions that move away: the others keep
        their fetcher, position and queued chunks. Returns when no chunk for
        ``tps`` can be queued any more; fetchers left without partitions are
        stopped and joined.
        """
        tps = set(tps)
        if not tps:
            return
        with self._lifecycle:
            with self._fetchers_lock:
                for fetcher in self._fetchers.values():
                    fetcher.remove_partitions(tps)
                with self._cond:
                    for tp in tps:
                        self._partitions.pop(tp, None)
                        self._leaders.pop(tp, None)
                        self._announced.pop(tp, None)
                    self._leaderless -= tps
            self._stop_idle_fetchers()

    def pause(self, tps: Iterable[TopicPartition] = (), queues: Iterable[ChunkQueue] = ()) -> List[PartitionTopicInfo]:
        """Stop fetching ``tps`` and every partition queued into ``queues`` (paused streams), until :meth:`resume`.

        Pauses outlive :meth:`stop_connections` and rebalances: a paused partition (or one
        of a paused stream) given again by :meth:`start_connections` is known but not
        fetched. Returns the infos of the paused partitions this manager holds, once no chunk
        of theirs can be queued any more (as :meth:`remove_partitions`); the caller sets their
        ``paused`` flag and drops what was queued (``consumer/pausing.py``). :meth:`resume`
        clears the flag before a partition can be fetched again.
        """
        tps, queue_ids = set(tps), {id(q) for q in queues}
        with self._lifecycle:
            with self._fetchers_lock:
                with self._cond:
                    self._paused |= tps
                    self._paused_queues |= queue_ids
                    held = {tp: info for tp, info in self._partitions.items()
                            if tp in tps or id(info.queue) in queue_ids}
                    self._leaderless -= set(held)
                    for tp in held:
                        self._leaders.pop(tp, None)
                for fetcher in self._fetchers.values():
                    fetcher.remove_partitions(held)
            self._stop_idle_fetchers()
        return list(held.values())

    def resume(self, tps: Iterable[TopicPartition] = (), queues: Iterable[ChunkQueue] = ()) -> List[PartitionTopicInfo]:
        """Undo :meth:`pause` for ``tps`` and ``queues``; fetching resumes from each ``fetched_offset``.

        A partition still paused another way (its stream, or itself) stays paused.
        Returns the infos that fetch again.
        """
        tps, queue_ids = set(tps), {id(q) for q in queues}
        with self._lifecycle:
            with self._cond:
                self._paused -= tps
                self._paused_queues -= queue_ids
                woken = {tp: info for tp, info in self._partitions.items()
                         if (tp in tps or id(info.queue) in queue_ids) and not self._is_paused(tp, info)
                         and tp not in self._leaders}
                for info in woken.values():
                    info.paused = False  # before it can be fetched: no chunk of it is dropped as paused
                self._leaderless |= set(woken)
                self._cond.notify_all()
        return list(woken.values())

    def forget_paused(self, tps: Iterable[TopicPartition]) -> None:
        """Drop partition pauses for good (the partitions left this member); stream pauses stay."""
        with self._cond:
            self._paused -= set(tps)

    def paused(self) -> Set[TopicPartition]:
        """The partitions paused one by one (not those paused through their stream)."""
        with self._cond:
            return set(self._paused)

    def _is_paused(self, tp: TopicPartition, info: PartitionTopicInfo) -> bool:
        """Caller holds ``_cond``."""
        return tp in self._paused or id(info.queue) in self._paused_queues

    def stop_connections(self) -> None:
        """Stop the LeaderFinder and every fetcher, join them all, forget every partition.

        After it returns no chunk is queued by this manager until the next
        :meth:`start_connections`. Parked chunks (waiting for room in a full
        queue) are dropped with their fetchers; their positions never moved past them.
        """
        with self._lifecycle:
            finder, self._leader_finder = self._leader_finder, None
            if finder is not None:
                finder.stop()
            with self._fetchers_lock:
                fetchers = list(self._fetchers.values())
                self._fetchers.clear()
            _stop_all(fetchers)
            with self._cond:
                self._partitions.clear()
                self._leaderless.clear()
                self._leaders.clear()

    def stop(self) -> None:
        """Stop everything (as :meth:`stop_connections`); idempotent; later starts raise."""
        with self._lifecycle:
            self._shut_down = True
            self.stop_connections()

    def metrics(self) -> Dict[str, Any]:
        """A snapshot for monitoring.

        ``partitions``: ``{"topic-partition": {...}}`` with ``fetched_offset``,
        ``consumed_offset``, ``high_watermark`` (``None`` until fetched),
        ``fetch_lag`` (high watermark - fetched offset), ``consumer_lag`` (high
        watermark - consumed offset), ``leader`` (broker id or ``None``),
        ``fetcher`` (thread name or ``None``), ``stalled`` (an error chunk was
        queued or parked), ``parked`` (a fetched chunk waits for room in its
        stream's queue: that stream is not being read fast enough) and ``paused``
        (by the application: :meth:`pause`).
        ``fetchers``: ``{thread name: {"broker", "fetcher_id", "connection", "partitions", "alive"}}``.
        ``partitions_without_leader``: how many wait for the LeaderFinder.
        ``brokers``: ``{broker_id: {"requests", "bytes", "messages", "held_back_waits", "deadline_cuts",
        "errors": {kind: n}}}``,
        cumulative since the manager was created (see :class:`FetchStats`).
        """
        with self._fetchers_lock:
            fetchers = dict(self._fetchers)
        held = {key: f.snapshot() for key, f in fetchers.items()}
        with self._cond:
            infos = dict(self._partitions)
            leaders = dict(self._leaders)
            leaderless = len(self._leaderless)
            paused = {tp for tp, info in infos.items() if self._is_paused(tp, info)}
        where: Dict[TopicPartition, Tuple[str, int, bool, bool]] = {}
        for key, snap in held.items():
            for tp, (_, hw, stalled, parked) in snap.items():
                where[tp] = (fetchers[key].name, hw, stalled, parked)
        partitions = {}
        for tp, info in sorted(infos.items()):
            name, hw, stalled, parked = where.get(tp, (None, -1, False, False))
            partitions[f"{tp[0]}-{tp[1]}"] = {
                "topic": tp[0], "partition": tp[1],
                "fetched_offset": info.fetched_offset, "consumed_offset": info.consumed_offset,
                "high_watermark": hw if hw >= 0 else None,
                "fetch_lag": max(0, hw - info.fetched_offset) if hw >= 0 and info.fetched_offset >= 0 else None,
                "consumer_lag": max(0, hw - info.consumed_offset) if hw >= 0 and info.consumed_offset >= 0 else None,
                "leader": leaders.get(tp), "fetcher": name, "stalled": stalled, "parked": parked,
                "paused": tp in paused,
            }
        return {
            "partitions": partitions,
            "fetchers": {f.name: {"broker": key.broker_id, "fetcher_id": key.fetcher_id, "connection": key.connection,
                                  "partitions": len(held[key]), "alive": f.is_alive()}
                         for key, f in fetchers.items()},
            "partitions_without_leader": leaderless,
            "brokers": self.fetch_stats.snapshot(),
        }

    # ------------------------------------------------------------------ used by the threads

    def _finder_host(self) -> LeaderFinderHost:
        """What the LeaderFinder may do with this manager (see :class:`LeaderFinderHost`)."""
        return LeaderFinderHost(
            wait_for_leaderless=self._wait_for_leaderless, assign_leaders=self._assign_leaders,
            stop_idle_fetchers=self._stop_idle_fetchers, backoff=self._backoff, report=self._report,
            brokers=self._brokers, connect=self._connect, wake=self._wake,
            backoff_ms=int(self._config.refresh_leader_backoff_ms))

    @staticmethod
    def _by_tp(infos: Iterable[PartitionTopicInfo]) -> Dict[TopicPartition, PartitionTopicInfo]:
        return {(info.topic, info.partition): info for info in infos}

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _report(self, exc: BaseException) -> None:
        try:
            self._on_error(exc)
        except Exception:  # noqa: BLE001 - a failing callback must not hide the original error
            log.exception("on_error callback failed")

    def _connect(self, host: str, port: int) -> BrokerConnection:
        if self._connection_factory is not None:
            return self._connection_factory(host, port)
        c = self._config
        # reuse_buffer: a fetcher thread decodes (copies) each response before its next request.
        return BrokerConnection(host, port, c.client_id, c.socket_timeout_ms, c.socket_receive_buffer_bytes,
                                self._ssl_context, reuse_buffer=True, authenticate=self._authenticate)

    def _wait_for_leaderless(self, finder: ShutdownableThread) -> Set[TopicPartition]:
        """Block until some partition lacks a leader; returns them (empty set when ``finder`` is stopping)."""
        with self._cond:
            while not self._leaderless and not finder.stopping:
                self._cond.wait()
            return set() if finder.stopping else set(self._leaderless)

    def _backoff(self, finder: ShutdownableThread) -> None:
        seconds = self._config.refresh_leader_backoff_ms / 1000.0
        if self._sleep is time.sleep:
            finder.wait(seconds)
        else:
            self._sleep(seconds)

    def _hand_back(self, infos: List[PartitionTopicInfo]) -> None:
        """A fetcher gave these up: find their leader again (unless they were replaced or dropped)."""
        with self._cond:
            for info in infos:
                tp = (info.topic, info.partition)
                if self._partitions.get(tp) is info:
                    self._leaders.pop(tp, None)
                    if not self._is_paused(tp, info):
                        self._leaderless.add(tp)
            self._cond.notify_all()

    def _assign_leaders(self, metadata: MetadataResponse, finder: ShutdownableThread) -> None:
        """Give every leaderless partition that has a live leader to its fetcher thread."""
        found: Dict[TopicPartition, FetcherKey] = {}  # connection 0 until spread below
        num = max(1, int(self._config.num_consumer_fetchers))
        for topic in metadata.topics:
            for pm in topic.partitions:
                leader = metadata.broker(pm.leader) if pm.leader >= 0 else None
                if leader is not None:
                    found[(topic.topic, pm.partition)] = FetcherKey(
                        leader.node_id, leader.host, leader.port, fetcher_id(topic.topic, pm.partition, num))
        with self._fetchers_lock:
            with self._cond:
                if finder.stopping:
                    return
                picked = {tp: (self._partitions[tp], found[tp]) for tp in self._leaderless if tp in found}
                self._leaderless.difference_update(picked)
                for tp, (_, key) in picked.items():
                    self._leaders[tp] = key.broker_id
                brokers = len(set(self._leaders.values()))
            load = {((k.broker_id, k.fetcher_id), k.connection): f.partition_count()
                    for k, f in self._fetchers.items() if f.is_alive()}
            slots: Dict[TopicPartition, int] = {}
            for wide in (False, True):
                slots.update(spread_over_connections(
                    (((key.broker_id, key.fetcher_id), tp) for tp, (_, key) in picked.items()
                     if ((key.broker_id, key.fetcher_id) in self._wide) == wide),
                    load, self._connections_per_broker(brokers) if wide else 1))
            chosen = {tp: (info, dataclasses.replace(key, connection=slots[tp])) for tp, (info, key) in picked.items()}
            groups: Dict[FetcherKey, List[PartitionTopicInfo]] = {}
            for _tp, (info, key) in sorted(chosen.items()):
                groups.setdefault(key, []).append(info)
            for key, infos in groups.items():
                self._fetcher_for(key).add_partitions(infos)
        if chosen:
            # While a dead leader is still in the metadata, the same assignment repeats
            # every backoff: log it at INFO only when it changes.
            moves = {tp: key.broker_id for tp, (_, key) in chosen.items()}
            level = logging.DEBUG if all(self._announced.get(tp) == b for tp, b in moves.items()) else logging.INFO
            self._announced.update(moves)
            log.log(level, "fetching %s", ", ".join(f"{t}-{p} from broker {b}" for (t, p), b in sorted(moves.items())))

    def _fetcher_for(self, key: FetcherKey) -> FetcherThread:
        """The fetcher thread for ``key``, started on demand (caller holds ``_fetchers_lock``)."""
        fetcher = self._fetchers.get(key)
        if fetcher is None or not fetcher.is_alive():  # a dead one already reported its error
            fetcher = FetcherThread(key, self._config, self._connect(key.host, key.port), self._hand_back,
                                    self._report, self._deliverable, self.fetch_stats, resize=self._resize)
            fetcher.wide = (key.broker_id, key.fetcher_id) in self._wide
            self._fetchers[key] = fetcher
            fetcher.start()
        return fetcher

    def _connections_per_broker(self, brokers: int) -> int:
        """A wide fetcher's connections to each of ``brokers`` brokers (``fetcher.connections`` shared out)."""
        return connections_per_broker(max(1, int(getattr(self._config, "fetcher_connections", 1))), brokers)

    def _resize(self, fetcher: FetcherThread, wide: bool) -> None:
        """``fetcher``'s thread, between requests, no lock held: make its fetcher wide (it had a large
        response) or narrow (if none of its threads had one for :data:`QUIET_S`); see the module docstring."""
        key = fetcher.key
        group = (key.broker_id, key.fetcher_id)
        with self._fetchers_lock:
            if self._fetchers.get(key) is not fetcher or self._shut_down:
                return  # stopped or replaced meanwhile
            members = {k: f for k, f in self._fetchers.items() if (k.broker_id, k.fetcher_id) == group}
            now = time.monotonic()
            if not wide and any(now - f.last_large < QUIET_S for f in members.values()):
                return
            (self._wide.add if wide else self._wide.discard)(group)
            for f in members.values():
                f.wide = wide
            with self._cond:
                brokers = len(set(self._leaders.values()))
            width = self._connections_per_broker(brokers)
            held = {info_tp: (k, info) for k, f in members.items() for info_tp, (info, *_) in f.snapshot().items()}
            slots = spread_over_connections(((group, tp) for tp in held), {}, width if wide else 1)
            moves: Dict[Tuple[FetcherKey, FetcherKey], List[TopicPartition]] = {}
            for tp, (k, _) in held.items():
                if slots[tp] != k.connection:
                    moves.setdefault((k, dataclasses.replace(k, connection=slots[tp])), []).append(tp)
            for (src, dst), tps in sorted(moves.items(), key=lambda m: (m[0][0].connection, m[0][1].connection)):
                infos = self._fetchers[src].remove_partitions(tps)
                if infos:
                    self._fetcher_for(dst).add_partitions(infos)
        if moves:
            log.debug("%s: fetcher %s of broker %d %s: %d partitions moved", fetcher.name, key.fetcher_id,
                      key.broker_id, f"wide ({width} connections)" if wide else "narrow", sum(map(len, moves.values())))

    def _stop_idle_fetchers(self) -> None:
        """Stop and join fetchers left without partitions (Kafka's shutdownIdleFetcherThreads)."""
        with self._fetchers_lock:
            idle = [key for key, f in self._fetchers.items() if f.partition_count() == 0]
            fetchers = [self._fetchers.pop(key) for key in idle]
        _stop_all(fetchers)


def _stop_all(threads: Sequence[ShutdownableThread]) -> None:
    """Request every stop first (they end in parallel), then join each (as before: no bound of its own;
    each fetcher's socket is aborted, so a join waits at most for the chunk being processed)."""
    for thread in threads:
        thread.request_stop()
    for thread in threads:
        thread.join()

