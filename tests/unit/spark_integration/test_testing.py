"""LocalSparkCluster's settings, without starting any JVM."""

from __future__ import annotations

import os

import pytest

from spark_integration.testing import LocalSparkCluster, spark_home
from zkconsumer.testing.errors import LocalClusterError


def test_spark_home_holds_spark_class() -> None:
    pytest.importorskip("pyspark")
    assert os.access(os.path.join(spark_home(), "bin", "spark-class"), os.X_OK)


def test_environment_puts_the_pythonpath_first_and_binds_loopback(monkeypatch) -> None:
    pytest.importorskip("pyspark")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setenv("SPARK_CONF_DIR", "/etc/spark")
    cluster = LocalSparkCluster(python="/venv/bin/python", pythonpath=["/code"])
    env = cluster.environment()
    assert env["PYTHONPATH"] == os.pathsep.join(["/code", "/elsewhere"])
    assert env["PYSPARK_PYTHON"] == "/venv/bin/python" and env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert "SPARK_CONF_DIR" not in env  # a user's spark-defaults must not change the test cluster


def test_spark_conf_gives_one_executor_per_worker_and_retries_tasks() -> None:
    cluster = LocalSparkCluster(workers=2, cores=1, python="/venv/bin/python", pythonpath=["/code"])
    cluster.master_port = 7077
    conf = cluster.spark_conf(**{"spark.task.maxFailures": "8"})
    assert conf["spark.master"] == "spark://127.0.0.1:7077"
    assert (conf["spark.executor.cores"], conf["spark.cores.max"]) == ("1", "2")
    assert conf["spark.task.maxFailures"] == "8"  # overrides win
    assert conf["spark.executorEnv.PYTHONPATH"] == "/code"


def test_a_cluster_that_is_not_running_has_no_logs_and_no_executors() -> None:
    cluster = LocalSparkCluster()
    with pytest.raises(LocalClusterError):
        _ = cluster.log_dir
    assert cluster.worker_pids() == [] and cluster.executor_pids() == []
    with pytest.raises(LocalClusterError):
        cluster.kill_executor()
    cluster.stop()  # idempotent, harmless
