"""The consumer connector: ZooKeeper session, streams, commits, metrics, bounded shutdown.

:class:`ConsumerConnectorBase` is what a group member does whoever keeps the
membership: it opens the ZooKeeper session (:mod:`kazoo`; used for brokers,
topics and, by default, offsets), creates the group client
(:mod:`zkconsumer.zookeeper.group`), the fetcher manager (:mod:`zkconsumer.fetch.manager`) and the
streams (:mod:`.stream`), retries commits through outages (:mod:`zkconsumer.offsets.retry`),
reports metrics and shuts down in one ordered, bounded sequence. Who decides which member
consumes what is one composed part, a :class:`~.membership.Membership`, built once by
:meth:`~ConsumerConnectorBase._make_membership` from a :class:`~.membership.ConnectorParts` (the
parts of the connector it may use):

* :class:`~zkconsumer.rebalance.zookeeper_membership.ZooKeeperMembership`: ZooKeeper
  membership (Kafka 0.8's rebalance), the default;
* :class:`~zkconsumer.coordinator.kafka_membership.CoordinatorMembership`: the
  brokers' group coordinator (``group.membership=kafka``).

The documented entry point, :class:`zkconsumer.ZookeeperConsumerConnector`
(:mod:`zkconsumer.connector`), is this class with the choice between the two made by
``group.membership``.

Connector states::

    CREATED ──create_message_streams*──▶ RUNNING ──shutdown()──▶ SHUT_DOWN
       └──────────────────────────────shutdown()──────────────────────▲

``shutdown()`` during ``create_message_streams`` ends the join: the create call
raises :class:`~zkconsumer.errors.ConsumerShutdownError` and nothing it started
outlives the shutdown. Later calls raise the same error.

ZooKeeper outages: the application never sees a kazoo exception.
:meth:`ConsumerConnectorBase.commit_offsets` retries for up to
``offsets.commit.timeout.ms`` before raising a retriable
:class:`~zkconsumer.errors.ZooKeeperUnavailableError`. Shutdown is bounded
whatever ZooKeeper does (see :meth:`ConsumerConnectorBase.shutdown`).
"""

from __future__ import annotations

import abc
import contextlib
import enum
import logging
import socket
import threading
import time
import uuid
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Set, Tuple, Union

from kazoo.client import KazooClient

from ..config import ConsumerConfig
from ..errors import ConfigurationError, ConsumerShutdownError, ZkConsumerError
from ..fetch.handoff import ChunkQueue
from ..fetch.manager import FetcherManager
from ..metrics.consumer import ConsumerMetrics, MetricsReporter, PauseTimingListener
from ..offsets.committer import AutoCommitter, OffsetCommitter, checked_offsets
from ..offsets.retry import commit_retrying
from ..structs import TopicPartition
from ..threads import ParallelStops
from ..zookeeper.acl import zookeeper_acls
from ..zookeeper.group import GroupClient
from ..zookeeper.heartbeat import SessionHeartbeat, close_client
from .acks import ProcessedOffsets
from .membership import ConnectorParts, ConsumerRebalanceListener, Membership, QueueFor, RebalanceStatus, TopicAllowed
from .offset_stores import make_offset_storage
from .pausing import Pauses
from .seeking import GroupSeeks
from .stream import Decoder, FailureSignal, KafkaStream, clear_streams
from .topic_count import StaticTopicCount, TopicCount, TopicFilter, WildcardTopicCount
from .zk_session import connect_zookeeper

__all__ = ["ConnectorState", "ConsumerConnectorBase", "make_consumer_id"]

log = logging.getLogger(__name__)

#: How long shutdown() waits, after closing the ZooKeeper client, for the threads it asked to stop.
_FINAL_JOIN_S = 5.0


class ConnectorState(enum.Enum):
    CREATED = "created"
    RUNNING = "running"
    SHUT_DOWN = "shut_down"


def make_consumer_id(config: ConsumerConfig) -> str:
    """``<group>_<consumer.id>``, or ``<group>_<hostname>-<epoch ms>-<8 hex>`` as Kafka builds it."""
    if config.consumer_id:
        return f"{config.group_id}_{config.consumer_id}"
    suffix = uuid.uuid4().hex[:8]
    return f"{config.group_id}_{socket.gethostname()}-{int(time.time() * 1000)}-{suffix}"


class ConsumerConnectorBase(abc.ABC):
    """A consumer group member, whoever keeps its membership; see the module docstring.

    Subclasses say only which membership: :meth:`_make_membership`.

    Construction connects to ZooKeeper (raising :class:`ZooKeeperUnavailableError`
    naming ``zookeeper.connect`` if it cannot within
    ``zookeeper.connection.timeout.ms``). If construction raises, nothing is left
    running: the ZooKeeper session is closed and whatever was built is stopped
    (threads joined, within the bounds of :meth:`shutdown`) before its exception
    propagates unchanged. :meth:`create_message_streams` (or
    :meth:`create_message_streams_by_filter`) joins the group and returns the
    streams; it may be called once per connector, as in Kafka. :meth:`shutdown`
    is idempotent and joins every thread the connector started.

    ``metrics_port=P`` serves the member's Prometheus metrics on ``http://0.0.0.0:P/metrics``
    (0: any free port, read ``connector.prometheus.port``); ``metrics_registry=R`` registers them
    on an application's own ``prometheus_client`` registry instead (or as well);
    ``metrics_pushgateway="host:port"`` pushes them to a Prometheus Pushgateway every 10 s and at
    shutdown. Names: the documentation's *Monitoring* page.
    """

    def __init__(
        self,
        config: Union[ConsumerConfig, Mapping[str, Any]],
        *,
        rebalance_listener: Optional[ConsumerRebalanceListener] = None,
        metrics_interval_s: Optional[float] = None,
        metrics_port: Optional[int] = None,
        metrics_registry: Any = None,
        metrics_pushgateway: Optional[str] = None,
    ) -> None:
        self.config = config if isinstance(config, ConsumerConfig) else ConsumerConfig(config)
        self.consumer_id = make_consumer_id(self.config)
        self._state = ConnectorState.CREATED
        self._state_lock = threading.Lock()
        self._failure = FailureSignal()
        self._streams: List[KafkaStream] = []
        self._processed = ProcessedOffsets() if self.config.commit_processed_only else None  # the streams' acks
        self._auto_committer: Optional[AutoCommitter] = None
        #: Counters and rates of this member; see :meth:`metrics_snapshot`.
        self.metrics = ConsumerMetrics()
        #: The listener handed to the group's rebalancer: times rebalance pauses, then calls the application's.
        self._listener = PauseTimingListener(rebalance_listener, self.metrics)
        self._metrics_interval_s = metrics_interval_s
        self._reporter: Optional[MetricsReporter] = None
        self._recorded = (0, 0)
        self._snapshot_lock = threading.Lock()  # metrics_snapshot(): the reporter thread vs. scrapes
        #: Set by shutdown(): ends commit retries and a join in progress.
        self._closing = threading.Event()
        #: Clear while create_message_streams() is joining the group.
        self._join_done = threading.Event()
        self._join_done.set()
        self._heartbeat: Optional[SessionHeartbeat] = None
        self._group: Optional[GroupClient] = None
        self._membership: Optional[Membership] = None  # set once the parts it uses exist

        #: Prometheus metrics (``metrics_port``: served over HTTP, 0 = any free port; ``metrics_pushgateway``:
        #: pushed; ``metrics_registry``:
        #: a ``prometheus_client`` registry to register on); see :mod:`zkconsumer.metrics.prometheus`.
        self.prometheus: Any = None

        self._zk = self._connect_zookeeper()
        # What stops each part built from here on, undone last first if a later step raises (the
        # caller then has no connector to shut down): the session first of all.
        undo: List[Tuple[str, Callable[[], None]]] = [("the ZooKeeper session", self._close_zookeeper)]
        try:
            self._group = GroupClient(
                self._zk,
                self.config.group_id,
                self.consumer_id,
                retry_timeout_s=self._session_timeout_s(),  # the granted timeout: past it the session is gone anyway
                acl=zookeeper_acls(self.config),
            )
            self._group.note_session()
            storage = make_offset_storage(self.config, self._group)
            undo.append(("the offset storage", storage.close))
            self._committer = OffsetCommitter(self._group, storage)
            self._fetchers = FetcherManager(
                self.config,
                brokers=lambda: self._group_client().brokers(self.config.security_protocol),
                on_error=self._background_failure,
                deliverable=self._deliverable,
            )
            undo.append(("the fetchers", self._fetchers.stop))
            self._pauses = Pauses(self._fetchers, self._streams, rebalance_listener)
            self._listener.on_assigned = self._pauses.assigned
            self._membership = self._make_membership(ConnectorParts(
                config=self.config, consumer_id=self.consumer_id, zk=self._zk, heartbeat=self._heartbeat, group=self._group,
                streams=self._streams, fetchers=self._fetchers, committer=self._committer, listener=self._listener,
                metrics=self.metrics, failure=self._failure, closing=self._closing, join_done=self._join_done,
                guard=self._guard, on_failure=self._background_failure, session_timeout_s=self._session_timeout_s,
                heartbeat_mode=lambda: self.heartbeat_mode,
                seeks=GroupSeeks(self._group.client, self._group.paths.root, self._committer, self._pauses,
                                 self._processed, zookeeper_acls(self.config)),
            ))
            undo.append(("the membership", self._membership.stop))
            if metrics_port is not None or metrics_registry is not None or metrics_pushgateway:
                from ..metrics.prometheus import instrument_connector
                self.prometheus = instrument_connector(self, port=metrics_port, registry=metrics_registry,
                                                       push_gateway=metrics_pushgateway)
        except BaseException:
            self._undo_construction(undo)
            raise

    def _undo_construction(self, undo: List[Tuple[str, Callable[[], None]]]) -> None:
        """The constructor raised: stop what it built, last first (a step that fails is logged; the rest run)."""
        for what, stop in reversed(undo):
            try:
                stop()
            except BaseException:  # noqa: BLE001 - must not replace the error that ended construction
                log.exception("%s: construction failed; stopping %s failed too", self.consumer_id, what)

    # ------------------------------------------------------------------ public

    def create_message_streams(
        self,
        topic_count_map: Mapping[str, int],
        key_decoder: Optional[Decoder] = None,
        value_decoder: Optional[Decoder] = None,
    ) -> Dict[str, List[KafkaStream]]:
        """Subscribe to ``{topic: number of streams}``; returns ``{topic: [KafkaStream, ...]}``.

        Each stream is one consumer thread id (``<consumer id>-<i>``) of the group.
        """
        count = StaticTopicCount(self.consumer_id, dict(topic_count_map))
        queues: Dict[Tuple[str, str], ChunkQueue] = {}
        result: Dict[str, List[KafkaStream]] = {}
        for topic, thread_ids in count.consumer_thread_ids(()).items():
            result[topic] = []
            for thread_id in thread_ids:
                queue = ChunkQueue(self.config.queued_max_message_chunks)
                queues[(topic, thread_id)] = queue
                result[topic].append(self._new_stream(queue, thread_id, key_decoder, value_decoder))
        self._join(count, lambda topic, thread_id: queues[(topic, thread_id)], None)
        return result

    def create_message_streams_by_filter(
        self,
        topic_filter: TopicFilter,
        num_streams: int = 1,
        key_decoder: Optional[Decoder] = None,
        value_decoder: Optional[Decoder] = None,
    ) -> List[KafkaStream]:
        """Subscribe to every topic the :class:`Whitelist`/:class:`Blacklist` allows, now and later."""
        count = WildcardTopicCount(self.consumer_id, topic_filter, num_streams, self.config.exclude_internal_topics)
        thread_ids = [f"{self.consumer_id}-{i}" for i in range(num_streams)]
        queues = {t: ChunkQueue(self.config.queued_max_message_chunks) for t in thread_ids}
        streams = [self._new_stream(queues[t], t, key_decoder, value_decoder) for t in thread_ids]
        exclude = self.config.exclude_internal_topics
        self._join(count, lambda topic, thread_id: queues[thread_id],
                   lambda topic: topic_filter.is_topic_allowed(topic, exclude))
        return streams

    def commit_offsets(self, offsets: Optional[Mapping[TopicPartition, int]] = None) -> List[TopicPartition]:
        """Commit the offsets of every message handed out so far (acked: ``commit.processed.only``), or ``offsets``.

        ``offsets``: exactly these positions (partition -> next offset to consume) of the
        partitions among them this member owns, fenced like every commit; with them,
        an application usually turns ``auto.commit.enable`` off (it commits what was handed out).

        Returns the partitions not written because this member does not own them
        (of ``offsets``, or found owned by another member during the commit: the
        session expired meanwhile; they stop being delivered; not an error).
        Writes only partitions whose offset changed since the last commit. While
        ZooKeeper (or, with ``offsets.storage=kafka``, the offsets coordinator) is
        unavailable, keeps retrying for up to ``offsets.commit.timeout.ms``, as
        Kafka's consumer blocks until ZooKeeper is back; then raises the retriable
        error (e.g. :class:`ZooKeeperUnavailableError`); calling again is safe.
        Raises a background failure if one happened, and :class:`ConsumerShutdownError`
        after (or during) :meth:`shutdown`. Only :class:`ZkConsumerError` subclasses.
        """
        chosen = None if offsets is None else checked_offsets(offsets)
        self._failure.raise_if_failed()
        if self._state is ConnectorState.SHUT_DOWN:
            raise ConsumerShutdownError("commit_offsets() after shutdown()")
        return self._commit_retrying(self.config.offsets_commit_timeout_ms / 1000.0, offsets=chosen)

    def positions(self) -> Dict[TopicPartition, int]:
        """What :meth:`commit_offsets` would commit now per owned partition (the next offset to read); a snapshot."""
        return self._the_membership().positions()

    def pause(self, partitions: Iterable[TopicPartition] = (), *, streams: Iterable[KafkaStream] = ()) -> None:
        """Stop fetching and handing out ``partitions`` (and every partition of ``streams``, now and after
        rebalances) without leaving the group: the session, ownership and positions are kept, commits go on.

        Returns once none of their messages can be handed out any more. Pausing a partition this
        member does not own (yet) is allowed. A paused partition that moves to another member is no
        longer paused, and the rebalance listener's optional ``paused_partitions_moved(partitions)``
        is told. ValueError for anything that is not a ``(topic, partition)`` pair.
        """
        self._pauses.pause(partitions, streams)

    def resume(self, partitions: Iterable[TopicPartition] = (), *, streams: Iterable[KafkaStream] = ()) -> None:
        """Fetch and hand out ``partitions`` (and ``streams``) again, from the first message not handed out."""
        self._pauses.resume(partitions, streams)

    def paused(self) -> Set[TopicPartition]:
        """The partitions paused by :meth:`pause` (one by one; not those paused through their stream)."""
        return self._pauses.paused()

    @property
    def membership(self) -> Membership:
        """Who keeps this member's group membership (``membership.kind``: ``zookeeper`` or ``kafka``).

        With ``group.membership=kafka`` it also shows the coordinator's view of the member once it
        joined: ``member_id``, ``generation`` and ``assignment``.
        """
        assert self._membership is not None
        current = getattr(self._membership, "current", None)  # a SwitchingMembership: the one that runs now
        return self._membership if current is None else current

    @property
    def status(self) -> Optional[RebalanceStatus]:
        """Membership state, owned partitions (by stream thread id), rebalances, last error, and the
        ZooKeeper heartbeat that runs (``None`` before joining)."""
        return None if self._membership is None else self._membership.status()

    @property
    def zk_client(self) -> KazooClient:
        """The connector's ZooKeeper client, for monitoring and tests. Do not stop or close it."""
        return self._zk

    @property
    def session_timeout_s(self) -> float:
        """The ZooKeeper session timeout the server granted, in seconds.

        The server clamps ``zookeeper.session.timeout.ms`` to its
        ``[minSessionTimeout, maxSessionTimeout]``; the session lease and the
        shutdown bound use the granted value (the configured one until the
        first handshake).
        """
        return self._session_timeout_s()

    def metrics_snapshot(self, *, restart_interval: bool = True) -> Dict[str, Any]:
        """Per-stream queue sizes and partitions, rebalances, messages/s, bytes/s, per-partition lag.

        Rates cover the time since the previous snapshot that restarted the
        interval (``restart_interval``, the default; a Prometheus scrape does
        not). Lag is the fetched
        high watermark minus the next offset to hand out. ``fetch`` holds the
        per-broker fetch counters (``FetcherManager.metrics()["brokers"]``);
        ``zookeeper_unanswered_drops`` counts the ZooKeeper connections the
        heartbeat dropped because the server stopped answering;
        ``zookeeper_heartbeat`` names the heartbeat that runs (:attr:`heartbeat_mode`).
        Thread-safe: concurrent calls are serialized.
        """
        with self._snapshot_lock:  # the MetricsReporter thread and scrapes may call this at once
            messages = sum(s.delivered[0] for s in self._streams)
            size = sum(s.delivered[1] for s in self._streams)
            self.metrics.record_messages(max(0, messages - self._recorded[0]), max(0, size - self._recorded[1]))
            self._recorded = (messages, size)
            return self._snapshot_locked(restart_interval)

    def _snapshot_locked(self, restart_interval: bool) -> Dict[str, Any]:
        status = self.status
        owned = dict(status.owned) if status is not None else {}
        queue_sizes: Dict[str, int] = {}
        for stream in self._streams:  # static streams of different topics share a thread id
            queue_sizes[stream.thread_id] = queue_sizes.get(stream.thread_id, 0) + len(stream.queue)
        fetch = self._fetchers.metrics()
        lag = {
            (p["topic"], p["partition"]): p["consumer_lag"]
            for p in fetch["partitions"].values()
            if p["consumer_lag"] is not None
        }
        snap = self.metrics.read(owned, queue_sizes, lag, status.as_metrics() if status is not None else None,
                                 restart_interval=restart_interval)
        snap["fetch"] = fetch["brokers"]
        snap["zookeeper_unanswered_drops"] = self._heartbeat.unanswered_drops if self._heartbeat is not None else 0
        snap["zookeeper_heartbeat"] = self.heartbeat_mode
        return snap

    @property
    def heartbeat_mode(self) -> Optional[str]:
        """The ZooKeeper heartbeat that runs, ``<mode>/<pinger>`` (``kafka/native``, ``kafka/kazoo`` or
        ``quiet/native``: see ``zookeeper.heartbeat``); ``None`` without a ZooKeeper session."""
        heartbeat = getattr(self, "_heartbeat", None)
        return None if heartbeat is None else heartbeat.effective

    def shutdown(self) -> None:
        """Leave the group: idempotent, ordered, bounded, joins every thread started.

        Order: a ``create_message_streams`` in progress is ended (it raises
        :class:`ConsumerShutdownError`); the metrics reporter, auto-commit, the
        coordination (watches, rebalancer, session lease:
        ``membership.stop()``) and the fetchers are asked to stop, all at
        once; once the fetchers stopped every stream ends (shutdown sentinel);
        offsets are committed (``auto.commit.enable``); the member leaves the
        group (``membership.leave()``); the ZooKeeper session closes, removing
        our ephemeral nodes so the group rebalances at once; every thread is
        joined.

        Bound, whatever ZooKeeper does (paused, killed, unreachable): stopping
        the threads and the final commit share one session timeout (the
        negotiated ``zookeeper.session.timeout.ms``); closing the ZooKeeper
        client then takes kazoo at most about one more session timeout (when
        the server accepts connections but does not answer; at once when it
        is down or healthy), and joining what closing released at most
        5 s more. Offsets that could not be committed in time are named in a
        WARNING (``topic-partition at offset N``): they will be consumed
        again by the partition's next owner (at-least-once).
        """
        with self._state_lock:
            if self._state is ConnectorState.SHUT_DOWN:
                return
            self._state = ConnectorState.SHUT_DOWN
            self._closing.set()
        started = time.monotonic()
        deadline = started + self._session_timeout_s()
        log.info("%r shutting down", self)
        stops = ParallelStops(self.consumer_id)
        try:
            if not self._join_done.wait(max(0.0, deadline - time.monotonic())):
                log.warning("%s: create_message_streams() still blocked in ZooKeeper; shutting down around it",
                            self.consumer_id)
            with self._state_lock:  # nothing is started after SHUT_DOWN: this is the final set
                reporter, committer = self._reporter, self._auto_committer
            if reporter is not None:
                stops.run("metrics", reporter.stop)
            if committer is not None:
                stops.run("autocommit", committer.stop)
            stops.run("coordination", self._the_membership().stop)
            stops.run("fetchers", self._fetchers.stop)
            if not stops.wait("fetchers", deadline):
                log.warning("%s: fetchers did not stop within the shutdown bound", self.consumer_id)
            clear_streams(self._streams)
            for stream in self._streams:
                stream.queue.put_shutdown()
            if self.config.auto_commit_enable and self._the_membership().joined():
                self._final_commit(deadline)
            stops.wait("coordination", deadline)
            self._the_membership().leave()
        finally:
            try:
                self._committer.close()
            finally:
                self._close_zookeeper()
                if self.prometheus is not None:
                    self.prometheus.close()
                left = stops.join(_FINAL_JOIN_S)
                if left:
                    log.error("%s: threads still running after shutdown: %s", self.consumer_id, ", ".join(left))
                log.info("%s shut down in %.1fs", self.consumer_id, time.monotonic() - started)

    def _final_commit(self, deadline: float) -> None:
        """Commit what was handed out, within ``deadline``; name what could not be committed."""
        remaining = max(0.5, deadline - time.monotonic())
        error: Optional[BaseException] = None
        try:
            with self._group_client().client.deadline(remaining):
                self._commit_retrying(remaining, during_shutdown=True)
        except ZkConsumerError as exc:
            error = exc
        left = self._the_membership().uncommitted()
        if left:
            log.warning(
                "%s: offsets NOT committed at shutdown%s: %s; their next owner consumes from the last committed "
                "offset (at-least-once)", self.consumer_id, f" ({error})" if error else " (no longer owned)",
                ", ".join(f"{t}-{p} at offset {o}" for t, p, o in left))
        elif error is not None:
            log.warning("%s: final offset commit failed: %s", self.consumer_id, error)

    def _close_zookeeper(self) -> None:
        """Close the session (kazoo fails every call still waiting, which releases blocked threads)."""
        self._zk.remove_listener(self._on_zk_state)
        close_client(self._zk, self._heartbeat, self.consumer_id)

    def _session_timeout_s(self) -> float:
        """The session timeout ZooKeeper granted (the configured one until it is known)."""
        negotiated = self._heartbeat.negotiated_timeout() if self._heartbeat is not None else None
        return self.config.zookeeper_session_timeout_ms / 1000.0 if negotiated is None else float(negotiated)

    def _the_membership(self) -> Membership:
        """The membership the connector drives (the switching wrapper, not :attr:`membership`'s current one)."""
        assert self._membership is not None
        return self._membership

    def _group_client(self) -> GroupClient:
        assert self._group is not None
        return self._group

    def __enter__(self) -> "ConsumerConnectorBase":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        membership = "" if self._membership is None else self._membership.describe()
        return f"{type(self).__name__}({self.consumer_id}, {membership}{self._state.value})"

    # ------------------------------------------------------------------ the membership

    @abc.abstractmethod
    def _make_membership(self, member: ConnectorParts) -> Membership:
        """The membership this connector uses, built once, at construction, from ``member``."""

    def _join(self, count: TopicCount, queue_for: QueueFor, topic_allowed: TopicAllowed) -> None:
        """CREATED -> RUNNING; join through the membership; then start auto-commit and metrics."""
        self._begin_join()
        self._the_membership().join(count, queue_for, topic_allowed)
        self._start_periodic_threads()

    def _on_zk_state(self, state: str) -> None:
        """kazoo's connection thread: hand the state to the membership (which only signals)."""
        if self._membership is not None:
            self._membership.on_zk_state(state)

    def _deliverable(self) -> bool:
        """A fetcher thread: may it queue data now? (The membership says; yes until it exists.)"""
        return self._membership is None or self._membership.deliverable()

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Hold the state lock, raising ConsumerShutdownError once shutdown() began (see :class:`ConnectorParts`)."""
        with self._state_lock:
            self._check_open()
            yield

    # ----------------------------------------------------------------- wiring

    def _connect_zookeeper(self) -> KazooClient:
        client, self._heartbeat = connect_zookeeper(self.config, self.consumer_id)
        client.add_listener(self._on_zk_state)
        return client

    def _new_stream(self, queue: ChunkQueue, thread_id: str, key_decoder: Optional[Decoder],
                    value_decoder: Optional[Decoder]) -> KafkaStream:
        stream = KafkaStream(queue, self.config.consumer_timeout_ms, key_decoder, value_decoder, self._failure,
                             thread_id, self._processed)
        self._streams.append(stream)
        return stream

    def _begin_join(self) -> None:
        """CREATED -> RUNNING, once: streams are created once per connector (as in Kafka)."""
        with self._state_lock:
            if self._state is ConnectorState.SHUT_DOWN:
                raise ConsumerShutdownError("create_message_streams() after shutdown()")
            if self._state is ConnectorState.RUNNING:
                raise ConfigurationError(
                    "create_message_streams", "streams can be created only once per connector (as in Kafka)"
                )
            self._state = ConnectorState.RUNNING

    def _check_open(self, doing: str = "joining the group") -> None:
        """Raise ConsumerShutdownError once shutdown() began; call with ``_state_lock`` held."""
        if self._state is ConnectorState.SHUT_DOWN:
            raise ConsumerShutdownError(f"shutdown() while create_message_streams() was {doing}")

    def _start_periodic_threads(self) -> None:
        """Start auto-commit (``auto.commit.enable``) and the metrics reporter (``metrics_interval_s``).

        Called once the member has joined; :meth:`shutdown` stops and joins both.
        Raises :class:`ConsumerShutdownError` (starting nothing) once shutdown() began.
        """
        with self._state_lock:
            self._check_open()
            if self.config.auto_commit_enable:
                self._auto_committer = AutoCommitter(
                    self._auto_commit, self.config.auto_commit_interval_ms,
                    name=f"zkconsumer-autocommit-{self.consumer_id}",
                )
                self._auto_committer.start()
            if self._metrics_interval_s:
                self._reporter = MetricsReporter(
                    self.metrics_snapshot, self._metrics_interval_s, name=f"zkconsumer-metrics-{self.consumer_id}"
                )
                self._reporter.start()

    def _auto_commit(self) -> None:
        """One auto-commit: retried through an outage like commit_offsets(); quiet once shutting down."""
        try:
            self._commit_retrying(self.config.offsets_commit_timeout_ms / 1000.0)
        except ConsumerShutdownError:
            pass  # the final commit of shutdown() takes over

    def _commit_retrying(self, budget_s: float, *, during_shutdown: bool = False,
                         offsets: Optional[Mapping[TopicPartition, int]] = None) -> List[TopicPartition]:
        """The membership's commit, retried through an outage (:func:`~zkconsumer.offsets.retry.commit_retrying`);
        the partitions the last attempt did not write because this member does not own them."""
        refused: List[TopicPartition] = []

        def attempt() -> None:
            refused[:] = self._the_membership().commit(offsets)

        commit_retrying(attempt, budget_s, closing=self._closing, record=self.metrics.record_commit,
                        name=self.consumer_id, during_shutdown=during_shutdown)
        return list(refused)

    def _background_failure(self, error: BaseException) -> None:
        """A background thread failed: make every iterator and commit raise it (as a ZkConsumerError)."""
        if self._failure.set(error):
            log.error("%s: background failure: %r", self.consumer_id, error)
            for stream in self._streams:
                stream.queue.wake_consumers()

