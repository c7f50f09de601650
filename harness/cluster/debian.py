"""Debian's ZooKeeper 3.8 server in place of the 3.4.6 shipped in Kafka's distribution.

This project runs its ensemble tests against both servers, to show zkconsumer
works with a newer ZooKeeper than Kafka 0.9's; it needs Debian's ``zookeeper``
package (``scripts/setup-env`` installs it). Brokers and tools keep Kafka's 3.4.6
client either way. A user's own tests run LocalCluster's 3.4.6 server.

Chosen with ``zookeeper="debian"`` (or ``"3.8"``, or ``ZKCONSUMER_ZOOKEEPER=debian``)
on :class:`DebianZooKeeper` (part of :class:`~harness.cluster.ProjectCluster`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from zkconsumer.testing.cluster import ClusterBase
from zkconsumer.testing.core import HOST, ZOOKEEPER_MAIN
from zkconsumer.testing.errors import MissingDependencyError
from zkconsumer.testing.probes import srvr_fields, zookeeper_command

#: Where Debian's ``zookeeper``/``libzookeeper-java`` packages put their jars.
DEBIAN_JAVA_DIR = Path("/usr/share/java")
DEBIAN_ZOOKEEPER_HINT = (
    "Debian's ZooKeeper is not installed: `sudo apt-get install -y zookeeper` "
    "(`scripts/setup-env` tries this)"
)
#: Accepted names of the two ZooKeeper servers -> canonical name.
_ZOOKEEPER_FLAVOURS = {"kafka": "kafka", "3.4": "kafka", "3.4.6": "kafka", "debian": "debian", "3.8": "debian"}

#: ZooKeeper 3.5 and newer: no AdminServer (it would take port 8080), and every four-letter
#: word (``srvr``, ``dump``, ``cons``) allowed, which 3.5+ refuses by default and the cluster
#: uses for readiness and session probes.
NEWER_SERVER_CONFIG = {"admin.enableServer": False, "4lw.commands.whitelist": "*"}


def zookeeper_flavour(requested: Optional[str] = None) -> str:
    """The ZooKeeper server to run: ``"kafka"`` (3.4.6, in Kafka's distribution) or ``"debian"``.

    ``requested`` ``None`` means ``$ZKCONSUMER_ZOOKEEPER``, else ``"kafka"``. ``"3.4"`` and
    ``"3.4.6"`` are aliases of ``"kafka"``, ``"3.8"`` of ``"debian"``; anything else is a ValueError.

    >>> zookeeper_flavour("3.8"), zookeeper_flavour("kafka")
    ('debian', 'kafka')
    """
    name = requested if requested is not None else (os.environ.get("ZKCONSUMER_ZOOKEEPER") or "kafka")
    try:
        return _ZOOKEEPER_FLAVOURS[name.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown ZooKeeper {name!r}: use one of {sorted(_ZOOKEEPER_FLAVOURS)}") from None


def debian_zookeeper(java_dir: Path = DEBIAN_JAVA_DIR) -> Tuple[str, str]:
    """``(classpath, version)`` of Debian's ZooKeeper server, e.g. ``(..., "3.8.0")``.

    The classpath is ``zookeeper.jar`` (its manifest names its dependencies) plus slf4j's
    log4j 1.2 binding and log4j when present, so the server logs through the cluster's
    log4j configuration. The version comes from the versioned jar's name (``"3.8"`` if
    there is none). Raises MissingDependencyError (with the install command) if absent.
    """
    jar = Path(java_dir) / "zookeeper.jar"
    if not jar.is_file():
        raise MissingDependencyError(DEBIAN_ZOOKEEPER_HINT)
    versions = [m.group(1) for m in (re.fullmatch(r"zookeeper-(\d+\.\d+\.\d+)\.jar", p.name)
                                     for p in Path(java_dir).glob("zookeeper-*.jar")) if m]
    logging = [Path(java_dir) / name for name in ("slf4j-log4j12.jar", "log4j-1.2.jar")]
    classpath = os.pathsep.join(str(p) for p in [jar, *logging] if p.is_file())
    return classpath, max(versions, key=lambda v: tuple(map(int, v.split("."))), default="3.8")


class DebianZooKeeper(ClusterBase):
    """A LocalCluster whose ZooKeeper may be Debian's: ``zookeeper`` is a name for
    :func:`zookeeper_flavour`; every other argument is LocalCluster's.

    With Debian's server, :data:`NEWER_SERVER_CONFIG` comes before ``zookeeper_config``.
    """

    def __init__(self, *args: Any, zookeeper: Optional[str] = None, **kwargs: Any) -> None:
        flavour = zookeeper_flavour(zookeeper)
        if flavour == "debian":
            kwargs["zookeeper_config"] = {**NEWER_SERVER_CONFIG, **(kwargs.get("zookeeper_config") or {})}
        super().__init__(*args, **kwargs)
        self._zk_flavour = flavour
        self._zk_classpath: Optional[str] = None

    @property
    def zookeeper_version(self) -> str:
        """The version of the ZooKeeper server that runs (node 1's ``srvr``), e.g. ``"3.4.6"`` or ``"3.8.0"``."""
        reply = zookeeper_command(HOST, self.zk_port, "srvr")
        return srvr_fields(reply).get("Zookeeper version", "").split("-")[0]

    def _start_zookeeper(self) -> None:
        if self._zk_flavour == "debian":
            self._zk_classpath = debian_zookeeper()[0]
        super()._start_zookeeper()

    def _java_argv(self, main_class: str, args: Sequence[str], log4j: str,
                   extra_options: Sequence[str] = (), classpath: Optional[str] = None) -> List[str]:
        if main_class == ZOOKEEPER_MAIN and self._zk_classpath is not None:
            classpath = self._zk_classpath
        return super()._java_argv(main_class, args, log4j, extra_options, classpath)
