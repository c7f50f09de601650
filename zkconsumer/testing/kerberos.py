"""``LocalCluster(kerberos=True)``: a real MIT KDC, ZooKeeper with SASL, brokers with SASL_PLAINTEXT listeners.

:class:`KerberizedCluster` starts a :class:`~zkconsumer.testing.kdc.LocalKdc` in the
cluster's work directory before ZooKeeper, with principals and keytabs for
``zookeeper/localhost``, ``kafka/localhost`` and the clients (:data:`CLIENT`,
:data:`OTHER_CLIENT`), then runs

- ZooKeeper 3.4.6 with ``authProvider.1=...SASLAuthenticationProvider`` and a JAAS
  ``Server`` section (keytab login as ``zookeeper/localhost``);
- every Kafka 0.9.0.1 broker with ``listeners=PLAINTEXT://...,SASL_PLAINTEXT://...``
  (inter-broker traffic stays on PLAINTEXT), ``sasl.kerberos.service.name=kafka``, a
  JAAS ``KafkaServer`` section (``kafka/localhost``) and a ``Client`` section, so the
  brokers' own ZooKeeper sessions authenticate too (a subclass with SSL listeners, as
  this project's own suite has, makes its SSL port a ``SASL_SSL`` listener instead);
- any other JVM of the cluster with a JAAS file logging in as :data:`CLIENT`.

Services are named for ``localhost`` and every address is 127.0.0.1, which both MIT's
library and Java reverse-resolve to ``localhost`` (``/etc/hosts``).

The process running the consumer must point MIT's library at the realm's ``krb5.conf``
(``KRB5_CONFIG``): :meth:`KerberizedCluster.realm_environment` does so for a block. Example::

    with LocalCluster(brokers=1, kerberos=True) as cluster, cluster.realm_environment():
        props = {"zookeeper.connect": cluster.zk_connect, "group.id": "g",
                 **cluster.kerberos_consumer_properties()}     # keytab login as zkclient@ZKCONSUMER.TEST

MIT's KDC tools missing: :class:`~zkconsumer.testing.errors.MissingDependencyError`
naming the Debian packages, before anything starts.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from zkconsumer.testing.cluster import ClusterBase
from zkconsumer.testing.core import HOST, KAFKA_MAIN, ZOOKEEPER_MAIN
from zkconsumer.testing.errors import LocalClusterError
from zkconsumer.testing.kdc import LocalKdc, find_kdc_tools, jaas_section
from zkconsumer.testing.properties import PropertyValue

__all__ = ["CLIENT", "OTHER_CLIENT", "KerberizedCluster", "KerberosOptions", "LocalCluster", "realm_environment"]

#: The clients' principals (realm added): the consumer's, and a second identity (e.g. for ACL tests).
CLIENT = "zkclient"
OTHER_CLIENT = "intruder"
ZOOKEEPER_PRINCIPAL = "zookeeper/localhost"
KAFKA_PRINCIPAL = "kafka/localhost"
SASL_AUTH_PROVIDER = "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"


@dataclass(frozen=True)
class KerberosOptions:
    """``ticket_lifetime``: the realm's longest ticket, seconds (short to test renewal);
    ``principals``: more client principals to create (each gets a keytab, :meth:`LocalKdc.keytab`)."""

    ticket_lifetime: int = 3600
    principals: Sequence[str] = ()


@contextlib.contextmanager
def realm_environment(kdc: LocalKdc) -> Iterator[None]:
    """Point this process's MIT library at ``kdc``'s realm (``KRB5_CONFIG``...) for the duration, then restore."""
    saved = {key: os.environ.get(key) for key in kdc.environ}
    os.environ.update(kdc.environ)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class KerberizedCluster(ClusterBase):
    """A cluster whose ZooKeeper and brokers are kerberized with ``kerberos=True`` (or a KerberosOptions)."""

    def __init__(self, *args: Any, kerberos: Union[KerberosOptions, bool, None] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._kerberos: Optional[KerberosOptions] = KerberosOptions() if kerberos is True else (kerberos or None)
        self._sasl_ports: Dict[int, int] = {}
        self._kdc: Optional[LocalKdc] = None
        self._jaas: Dict[str, Path] = {}

    def _start(self) -> None:
        if self._kerberos is not None:
            find_kdc_tools()  # MissingDependencyError before any JVM starts
        super()._start()

    def _allocate_ports(self, extra: int = 0) -> List[int]:
        """The base's ports, and a SASL_PLAINTEXT port per broker (with ``kerberos=``)."""
        count = len(self.broker_ids) if self._kerberos is not None else 0
        ports = super()._allocate_ports(extra + count)
        self._sasl_ports = dict(zip(self.broker_ids, ports[:count]))
        return ports[count:]

    def _start_zookeeper(self) -> None:
        """The KDC, principals, keytabs and JAAS files first, then ZooKeeper (with SASL)."""
        if self._kerberos is not None:
            self._start_kdc(self._kerberos)
            self._zookeeper_config.setdefault("authProvider.1", SASL_AUTH_PROVIDER)
        super()._start_zookeeper()

    def _start_kdc(self, options: KerberosOptions) -> None:
        directory = self.work_dir / "kerberos"
        self._kdc = kdc = LocalKdc(directory, ticket_lifetime=options.ticket_lifetime).start()
        zk, kafka = kdc.add_principal(ZOOKEEPER_PRINCIPAL), kdc.add_principal(KAFKA_PRINCIPAL)
        client = kdc.add_principal(CLIENT)
        for principal in (OTHER_CLIENT, *options.principals):
            kdc.add_principal(principal)
        files = {
            "zookeeper": jaas_section("Server", kdc.qualified(ZOOKEEPER_PRINCIPAL), zk),
            "kafka": jaas_section("KafkaServer", kdc.qualified(KAFKA_PRINCIPAL), kafka)
            + jaas_section("Client", kdc.qualified(KAFKA_PRINCIPAL), kafka, client=True),
            "client": jaas_section("KafkaClient", kdc.qualified(CLIENT), client, client=True)
            + jaas_section("Client", kdc.qualified(CLIENT), client, client=True),
        }
        for name, text in files.items():
            self._jaas[name] = directory / f"{name}.jaas"
            self._jaas[name].write_text(text)

    def _java_argv(self, main_class: str, args: Sequence[str], log4j: str,
                   extra_options: Sequence[str] = (), classpath: Optional[str] = None) -> List[str]:
        if self._kdc is not None:
            role = {ZOOKEEPER_MAIN: "zookeeper", KAFKA_MAIN: "kafka"}.get(main_class, "client")
            extra_options = (f"-Djava.security.krb5.conf={self._kdc.krb5_conf}",
                             f"-Djava.security.auth.login.config={self._jaas[role]}",
                             "-Dzookeeper.authProvider.1=" + SASL_AUTH_PROVIDER, *extra_options)
        return super()._java_argv(main_class, args, log4j, extra_options, classpath)

    def _broker_overrides(self, broker_id: int) -> Dict[str, Optional[PropertyValue]]:
        overrides = super()._broker_overrides(broker_id)
        if self._kerberos is not None:
            listeners = f"PLAINTEXT://{HOST}:{self._broker_ports[broker_id]},SASL_PLAINTEXT://{HOST}:{self._sasl_ports[broker_id]}"
            ssl_port = getattr(self, "_ssl_ports", {}).get(broker_id)
            if ssl_port is not None:  # a subclass's SSL port speaks SASL_SSL (its ssl.* settings apply to it)
                listeners += f",SASL_SSL://{HOST}:{ssl_port}"
            overrides.update({"listeners": listeners, "advertised.listeners": listeners, "host.name": None,
                              "port": None, "advertised.host.name": None, "advertised.port": None,
                              "security.inter.broker.protocol": "PLAINTEXT", "sasl.kerberos.service.name": "kafka"})
        return overrides

    def stop(self, grace: float = 5.0) -> None:
        """The cluster's stop(), then the KDC's."""
        try:
            super().stop(grace)
        finally:
            if self._kdc is not None:
                self._kdc.stop()

    @property
    def zk_connect(self) -> str:
        """``localhost:<port>`` when kerberized: ZooKeeper 3.4's Java client (brokers, Kafka's tools) asks
        for the service ticket of the connect string's host as written, and the principal is
        ``zookeeper/localhost``."""
        connect = super().zk_connect
        return connect.replace(f"{HOST}:", "localhost:", 1) if self._kerberos is not None else connect

    @property
    def kdc(self) -> LocalKdc:
        """The cluster's KDC (needs ``kerberos=``): ``kdc.environ``, ``kdc.krb5_conf``, ``kdc.keytab(principal)``,
        ``kdc.add_principal(...)``, ``kdc.stop_server()``/``start_server()`` ("the KDC is down" and back)."""
        self._require_kerberos()
        assert self._kdc is not None
        return self._kdc

    def realm_environment(self) -> "contextlib.AbstractContextManager[None]":
        """A context manager pointing this process's MIT library at the cluster's realm (``KRB5_CONFIG``,
        ``KRB5_KDC_PROFILE``, :attr:`LocalKdc.environ`) for its block; a Spark executor or any other
        process needs the same variables."""
        return realm_environment(self.kdc)

    def sasl_port(self, broker_id: int) -> int:
        """The SASL_PLAINTEXT listener port of broker ``broker_id`` (needs ``kerberos=``)."""
        self._require_kerberos()
        self._check_broker_id(broker_id)
        return self._sasl_ports[broker_id]

    def kerberos_consumer_properties(self, principal: str = CLIENT, *, zookeeper: bool = True,
                                     protocol: str = "SASL_PLAINTEXT") -> Dict[str, str]:
        """zkconsumer properties logging in as ``principal`` (:data:`CLIENT`, :data:`OTHER_CLIENT` or one of
        KerberosOptions' ``principals``) from its keytab, SASL to the brokers (and to ZooKeeper unless
        ``zookeeper=False``). ``protocol="SASL_SSL"`` needs a subclass with SSL listeners (``ssl_files``),
        whose test CA ``ssl.cafile`` then trusts."""
        kdc = self.kdc
        props = {"security.protocol": protocol, "sasl.kerberos.service.name": "kafka",
                 "sasl.kerberos.keytab": str(kdc.keytab(principal)), "sasl.kerberos.principal": kdc.qualified(principal)}
        if zookeeper:
            props["zookeeper.sasl.enabled"] = "true"
        if protocol == "SASL_SSL":
            ssl_files = getattr(self, "ssl_files", None)
            if ssl_files is None:
                raise LocalClusterError("SASL_SSL needs SSL listeners, which LocalCluster does not run; "
                                        "use SASL_PLAINTEXT")
            props["ssl.cafile"] = str(ssl_files.ca)
        return props

    def _require_kerberos(self) -> None:
        self._require_running()
        if self._kerberos is None:
            raise LocalClusterError("this cluster is not kerberized; create it with kerberos=True")


class LocalCluster(KerberizedCluster):
    """ZooKeeper and ``brokers`` Kafka 0.9.0.1 brokers (ids 0..n-1) on loopback; kerberized with ``kerberos=``.

    ZooKeeper is one standalone server (3.4.6, shipped with Kafka).

    ``partitions`` is the brokers' ``num.partitions`` (auto-created topics) and the default
    of :meth:`create_topic`. ``broker_config`` overrides broker settings (``None`` values
    remove one; see :func:`zkconsumer.testing.properties.broker_properties` for the
    defaults), ``zookeeper_config`` likewise for ZooKeeper. ``heap`` is each JVM's ``-Xmx``;
    ``startup_timeout`` bounds each JVM's start; ``kafka_home`` is a Kafka 0.9.0.1 distribution
    to use instead of the cached download. ``kerberos`` (``True`` or a :class:`KerberosOptions`)
    adds a KDC and SASL (:class:`KerberizedCluster`).

    Use as a context manager, or call :meth:`start` and :meth:`stop`. A stopped cluster
    cannot be started again. Methods are safe to call from several threads.
    """
