"""The scale benchmark's member processes: zkconsumer's (``benchmarks.chaos.member``) and Kafka's
(``ScaleMember``, a small program on Kafka 0.9.0.1's ``kafka.javaapi.consumer``, compiled here)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

from benchmarks.chaos.member import spawn_member
from harness.cluster import ProjectCluster
from harness.cluster.tools import compile_against_kafka, log4j_properties
from zkconsumer.testing import processes
from zkconsumer.testing.properties import render_properties

BACKOFF_MS = 2000
MAX_RETRIES = 4
SESSION_TIMEOUT_MS = 6000

@dataclass
class Member:
    kind: str
    name: str
    process: "subprocess.Popen[Any]"
    log: Path

    def alive(self) -> bool:
        return self.process.poll() is None

    def rss_mb(self) -> Optional[float]:
        try:
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
        except OSError:
            return None
        return None


class Launcher:
    kind = ""
    failure_patterns: Tuple[str, ...] = ()
    gave_up_pattern = "can't rebalance after"

    def __init__(self, cluster: ProjectCluster, group: str, topics: Sequence[str], streams: int, directory: Path):
        self.cluster, self.group, self.topics, self.streams, self.directory = cluster, group, topics, streams, directory
        self.counter = 0

    def properties(self) -> Dict[str, str]:
        return {"group.id": self.group, "zookeeper.connect": self.cluster.zk_connect,
                "rebalance.backoff.ms": str(BACKOFF_MS), "rebalance.max.retries": str(MAX_RETRIES),
                "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS), "partition.assignment.strategy": "range",
                "auto.commit.enable": "true", "auto.commit.interval.ms": "1000", "auto.offset.reset": "smallest"}

    def start(self) -> Member:
        raise NotImplementedError

    def failures(self, member: Member) -> Tuple[int, int]:
        """(failed attempts, gave-up lines) in the member's log so far."""
        try:
            text = member.log.read_text(errors="replace")
        except OSError:
            return 0, 0
        return sum(text.count(p) for p in self.failure_patterns), text.count(self.gave_up_pattern)


class ZkconsumerLauncher(Launcher):
    kind = "zkconsumer"
    failure_patterns = ("rebalance attempt failed",)

    def start(self) -> Member:
        self.counter += 1
        name = f"zk-m{self.counter}"
        log = self.directory / f"{name}.log"
        process = spawn_member(self.cluster.zk_connect, self.group, ",".join(self.topics), Path(os.devnull), log,
                               self.directory, self.properties(), streams=self.streams)
        return Member(self.kind, name, process, log)


class KafkaLauncher(Launcher):
    kind = "kafka"
    failure_patterns = ("Rebalancing attempt failed",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.classes = compile_scale_member(self.directory)
        self.log4j = self.directory / "log4j-member.properties"
        quiet = {"kafka.consumer": "INFO", "kafka.consumer.ConsumerFetcherThread": "WARN",
                 "kafka.consumer.ConsumerFetcherManager": "WARN"}
        self.log4j.write_text(render_properties(log4j_properties("WARN", "System.err", quiet)))

    def start(self) -> Member:
        self.counter += 1
        name = f"kafka-m{self.counter}"
        config = self.directory / f"{name}.properties"
        config.write_text(render_properties(self.properties()))
        argv = self.cluster.tool_command("ScaleMember", str(config), ",".join(self.topics), str(self.streams),
                                         jvm_options=("-Xmx128m", f"-Dlog4j.configuration=file:{self.log4j}"))
        cp = argv.index("-cp") + 1
        argv[cp] = f"{argv[cp]}{os.pathsep}{self.classes}"
        log = self.directory / f"{name}.log"
        with open(log, "ab") as out:
            process = processes.spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out,
                                      cwd=str(self.directory))
        return Member(self.kind, name, process, log)


def compile_scale_member(directory: Path) -> Path:
    """Compile ScaleMember.java against Kafka's jars into ``directory/classes``."""
    return compile_against_kafka(Path(__file__).with_name("java") / "ScaleMember.java", directory)
