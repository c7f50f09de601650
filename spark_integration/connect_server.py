"""A local Spark Connect server started from the installed PySpark (for tests and examples).

PySpark 4 ships the Connect server (``jars/spark-connect_*.jar``) and
``bin/spark-submit``; :class:`LocalConnectServer` runs its main class
``org.apache.spark.sql.connect.service.SparkConnectServer`` the way
``sbin/start-connect-server.sh --wait`` would, but as a child process of this
one (:func:`zkconsumer.testing.processes.spawn`: it dies with this process even
on SIGKILL), on a free loopback port, with ``local[2]`` as its master::

    with LocalConnectServer(workdir) as server:
        spark = SparkSession.builder.remote(server.url).getOrCreate()
        register_data_source(spark)   # the server's Python workers import spark_integration

The Python data source runs in the *server's* Python workers, so the server is
started with ``PYSPARK_PYTHON`` set to this interpreter and ``PYTHONPATH``
(also as ``spark.executorEnv.PYTHONPATH``) holding this checkout: that is what
a real deployment must arrange too (install ``zkconsumer`` where the server and
its executors run).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from zkconsumer.testing.ports import free_ports
from zkconsumer.testing.processes import spawn, tail, terminate_all

__all__ = ["CONNECT_SERVER_CLASS", "ConnectServerError", "LocalConnectServer", "spark_home"]

#: The main class ``sbin/start-connect-server.sh`` submits.
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


class ConnectServerError(RuntimeError):
    """The Connect server could not be started (the message holds the end of its log)."""


def spark_home() -> Path:
    """The Spark installation to run: ``$SPARK_HOME`` if set, else the installed ``pyspark`` package.

    Raises :class:`ConnectServerError` if it has no ``bin/spark-submit`` or no Connect server jar.
    """
    if os.environ.get("SPARK_HOME"):
        home = Path(os.environ["SPARK_HOME"])
    else:
        import pyspark

        home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-submit").exists():
        raise ConnectServerError(f"no bin/spark-submit under {home}")
    if not list((home / "jars").glob("spark-connect_*.jar")):
        raise ConnectServerError(f"no Spark Connect server jar (jars/spark-connect_*.jar) under {home}")
    return home


def _checkout_root() -> str:
    return str(Path(__file__).resolve().parent.parent)


class LocalConnectServer:
    """One Spark Connect server JVM on ``127.0.0.1``; :attr:`url` is what ``SparkSession.builder.remote`` takes.

    ``workdir`` holds its log (``connect-server.log``) and Spark's local
    directory. ``python_path`` entries are prepended to the server's
    ``PYTHONPATH`` (this checkout is always included); ``conf`` adds Spark
    properties. :meth:`start` returns once the gRPC port accepts connections;
    :meth:`stop` is idempotent.
    """

    def __init__(self, workdir: "os.PathLike[str]", *, master: str = "local[2]", port: Optional[int] = None,
                 python: str = sys.executable, python_path: Sequence[str] = (),
                 conf: Optional[Mapping[str, str]] = None, driver_memory: str = "768m") -> None:
        self.workdir = Path(workdir)
        self.master = master
        self.port = port
        self.python = python
        self.python_path = [*python_path, _checkout_root()]
        self.conf: Dict[str, str] = dict(conf or {})
        self.driver_memory = driver_memory
        self._process: Optional["subprocess.Popen[Any]"] = None

    @property
    def url(self) -> str:
        """``sc://127.0.0.1:<port>`` (valid once started)."""
        if self.port is None:
            raise RuntimeError("the Connect server has not been started")
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "connect-server.log"

    def _pythonpath(self) -> str:
        inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        return os.pathsep.join(dict.fromkeys([*self.python_path, *inherited]))

    def command(self) -> List[str]:
        """The ``spark-submit`` command line (``spark-internal``: no application jar is needed)."""
        pythonpath = self._pythonpath()
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.local.dir": str(self.workdir / "spark-local"),
            "spark.sql.warehouse.dir": str(self.workdir / "warehouse"),
            "spark.pyspark.python": self.python,
            "spark.executorEnv.PYTHONPATH": pythonpath,
            **self.conf,
        }
        argv = [str(spark_home() / "bin" / "spark-submit"), "--class", CONNECT_SERVER_CLASS,
                "--name", "zkconsumer Spark Connect server", "--master", self.master,
                "--driver-memory", self.driver_memory]
        for key, value in conf.items():
            argv += ["--conf", f"{key}={value}"]
        return argv

    def environment(self) -> Dict[str, str]:
        env = dict(os.environ)
        for name in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "PYSPARK_DRIVER_PYTHON"):
            env.pop(name, None)
        env.update({
            "SPARK_HOME": str(spark_home()),
            "SPARK_CONNECT_MODE": "0",  # as sbin/start-connect-server.sh: run the classic server side
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": self.python,
            "PYTHONPATH": self._pythonpath(),
        })
        return env

    def start(self, timeout: float = 120.0) -> str:
        """Launch the server and wait until its port accepts connections; returns :attr:`url`.

        Raises :class:`ConnectServerError` (with the log's end) if it exits or is not up within ``timeout``.
        """
        if self._process is not None and self._process.poll() is None:
            raise RuntimeError("the Connect server is already running")
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "spark-local").mkdir(exist_ok=True)
        if self.port is None:
            self.port = free_ports(1)[0]
        with open(self.log_path, "ab") as log:
            self._process = spawn(self.command(), cwd=str(self.workdir), env=self.environment(),
                                  stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise ConnectServerError(f"the Spark Connect server exited with status {self._process.returncode}:\n"
                                         f"{tail(str(self.log_path))}")
            if _accepts(self.port):
                return self.url
            if time.monotonic() > deadline:
                self.stop()
                raise ConnectServerError(f"the Spark Connect server did not listen on port {self.port} within "
                                         f"{timeout:.0f}s:\n{tail(str(self.log_path))}")
            time.sleep(0.25)

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM the server's process group, SIGKILL after ``grace`` seconds; idempotent."""
        if self._process is not None:
            terminate_all([self._process], grace)

    def __enter__(self) -> "LocalConnectServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False
