"""The migration benchmark's members and producer, each recording what it did with one clock.

* :class:`Recorder`: a zkconsumer member in this process (2 streams, a :class:`StreamMember`), recording
  ``(time, name, partition, offset)`` as each message is handed out;
* :class:`ClientMember`: a modern client in a child process (kafka-python or confluent-kafka
  through :mod:`harness.modern_client`, or Kafka 0.9's Java ``KafkaConsumer`` through
  ``ConsoleConsumer --new-consumer``), recording ``(time, name, value)`` as each printed value is
  read here (every one of them flushes a line per message);
* :class:`SteadyProducer`: kafka-python at a steady rate, remembering where each acknowledged
  value went (value -> partition, offset), which places the child processes' values.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from benchmarks.migration_report import Delivery
from harness import modern_client
from zkconsumer.testing import processes

JAVA_ASSIGNOR = "org.apache.kafka.clients.consumer.RangeAssignor"


class StreamMember:
    """A zkconsumer member in this process reading ``topic`` on 2 streams, each drained by a thread of its
    own that calls ``record(message)`` as each message is handed out (until :meth:`stop`). ``joined`` is
    set once its streams exist. The integration tests' live-switch members are these too."""

    def __init__(self, name: str, props: Dict[str, object], topic: str, record: Callable[[Any], None]) -> None:
        from zkconsumer import ZookeeperConsumerConnector

        self.name = name
        self.connector = ZookeeperConsumerConnector(props)
        self._record = record
        self._stop = threading.Event()
        self._threads: List[threading.Thread] = []
        self.joined = threading.Event()
        starter = threading.Thread(target=self._start, args=(topic,), daemon=True)
        starter.start()
        self._threads.append(starter)

    def _start(self, topic: str) -> None:
        for stream in self.connector.create_message_streams({topic: 2})[topic]:
            t = threading.Thread(target=self._drain, args=(stream,), daemon=True)
            t.start()
            self._threads.append(t)
        self.joined.set()

    def _drain(self, stream: Any) -> None:
        from zkconsumer import ConsumerTimeoutError

        while not self._stop.is_set():
            try:
                for m in stream:
                    self._record(m)
                    if self._stop.is_set():
                        return
                return
            except ConsumerTimeoutError:
                continue

    def stop(self) -> None:
        """``shutdown()``: final commits, then it leaves its membership; its threads are joined (15 s each)."""
        self._stop.set()
        self.connector.shutdown()
        for t in self._threads:
            t.join(15)


class Recorder(StreamMember):
    """A zkconsumer member delivering on 2 streams into ``log``: ``(time, name, partition, offset)``."""

    def __init__(self, name: str, props: Dict[str, object], topic: str, log: List[Delivery]) -> None:
        super().__init__(name, props, topic, lambda m: log.append((time.monotonic(), name, m.partition, m.offset)))

    def owned(self) -> int:
        status = self.connector.status
        return len(status.owned) if status else 0


class ClientMember:
    """A modern client of ``kind`` (``java``, ``kafka-python``, ``confluent``) in a child process,
    subscribed to ``topic`` in ``group`` with Kafka's range assignor; appends ``(time, name, value)``
    to ``log`` for every value it prints."""

    def __init__(self, kind: str, name: str, cluster: Any, group: str, topic: str,
                 log: List[Tuple[float, str, bytes]]) -> None:
        self.name = name
        self._cluster: Optional[Any] = None
        if kind == "java":
            config = Path(tempfile.mkdtemp(prefix="bench-migration-")) / "consumer.properties"
            config.write_text(f"group.id={group}\nclient.id=java\nauto.commit.interval.ms=200\n"
                              f"session.timeout.ms=6000\nheartbeat.interval.ms=500\n"
                              f"partition.assignment.strategy={JAVA_ASSIGNOR}\n")
            self.proc = cluster.start_tool("kafka.tools.ConsoleConsumer", "--new-consumer", "--bootstrap-server",
                                           cluster.bootstrap_servers, "--topic", topic,
                                           "--consumer.config", str(config))
            self._cluster = cluster
        else:
            self.proc = processes.spawn([sys.executable, modern_client.__file__, kind, cluster.bootstrap_servers,
                                         group, topic, "range"], stdout=subprocess.PIPE, text=True)
        self._log = log
        self._reader = threading.Thread(target=self._read, name=f"read-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            if line and not line.startswith("#"):
                self._log.append((time.monotonic(), self.name, line.encode()))

    def stop(self) -> None:
        """SIGTERM (the client closes: commits, leaves the group), SIGKILL after 30 s."""
        if self._cluster is not None:
            self._cluster.stop_tool(self.proc, grace=30)
        else:
            processes.terminate_all([self.proc], 30)
        self._reader.join(10)


class SteadyProducer:
    """``rate`` values a second (``v00000000``, ...), acks=1; ``where``: acknowledged value -> (partition, offset)."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        from kafka import KafkaProducer

        self._producer = KafkaProducer(bootstrap_servers=bootstrap, api_version=(0, 9), acks=1, linger_ms=0)
        self.where: Dict[bytes, Tuple[int, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(topic, rate), daemon=True)
        self._thread.start()

    def _acked(self, value: bytes, metadata: Any) -> None:
        self.where[value] = (metadata.partition, metadata.offset)

    def _run(self, topic: str, rate: int) -> None:
        i, started = 0, time.monotonic()
        while not self._stop.is_set():
            value = f"v{i:08d}".encode()
            self._producer.send(topic, value=value).add_callback(lambda md, v=value: self._acked(v, md))
            i += 1
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)

    def stop(self) -> Dict[bytes, Tuple[int, int]]:
        """Stop producing, wait for the last acknowledgements; what was acknowledged, and where."""
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(30)
        self._producer.close(5)
        return dict(self.where)
