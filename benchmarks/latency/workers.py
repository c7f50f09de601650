"""Starting the latency workers: one process per consumer kind, all given the same window."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from benchmarks.runner import child_env
from harness.cluster.tools import compile_against_kafka, log4j_properties
from zkconsumer.testing import processes
from zkconsumer.testing.properties import render_properties

from .settings import ZK_BASE, settings

#: Every kind, in table order.
KINDS = ("floor", "zkconsumer", "zkconsumer-batch", "kafka", "confluent")
PARTITIONS = 6


@dataclass(frozen=True)
class Window:
    """The stamps measured, ``[t0, t1)``, and when workers stop reading (microseconds since the epoch)."""

    t0: int
    t1: int
    deadline: int

    def publish(self, path: Path) -> None:
        """Write the window where the workers wait for it (atomically: they may read at any time)."""
        part = path.with_suffix(".part")
        part.write_text(f"{self.t0} {self.t1} {self.deadline}\n")
        part.rename(path)


@dataclass
class Worker:
    kind: str
    name: str
    process: "subprocess.Popen[Any]"
    out: Path
    err: Path
    trace: Optional[Path]

    def is_ready(self) -> bool:
        try:
            return "READY" in self.err.read_text(errors="replace")
        except OSError:
            return False

    def result(self) -> Dict[str, Any]:
        lines = [ln for ln in self.out.read_text(errors="replace").splitlines() if ln.startswith("{")]
        if not lines:
            tail = self.err.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{self.name} printed no summary (exit {self.process.returncode}):\n{tail}")
        import json

        result: Dict[str, Any] = json.loads(lines[-1])
        return result


class Launcher:
    """Starts workers of any kind against ``cluster``; Kafka's Java worker is compiled once into ``directory``."""

    def __init__(self, cluster: Any, directory: Path) -> None:
        self.cluster, self.directory = cluster, directory
        self.counter = 0
        self._classes: Optional[Path] = None

    def start(self, kind: str, topic: str, window: Path, setting: str, group: str = "",
              trace: bool = False, props: Optional[Dict[str, str]] = None) -> Worker:
        """Start a worker of ``kind``; it reads ``topic`` once ``window`` is published.

        ``group``: join that group (default: a new one); ``props``: more consumer properties
        (zkconsumer and Kafka share names; confluent-kafka has its own).
        """
        self.counter += 1
        name = f"{kind}-{setting}-{self.counter}"
        trace_path = self.directory / f"{name}.trace" if trace else None
        common = ["--topic", topic, "--window", str(window), "--setting", setting]
        common += ["--trace", str(trace_path)] if trace_path else []
        common += ["--group", group] if group else []
        common += [f"--prop={k}={v}" for k, v in (props or {}).items()]
        if kind == "kafka":
            argv = self._kafka_argv(name, topic, window, setting, group, trace_path, props or {})
        elif kind == "floor":
            argv = self._python("floor_worker", *common, "--broker", self.cluster.bootstrap_servers.split(",")[0],
                                "--partitions", str(PARTITIONS))
        elif kind == "confluent":
            argv = self._python("confluent_worker", *common, "--bootstrap", self.cluster.bootstrap_servers)
        else:
            extra = ["--batch"] if kind == "zkconsumer-batch" else []
            argv = self._python("zk_worker", *common, "--zookeeper", self.cluster.zk_connect, *extra)
        out, err = self.directory / f"{name}.out", self.directory / f"{name}.err"
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            process = processes.spawn(argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                      cwd=str(self.directory), env=child_env())
        return Worker(kind, name, process, out, err, trace_path)

    @staticmethod
    def _python(module: str, *args: str) -> List[str]:
        return [sys.executable, "-m", f"benchmarks.latency.{module}", *args]

    def _kafka_argv(self, name: str, topic: str, window: Path, setting: str, group: str,
                    trace: Optional[Path], extra: Dict[str, str]) -> List[str]:
        if self._classes is None:
            self._classes = compile_against_kafka(Path(__file__).with_name("java") / "LatencyMember.java", self.directory)
            log4j = self.directory / "log4j-member.properties"
            log4j.write_text(render_properties(log4j_properties("WARN", "System.err")))
        config = self.directory / f"{name}.properties"
        props = {"zookeeper.connect": self.cluster.zk_connect, "group.id": group or f"lat-kafka-{name}",
                 **ZK_BASE, **settings("kafka", setting), **extra}
        config.write_text(render_properties(props))
        argv = self.cluster.tool_command(
            "LatencyMember", str(config), topic, str(window), setting,
            *([str(trace)] if trace else []),
            jvm_options=("-Xmx256m", f"-Dlog4j.configuration=file:{self.directory / 'log4j-member.properties'}"))
        cp = argv.index("-cp") + 1
        argv[cp] = f"{argv[cp]}{os.pathsep}{self._classes}"
        return argv


def wait_ready(workers: Sequence[Worker], timeout: float) -> None:
    """Wait until every worker said READY; RuntimeError naming the first that died or did not in time."""
    deadline = time.monotonic() + timeout
    while True:
        pending = [w for w in workers if not w.is_ready()]
        if not pending:
            return
        for w in pending:
            if w.process.poll() is not None:
                raise RuntimeError(f"{w.name} exited {w.process.returncode} before it was ready:\n"
                                   f"{w.err.read_text(errors='replace')[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"not ready after {timeout:.0f} s: {[w.name for w in pending]}")
        time.sleep(0.2)


def finish(workers: Sequence[Worker], timeout: float) -> List[Dict[str, Any]]:
    """Wait for every worker (killing those still running after ``timeout`` s); their summaries."""
    deadline = time.monotonic() + timeout
    for w in workers:
        try:
            w.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.process.kill()
            w.process.wait(10)
    return [w.result() for w in workers]

