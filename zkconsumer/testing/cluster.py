"""``LocalCluster``: a real ZooKeeper and real Kafka 0.9.0.1 brokers for tests (README: "LocalCluster
for your own tests").

Every JVM runs in its own process group, dies with the test process (see :mod:`zkconsumer.testing.processes`),
logs to ``cluster.log_dir`` and lives in a temporary directory that ``stop()`` removes. An ``atexit`` hook
stops clusters a test forgot to stop; directories of crashed test processes are swept by the next cluster
(see :mod:`zkconsumer.testing.workdir`).

Replica placement is deterministic: partition ``p`` of a topic created by :meth:`LocalCluster.create_topic`
on live brokers ``B`` (sorted) has replicas ``B[(p + j) % len(B)]`` for ``j < replication``; the first is
the leader. With brokers 0, 1, 2, partition 0 is led by broker 0, partition 1 by broker 1, and so on.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import re
import signal
import threading
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, TypeVar, Union

from kazoo.exceptions import NodeExistsError, NoNodeError

from zkconsumer.testing import processes
from zkconsumer.testing.core import HOST, KAFKA_MAIN, ZooKeeperControls, stop_servers
from zkconsumer.testing.distribution import (
    ensure_kafka_distribution,
    find_java,
    kafka_classpath,
)
from zkconsumer.testing.errors import ClusterStartError, LocalClusterError
from zkconsumer.testing.ports import free_ports
from zkconsumer.testing.probes import fetch_metadata
from zkconsumer.testing.properties import (
    BROKER_ZK_SESSION_TIMEOUT_MS,
    SERVER_LOG4J,
    PropertyValue,
    broker_properties,
    format_value,
    render_properties,
)
from zkconsumer.testing.workdir import WorkDir, sweep_abandoned

_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_Value = Union[bytes, str, None]
_Cluster = TypeVar("_Cluster", bound="ClusterBase")

_RUNNING_CLUSTERS: Set["ClusterBase"] = set()
_RUNNING_LOCK = threading.Lock()


@atexit.register
def _stop_running_clusters() -> None:
    """atexit backstop: stop every cluster that is still running."""
    with _RUNNING_LOCK:
        clusters = list(_RUNNING_CLUSTERS)
    for cluster in clusters:
        cluster.stop()


def replica_assignment(brokers: Sequence[int], partitions: int, replication: int) -> Dict[int, List[int]]:
    """Deterministic replica lists: partition p gets ``sorted(brokers)[(p + j) % n]``, j < replication.

    >>> replica_assignment([2, 0, 1], 4, 2)
    {0: [0, 1], 1: [1, 2], 2: [2, 0], 3: [0, 1]}
    """
    ordered = sorted(brokers)
    if partitions < 1:
        raise LocalClusterError("a topic needs at least one partition")
    if not 1 <= replication <= len(ordered):
        raise LocalClusterError(f"replication {replication} impossible with live brokers {ordered}")
    return {p: [ordered[(p + j) % len(ordered)] for j in range(replication)] for p in range(partitions)}


def validate_topic_name(name: str) -> None:
    """Raise LocalClusterError unless ``name`` is a legal Kafka 0.9 topic name."""
    if not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise LocalClusterError(f"illegal topic name {name!r}: use 1-249 of [a-zA-Z0-9._-]")


def _json(value: Mapping[str, Any]) -> bytes:
    """Compact JSON, as Kafka's AdminUtils writes it."""
    return json.dumps(value, separators=(",", ":")).encode()


def _as_bytes(value: _Value) -> Optional[bytes]:
    return value.encode("utf-8") if isinstance(value, str) else value


class ClusterBase(ZooKeeperControls):
    """:class:`~zkconsumer.testing.LocalCluster` without Kerberos (its arguments and contracts are documented
    there); the base the optional parts (:class:`~zkconsumer.testing.kerberos.KerberizedCluster`, this
    project's SSL listeners and ZooKeeper ensembles) build on."""

    def __enter__(self: _Cluster) -> _Cluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = f" zk={self.zk_connect}" if self._state == "running" else ""
        return f"<LocalCluster {self._state} brokers={self._broker_count}{where}>"

    def start(self: _Cluster) -> _Cluster:
        """Start ZooKeeper, then every broker; return once all are registered in /brokers/ids.

        Idempotent while running. On failure everything started is stopped and
        ClusterStartError (with the failing JVM's log tail) is raised; MissingDependencyError
        or KafkaDistributionError if java or the distribution is missing.
        """
        with self._lock:
            if self._state == "running":
                return self
            if self._state == "stopped":
                raise LocalClusterError("this LocalCluster was stopped; create a new one")
            with _RUNNING_LOCK:
                _RUNNING_CLUSTERS.add(self)
            self._state = "running"
            try:
                self._start()
            except BaseException:
                self.stop()
                raise
            return self

    def _start(self) -> None:
        self._java = find_java()
        self._home = ensure_kafka_distribution(self._requested_home)
        self._classpath = kafka_classpath(self._home)
        sweep_abandoned()
        self._work = WorkDir()
        for sub in ("logs", "conf", "tmp"):
            (self._work.path / sub).mkdir()
        self._allocate_ports()
        self._write_log4j_configs()
        self._start_zookeeper()
        for broker_id in self.broker_ids:
            self._brokers[broker_id] = self._make_broker(broker_id)
            self._brokers[broker_id].start()
        for broker_id in self.broker_ids:
            self._wait_registered(broker_id, self._startup_timeout)

    def stop(self, grace: float = 5.0) -> None:
        """Stop clients, brokers and ZooKeeper; remove the work directory. Idempotent.

        ZooKeeper gets SIGTERM, then SIGKILL after ``grace`` seconds. Brokers get SIGKILL
        at once, as their data is deleted anyway (a graceful stop of every broker costs a
        chain of controller hand-offs, ~3 s). Returns only when every process has exited
        and been reaped.
        """
        with self._lock:
            if self._state == "stopped":
                return
            self._state = "stopped"
            try:
                self._close_clients()
                processes.kill_all([b.process for b in self._brokers.values() if b.process is not None])
                stop_servers([z.process for z in self._zookeeper_processes() if z.process is not None], grace)
            finally:
                if self._work is not None:
                    self._work.remove()
                with _RUNNING_LOCK:
                    _RUNNING_CLUSTERS.discard(self)

    def _allocate_ports(self, extra: int = 0) -> List[int]:
        """Pick ZooKeeper's and the brokers' ports, and ``extra`` more for a subclass (returned), all distinct."""
        self._zk_port, *ports = free_ports(1 + self._broker_count + extra)
        self._broker_ports = dict(zip(self.broker_ids, ports))
        return ports[self._broker_count:]

    def _close_clients(self) -> None:
        clients = self._clients + ([self._admin] if self._admin is not None else [])
        self._clients, self._admin = [], None
        for client in clients:
            with contextlib.suppress(Exception):  # a client already broken must not block the shutdown
                client.stop()
                client.close()

    @property
    def bootstrap_servers(self) -> str:
        """Every broker, running or not, as ``127.0.0.1:p0,127.0.0.1:p1,...`` in id order."""
        self._require_running()
        return ",".join(f"{HOST}:{self._broker_ports[i]}" for i in self.broker_ids)

    def broker_port(self, broker_id: int) -> int:
        """The port of broker ``broker_id`` (stable across restarts)."""
        self._require_running()
        self._check_broker_id(broker_id)
        return self._broker_ports[broker_id]

    def _write_log4j_configs(self) -> None:
        (self.work_dir / "conf" / "log4j-server.properties").write_text(render_properties(SERVER_LOG4J))

    def _make_broker(self, broker_id: int) -> processes.JavaProcess:
        data_dir = self.work_dir / f"kafka-{broker_id}"
        config = self.work_dir / "conf" / f"broker-{broker_id}.properties"
        overrides = {**self._broker_overrides(broker_id), **self._broker_config}
        props = broker_properties(broker_id, self._broker_ports[broker_id], str(data_dir), self.zk_connect,
                                  cluster_size=self._broker_count, partitions=self.partitions,
                                  overrides=overrides)
        config.write_text(render_properties(props))
        return processes.JavaProcess(
            f"broker {broker_id}", self._java_argv(KAFKA_MAIN, [str(config)], "log4j-server.properties"),
            str(self.log_dir / f"broker-{broker_id}.log"), cwd=str(self.work_dir))

    def _broker_overrides(self, broker_id: int) -> Dict[str, Optional[PropertyValue]]:
        """Settings a subclass adds to broker ``broker_id``'s defaults; ``broker_config`` wins over them."""
        return {}

    def registered_brokers(self) -> List[int]:
        """Broker ids currently registered in ZooKeeper's /brokers/ids, sorted."""
        try:
            return sorted(int(child) for child in self._zk.get_children("/brokers/ids"))
        except NoNodeError:
            return []

    def is_running(self, broker_id: int) -> bool:
        """True while broker ``broker_id``'s JVM runs (it may not be registered yet)."""
        self._check_broker_id(broker_id)
        broker = self._brokers.get(broker_id)
        return broker is not None and broker.running()

    def _is_registered(self, broker_id: int) -> bool:
        return self._zk.exists(f"/brokers/ids/{broker_id}") is not None

    def _wait_registered(self, broker_id: int, timeout: float) -> None:
        self._wait_for(f"broker {broker_id} to register in /brokers/ids", lambda: self._is_registered(broker_id),
                       timeout, self._brokers[broker_id], ClusterStartError)

    def partition_state(self, topic: str, partition: int) -> Dict[str, Any]:
        """The JSON of ``/brokers/topics/<topic>/partitions/<p>/state`` (leader, isr, epochs)."""
        path = f"/brokers/topics/{topic}/partitions/{partition}/state"
        try:
            data, _ = self._zk.get(path)
        except NoNodeError:
            raise LocalClusterError(f"{path} does not exist (no such topic/partition, or not yet created)") from None
        return dict(json.loads(data.decode("utf-8")))

    def leader(self, topic: str, partition: int) -> int:
        """The leader of ``topic``/``partition`` according to ZooKeeper; -1 if it has none."""
        return int(self.partition_state(topic, partition)["leader"])

    def topic_partitions(self, topic: str) -> Dict[int, List[int]]:
        """The replica assignment of ``topic`` from ``/brokers/topics/<topic>``: partition -> brokers."""
        try:
            data, _ = self._zk.get(f"/brokers/topics/{topic}")
        except NoNodeError:
            raise LocalClusterError(f"topic {topic!r} does not exist") from None
        partitions = json.loads(data.decode("utf-8"))["partitions"]
        return {int(p): [int(b) for b in replicas] for p, replicas in partitions.items()}

    def create_topic(self, name: str, partitions: Optional[int] = None, replication: int = 1,
                     config: Optional[Mapping[str, PropertyValue]] = None, *, timeout: float = 60.0) -> str:
        """Create ``name`` the way Kafka's AdminUtils does (ZooKeeper nodes); return ``name``.

        Replicas are placed as the module docstring says, on the brokers registered now.
        ``config`` is the topic-level config (written as is, not validated).
        Returns once every partition has a leader in ZooKeeper and every running
        broker's metadata reports that leader (see :meth:`wait_for_leaders`).
        Raises LocalClusterError if the topic exists or the name is illegal.
        """
        validate_topic_name(name)
        assignment = replica_assignment(self.registered_brokers(), partitions or self.partitions, replication)
        topic_path = f"/brokers/topics/{name}"
        if self._zk.exists(topic_path):
            raise LocalClusterError(f"topic {name!r} already exists")
        topic_config = {key: format_value(value) for key, value in (config or {}).items()}
        self._zk.ensure_path(f"/config/topics/{name}")  # a deleted topic's config may be left over
        self._zk.set(f"/config/topics/{name}", _json({"version": 1, "config": topic_config}))
        body = {"version": 1, "partitions": {str(p): replicas for p, replicas in assignment.items()}}
        try:
            self._zk.create(topic_path, _json(body), makepath=True)
        except NodeExistsError:
            raise LocalClusterError(f"topic {name!r} already exists") from None
        self.wait_for_leaders(name, timeout=timeout)
        return name

    def wait_for_leaders(self, topic: str, timeout: float = 60.0) -> Dict[int, int]:
        """Wait until every partition of ``topic`` has a leader that is a running broker in
        ZooKeeper's state, and every running broker's metadata cache reports that same
        leader. Returns partition -> leader.

        Use after failover too; a partition whose replicas are all down never qualifies
        (ClusterTimeoutError after ``timeout``).
        """
        leaders: Dict[int, int] = {}

        def settled() -> bool:
            nonlocal leaders
            try:
                leaders = {p: self.leader(topic, p) for p in self.topic_partitions(topic)}
            except LocalClusterError:  # not created yet
                return False
            running = [b for b in self.broker_ids if self.is_running(b)]
            if not leaders or any(leader not in running for leader in leaders.values()):
                return False
            return all(self._broker_agrees(b, topic, leaders) for b in running)

        self._wait_for(f"leaders of every partition of {topic!r}", settled, timeout, interval=0.05)
        return leaders

    def _broker_agrees(self, broker_id: int, topic: str, leaders: Mapping[int, int]) -> bool:
        try:
            reported = fetch_metadata(HOST, self._broker_ports[broker_id], [topic], timeout=2.0).get(topic)
        except (OSError, ValueError):
            return False
        return reported == dict(leaders)

    def produce(self, topic: str, values: Iterable[_Value], keys: Optional[Iterable[_Value]] = None,
                partition: Optional[int] = None, acks: Union[int, str] = "all",
                timeout: float = 30.0) -> List[Tuple[int, int]]:
        """Send ``values`` (bytes, or str encoded as UTF-8) with kafka-python, in order.

        ``keys`` pairs up with ``values``; ``partition`` pins every message to one partition
        (else kafka-python's partitioner decides). Returns ``(partition, offset)`` per
        message, once all are acknowledged with ``acks``. Raises kafka-python's errors.
        """
        from kafka import KafkaProducer  # imported lazily: only producers need it

        value_list = list(values)
        key_list = list(keys) if keys is not None else [None] * len(value_list)
        if len(key_list) != len(value_list):
            raise ValueError(f"{len(key_list)} keys for {len(value_list)} values")
        running = [b for b in self.broker_ids if self.is_running(b)] or self.broker_ids
        producer = KafkaProducer(
            bootstrap_servers=[f"{HOST}:{self._broker_ports[b]}" for b in running],
            api_version=(0, 9), acks=acks, enable_idempotence=False, linger_ms=0,
            max_in_flight_requests_per_connection=1, retry_backoff_ms=200,
            request_timeout_ms=int(min(timeout, 30.0) * 1000) // 2,
            delivery_timeout_ms=int(timeout * 1000), max_block_ms=int(timeout * 1000))
        try:
            futures = [producer.send(topic, value=_as_bytes(v), key=_as_bytes(k), partition=partition)
                       for k, v in zip(key_list, value_list)]
            producer.flush(timeout=timeout)
            return [(md.partition, md.offset) for md in (f.get(timeout=timeout) for f in futures)]
        finally:
            producer.close(timeout=5)

    def kill_broker(self, broker_id: int, wait_unregistered: bool = False) -> None:
        """SIGKILL broker ``broker_id`` and return once its JVM is gone. Its ZooKeeper session (and /brokers/ids
        entry) lives on until the session times out (6 s); ``wait_unregistered=True`` also waits for that."""
        with self._lock:
            self._running_broker(broker_id).kill()
        if wait_unregistered:
            self._wait_unregistered(broker_id)

    def pause_broker(self, broker_id: int, paused: bool = True) -> None:
        """SIGSTOP broker ``broker_id`` (connections open, no answers; resume within its 6 s session); else SIGCONT."""
        with self._lock:
            process = self._running_broker(broker_id).process
            if process is not None:  # never None while running
                processes.signal_group(process, signal.SIGSTOP if paused else signal.SIGCONT)

    def stop_broker(self, broker_id: int, timeout: float = 30.0) -> None:
        """Stop broker ``broker_id`` gracefully (SIGTERM: controlled shutdown moves its
        leaderships first), SIGKILL after ``timeout`` s; return once it is unregistered."""
        with self._lock:
            self._running_broker(broker_id).terminate(timeout)
        self._wait_unregistered(broker_id)

    def start_broker(self, broker_id: int, timeout: Optional[float] = None) -> None:
        """Start a stopped or killed broker with its id, port and data; return once it is registered in
        /brokers/ids. Waits first for a killed broker's old registration to expire (Kafka refuses to start)."""
        self._check_broker_id(broker_id)
        with self._lock:
            self._require_running()
            broker = self._brokers[broker_id]
            if broker.running():
                raise LocalClusterError(f"broker {broker_id} is already running")
            self._wait_unregistered(broker_id)
            broker.start()
        self._wait_registered(broker_id, timeout or self._startup_timeout)

    def _running_broker(self, broker_id: int) -> processes.JavaProcess:
        self._check_broker_id(broker_id)
        self._require_running()
        broker = self._brokers[broker_id]
        if not broker.running():
            raise LocalClusterError(f"broker {broker_id} is not running")
        return broker

    def _wait_unregistered(self, broker_id: int) -> None:
        timeout = 2 * BROKER_ZK_SESSION_TIMEOUT_MS / 1000 + 10
        self._wait_for(f"broker {broker_id} to leave /brokers/ids", lambda: not self._is_registered(broker_id), timeout)

    def controller(self) -> int:
        """The id of the broker that is the controller now (``/controller``); -1 if none is."""
        try:
            return int(json.loads(self._zk.get("/controller")[0].decode("utf-8"))["brokerid"])
        except NoNodeError:
            return -1

    def kill_controller(self) -> int:
        """SIGKILL the controller broker (see :meth:`kill_broker`); return its id."""
        broker_id = self.controller()
        if broker_id < 0:
            raise LocalClusterError("no broker is the controller now")
        self.kill_broker(broker_id)
        return broker_id
