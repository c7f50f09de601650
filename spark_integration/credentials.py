"""Kerberos credentials on Spark's driver and executors: where ``sasl.kerberos.keytab`` is found.

Executors are other processes, often on other hosts, so a keytab path that is right
on the driver may not exist where a task runs. :func:`resolve_keytab` is applied
wherever spark_integration turns properties into a
:class:`~zkconsumer.config.ConsumerConfig` (members of ``foreach_stream``, the
``create_rdd`` readers, the ``zkconsumer`` source's planning and readers), and
finds the keytab the way Spark ships files:

* an absolute path is used as it is: the keytab must be at that path on every node;
* a relative path is looked up in the working directory, then among the files Spark
  shipped with ``spark-submit --files`` / ``spark.files`` (``SparkFiles.get``: on an
  executor the task's working directory, on the driver Spark's download directory,
  ``userFiles-<id>``, also from the Python worker planning a streaming query, whose own
  files directory is a subdirectory of it), so
  ``sasl.kerberos.keytab=consumer.keytab`` with ``--files /secure/consumer.keytab``
  works on the driver and on every executor alike;
* a keytab found nowhere raises :class:`~zkconsumer.errors.ConfigurationError` naming
  ``sasl.kerberos.keytab``, the host and both ways to provide it.

Nothing happens without Kerberos (``security.protocol`` not ``SASL_*`` and
``zookeeper.sasl.enabled`` not true) or without ``sasl.kerberos.keytab`` (the ticket
cache login: each executor process reads its own ``KRB5CCNAME``).

May import: zkconsumer, pyspark (lazily, when present).
"""

from __future__ import annotations

import os
import socket
from typing import Any, Dict, Mapping, Optional, Union

from zkconsumer.config import ConsumerConfig
from zkconsumer.errors import ConfigurationError
from zkconsumer.kerberos import uses_sasl

__all__ = ["KEYTAB", "consumer_config", "resolve_keytab", "spark_files_dir"]

KEYTAB = "sasl.kerberos.keytab"


def spark_files_dir() -> Optional[str]:
    """Where this process finds files shipped with ``spark.files``, or ``None`` outside Spark.

    In a Python worker (executor tasks, a data source's planning) PySpark sets it up; in
    the driver it is the active SparkContext's download directory.
    """
    try:
        from pyspark import SparkContext
        from pyspark.core.files import SparkFiles
    except ImportError:  # pragma: no cover - depends on the environment
        return None
    if SparkFiles._root_directory is not None:
        return SparkFiles._root_directory
    if SparkContext._active_spark_context is None:
        return None
    try:
        return SparkFiles.getRootDirectory()
    except Exception:  # a stopped or half-built context: no shipped files to look in
        return None


def _kerberized(props: Mapping[str, str]) -> bool:
    return uses_sasl(str(props.get("security.protocol", ""))) or \
        str(props.get("zookeeper.sasl.enabled", "")).strip().lower() == "true"


def consumer_config(props: Union[ConsumerConfig, Mapping[str, Any]]) -> ConsumerConfig:
    """``ConsumerConfig(resolve_keytab(props))``; a ConsumerConfig is used as it is (its caller built it here)."""
    return props if isinstance(props, ConsumerConfig) else ConsumerConfig(resolve_keytab(props))


def resolve_keytab(props: Mapping[str, Any]) -> Dict[str, Any]:
    """``props`` with ``sasl.kerberos.keytab`` made a readable absolute path on this host (see the module).

    Raises ConfigurationError (property ``sasl.kerberos.keytab``) when the keytab is not
    readable here. Returns a copy; ``props`` without Kerberos or without a keytab come back unchanged.
    """
    resolved = dict(props)
    keytab = str(resolved.get(KEYTAB) or "")
    if not keytab or not _kerberized(resolved):
        return resolved
    candidates = [keytab]
    shipped = None if os.path.isabs(keytab) else spark_files_dir()
    if shipped is not None:
        candidates.append(os.path.join(shipped, keytab))
        parent = os.path.dirname(os.path.abspath(shipped))
        if os.path.basename(parent).startswith("userFiles-"):  # a job's own directory (a streaming query's)
            candidates.append(os.path.join(parent, keytab))  # below the driver's: spark.files are there
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.R_OK):
            resolved[KEYTAB] = os.path.abspath(candidate)
            return resolved
    where = f"on host {socket.gethostname()!r} (working directory {os.getcwd()!r}"
    where += f", Spark files {shipped!r})" if shipped is not None else ")"
    raise ConfigurationError(
        KEYTAB, f"cannot read keytab {keytab!r} {where}: put the keytab at the same absolute path on every "
        f"node, or ship it with spark-submit --files /path/to/{os.path.basename(keytab)} (spark.files) and set "
        f"{KEYTAB} to its file name {os.path.basename(keytab)!r}")
