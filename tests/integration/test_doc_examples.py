"""Every runnable Python example of README.md and the documentation runs, as written, against a real cluster.

The examples and their placeholders are described in ``tests/docs/doc_examples.py``: each one
is filled in (the cluster's ``zookeeper.connect``, a group of its own, the documented
placeholder names) and run as a program of its own, which must exit with status 0 within
:data:`EXAMPLE_TIMEOUT_S`. The module's one-broker cluster holds the topics the examples read:
``events`` (4 partitions, JSON messages with keys) and ``clicks``. Examples that start Spark are
marked ``spark``; their Python workers run this interpreter (``PYSPARK_PYTHON``, as in an
activated virtualenv); examples marked ``<!-- example: not run: REASON -->`` are not collected here
(``tests/docs/test_examples.py`` checks that they give a reason).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from harness.cluster import ProjectCluster

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "docs"))

from doc_examples import Example, collect, filled  # noqa: E402

LOCAL_PARTITIONS = 4
EXAMPLE_TIMEOUT_S = 240
MESSAGES_PER_PARTITION = 100


def _params() -> List["pytest.ParameterSet"]:
    return [pytest.param(e, id=e.id, marks=[pytest.mark.spark] if e.starts_spark else [])
            for e in collect() if e.not_run is None]


@pytest.fixture(scope="module")
def events(local: ProjectCluster) -> ProjectCluster:
    """``local`` with the topics the examples read: ``events`` (4 partitions of JSON messages with keys), ``clicks``."""
    local.create_topic("events", partitions=LOCAL_PARTITIONS)
    for partition in range(LOCAL_PARTITIONS):
        values = [json.dumps({"partition": partition, "n": n}).encode() for n in range(MESSAGES_PER_PARTITION)]
        keys = [f"key-{n}".encode() for n in range(MESSAGES_PER_PARTITION)]
        local.produce("events", values, keys=keys, partition=partition)
    local.create_topic("clicks", partitions=2)  # the Spark page reads "events,clicks"
    local.produce("clicks", [b'{"click": 1}', b'{"click": 2}'])
    return local


@pytest.mark.parametrize("example", _params())
def test_the_example_runs_as_written(example: Example, events: ProjectCluster, tmp_path: Path) -> None:
    group = "doc-" + example.id.replace("/", "-").replace(":", "-").replace(".md", "")
    program = tmp_path / "example.py"
    program.write_text(filled(example, events.zk_connect, group))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               PYSPARK_PYTHON=sys.executable,  # Spark's Python workers: this virtualenv, as an activated one gives
               SPARK_LOCAL_IP="127.0.0.1")
    with subprocess.Popen([sys.executable, str(program)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True) as proc:
        try:
            output, _ = proc.communicate(timeout=EXAMPLE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the example and whatever it started (a Spark JVM)
            output, _ = proc.communicate()
            pytest.fail(f"{example.id} still running after {EXAMPLE_TIMEOUT_S}s:\n{output[-4000:]}")
    assert proc.returncode == 0, f"{example.id} exited with {proc.returncode}:\n{output[-6000:]}"
    print(f"--- {example.id}\n{output[-1500:]}")  # shown with -s, or -rP
