"""``ZookeeperConsumerConnector``: joins a group and wires the parts together.

The connector holds no algorithm of its own. It creates, in order, a ZooKeeper
session (:mod:`kazoo`), the group client (:mod:`.group`), the fetcher manager
(:mod:`.fetcher`), the streams (:mod:`.stream`), the rebalancer
(:mod:`.rebalancer`), the watches (:mod:`.watchers`) and the auto-committer
(:mod:`.offsets`), and tears them down in the reverse order.

``group.membership=kafka`` makes ``ZookeeperConsumerConnector(config)`` return a
:class:`~zkconsumer.coordinator.connector.CoordinatorConsumerConnector`: a
subclass with the same API whose membership is kept by the brokers' group
coordinator instead of ZooKeeper (see ``docs/MIGRATION.md``). Offsets go where
``offsets.storage`` says (:mod:`.offset_storage`).

Connector states::

    CREATED ──create_message_streams*──▶ RUNNING ──shutdown()──▶ SHUT_DOWN
       └──────────────────────────────shutdown()──────────────────────▲

``shutdown()`` during ``create_message_streams`` ends the join: the create call
raises :class:`~zkconsumer.errors.ConsumerShutdownError` and nothing it started
outlives the shutdown. Later calls raise the same error.

ZooKeeper outages: the application never sees a kazoo exception. While
ZooKeeper is away, iterators go on handing out what was fetched (fetchers hold
back new data once the session lease ran out, see :mod:`.lease`), and
:meth:`ZookeeperConsumerConnector.commit_offsets` retries for up to
``offsets.commit.timeout.ms`` before raising a retriable
:class:`~zkconsumer.errors.ZooKeeperUnavailableError`. Shutdown is bounded
whatever ZooKeeper does (see :meth:`ZookeeperConsumerConnector.shutdown`).

Example::

    with ZookeeperConsumerConnector({"zookeeper.connect": "127.0.0.1:2181",
                                     "group.id": "g1"}) as connector:
        stream = connector.create_message_streams({"events": 1})["events"][0]
        for m in stream:
            handle(m.message)
"""

from __future__ import annotations

import enum
import logging
import random
import socket
import threading
import time
import uuid
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoAuthError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from . import assignors, security
from .zookeeper import zkformat
from .config import ConsumerConfig
from .errors import ConfigurationError, ConsumerShutdownError, RebalanceInProgressError, ZkConsumerError, \
    ZooKeeperAccessError, ZooKeeperUnavailableError
from .zookeeper.zkcalls import BoundedZooKeeper
from .fetch.manager import FetcherManager
from .zookeeper.group import GroupClient
from .zookeeper.lease import SessionLease, track_negotiated_timeout
from .metrics import ConsumerMetrics, MetricsReporter, PauseTimingListener
from .offset_storage import OffsetStorageError, make_offset_storage
from .offsets import AutoCommitter, OffsetCommitter
from .fetch.partition_info import ChunkQueue
from .rebalancer import ConsumerRebalanceListener, Rebalancer, RebalanceStatus
from .stopping import ParallelStops
from .stream import Decoder, FailureSignal, KafkaStream, clear_streams
from .topic_count import StaticTopicCount, TopicCount, TopicFilter, WildcardTopicCount
from .zookeeper.watchers import GroupWatcher

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


class ZookeeperConsumerConnector:
    """A member of a ZooKeeper-coordinated consumer group (Kafka 0.8's high-level consumer).

    Construction connects to ZooKeeper (raising :class:`ZooKeeperUnavailableError`
    naming ``zookeeper.connect`` if it cannot within
    ``zookeeper.connection.timeout.ms``). :meth:`create_message_streams` (or
    :meth:`create_message_streams_by_filter`) registers the member, runs the
    first rebalance and returns the streams; it may be called once per
    connector, as in Kafka. :meth:`shutdown` is idempotent and joins every
    thread the connector started.

    ``metrics_port=P`` serves the member's Prometheus metrics on ``http://0.0.0.0:P/metrics``
    (0: any free port, read ``connector.prometheus.port``); ``metrics_registry=R`` registers them
    on an application's own ``prometheus_client`` registry instead (or as well);
    ``metrics_pushgateway="host:port"`` pushes them to a Prometheus Pushgateway every 10 s and at
    shutdown. Names: ``docs/MONITORING.md``.

    With ``group.membership=kafka`` the constructor returns a
    :class:`~zkconsumer.coordinator.connector.CoordinatorConsumerConnector`
    (still an instance of this class), so application code does not change.
    """

    def __new__(
        cls, config: Union[ConsumerConfig, Mapping[str, Any]], *args: Any, **kwargs: Any
    ) -> "ZookeeperConsumerConnector":
        if cls is ZookeeperConsumerConnector:
            parsed = config if isinstance(config, ConsumerConfig) else ConsumerConfig(config)
            if parsed.group_membership == "kafka":
                from .coordinator.connector import CoordinatorConsumerConnector  # imported late: it subclasses this

                cls = CoordinatorConsumerConnector
        return super().__new__(cls)

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
        self._rebalancer: Optional[Rebalancer] = None
        self._watcher: Optional[GroupWatcher] = None
        self._auto_committer: Optional[AutoCommitter] = None
        self._session_was_lost = False
        #: Counters and rates of this member; see :meth:`metrics_snapshot`.
        self.metrics = ConsumerMetrics()
        #: The listener handed to the group's rebalancer: times rebalance pauses, then calls the application's.
        self._listener = PauseTimingListener(rebalance_listener, self.metrics)
        self._metrics_interval_s = metrics_interval_s
        self._reporter: Optional[MetricsReporter] = None
        self._recorded = (0, 0)
        self._snapshot_lock = threading.Lock()  # metrics_snapshot(): the reporter thread vs. scrapes
        self._lease: Optional[SessionLease] = None
        #: Set by shutdown(): ends commit retries and a join in progress.
        self._closing = threading.Event()
        #: Clear while create_message_streams() is joining the group.
        self._join_done = threading.Event()
        self._join_done.set()
        self._negotiated: Any = lambda: None
        self._group: Optional[GroupClient] = None

        self._zk = self._connect_zookeeper()
        self._group = GroupClient(
            self._zk,
            self.config.group_id,
            self.consumer_id,
            retry_timeout_s=self._session_timeout_s(),  # the granted timeout: past it the session is gone anyway
            acl=security.zookeeper_acls(self.config),
        )
        self._group.note_session()
        self._committer = OffsetCommitter(self._group, make_offset_storage(self.config, self._group))
        self._fetchers = FetcherManager(
            self.config,
            brokers=lambda: self._group.brokers(self.config.security_protocol),
            on_error=self._background_failure,
            deliverable=self._session_proven,
        )
        #: Prometheus metrics (``metrics_port``: served over HTTP, 0 = any free port; ``metrics_pushgateway``:
        #: pushed; ``metrics_registry``:
        #: a ``prometheus_client`` registry to register on); see :mod:`zkconsumer.monitoring.prometheus`.
        self.prometheus: Any = None
        if metrics_port is not None or metrics_registry is not None or metrics_pushgateway:
            from .monitoring.prometheus import instrument_connector
            try:
                self.prometheus = instrument_connector(self, port=metrics_port, registry=metrics_registry,
                                                       push_gateway=metrics_pushgateway)
            except BaseException:
                self._zk.stop()
                self._zk.close()
                raise

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
        self._join(count, lambda topic, thread_id: queues[(topic, thread_id)], topic_allowed=None)
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
        self._join(
            count,
            lambda topic, thread_id: queues[thread_id],
            topic_allowed=lambda topic: topic_filter.is_topic_allowed(topic, exclude),
        )
        return streams

    def commit_offsets(self) -> None:
        """Commit the offsets of every message handed to the application so far.

        Writes only partitions whose offset changed since the last commit.
        While ZooKeeper (or, with ``offsets.storage=kafka``, the offsets
        coordinator) is unavailable, keeps retrying for up to
        ``offsets.commit.timeout.ms``, as Kafka's consumer blocks until
        ZooKeeper is back; then raises the retriable error (e.g.
        :class:`ZooKeeperUnavailableError`); calling again later is safe.
        Partitions found owned by another member (the session expired
        meanwhile) are not written and stop being delivered; that is not an
        error. Raises a background failure if one happened, and
        :class:`ConsumerShutdownError` after (or during) :meth:`shutdown`.
        Only :class:`ZkConsumerError` subclasses are raised.
        """
        self._failure.raise_if_failed()
        if self._state is ConnectorState.SHUT_DOWN:
            raise ConsumerShutdownError("commit_offsets() after shutdown()")
        self._commit_retrying(self.config.offsets_commit_timeout_ms / 1000.0)

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

    @property
    def status(self) -> Optional[RebalanceStatus]:
        """The rebalancer's state, owned partitions and last error (``None`` before joining)."""
        return None if self._rebalancer is None else self._rebalancer.status

    def metrics_snapshot(self) -> Dict[str, Any]:
        """Per-stream queue sizes and partitions, rebalances, messages/s, bytes/s, per-partition lag.

        Rates cover the time since the previous snapshot. Lag is the fetched
        high watermark minus the next offset to hand out. ``fetch`` holds the
        per-broker fetch counters (``FetcherManager.metrics()["brokers"]``).
        Thread-safe: concurrent calls are serialized.
        """
        with self._snapshot_lock:  # the MetricsReporter thread and scrapes may call this at once
            messages = sum(s.delivered[0] for s in self._streams)
            size = sum(s.delivered[1] for s in self._streams)
            self.metrics.record_messages(max(0, messages - self._recorded[0]), max(0, size - self._recorded[1]))
            self._recorded = (messages, size)
            return self._snapshot_locked()

    def _snapshot_locked(self) -> Dict[str, Any]:
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
        snap = self.metrics.snapshot(owned, queue_sizes, lag, status.as_metrics() if status is not None else None)
        snap["fetch"] = fetch["brokers"]
        return snap

    def shutdown(self) -> None:
        """Leave the group: idempotent, ordered, bounded, joins every thread started.

        Order: a ``create_message_streams`` in progress is ended (it raises
        :class:`ConsumerShutdownError`); the metrics reporter, auto-commit, the
        coordination (watches, rebalancer, session lease:
        :meth:`_stop_coordination`) and the fetchers are asked to stop, all at
        once; once the fetchers stopped every stream ends (shutdown sentinel);
        offsets are committed (``auto.commit.enable``); the member leaves the
        group (:meth:`_leave_group`); the ZooKeeper session closes, removing
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
            stops.run("coordination", self._stop_coordination)
            stops.run("fetchers", self._fetchers.shutdown)
            if not stops.wait("fetchers", deadline):
                log.warning("%s: fetchers did not stop within the shutdown bound", self.consumer_id)
            clear_streams(self._streams)
            for stream in self._streams:
                stream.queue.put_shutdown()
            if self.config.auto_commit_enable and self._joined():
                self._final_commit(deadline)
            stops.wait("coordination", deadline)
            self._leave_group()
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
        left = self._uncommitted()
        if left:
            log.warning(
                "%s: offsets NOT committed at shutdown%s: %s; their next owner consumes from the last committed "
                "offset (at-least-once)", self.consumer_id, f" ({error})" if error else " (no longer owned)",
                ", ".join(f"{t}-{p} at offset {o}" for t, p, o in left))
        elif error is not None:
            log.warning("%s: final offset commit failed: %s", self.consumer_id, error)

    def _uncommitted(self) -> List[Tuple[str, int, int]]:
        """``(topic, partition, consumed offset)`` handed out but not known to be committed."""
        if self._rebalancer is None:
            return []
        committed = self._committer.committed()
        return sorted(
            (info.topic, info.partition, info.consumed_offset)
            for info, _ in self._rebalancer.owned_partitions()
            if info.consumed_offset >= 0 and committed.get((info.topic, info.partition)) != info.consumed_offset
        )

    def _close_zookeeper(self) -> None:
        """Close the session (kazoo fails every call still waiting, which releases blocked threads)."""
        self._zk.remove_listener(self._on_zk_state)
        try:
            self._zk.stop()
        except Exception as exc:  # noqa: BLE001 - e.g. kazoo's WriterNotClosedException: still close
            log.warning("%s: closing the ZooKeeper session: %r", self.consumer_id, exc)
        self._zk.close()

    def _session_timeout_s(self) -> float:
        """The session timeout ZooKeeper granted (the configured one until it is known)."""
        negotiated = self._negotiated()
        return self.config.zookeeper_session_timeout_ms / 1000.0 if negotiated is None else negotiated

    def _group_client(self) -> GroupClient:
        assert self._group is not None
        return self._group

    def _stop_coordination(self) -> None:
        """Stop (and join) whatever could change ownership or restart fetchers. A subclass hook."""
        if self._watcher is not None:
            self._watcher.stop()
        if self._lease is not None:
            self._lease.request_stop()
        if self._rebalancer is not None:
            self._rebalancer.stop()
        if self._lease is not None:
            self._lease.stop()

    def _joined(self) -> bool:
        """Whether streams were created (so there is something to commit). A subclass hook."""
        return self._rebalancer is not None

    def _leave_group(self) -> None:
        """Nothing to do here: closing the session removes our ephemeral nodes. A subclass hook."""

    def __enter__(self) -> "ZookeeperConsumerConnector":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"ZookeeperConsumerConnector({self.consumer_id}, {self._state.value})"

    # ----------------------------------------------------------------- wiring

    def _connect_zookeeper(self) -> KazooClient:
        cfg = self.config
        security.check_config(cfg)  # bad ACL/TLS settings fail before a session is opened
        auth = security.zookeeper_auth_data(cfg)
        client = KazooClient(
            hosts=cfg.zookeeper_connect,
            timeout=cfg.zookeeper_session_timeout_ms / 1000.0,
            connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 2.0},
            auth_data=auth,
        )
        self._negotiated = track_negotiated_timeout(client)
        try:
            client.start(timeout=cfg.zookeeper_connection_timeout_ms / 1000.0)
        except KazooTimeoutError as exc:
            client.stop()
            client.close()
            raise ZooKeeperUnavailableError(
                f"could not connect to ZooKeeper at zookeeper.connect={cfg.zookeeper_connect!r} within "
                f"zookeeper.connection.timeout.ms={cfg.zookeeper_connection_timeout_ms}"
            ) from exc
        try:
            try:
                security.prepare_zookeeper(client, cfg)  # open /consumers; a wrong zookeeper.auth fails here
            except NoAuthError as exc:
                raise ZooKeeperAccessError("/consumers", "preparing", "check zookeeper.auth") from exc
            except KazooException as exc:
                raise ZooKeeperUnavailableError(
                    f"ZooKeeper at zookeeper.connect={cfg.zookeeper_connect!r} failed while connecting: {exc!r}"
                ) from exc
        except BaseException:
            client.stop()
            client.close()
            raise
        client.add_listener(self._on_zk_state)
        return client

    def _new_stream(
        self, queue: ChunkQueue, thread_id: str, key_decoder: Optional[Decoder], value_decoder: Optional[Decoder]
    ) -> KafkaStream:
        stream = KafkaStream(queue, self.config.consumer_timeout_ms, key_decoder, value_decoder, self._failure, thread_id)
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

    def _join(self, count: TopicCount, queue_for: Any, topic_allowed: Any) -> None:
        self._begin_join()
        self._join_done.clear()  # shutdown() waits (bounded) for the join to wind down
        try:
            self._join_group(count, queue_for, topic_allowed)
        finally:
            self._join_done.set()

    def _join_group(self, count: TopicCount, queue_for: Any, topic_allowed: Any) -> None:
        """Register, start lease, rebalancer and watches, wait for the first assignment.

        Each part is started under ``_state_lock`` after checking that shutdown()
        has not begun, so shutdown() sees (and stops) everything started, and
        nothing is started after it began.
        """
        cfg = self.config
        group = self._group_client()
        registration = zkformat.encode_registration(count.subscription, count.pattern, int(time.time() * 1000))
        register = lambda: group.register(registration, cancelled=self._closing)  # noqa: E731
        try:
            register()
        except ZooKeeperUnavailableError:
            if self._closing.is_set():
                raise ConsumerShutdownError("shutdown() while create_message_streams() was registering") from None
            raise
        lease = SessionLease(
            BoundedZooKeeper(self._zk, self._session_timeout_s() / 3.0),
            group.paths.member(self.consumer_id), cfg.zookeeper_session_timeout_ms / 1000.0,
            name=f"zkconsumer-lease-{self.consumer_id}", negotiated=self._negotiated,
        )
        watcher = GroupWatcher(self._zk, group.paths, self._request_rebalance, topic_allowed)
        rebalancer = Rebalancer(
            group=group,
            topic_count=count,
            assignor=assignors.get_assignor(cfg.partition_assignment_strategy),
            queue_for=queue_for,
            streams=self._streams,
            fetchers=self._fetchers,
            committer=self._committer,
            auto_commit=cfg.auto_commit_enable,
            fetch_size=cfg.fetch_message_max_bytes,
            max_retries=cfg.rebalance_max_retries,
            backoff_ms=cfg.rebalance_backoff_ms,
            exclude_internal_topics=cfg.exclude_internal_topics,
            register=register,
            watch_topics=watcher.watch_topics,
            on_failure=self._background_failure,
            listener=self._listener,
            on_rebalanced=self._rebalanced,
            on_attempt_failed=self.metrics.record_failed_rebalance_attempt,
            read_offsets=self._committer.read_offsets,
        )
        with self._state_lock:
            self._check_open()
            self._watcher = watcher
        try:  # armed before the rebalancer's first read of members and topics
            watcher.start()  # may block in kazoo while ZooKeeper is away; shutdown() releases it
        except NoAuthError as exc:
            raise ZooKeeperAccessError(group.paths.ids, "watching") from exc
        except KazooException as exc:
            if self._closing.is_set():
                raise ConsumerShutdownError("shutdown() while create_message_streams() was joining the group") from exc
            raise ZooKeeperUnavailableError(f"could not watch {group.paths.ids}: {exc!r}") from exc
        with self._state_lock:
            self._check_open()
            self._lease, self._rebalancer = lease, rebalancer
            lease.start()
            rebalancer.start()
        while not rebalancer.wait_first_assignment(timeout=0.1):
            if self._closing.is_set():
                break
        self._failure.raise_if_failed()
        self._start_periodic_threads()

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

    def _commit_retrying(self, budget_s: float, *, during_shutdown: bool = False) -> None:
        """:meth:`_commit`, retried on retriable errors for up to ``budget_s`` (jittered backoff, 0.1..1 s).

        Outside shutdown, shutdown() beginning ends the wait with
        :class:`ConsumerShutdownError`. The last retriable error is raised when
        the budget runs out; a non-retriable one at once.

        Each :meth:`_commit` call is one attempt for the metrics
        (``metrics.record_commit``): a commit if it returns, a failure if it raises.
        """
        deadline = time.monotonic() + budget_s
        delay = 0.1
        while True:
            try:
                try:
                    self._commit()
                except BaseException:
                    self.metrics.record_commit(False)
                    raise
                self.metrics.record_commit(True)
                return
            except ZkConsumerError as exc:
                remaining = deadline - time.monotonic()
                # A refused commit of a revoked generation is not retried here: once the rebalance
                # ends, those partitions may belong to another member, and a later attempt would
                # silently leave what was handed out uncommitted. The caller decides.
                if not exc.retriable or remaining <= 0 or isinstance(exc, RebalanceInProgressError):
                    raise
                if self._closing.is_set() and not during_shutdown:
                    raise ConsumerShutdownError("shutdown() while commit_offsets() was retrying") from exc
                log.info("%s: offset commit failed (%s); retrying for up to %.1fs more", self.consumer_id, exc,
                         remaining)
                pause = min(remaining, delay * (0.5 + random.random()))
                delay = min(1.0, delay * 2)
                if during_shutdown:
                    time.sleep(pause)
                elif self._closing.wait(pause):
                    raise ConsumerShutdownError("shutdown() while commit_offsets() was retrying") from exc

    def _commit(self) -> None:
        """Commit what was handed out; partitions found owned by someone else are given up."""
        if self._rebalancer is None:
            return
        fenced: List[Tuple[str, int]] = []
        try:
            fenced = self._committer.commit(self._rebalancer.owned_partitions())
        except OffsetStorageError as exc:
            fenced = exc.fenced
            raise
        finally:
            if fenced:
                self._rebalancer.ownership_lost(fenced)

    # ------------------------------------------------------ callbacks (signal only)

    def _request_rebalance(self, reason: str) -> None:
        if self._rebalancer is not None:
            self._rebalancer.request(reason)

    def _on_zk_state(self, state: str) -> None:
        """kazoo's connection thread: only signal."""
        if state == KazooState.CONNECTED and self._group is not None:
            self._group.note_session()  # a session of ours: its leftover nodes may be replaced later
        if state == KazooState.LOST:
            self._session_was_lost = True
            log.warning("%s: ZooKeeper session expired", self.consumer_id)
            if self._rebalancer is not None:
                self._rebalancer.session_lost()
        elif state == KazooState.SUSPENDED:
            log.warning("%s: ZooKeeper connection lost; still consuming owned partitions", self.consumer_id)
        elif state == KazooState.CONNECTED and self._session_was_lost:
            self._session_was_lost = False
            log.info("%s: new ZooKeeper session; rejoining the group", self.consumer_id)
            if self._rebalancer is not None:
                self._rebalancer.session_restored()

    def _rebalanced(self, duration_s: float) -> None:
        """The rebalancer thread: a rebalance succeeded; the current session's proofs count for the lease."""
        self.metrics.record_rebalance(duration_s)
        if self._lease is not None:
            self._lease.accept_session()

    def _session_proven(self) -> bool:
        """Fetchers may queue data: the ZooKeeper session was proven alive within its timeout.

        After a freeze longer than the session timeout (SIGSTOP, a stalled VM)
        this is false at once, before kazoo learns the session expired, so a
        resumed member does not hand out backlog that a successor owns by now.
        """
        return self._lease is None or self._lease.valid()

    def _background_failure(self, error: BaseException) -> None:
        """A background thread failed: make every iterator and commit raise it (as a ZkConsumerError)."""
        if self._failure.set(error):
            log.error("%s: background failure: %r", self.consumer_id, error)
            for stream in self._streams:
                stream.queue.wake_consumers()

