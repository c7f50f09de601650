"""Helpers shared by the integration tests: draining streams, reading the group as Kafka does,
members and a producer that keep going through faults."""

from __future__ import annotations

import re
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from zkconsumer import ConsumerTimeoutError, KafkaStream, MessageAndMetadata, ZookeeperConsumerConnector
from zkconsumer.testing import LocalCluster
from zkconsumer.testing.errors import ClusterTimeoutError


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def consumer_props(cluster, group: str, **extra: object) -> Dict[str, object]:
    """Properties for a test member: fast timeouts, manual commits unless overridden."""
    props: Dict[str, object] = {
        "zookeeper.connect": cluster.zk_connect,
        "group.id": group,
        "auto.offset.reset": "smallest",
        "consumer.timeout.ms": 200,
        "auto.commit.enable": "false",
        "rebalance.backoff.ms": 1000,
        "zookeeper.session.timeout.ms": 6000,
        "refresh.leader.backoff.ms": 100,
    }
    props.update({k.replace("_", "."): v for k, v in extra.items()})
    return props


def wait_until(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.1) -> object:
    """Poll ``predicate`` until truthy; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def new_topic(cluster: LocalCluster, prefix: str, partitions: int) -> str:
    """A fresh topic with a leader for every partition, on a cluster whose ZooKeeper may just
    have been paused or killed.

    Such a fault may have expired the brokers' own ZooKeeper sessions: until each broker has
    registered again a topic cannot even be placed ("impossible with live brokers []"), so
    this first waits for that. And a Kafka 0.9 controller then sometimes elects no leader for
    a new topic; restarting the broker recovers it (a harness concern, not the consumer's).
    """

    def all_registered() -> bool:
        try:
            return cluster.registered_brokers() == cluster.broker_ids
        except KazooException:  # the harness's own client is reconnecting after the fault
            return False

    wait_until(all_registered, 60, "every broker registered in ZooKeeper again")
    name = unique(prefix)
    try:
        return cluster.create_topic(name, partitions=partitions, timeout=20)
    except ClusterTimeoutError:
        for broker in cluster.broker_ids:
            cluster.kill_broker(broker)
            cluster.start_broker(broker)
        cluster.wait_for_leaders(name, timeout=60)
        return name


class Drainer:
    """Iterates streams on background threads, collecting every message, until stopped."""

    def __init__(self, streams: Iterable[KafkaStream]) -> None:
        self.messages: List[MessageAndMetadata] = []
        self.handed_at: List[float] = []  # time.monotonic() of each message, beside ``messages``
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._drain, args=(s,), daemon=True) for s in streams]
        for t in self._threads:
            t.start()

    def _drain(self, stream: KafkaStream) -> None:
        while not self._stop.is_set():
            try:
                for message in stream:
                    with self._lock:
                        self.messages.append(message)
                        self.handed_at.append(time.monotonic())
                    if self._stop.is_set():
                        return
                return  # shutdown sentinel
            except ConsumerTimeoutError:
                continue

    def count(self) -> int:
        with self._lock:
            return len(self.messages)

    def wait_for(self, n: int, timeout: float = 60) -> List[MessageAndMetadata]:
        wait_until(lambda: self.count() >= n, timeout, f"{n} messages (have {self.count()})")
        return self.snapshot()

    def snapshot(self) -> List[MessageAndMetadata]:
        with self._lock:
            return list(self.messages)

    def stamped(self) -> List[Tuple[float, MessageAndMetadata]]:
        """``(time.monotonic() when handed out, message)`` of every message so far."""
        with self._lock:
            return list(zip(self.handed_at, self.messages))

    def stop(self) -> List[MessageAndMetadata]:
        self._stop.set()
        for t in self._threads:
            t.join(10)
            assert not t.is_alive(), "a drain thread did not stop"
        return self.snapshot()


def owners(zk: KazooClient, group: str, topic: str) -> Dict[int, str]:
    base = f"/consumers/{group}/owners/{topic}"
    if not zk.exists(base):
        return {}
    result = {}
    for child in zk.get_children(base):
        try:
            result[int(child)] = zk.get(f"{base}/{child}")[0].decode()
        except Exception:  # vanished meanwhile
            continue
    return result


def members(zk: KazooClient, group: str) -> List[str]:
    path = f"/consumers/{group}/ids"
    return sorted(zk.get_children(path)) if zk.exists(path) else []


def thread_ids_of(zk: KazooClient, group: str, topic: str) -> List[str]:
    """Every member's thread ids for ``topic`` from its registration (static or whitelist)."""
    import json

    ids = []
    for member in members(zk, group):
        data = json.loads(zk.get(f"/consumers/{group}/ids/{member}")[0])
        subscription = data["subscription"]
        n = subscription.get(topic)
        if n is None and data["pattern"] != "static":
            n = next((v for k, v in subscription.items() if re.fullmatch(k, topic)), None)
        ids += [f"{member}-{i}" for i in range(n or 0)]
    return ids


class ScalaConsoleConsumer:
    """Kafka's own ZooKeeper consumer (kafka.tools.ConsoleConsumer) as a group member."""

    def __init__(self, cluster, group: str, topic: str, workdir: Path, **props: object) -> None:
        config = workdir / f"{unique('console')}.properties"
        settings = {"group.id": group, "auto.commit.interval.ms": 200, "zookeeper.session.timeout.ms": 6000,
                    "rebalance.backoff.ms": 1000}
        settings.update({k.replace("_", "."): v for k, v in props.items()})
        config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        self.lines: List[str] = []
        self._proc: subprocess.Popen = cluster.start_tool(
            "kafka.tools.ConsoleConsumer", "--zookeeper", cluster.zk_connect, "--topic", topic,
            "--consumer.config", str(config), "--from-beginning",
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            line = raw.decode() if isinstance(raw, bytes) else raw
            self.lines.append(line.rstrip("\n"))

    def stop(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)
        self._reader.join(5)


def offset_checker(cluster, group: str, topic: str) -> Dict[int, Tuple[Optional[int], int, Optional[int]]]:
    """Kafka's ConsumerOffsetChecker's view: partition → (offset, logSize, lag)."""
    result = cluster.run_tool("kafka.tools.ConsumerOffsetChecker", "--zookeeper", cluster.zk_connect,
                              "--group", group, "--topic", topic, timeout=60)
    out = result.stdout.decode() if isinstance(result.stdout, bytes) else result.stdout
    rows: Dict[int, Tuple[Optional[int], int, Optional[int]]] = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[0] == group and fields[1] == topic:
            as_int = lambda s: None if s == "unknown" else int(s)  # noqa: E731
            rows[int(fields[2])] = (as_int(fields[3]), int(fields[4]), as_int(fields[5]))
    return rows


def verify_consumer_rebalance(cluster, group: str) -> Tuple[Dict[Tuple[str, int], str], List[str]]:
    """Kafka's VerifyConsumerRebalance over the group: (partition -> the owner it read, partitions
    it found without an owner, as its lines say them).

    Kafka 0.9.0.1's tool cannot say "successful" for any group (Kafka's own consumers' included):
    it looks the owner string up in a list of ``ConsumerThreadId`` objects (``List.contains`` of a
    String, read in its bytecode), so every owner is reported "not a valid member". What it does
    check for real is read here: that each partition of each subscribed topic has an owner node,
    and what the owner is; the caller compares those with the registered thread ids.
    """
    result = cluster.run_tool("kafka.tools.VerifyConsumerRebalance", "--zookeeper.connect", cluster.zk_connect,
                              "--group", group, timeout=60)
    text = "".join(part.decode() if isinstance(part, bytes) else (part or "")
                   for part in (result.stdout, result.stderr))
    owned: Dict[Tuple[str, int], str] = {}
    unowned: List[str] = []
    for match in re.finditer(r"Owner (\S+) for partition \[([^,\]]+),(\d+)\]", text):
        owned[(match.group(2), int(match.group(3)))] = match.group(1)
    for match in re.finditer(r"No owner for partition \[[^\]]+\]", text):
        unowned.append(match.group(0))
    assert owned or unowned, f"VerifyConsumerRebalance said nothing about the group's partitions: {text}"
    return owned, unowned


def by_value(messages: Iterable[MessageAndMetadata]) -> List[bytes]:
    return sorted(m.message for m in messages)


def produced_values(n: int, prefix: str = "m") -> List[bytes]:
    return [f"{prefix}-{i:06d}".encode() for i in range(n)]


def partition_counts(placed: Iterable[Tuple[int, int]]) -> Mapping[int, int]:
    counts: Dict[int, int] = {}
    for partition, _offset in placed:
        counts[partition] = counts.get(partition, 0) + 1
    return counts


class Member:
    """A connector with an application that treats ANY exception from it as fatal."""

    def __init__(self, cluster, group: str, topic: str, session_ms: int) -> None:
        self.connector = ZookeeperConsumerConnector(consumer_props(
            cluster, group, **{"zookeeper.session.timeout.ms": session_ms, "consumer.timeout.ms": -1,
                               "rebalance.backoff.ms": 500}))
        self.stream = self.connector.create_message_streams({topic: 1})[topic][0]
        self.consumed: List[Tuple[int, int, bytes]] = []
        self.consumed_at: List[float] = []
        self.fatal: List[BaseException] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._consume, daemon=True, name="app-consume"),
                         threading.Thread(target=self._commit, daemon=True, name="app-commit")]
        for t in self._threads:
            t.start()

    def _consume(self) -> None:
        try:
            for m in self.stream:
                self.consumed.append((m.partition, m.offset, m.message))
                self.consumed_at.append(time.monotonic())
        except BaseException as exc:  # noqa: BLE001 - the application dies
            self.fatal.append(exc)

    def _commit(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.connector.commit_offsets()
            except BaseException as exc:  # noqa: BLE001 - the application dies
                self.fatal.append(exc)
                return

    def stop(self) -> None:
        """Stop as an application does: its commit loop first, then the connector, then its reader.

        (Calling shutdown() while the application's own commit is still retrying would make that
        commit raise ConsumerShutdownError: the application's doing, not a fault.)
        """
        self._stop.set()
        self._threads[1].join(70)  # a commit in flight finishes (bounded by offsets.commit.timeout.ms)
        self.connector.shutdown()
        for t in self._threads:
            t.join(10)


class Producer:
    """Produces numbered values to ``cluster.bootstrap_servers`` until stopped; remembers the acknowledged ones.

    ``acks``: the producer's setting ("all" when a test kills a leader and counts losses).
    """

    def __init__(self, cluster, topic: str, acks: object = 1) -> None:
        from kafka import KafkaProducer

        self._producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, api_version=(0, 9), acks=acks,
                                       linger_ms=0, retries=5, retry_backoff_ms=200)
        self.topic = topic
        self.acked: Set[bytes] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="test-producer")
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.wait(0.05):
            for _ in range(5):
                value = f"v{i:07d}".encode()
                i += 1
                self._producer.send(self.topic, value=value).add_callback(self._acked, value)

    def _acked(self, value: bytes, _metadata: object) -> None:
        with self._lock:
            self.acked.add(value)

    def stop(self) -> Set[bytes]:
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(30)
        self._producer.close(5)
        with self._lock:
            return set(self.acked)


def assert_nothing_lost(members: Sequence[Member], produced: Set[bytes], timeout: float) -> None:
    """Wait until the members consumed every value in ``produced`` (or one died); assert none died, none lost."""

    def consumed() -> Set[bytes]:
        return {value for m in members for _, _, value in list(m.consumed)}

    wait_until(lambda: produced <= consumed() or any(m.fatal for m in members), timeout,
               "every acknowledged message to be consumed")
    fatal = [repr(e) for m in members for e in m.fatal]
    assert fatal == [], f"members died: {fatal}"
    lost = produced - consumed()
    assert not lost, f"{len(lost)} of {len(produced)} acknowledged messages never consumed"


class TwoMembers:
    """Two connectors of one group reading one topic (one stream each), each drained by a
    :class:`Drainer`. Entering starts the first; :meth:`join_second` starts the second and waits
    until each owns one partition. Leaving stops the drainers and shuts both connectors down."""

    def __init__(self, props: Mapping[str, object], topic: str,
                 listener: Optional[object] = None) -> None:
        self.props, self.topic = props, topic
        self.first = ZookeeperConsumerConnector(props, rebalance_listener=listener)  # type: ignore[arg-type]
        self.second: Optional[ZookeeperConsumerConnector] = None
        self.drainers: List[Drainer] = []

    def __enter__(self) -> "TwoMembers":
        try:
            self.drainers.append(Drainer(self.first.create_message_streams({self.topic: 1})[self.topic]))
        except BaseException:
            self.first.shutdown()
            raise
        return self

    def join_second(self) -> Tuple[Tuple[str, int], Tuple[str, int]]:
        """Start the second member; returns ``(the partition the first kept, the one that moved)``."""
        self.second = ZookeeperConsumerConnector(self.props)
        self.drainers.append(Drainer(self.second.create_message_streams({self.topic: 1})[self.topic]))
        return one_partition_each(self.first, self.second)

    def __exit__(self, *exc: object) -> None:
        for drainer in self.drainers:
            drainer.stop()
        self.first.shutdown()
        if self.second is not None:
            self.second.shutdown()


def one_partition_each(first, second) -> Tuple[Tuple[str, int], Tuple[str, int]]:
    """Wait until two members of a two-partition group own one partition each (by ``positions()``);
    returns ``(first's, second's)``."""

    def split() -> bool:
        a, b = set(first.positions()), set(second.positions())
        return len(a) == 1 and len(b) == 1 and a != b

    wait_until(split, 60, "one partition each")
    (mine,) = first.positions()
    (theirs,) = second.positions()
    return mine, theirs


class Cli:
    """The CLI's ``main([...])`` in-process with ``--zookeeper`` added; returns (exit code, stdout,
    stderr). The ``cli`` fixture (conftest.py) makes one per test."""

    def __init__(self, cluster, capsys) -> None:
        self.cluster, self.capsys = cluster, capsys

    def __call__(self, *argv: str) -> Tuple[int, str, str]:
        from zkconsumer.__main__ import main

        self.capsys.readouterr()
        code = main([*argv, "--zookeeper", self.cluster.zk_connect])
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err
