"""Helpers for the offset-storage, coordinator and migration tests: both offset stores, member processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from kafka import KafkaConsumer, TopicPartition

from support import PROGRAMS, checkout_env
from support.common import Drainer, consumer_props
from zkconsumer import MessageAndMetadata, ZookeeperConsumerConnector

MEMBER_SCRIPT = PROGRAMS / "member.py"


def kafka_committed(cluster, group: str, topic: str, partitions: Iterable[int]) -> Dict[int, Optional[int]]:
    """What kafka-python's ``KafkaConsumer(group_id=group).committed(tp)`` reports (OffsetFetch v1)."""
    consumer = KafkaConsumer(group_id=group, bootstrap_servers=cluster.bootstrap_servers, api_version=(0, 9),
                             enable_auto_commit=False)
    try:
        return {p: consumer.committed(TopicPartition(topic, p)) for p in partitions}
    finally:
        consumer.close()


def zookeeper_committed(zk, group: str, topic: str, partitions: Iterable[int]) -> Dict[int, Optional[int]]:
    """The offsets under ``/consumers/<group>/offsets/<topic>`` (``None`` where there is no node)."""
    result: Dict[int, Optional[int]] = {}
    for p in partitions:
        path = f"/consumers/{group}/offsets/{topic}/{p}"
        result[p] = int(zk.get(path)[0]) if zk.exists(path) else None
    return result


def consume(cluster, group: str, topic: str, expected: int, **props: object):
    """One member: consume ``expected`` messages, commit, shut down; returns what it got."""
    with ZookeeperConsumerConnector(consumer_props(cluster, group, **props)) as connector:
        drainer = Drainer(connector.create_message_streams({topic: 2})[topic])
        got = drainer.wait_for(expected)
        connector.commit_offsets()
        drainer.stop()
    return got


def produce_evenly(cluster, topic: str, produced: List[bytes], partitions: int = 4) -> None:
    """Message ``i`` to partition ``i % partitions``: every partition gets its share, deterministically."""
    for p in range(partitions):
        cluster.produce(topic, produced[p::partitions], partition=p)


def next_offsets(messages: Iterable[MessageAndMetadata]) -> Dict[int, int]:
    """Per partition, the offset after the last message seen."""
    result: Dict[int, int] = {}
    for m in messages:
        result[m.partition] = max(result.get(m.partition, 0), m.offset + 1)
    return result


def values(messages: Iterable[MessageAndMetadata]) -> List[bytes]:
    return sorted(m.message for m in messages)


class ChildProcess:
    """A test script as a child process whose stdout lines are handed to :meth:`on_line` on a reader
    thread (under ``self._lock``); a line cut short by a kill is dropped. SIGKILL with :meth:`kill`."""

    def __init__(self, script: Path, args: List[str], stdin: bool = False) -> None:
        env = checkout_env(PYTHONUNBUFFERED="1")
        self._proc = subprocess.Popen(
            [sys.executable, str(script), *args], stdin=subprocess.PIPE if stdin else None,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True,
        )
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)

    def _start_reading(self) -> None:
        """Start the reader; a subclass calls it once its own fields exist."""
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if not line.endswith("\n"):
                break  # killed mid-line
            with self._lock:
                self.on_line(line.rstrip("\n"))

    def on_line(self, line: str) -> None:
        """One complete line the child printed (called with ``self._lock`` held)."""
        raise NotImplementedError

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no commit, sockets dropped; the session expires on its own."""
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
        self._proc.wait(30)
        self._reader.join(10)


class MemberProcess(ChildProcess):
    """``programs/member.py`` as a child process: the lines it printed, and SIGKILL."""

    def __init__(self, props: Mapping[str, object], topic: str, streams: int = 1) -> None:
        super().__init__(MEMBER_SCRIPT, [json.dumps(dict(props)), topic, str(streams)])
        self.member_id: Optional[str] = None
        self.consumed: List[Tuple[int, int, bytes]] = []
        self._start_reading()

    def on_line(self, line: str) -> None:
        fields = line.split(" ", 2)
        if fields[0] == "READY":
            self.member_id = fields[1]
        else:
            self.consumed.append((int(fields[0]), int(fields[1]), fields[2].encode()))

    def values(self) -> List[bytes]:
        with self._lock:
            return [v for _, _, v in self.consumed]
