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
import socket
import threading
import time
import uuid
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from . import assignors, security, zkformat
from .config import ConsumerConfig
from .errors import ConfigurationError, ConsumerShutdownError, ZkConsumerError, ZooKeeperUnavailableError
from .fetcher import FetcherManager
from .group import GroupClient
from .lease import SessionLease
from .metrics import ConsumerMetrics, MetricsReporter
from .offset_storage import OffsetStorageError, make_offset_storage
from .offsets import AutoCommitter, OffsetCommitter
from .partition_info import ChunkQueue
from .rebalancer import ConsumerRebalanceListener, Rebalancer, RebalanceStatus
from .stream import Decoder, FailureSignal, KafkaStream, clear_streams
from .topic_count import StaticTopicCount, TopicCount, TopicFilter, WildcardTopicCount
from .watchers import GroupWatcher

log = logging.getLogger(__name__)


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
        self._listener = rebalance_listener
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
        self._metrics_interval_s = metrics_interval_s
        self._reporter: Optional[MetricsReporter] = None
        self._recorded = (0, 0)
        self._lease: Optional[SessionLease] = None

        self._zk = self._connect_zookeeper()
        self._group = GroupClient(
            self._zk,
            self.config.group_id,
            self.consumer_id,
            retry_timeout_s=self.config.zookeeper_session_timeout_ms / 1000.0,
            acl=security.zookeeper_acls(self.config),
        )
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
        Raises a background failure if one happened, and
        :class:`ConsumerShutdownError` after :meth:`shutdown`.
        """
        self._failure.raise_if_failed()
        if self._state is ConnectorState.SHUT_DOWN:
            raise ConsumerShutdownError("commit_offsets() after shutdown()")
        self._commit()

    @property
    def zk_client(self) -> KazooClient:
        """The connector's ZooKeeper client, for monitoring and tests. Do not stop or close it."""
        return self._zk

    @property
    def status(self) -> Optional[RebalanceStatus]:
        """The rebalancer's state, owned partitions and last error (``None`` before joining)."""
        return None if self._rebalancer is None else self._rebalancer.status

    def metrics_snapshot(self) -> Dict[str, Any]:
        """Per-stream queue sizes and partitions, rebalances, messages/s, bytes/s, per-partition lag.

        Rates cover the time since the previous snapshot. Lag is the fetched
        high watermark minus the next offset to hand out.
        """
        messages = sum(s.delivered[0] for s in self._streams)
        size = sum(s.delivered[1] for s in self._streams)
        self.metrics.record_messages(messages - self._recorded[0], size - self._recorded[1])
        self._recorded = (messages, size)
        status = self.status
        owned = dict(status.owned) if status is not None else {}
        queue_sizes: Dict[str, int] = {}
        for stream in self._streams:  # static streams of different topics share a thread id
            queue_sizes[stream.thread_id] = queue_sizes.get(stream.thread_id, 0) + len(stream.queue)
        lag = {
            (p["topic"], p["partition"]): p["consumer_lag"]
            for p in self._fetchers.metrics()["partitions"].values()
            if p["consumer_lag"] is not None
        }
        return self.metrics.snapshot(owned, queue_sizes, lag, status.as_metrics() if status is not None else None)

    def shutdown(self) -> None:
        """Leave the group: idempotent, ordered, joins every thread started.

        Order: the metrics reporter and auto-commit stop; the coordination stops
        (watches, rebalancer, session lease: :meth:`_stop_coordination`);
        fetchers stop; every stream ends (shutdown sentinel); offsets are
        committed (``auto.commit.enable``); the member leaves the group
        (:meth:`_leave_group`); the ZooKeeper session closes, removing our
        ephemeral nodes so the group rebalances at once.
        """
        with self._state_lock:
            if self._state is ConnectorState.SHUT_DOWN:
                return
            self._state = ConnectorState.SHUT_DOWN
        log.info("%r shutting down", self)
        try:
            if self._reporter is not None:
                self._reporter.stop()
            if self._auto_committer is not None:
                self._auto_committer.stop()
            self._stop_coordination()
            self._fetchers.shutdown()
            clear_streams(self._streams)
            for stream in self._streams:
                stream.queue.put_shutdown()
            if self.config.auto_commit_enable and self._joined():
                try:
                    self._commit()
                except ZkConsumerError as exc:
                    log.warning("%s: final offset commit failed: %s", self.consumer_id, exc)
            self._leave_group()
        finally:
            if self.prometheus is not None:
                self.prometheus.close()
            self._committer.close()
            self._zk.remove_listener(self._on_zk_state)
            self._zk.stop()
            self._zk.close()

    def _stop_coordination(self) -> None:
        """Stop (and join) whatever could change ownership or restart fetchers. A subclass hook."""
        if self._watcher is not None:
            self._watcher.stop()
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
            security.prepare_zookeeper(client, cfg)  # open /consumers; a wrong zookeeper.auth fails here
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

    def _join(self, count: TopicCount, queue_for: Any, topic_allowed: Any) -> None:
        self._begin_join()
        cfg = self.config
        registration = zkformat.encode_registration(count.subscription, count.pattern, int(time.time() * 1000))
        register = lambda: self._group.register(registration)  # noqa: E731
        register()
        self._lease = SessionLease(
            self._zk, self._group.paths.member(self.consumer_id), cfg.zookeeper_session_timeout_ms / 1000.0,
            name=f"zkconsumer-lease-{self.consumer_id}",
        )
        self._lease.start()
        self._watcher = GroupWatcher(self._zk, self._group.paths, self._request_rebalance, topic_allowed)
        self._rebalancer = Rebalancer(
            group=self._group,
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
            watch_topics=self._watcher.watch_topics,
            on_failure=self._background_failure,
            listener=self._listener,
            on_rebalanced=self.metrics.record_rebalance,
            read_offsets=self._committer.read_offsets,
        )
        self._watcher.start()  # armed before the rebalancer's first read of members and topics
        self._rebalancer.start()
        self._rebalancer.wait_first_assignment(timeout=None)
        self._start_periodic_threads()

    def _start_periodic_threads(self) -> None:
        """Start auto-commit (``auto.commit.enable``) and the metrics reporter (``metrics_interval_s``).

        Called once the member has joined; :meth:`shutdown` stops and joins both.
        """
        if self.config.auto_commit_enable:
            self._auto_committer = AutoCommitter(
                self._commit, self.config.auto_commit_interval_ms, name=f"zkconsumer-autocommit-{self.consumer_id}"
            )
            self._auto_committer.start()
        if self._metrics_interval_s:
            self._reporter = MetricsReporter(
                self.metrics_snapshot, self._metrics_interval_s, name=f"zkconsumer-metrics-{self.consumer_id}"
            )
            self._reporter.start()

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

    def _session_proven(self) -> bool:
        """Fetchers may queue data: the ZooKeeper session was proven alive within its timeout.

        After a freeze longer than the session timeout (SIGSTOP, a stalled VM)
        this is false at once, before kazoo learns the session expired, so a
        resumed member does not hand out backlog that a successor owns by now.
        """
        return self._lease is None or self._lease.valid()

    def _background_failure(self, error: BaseException) -> None:
        """A background thread failed: make every iterator and commit raise it."""
        if self._failure.set(error):
            log.error("%s: background failure: %r", self.consumer_id, error)
            for stream in self._streams:
                stream.queue.wake_consumers()
