"""Chaos group members (zkconsumer or Kafka's Scala consumer) as processes, and the acknowledged producer."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Dict, Tuple

from benchmarks.chaos.member import spawn_member
from benchmarks.chaos.report import MemberReport
from benchmarks.chaos.settings import VALUE_PATTERN, ChaosSettings, value_of
from harness.cluster import ProjectCluster
from harness.cluster.proxy import ZooKeeperProxy
from harness.cluster.tools import log4j_properties
from zkconsumer.testing.properties import render_properties


class Member:
    """One member process of the group under test; ``name`` is its ``consumer.id``.

    ``proxy`` is the member's own way to ZooKeeper (closed by its launcher's ``forget``).
    """

    def __init__(self, name: str, process: "subprocess.Popen[Any]", out_path: Path, log_path: Path,
                 proxy: ZooKeeperProxy) -> None:
        self.name = name
        self.process = process
        self.out_path = out_path
        self.log_path = log_path
        self.proxy = proxy
        self.report = MemberReport(name)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the process itself (a JVM or Python process, not a shell)."""
        if self.alive():
            os.kill(self.process.pid, sig)


class MemberLauncher:
    """Starts and stops the member processes of one kind for one group."""

    kind = ""

    def __init__(self, cluster: ProjectCluster, group: str, topic: str, directory: Path,
                 settings: ChaosSettings) -> None:
        self.cluster = cluster
        self.group = group
        self.topic = topic
        self.directory = directory
        self.settings = settings

    def properties(self, name: str) -> Dict[str, str]:
        """The consumer properties every member of both kinds gets (Kafka's defaults otherwise)."""
        return {
            "group.id": self.group,
            "consumer.id": name,
            "auto.commit.enable": "true",
            "auto.commit.interval.ms": str(self.settings.commit_interval_ms),
            "zookeeper.session.timeout.ms": str(self.settings.session_timeout_ms),
            "auto.offset.reset": "smallest",
        }

    def start(self, name: str) -> Member:
        """Start member ``name``, connected to ZooKeeper through a new proxy of its own."""
        proxy = ZooKeeperProxy("127.0.0.1", self.cluster.zk_port, name=f"zk-proxy-{name}")
        proxy.start()
        try:
            return self._start(name, proxy)
        except BaseException:
            proxy.close()
            raise

    def _start(self, name: str, proxy: ZooKeeperProxy) -> Member:
        raise NotImplementedError

    def forget(self, member: Member) -> None:
        """Called once the member's process is gone: closes its proxy (idempotent)."""
        member.proxy.close()


class ZkconsumerLauncher(MemberLauncher):
    """Members running :mod:`benchmarks.chaos.member` in their own Python process."""

    kind = "zkconsumer"

    def _start(self, name: str, proxy: ZooKeeperProxy) -> Member:
        out, log = self.directory / f"{name}.out", self.directory / f"{name}.log"
        props = self.properties(name)
        process = spawn_member(proxy.address, self.group, self.topic, out, log, self.directory,
                               props, consumer_id=name, commit_fatal=self.settings.fatal_commits,
                               commit_interval_s=self.settings.fatal_commit_interval_s)
        return Member(name, process, out, log, proxy)


class KafkaLauncher(MemberLauncher):
    """Kafka's own ZooKeeper consumer: ``kafka.tools.ConsoleConsumer`` printing values.

    No ``--from-beginning``: ConsoleConsumer refuses it once the group has
    offsets (a member added later would exit), and without it forces
    ``auto.offset.reset=largest``. The engine therefore seeds every partition's
    offset with 0 before any member starts, for both kinds, so no member ever
    depends on ``auto.offset.reset``.
    """

    kind = "kafka"
    JVM_OPTIONS = ("-Xmx192m",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._log4j = self.directory / "log4j-kafka-member.properties"
        quiet = {"kafka.consumer": "INFO", "kafka.consumer.ConsumerFetcherThread": "WARN",
                 "kafka.consumer.ConsumerFetcherManager": "INFO"}
        self._log4j.write_text(render_properties(log4j_properties("WARN", "System.err", quiet)))

    def _start(self, name: str, proxy: ZooKeeperProxy) -> Member:
        out, log = self.directory / f"{name}.out", self.directory / f"{name}.log"
        config = self.directory / f"{name}.properties"
        config.write_text(render_properties(self.properties(name)))
        with open(out, "ab") as out_file, open(log, "ab") as log_file:
            process = self.cluster.start_tool(
                "kafka.tools.ConsoleConsumer", "--zookeeper", proxy.address, "--topic", self.topic,
                "--consumer.config", str(config), "--property", "print.key=false",
                stdout=out_file, stderr=log_file, text=False,
                jvm_options=(*self.JVM_OPTIONS, f"-Dlog4j.configuration=file:{self._log4j}"))
        return Member(name, process, out, log, proxy)

    def forget(self, member: Member) -> None:
        self.cluster.stop_tool(member.process, grace=0)
        super().forget(member)


def read_recordings(path: Path) -> Tuple["Counter[str]", int]:
    """Count the values recorded in a member's output file; also the malformed complete lines.

    A line is ``<value>`` or ``<partition> <offset> <value>``; its last field is
    the value. A last line without ``\\n`` (cut by ``kill -9``) is ignored.
    """
    counts: "Counter[str]" = Counter()
    malformed = 0
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return counts, 0
    end = data.rfind(b"\n")
    for raw in data[:end + 1].decode("latin-1").splitlines():
        fields = raw.split()
        if fields and VALUE_PATTERN.fullmatch(fields[-1]):
            counts[fields[-1]] += 1
        elif raw.strip():
            malformed += 1
    return counts, malformed


# ---------------------------------------------------------------------------- producer


class AckedProducer:
    """Sends ``chaos-<n>`` values with ``acks=all`` at a steady rate; records the acknowledged ones.

    ``acked`` maps value → (partition, offset). Keyless sends: kafka-python
    picks a random partition among those with a leader, so a partition whose
    leader is down is skipped rather than piled up.
    """

    def __init__(self, bootstrap_servers: str, topic: str, rate: float) -> None:
        from kafka import KafkaProducer  # imported lazily, as LocalCluster.produce does

        self.topic = topic
        self.acked: Dict[str, Tuple[int, int]] = {}
        self.sent = 0
        self.failures: "Counter[str]" = Counter()
        self._ends: Dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._interval = 1.0 / rate
        self._producer = KafkaProducer(
            bootstrap_servers=bootstrap_servers, api_version=(0, 9), acks="all", retries=1_000_000,
            retry_backoff_ms=200, max_in_flight_requests_per_connection=1, request_timeout_ms=15000,
            delivery_timeout_ms=120_000, max_block_ms=60_000, linger_ms=5, enable_idempotence=False)
        self._thread = threading.Thread(target=self._run, name="chaos-producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            value = value_of(self.sent)
            self.sent += 1
            future = self._producer.send(self.topic, value.encode("ascii"))
            future.add_callback(lambda md, v=value: self._ack(v, md.partition, md.offset))
            future.add_errback(lambda exc: self._fail(exc))
            next_at += self._interval
            delay = next_at - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            elif delay < -1.0:  # fell behind (send blocked): do not burst to catch up
                next_at = time.monotonic()

    def _ack(self, value: str, partition: int, offset: int) -> None:
        with self._lock:
            self.acked[value] = (partition, offset)
            if offset + 1 > self._ends.get(partition, 0):
                self._ends[partition] = offset + 1

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            self.failures[type(exc).__name__] += 1

    def acked_end(self, partition: int) -> int:
        """One past the highest acknowledged offset of ``partition`` (0 if none)."""
        with self._lock:
            return self._ends.get(partition, 0)

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def stop(self, flush_timeout: float = 150.0) -> None:
        """Stop sending, wait for every outstanding send to be acknowledged or fail, close."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(70)
        try:
            self._producer.flush(timeout=flush_timeout)
        finally:
            self._producer.close(timeout=10)


# ---------------------------------------------------------------------------- offsets


