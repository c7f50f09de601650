"""Kafka's own tools (``kafka.tools.*``, ``kafka.admin.*``) run against a LocalCluster.

This project's tests and benchmarks use them as referees (ConsoleConsumer,
ConsumerPerformance, ConsumerOffsetChecker) and to drive Kafka (TopicCommand,
ProducerPerformance); a user's own tests have their own clients and never need them.
"""

from __future__ import annotations

import itertools
import os
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from zkconsumer.testing import processes
from zkconsumer.testing.cluster import ClusterBase
from zkconsumer.testing.properties import SERVER_LOG4J, render_properties


def log4j_properties(level: str, target: str, quiet_loggers: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """LocalCluster's log4j configuration writing ``level`` and above to ``target`` (``System.out``
    or ``System.err``), with ``quiet_loggers`` (logger name -> level) in place of its own."""
    props = {key: value for key, value in SERVER_LOG4J.items() if not key.startswith("log4j.logger.")}
    props.update({"log4j.rootLogger": f"{level}, console", "log4j.appender.console.Target": target})
    props.update({f"log4j.logger.{logger}": logger_level for logger, logger_level in (quiet_loggers or {}).items()})
    return props


def compile_against_kafka(source: Path, directory: Path) -> Path:
    """Compile the Java program ``source`` against Kafka 0.9.0.1's jars into ``directory/classes`` (once);
    returns that directory, for the classpath (e.g. the benchmarks' members on Kafka's consumer API)."""
    classes = directory / "classes"
    if (classes / source.with_suffix(".class").name).exists():
        return classes
    classes.mkdir(parents=True, exist_ok=True)
    libs = Path(os.environ.get("ZKCONSUMER_KAFKA_HOME", Path.home() / ".cache/zkconsumer/kafka-0.9.0.1")) / "libs"
    subprocess.run(["javac", "-nowarn", "-cp", f"{libs}/*", "-d", str(classes), str(source)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return classes


class KafkaTools(ClusterBase):
    """Running Kafka's Scala tools with the cluster's classpath: to completion, or in the background.

    Tools still running are killed by :meth:`stop` (SIGTERM, SIGKILL after at most 2 s);
    a tool's stderr goes to ``log_dir / "tool-<n>-<Class>.log"`` unless redirected.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tools: List["subprocess.Popen[Any]"] = []
        self._tool_logs: Dict[int, str] = {}
        self._tool_counter = itertools.count(1)

    def _write_log4j_configs(self) -> None:
        super()._write_log4j_configs()
        tools = render_properties(log4j_properties("WARN", "System.err"))
        (self.work_dir / "conf" / "log4j-tools.properties").write_text(tools)

    def stop(self, grace: float = 5.0) -> None:
        with self._lock:
            tools, self._tools = self._tools, []
        processes.terminate_all(tools, min(grace, 2.0))
        super().stop(grace)

    @property
    def kafka_home(self) -> Path:
        """The Kafka distribution directory (with ``libs/`` and ``config/``)."""
        self._require_running()
        assert self._home is not None
        return self._home

    @property
    def classpath(self) -> str:
        """The Java classpath of the distribution (for running other Kafka classes)."""
        self._require_running()
        return self._classpath

    def tool_command(self, main_class: str, *args: str, jvm_options: Sequence[str] = ()) -> List[str]:
        """The argv running Kafka class ``main_class`` with the cluster's classpath and
        a quiet log4j config (WARN and above, to stderr)."""
        self._require_running()
        return self._java_argv(main_class, [str(a) for a in args], "log4j-tools.properties", jvm_options)

    def run_tool(self, main_class: str, *args: str, timeout: float = 120.0, check: bool = False,
                 input: Optional[str] = None, jvm_options: Sequence[str] = ()) -> "subprocess.CompletedProcess[str]":
        """Run a Kafka tool to completion; return its exit status, stdout and stderr (text).

        On timeout the tool's process group is killed and subprocess.TimeoutExpired raised;
        with ``check``, a non-zero exit raises subprocess.CalledProcessError.
        """
        argv = self.tool_command(main_class, *args, jvm_options=jvm_options)
        process = self._spawn_tool(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            stdout, stderr = process.communicate(input=input, timeout=timeout)
        except subprocess.TimeoutExpired:
            processes.kill_all([process])
            stdout, stderr = process.communicate()
            raise subprocess.TimeoutExpired(argv, timeout, output=stdout, stderr=stderr) from None
        finally:
            self._forget_tool(process)
        result = subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)
        if check:
            result.check_returncode()
        return result

    def start_tool(self, main_class: str, *args: str, stdout: Any = subprocess.PIPE, stderr: Any = None,
                   text: bool = True, jvm_options: Sequence[str] = ()) -> "subprocess.Popen[Any]":
        """Start a Kafka tool (e.g. a ConsoleConsumer) in the background; stop() kills it.

        stdout is a pipe by default; stderr goes to ``tool_log(process)``'s file unless
        given. Stop it early with :meth:`stop_tool`.
        """
        argv = self.tool_command(main_class, *args, jvm_options=jvm_options)
        log_file = None
        if stderr is None:
            name = main_class.rsplit(".", 1)[-1]
            log_path = str(self.log_dir / f"tool-{next(self._tool_counter)}-{name}.log")
            log_file = stderr = open(log_path, "ab")
        try:
            process = self._spawn_tool(argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, text=text)
        finally:
            if log_file is not None:
                log_file.close()
        if log_file is not None:
            self._tool_logs[process.pid] = log_file.name
        return process

    def tool_log(self, process: "subprocess.Popen[Any]") -> str:
        """The stderr of a tool started by :meth:`start_tool` with its default stderr."""
        path = self._tool_logs.get(process.pid)
        return processes.tail(path, 10 ** 6) if path else ""

    def stop_tool(self, process: "subprocess.Popen[Any]", grace: float = 5.0) -> int:
        """SIGTERM a tool from :meth:`start_tool` (SIGKILL after ``grace`` s); return its exit status."""
        processes.terminate_all([process], grace)
        self._forget_tool(process)
        return int(process.returncode)

    def _spawn_tool(self, argv: List[str], **kwargs: Any) -> "subprocess.Popen[Any]":
        with self._lock:
            self._require_running()
            process = processes.spawn(argv, cwd=str(self.work_dir), **kwargs)
            self._tools.append(process)
        return process

    def _forget_tool(self, process: "subprocess.Popen[Any]") -> None:
        with self._lock:
            if process in self._tools:
                self._tools.remove(process)
