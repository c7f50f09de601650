"""``LocalSparkCluster``: a standalone Spark Master and Workers on loopback, from the installed PySpark.

Example::

    from spark_integration.testing import LocalSparkCluster

    with LocalSparkCluster(workers=2, cores=1) as spark_cluster:
        spark = spark_cluster.session("my app")       # master spark://127.0.0.1:<port>
        spark.range(10).count()
        spark_cluster.kill_executor()                  # SIGKILL one executor JVM (Spark relaunches it)

Master and Workers are started with PySpark's ``bin/spark-class`` (no Docker, no
separate Spark download), as children that die with this process
(:func:`zkconsumer.testing.processes.spawn`). Executors are JVMs the Workers start
(``CoarseGrainedExecutorBackend``), each with its own Python workers running
``python`` (default: this interpreter) with ``pythonpath`` first on ``PYTHONPATH``,
so they import the code under test. Logs and work directories live in a temporary
directory (``log_dir``) removed by ``stop()``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from zkconsumer.testing import processes
from zkconsumer.testing.errors import ClusterStartError, ClusterTimeoutError, LocalClusterError
from zkconsumer.testing.ports import free_ports
from zkconsumer.testing.workdir import WorkDir

HOST = "127.0.0.1"
EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
#: JVM options of Master and Workers (small, quick to start; the executors keep Spark's defaults).
DAEMON_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.net.preferIPv4Stack=true"


def spark_home() -> str:
    """The installed PySpark's directory, which holds ``bin/spark-class`` and the jars."""
    try:
        import pyspark
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise LocalClusterError("LocalSparkCluster needs PySpark: pip install 'pyspark>=4.0,<5'") from error
    return str(Path(pyspark.__file__).resolve().parent)


class LocalSparkCluster:
    """A Spark standalone Master and ``workers`` Workers of ``cores`` cores and ``worker_memory`` each.

    ``start()`` returns once every Worker is registered ALIVE with the Master.
    ``pythonpath`` entries come first on the executors' ``PYTHONPATH`` (default:
    the checkout holding this package). ``stop()`` kills everything (Workers take
    their executors with them) and removes the work directory; idempotent.
    """

    def __init__(self, workers: int = 2, cores: int = 1, *, worker_memory: str = "1g", daemon_heap: str = "256m",
                 python: Optional[str] = None, pythonpath: Optional[Sequence[str]] = None,
                 start_timeout: float = 120.0) -> None:
        self.workers, self.cores, self.worker_memory, self.daemon_heap = workers, cores, worker_memory, daemon_heap
        self.python = python or sys.executable
        root = str(Path(__file__).resolve().parents[1])
        self.pythonpath: List[str] = list(pythonpath) if pythonpath is not None else [root]
        self.start_timeout = start_timeout
        self.master_port = self.web_port = 0
        self._work: Optional[WorkDir] = None
        self._master: Optional[processes.JavaProcess] = None
        self._workers: List[processes.JavaProcess] = []

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> "LocalSparkCluster":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master_port}"

    @property
    def web_url(self) -> str:
        """The Master's web UI (``/json`` there is its state as JSON)."""
        return f"http://{HOST}:{self.web_port}"

    @property
    def log_dir(self) -> Path:
        if self._work is None:
            raise LocalClusterError("the Spark cluster is not running")
        return self._work.path

    def environment(self) -> Dict[str, str]:
        """The environment of the Master and Workers (inherited by executors and their Python workers)."""
        env = dict(os.environ)
        env.update(SPARK_HOME=spark_home(), SPARK_LOCAL_IP=HOST, SPARK_LOCAL_HOSTNAME=HOST,
                   SPARK_DAEMON_MEMORY=self.daemon_heap, SPARK_DAEMON_JAVA_OPTS=DAEMON_JAVA_OPTIONS,
                   PYSPARK_PYTHON=self.python, SPARK_NO_DAEMONIZE="1",
                   PYTHONPATH=os.pathsep.join([*self.pythonpath, *filter(None, [env.get("PYTHONPATH")])]))
        env.pop("SPARK_CONF_DIR", None)
        return env

    def start(self) -> "LocalSparkCluster":
        """Start the Master, then the Workers; return once all Workers are ALIVE. Idempotent while running."""
        if self._master is not None:
            return self
        self._work = WorkDir()
        env = self.environment()
        spark_class = str(Path(env["SPARK_HOME"], "bin", "spark-class"))
        ports = free_ports(2 + 2 * self.workers, HOST)
        self.master_port, self.web_port = ports[0], ports[1]
        self._master = processes.JavaProcess(
            "spark-master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", HOST,
                             "--port", str(self.master_port), "--webui-port", str(self.web_port)],
            str(self.log_dir / "master.log"), str(self.log_dir), env)
        for i in range(self.workers):
            work = self.log_dir / f"worker-{i}"
            work.mkdir()
            self._workers.append(processes.JavaProcess(
                f"spark-worker-{i}",
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", HOST,
                 "--port", str(ports[2 + 2 * i]), "--webui-port", str(ports[3 + 2 * i]),
                 "--cores", str(self.cores), "--memory", self.worker_memory, "--work-dir", str(work),
                 self.master_url], str(self.log_dir / f"worker-{i}.log"), str(work), env))
        try:
            self._master.start()
            self._wait(lambda: self._state_or_none() is not None, "the Spark Master's web UI", self._master)
            for worker in self._workers:
                worker.start()
            self._wait(lambda: len(self.alive_workers()) >= self.workers, f"{self.workers} Workers to register",
                       *self._workers)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """SIGKILL Workers (with their executors) and the Master; remove the work directory. Idempotent."""
        jvms = [j.process for j in [*self._workers, self._master] if j is not None and j.process is not None]
        processes.kill_all(jvms)
        self._workers, self._master = [], None
        if self._work is not None:
            self._work.remove()
            self._work = None

    def _wait(self, ready: Any, what: str, *jvms: processes.JavaProcess) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not ready():
            for jvm in jvms:
                if not jvm.running():
                    raise ClusterStartError(f"{jvm.name} exited ({jvm.exit_code()}):\n{jvm.log_tail()}")
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {j.name}\n{j.log_tail(15)}" for j in jvms)
                raise ClusterTimeoutError(f"timed out after {self.start_timeout:.0f}s waiting for {what}\n{tails}")
            time.sleep(0.3)

    # ------------------------------------------------------------------ state

    def _state_or_none(self) -> Optional[Dict[str, Any]]:
        try:
            with urllib.request.urlopen(f"{self.web_url}/json", timeout=5) as response:
                state: Dict[str, Any] = json.loads(response.read().decode("utf-8"))
                return state
        except (OSError, ValueError):
            return None

    def state(self) -> Dict[str, Any]:
        """The Master's JSON state (workers, active applications, ...)."""
        state = self._state_or_none()
        if state is None:
            raise LocalClusterError(f"the Spark Master at {self.web_url} does not answer")
        return state

    def alive_workers(self) -> List[Dict[str, Any]]:
        state = self._state_or_none() or {}
        return [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]

    def worker_pids(self) -> List[int]:
        return [j.process.pid for j in self._workers if j.running() and j.process is not None]

    def executor_pids(self) -> List[int]:
        """Pids of the live executor JVMs the Workers of this cluster started (read from /proc)."""
        workers, found = set(self.worker_pids()), []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path("/proc", entry, "stat").read_text()
                cmdline = Path("/proc", entry, "cmdline").read_bytes()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            if parent in workers and EXECUTOR_MAIN.encode() in cmdline and stat.rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(entry))
        return sorted(found)

    def kill_executor(self, pid: Optional[int] = None) -> int:
        """SIGKILL executor ``pid`` (default: the first one found); return its pid."""
        pids = self.executor_pids()
        if not pids or (pid is not None and pid not in pids):
            raise LocalClusterError(f"no executor {pid if pid is not None else ''} of this cluster is running")
        target = pid if pid is not None else pids[0]
        os.kill(target, signal.SIGKILL)
        return target

    # ------------------------------------------------------------------ applications

    def spark_conf(self, **overrides: str) -> Dict[str, str]:
        """The settings of :meth:`session`: 1-core executors on every Worker, failed tasks retried."""
        conf = {
            "spark.master": self.master_url, "spark.driver.host": HOST, "spark.driver.bindAddress": HOST,
            "spark.executor.cores": str(self.cores), "spark.cores.max": str(self.cores * self.workers),
            "spark.executor.memory": "512m", "spark.driver.memory": "512m", "spark.task.maxFailures": "4",
            "spark.executorEnv.PYTHONPATH": os.pathsep.join(self.pythonpath),
            "spark.executorEnv.PYSPARK_PYTHON": self.python, "spark.pyspark.python": self.python,
            "spark.executor.extraJavaOptions": "-XX:+UseSerialGC", "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": str(self.cores * self.workers),
        }
        conf.update(overrides)
        return conf

    def session(self, app_name: str = "zkconsumer", **overrides: str) -> Any:
        """A SparkSession on this cluster (``getOrCreate``: stop any other session first)."""
        from pyspark.sql import SparkSession

        os.environ.setdefault("PYSPARK_PYTHON", self.python)
        os.environ.setdefault("SPARK_LOCAL_IP", HOST)
        launch_plain_gateway()
        builder = SparkSession.builder.appName(app_name)
        for key, value in self.spark_conf(**overrides).items():
            builder = builder.config(key, value)
        return builder.getOrCreate()


def launch_plain_gateway() -> None:
    """Start this process's PySpark JVM gateway, if it is not running yet, without any session's settings.

    PySpark hands the settings of the first session a process creates to ``spark-submit`` as
    ``--conf``, which makes them JVM system properties that every later SparkContext of the
    process inherits: a ``spark.files`` entry whose file is gone by then fails every later
    session. Only the driver's heap (``spark.driver.memory``, read when the JVM starts) is given.
    """
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized(conf=SparkConf(loadDefaults=False).set("spark.driver.memory", "512m"))


def local_spark(app_name: str, master: str = "local[2]") -> Any:
    """A small SparkSession whose Python workers run this interpreter and can import this checkout.

    ``$ZKCONSUMER_SPARK_MASTER``, when set, replaces ``master`` (the compose runner sets it to
    its Spark standalone Master, ``spark://127.0.0.1:7077``).
    """
    master = os.environ.get("ZKCONSUMER_SPARK_MASTER") or master
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    root = str(Path(__file__).resolve().parent.parent)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])
    from pyspark.sql import SparkSession

    launch_plain_gateway()
    return (SparkSession.builder.master(master).appName(app_name)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.memory", "512m")
            .getOrCreate())
