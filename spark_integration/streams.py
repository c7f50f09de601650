"""``foreach_stream``: one Spark task per stream, each task one member of the consumer group.

:class:`KafkaStreamSource` ``(props, {topic: n, ...})`` describes
``sum(n)`` streams. :meth:`KafkaStreamSource.foreach_stream` runs one Spark
task per stream; each task, on its executor:

1. creates its own :class:`~zkconsumer.ZookeeperConsumerConnector` (never shared
   with the driver or other tasks) with ``auto.commit.enable=false`` and joins
   the group subscribing ``{topic: 1}``: the group has one member per running task;
2. optionally waits for the peers expected to run at the same time (see
   *Start-up* below);
3. calls ``handler(stream)`` with a :class:`BoundedStream`, an iterable of
   :class:`~zkconsumer.MessageAndMetadata` that *ends* (instead of raising
   :class:`~zkconsumer.ConsumerTimeoutError`) once no message arrived for
   ``consumer.timeout.ms``, or after ``max_messages``;
4. if the handler returned normally, commits the offsets of every message the
   stream handed out (for the partitions the member owns at that moment), then
   shuts the member down. If the handler raised, the member shuts down
   *without* committing and the exception fails the task: Spark retries it and
   the retry re-reads every uncommitted message (at-least-once).

Semantics (at-least-once; document these to users):

* A message handed to the handler is processed as far as offsets go: a handler
  that returns normally must have dealt with every message it pulled.
* **Duplicates** happen when a partition moves between members while its
  messages are handed out but not yet committed: the new owner resumes from the
  last committed offset. That happens when a member fails (its retry, or a
  peer, re-reads its uncommitted messages), and when members join while others
  still hold uncommitted messages (with more tasks than task slots, a task of
  the next wave starts as soon as one of the previous wave finishes, while its
  peers may not have committed yet). Members leaving after committing cause
  none: their partitions move with offsets already committed.
* **No loss**: a member only ever writes offsets of messages its own handler
  processed, after the handler returned (and the connector's commit is fenced
  on ownership, so it never overwrites the offsets of a partition's new owner).
* A stream also ends while a rebalance pauses delivery for longer than
  ``consumer.timeout.ms``; what was not consumed stays uncommitted for the next
  run. Keep ``consumer.timeout.ms`` above the group's rebalance time (a few seconds).

Start-up: with N tasks and C concurrent task slots, Spark starts C tasks at
once. Without care the first member to join would take every partition and
start consuming before its peers join, and the partitions it then hands over
would be read twice. So each member waits (at most ``settle_timeout_s``) until
the group has as many members as tasks expected to run with it (its "wave" of
C tasks, :func:`wave_size`; the last wave may be smaller) and the partitions of
its topic are owned as the assignment intends (:func:`ownership_settled`),
before consuming. Retried attempts do not wait: they take whatever is left. The
wait is an optimisation against duplicates; correctness never depends on it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from zkconsumer import (
    Blacklist,
    ConfigurationError,
    ConsumerTimeoutError,
    KafkaStream,
    MessageAndMetadata,
    Whitelist,
    ZookeeperConsumerConnector,
)
from zkconsumer.consumer.topic_count import SubscriptionError
from zkconsumer.structs import TopicPartition
from zkconsumer.zookeeper.group import GroupClient
from zkconsumer.zookeeper.zkformat import Registration

from .connect import spark_context
from .credentials import consumer_config
from .options import MemberMetrics, PropsLike, member_config, plain_props

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import SparkContext

__all__ = [
    "KafkaStreamSource", "StreamSpec", "StreamResult", "BoundedStream", "Handler",
    "run_member", "ownership_settled", "wave_size",
]

log = logging.getLogger(__name__)

#: What users pass: called once per task with the task's stream; its return value is reported.
Handler = Callable[["BoundedStream"], Any]


@dataclass(frozen=True)
class StreamSpec:
    """Stream ``index`` (``0 <= index < n``) of ``topic`` in a ``{topic: n}`` subscription."""

    topic: str
    index: int


@dataclass(frozen=True)
class StreamResult:
    """What one successful task did.

    ``positions``: per partition, the offset after the last message handed to
    the handler (what was committed for the partitions the member still owned).
    ``value``: what the handler returned (must be picklable).
    ``metrics_port``: the port the member served its Prometheus metrics on
    (``None`` if it served none).
    """

    topic: str
    stream_index: int
    consumer_id: str
    attempt: int
    messages: int
    positions: Dict[TopicPartition, int] = field(default_factory=dict)
    value: Any = None
    metrics_port: Optional[int] = None


class BoundedStream(Iterable[MessageAndMetadata]):
    """A :class:`~zkconsumer.KafkaStream` that ends when idle or after ``max_messages``.

    Iterating it yields :class:`~zkconsumer.MessageAndMetadata`. It ends (for
    good: iterating again yields nothing) once no message arrived for
    ``consumer.timeout.ms``, once ``max_messages`` were handed out, or when the
    member shuts down. A loop left early with ``break`` can be resumed by
    iterating again. No message is taken from the underlying stream unless it
    is handed to the caller, so the committed offsets are exactly what was handed out.
    """

    def __init__(self, stream: KafkaStream, topic: str, consumer_id: str, max_messages: Optional[int] = None,
                 metrics_port: Optional[int] = None) -> None:
        self._stream = stream
        self.topic = topic
        self.consumer_id = consumer_id
        self.max_messages = max_messages
        #: The port this member serves its Prometheus metrics on (``None``: none).
        self.metrics_port = metrics_port
        #: Messages handed out so far.
        self.count = 0
        #: Per partition, the offset after the last message handed out.
        self.positions: Dict[TopicPartition, int] = {}
        #: Why the stream ended: ``None`` while it has not, else ``"idle"``, ``"max_messages"`` or ``"shutdown"``.
        self.ended: Optional[str] = None

    @property
    def thread_id(self) -> str:
        """The group thread id this stream consumes as (``<consumer id>-0``)."""
        return self._stream.thread_id

    def __iter__(self) -> Iterator[MessageAndMetadata]:
        iterator = iter(self._stream)
        while self.ended is None:
            if self.max_messages is not None and self.count >= self.max_messages:
                self.ended = "max_messages"
                return
            try:
                message = next(iterator)
            except ConsumerTimeoutError:
                self.ended = "idle"
                return
            except StopIteration:
                self.ended = "shutdown"
                return
            self.count += 1
            self.positions[(message.topic, message.partition)] = message.offset + 1
            yield message

    def __repr__(self) -> str:
        return f"BoundedStream({self.thread_id}, handed_out={self.count}, ended={self.ended})"


# --------------------------------------------------------------------------- start-up barrier


def wave_size(task_index: int, tasks: int, slots: int) -> int:
    """How many of ``tasks`` tasks run together with task ``task_index`` when ``slots`` run at once.

    Spark starts tasks in index order as slots free up, so tasks come in waves
    of ``slots``; the last wave may be smaller.

    >>> [wave_size(i, 5, 2) for i in range(5)]
    [2, 2, 2, 2, 1]
    """
    if slots < 1:
        return 1
    first = (task_index // slots) * slots
    return max(1, min(slots, tasks - first))


def _streams_for(registration: Registration, topic: str) -> int:
    """How many streams a member registration has for ``topic`` (wildcards evaluated)."""
    if registration.pattern == "static":
        return registration.subscription.get(topic, 0)
    for regex, count in registration.subscription.items():
        try:
            topic_filter = Whitelist(regex) if registration.pattern == "white_list" else Blacklist(regex)
        except SubscriptionError:
            return 0
        return count if topic_filter.is_topic_allowed(topic, True) else 0
    return 0


def ownership_settled(
    registrations: Mapping[str, Registration], topic: str, partitions: Sequence[int], owners: Mapping[int, str]
) -> bool:
    """Whether ``topic``'s owner nodes show a finished rebalance of the current members.

    True when every partition has an owner, every owner is a thread id of a
    registered member, and as many distinct threads own partitions as the
    assignment gives partitions to (``min(threads, partitions)``: true of both
    Range and RoundRobin).

    >>> reg = Registration({"t": 1}, "static", None, 1)
    >>> ownership_settled({"a": reg, "b": reg}, "t", [0, 1], {0: "a-0", 1: "a-0"})
    False
    >>> ownership_settled({"a": reg, "b": reg}, "t", [0, 1], {0: "a-0", 1: "b-0"})
    True
    """
    threads = {f"{cid}-{i}" for cid, reg in registrations.items() for i in range(_streams_for(reg, topic))}
    holders = set(owners.values())
    return (
        bool(threads)
        and set(owners) == set(partitions)
        and holders <= threads
        and len(holders) == min(len(threads), len(partitions))
    )


def wait_for_peers(
    group: GroupClient,
    topic: str,
    members: int,
    timeout_s: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Poll ZooKeeper until the group has ``members`` members and ``topic``'s ownership settled.

    Returns ``False`` (and the caller goes ahead anyway) after ``timeout_s``.
    """
    deadline = clock() + timeout_s
    while True:
        registrations = group.members()
        if len(registrations) >= members:
            partitions = group.partitions_for_topics([topic]).get(topic, [])
            if ownership_settled(registrations, topic, partitions, group.owners(topic)):
                return True
        if clock() >= deadline:
            log.info("%s: %d of %d expected members after %.1fs; consuming anyway",
                     group.consumer_id, len(registrations), members, timeout_s)
            return False
        sleep(0.1)


# --------------------------------------------------------------------------- one member


def _connect(config: Any, metrics_port: Optional[int], metrics_pushgateway: Optional[str]) -> ZookeeperConsumerConnector:
    """The member's connector, serving/pushing its metrics as asked.

    A metrics port that cannot be bound (another process holds it) must not
    fail the task: the member serves on a free port instead, with a warning.
    """
    try:
        return ZookeeperConsumerConnector(config, metrics_port=metrics_port, metrics_pushgateway=metrics_pushgateway)
    except ConfigurationError as exc:
        if metrics_port is None or getattr(exc, "property", None) != "metrics_port":
            raise
        log.warning("%s; serving this member's metrics on a free port instead", exc)
        return ZookeeperConsumerConnector(config, metrics_port=0, metrics_pushgateway=metrics_pushgateway)


def run_member(
    props: Mapping[str, str],
    spec: StreamSpec,
    handler: Handler,
    *,
    max_messages: Optional[int] = None,
    peers: int = 1,
    settle_timeout_s: float = 10.0,
    attempt: int = 0,
    metrics_port: Optional[int] = None,
    metrics_pushgateway: Optional[str] = None,
) -> StreamResult:
    """Be one group member for one stream: join, (wait for ``peers``), ``handler(stream)``, commit, leave.

    Offsets are committed only if ``handler`` returns; if it raises, the member
    leaves without committing and the exception propagates. Runs anywhere (a
    Spark task, or a plain process in tests).

    ``metrics_port`` (0: a free port) serves the member's Prometheus metrics on
    ``http://<executor>:<port>/metrics`` while it runs (the port actually used
    is logged, given to the handler as ``stream.metrics_port`` and returned in
    :attr:`StreamResult.metrics_port`; if the port is taken, a free one is
    used, with a warning). ``metrics_pushgateway`` pushes them to a Prometheus
    Pushgateway every 10 s and once more as the member leaves.
    """
    config = member_config(consumer_config(props), max_messages)
    connector = _connect(config, metrics_port, metrics_pushgateway)
    served: Optional[int] = connector.prometheus.port if connector.prometheus is not None else None
    if served is not None:
        log.info("%s: serving Prometheus metrics on port %d", connector.consumer_id, served)
    try:
        stream = connector.create_message_streams({spec.topic: 1})[spec.topic][0]
        if peers > 1:
            group = GroupClient(connector.zk_client, config.group_id, connector.consumer_id)
            wait_for_peers(group, spec.topic, peers, settle_timeout_s)
        bounded = BoundedStream(stream, spec.topic, connector.consumer_id, max_messages, served)
        value = handler(bounded)
        connector.commit_offsets()
        log.info("%s: handled %d messages of %s (stream ended: %s); offsets committed",
                 connector.consumer_id, bounded.count, spec.topic, bounded.ended)
    finally:
        connector.shutdown()  # auto.commit.enable is false: commits nothing
    return StreamResult(spec.topic, spec.index, connector.consumer_id, attempt, bounded.count,
                        dict(bounded.positions), value, served)


@dataclass(frozen=True)
class _MemberTask:
    """The picklable function a Spark task runs: plain properties, the specs and the handler."""

    props: Dict[str, str]
    specs: Tuple[StreamSpec, ...]
    handler: Handler
    max_messages: Optional[int]
    settle_timeout_s: float
    concurrency: Optional[int]
    metrics: MemberMetrics = MemberMetrics()

    def run(self) -> StreamResult:
        from pyspark import TaskContext

        context = TaskContext.get()
        index = context.partitionId() if context is not None else 0
        attempt = context.attemptNumber() if context is not None else 0
        spec = self.specs[index % len(self.specs)]
        peers = 1
        if attempt == 0 and self.concurrency:
            peers = wave_size(index, len(self.specs), self.concurrency)
        return run_member(self.props, spec, self.handler, max_messages=self.max_messages, peers=peers,
                          settle_timeout_s=self.settle_timeout_s, attempt=attempt,
                          metrics_port=self.metrics.port_for(index), metrics_pushgateway=self.metrics.pushgateway)

    def results(self, _elements: Iterable[Any]) -> Iterator[StreamResult]:
        """For ``mapPartitions``: one :class:`StreamResult` per task."""
        yield self.run()

    def __call__(self, _elements: Iterable[Any]) -> None:
        """For ``foreachPartition``: the partition's elements are ignored."""
        self.run()


# --------------------------------------------------------------------------- the source


class KafkaStreamSource:
    """``sum(topic_count.values())`` streams of a ZooKeeper consumer group, consumed by Spark tasks.

    ``props`` are consumer properties (validated here, on the driver):
    ``zookeeper.connect`` and ``group.id`` are required; ``auto.commit.enable``
    must be unset or false; ``consumer.timeout.ms`` must be ``>= 0`` unless
    ``max_messages`` bounds each stream. ``settle_timeout_s`` bounds the
    start-up wait for peers (see the module docstring).

    Metrics (see the documentation's *Monitoring* page): with ``metrics_port=P`` the member
    of Spark partition ``i`` serves its Prometheus metrics on port ``P + i`` of
    its executor while it runs (``0``: each a free port, logged and returned in
    :attr:`StreamResult.metrics_port`); with ``metrics_pushgateway="host:port"``
    each member pushes them to that Pushgateway every 10 s and as it leaves.

    >>> source = KafkaStreamSource({"zookeeper.connect": "zk:2181", "group.id": "g",
    ...                             "consumer.timeout.ms": 2000}, {"events": 2})
    >>> source.num_streams, source.specs[1]
    (2, StreamSpec(topic='events', index=1))
    """

    def __init__(
        self,
        props: PropsLike,
        topic_count: Mapping[str, int],
        *,
        max_messages: Optional[int] = None,
        settle_timeout_s: float = 10.0,
        metrics_port: Optional[int] = None,
        metrics_pushgateway: Optional[str] = None,
    ) -> None:
        member_config(props, max_messages)  # validates, raising ConfigurationError on the driver
        if not topic_count:
            raise ConfigurationError("topic_count", "subscribe at least one topic")
        for topic, n in topic_count.items():
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise ConfigurationError("topic_count", f"stream count for {topic!r} must be a positive integer, not {n!r}")
        self.props = plain_props(props)
        self.topic_count = dict(topic_count)
        self.max_messages = max_messages
        self.settle_timeout_s = settle_timeout_s
        self.specs: Tuple[StreamSpec, ...] = tuple(
            StreamSpec(topic, i) for topic in sorted(self.topic_count) for i in range(self.topic_count[topic])
        )
        self.metrics = MemberMetrics(metrics_port, metrics_pushgateway).validate(len(self.specs))

    @property
    def num_streams(self) -> int:
        return len(self.specs)

    def _task(self, handler: Handler, concurrency: Optional[int]) -> _MemberTask:
        if not callable(handler):
            raise TypeError(f"handler must be callable, not {type(handler).__name__}")
        return _MemberTask(self.props, self.specs, handler, self.max_messages, self.settle_timeout_s, concurrency,
                           self.metrics)

    def foreach_stream(self, sc: "SparkContext", handler: Handler) -> List[StreamResult]:
        """Run ``handler(stream)`` in one Spark task per stream; returns each task's :class:`StreamResult`.

        Blocks until every task succeeded (Spark retries failed tasks up to
        ``spark.task.maxFailures``) and raises Spark's error if one gave up.
        ``sc`` may also be a classic SparkSession; a Spark Connect session (no
        RDD API) raises :class:`~spark_integration.connect.SparkConnectUnsupportedError`.
        """
        sc = spark_context(sc, "foreach_stream")
        task = self._task(handler, concurrency=sc.defaultParallelism)
        n = self.num_streams
        return sc.parallelize(range(n), n).mapPartitions(task.results).collect()

    def partition_handler(self, handler: Handler, concurrency: Optional[int] = None) -> Callable[[Iterable[Any]], None]:
        """A plain function for ``rdd.foreachPartition(...)``: each Spark partition becomes one member.

        Partition ``i`` consumes stream ``specs[i % num_streams]``; give the RDD
        :attr:`num_streams` partitions (e.g. ``sc.parallelize(range(n), n)``).
        The partition's elements are ignored. ``concurrency`` (e.g.
        ``sc.defaultParallelism``) enables the start-up wait for peers.
        """
        return self._task(handler, concurrency)
