"""A kerberized LocalCluster: a real MIT KDC, ZooKeeper with SASL, brokers with SASL_PLAINTEXT (and SASL_SSL) listeners.

:class:`KerberosListeners` (a LocalCluster subclass taking ``kerberos=``) starts a
:class:`~harness.cluster.kdc.LocalKdc` in the cluster's work directory before
ZooKeeper, with principals and keytabs for ``zookeeper/localhost``, ``kafka/localhost``
and the clients (:data:`CLIENT`, :data:`OTHER_CLIENT`), then runs

- ZooKeeper 3.4.6 with ``authProvider.1=...SASLAuthenticationProvider`` and a JAAS
  ``Server`` section (keytab login as ``zookeeper/localhost``);
- every Kafka 0.9.0.1 broker with ``listeners=PLAINTEXT://...,SASL_PLAINTEXT://...``
  (inter-broker traffic stays on PLAINTEXT), ``sasl.kerberos.service.name=kafka``, a
  JAAS ``KafkaServer`` section (``kafka/localhost``) and a ``Client`` section, so the
  brokers' own ZooKeeper sessions authenticate too; with ``ssl=`` as well, the SSL port
  (:mod:`.tls`'s material) is a ``SASL_SSL`` listener instead of an ``SSL`` one;
- Kafka's tools (``KafkaTools``) with a JAAS file logging in as :data:`CLIENT`.

Services are named for ``localhost`` and every address is 127.0.0.1, which both
MIT's library and Java reverse-resolve to ``localhost`` (``/etc/hosts``).

The test process must point MIT's library at the realm: ``os.environ.update(cluster.kdc.environ)``
(``KRB5_CONFIG``). Example::

    with kerberized_cluster(brokers=1) as cluster:   # KRB5_CONFIG set for the duration
        props = {**consumer_props, **cluster.kerberos_consumer_properties()}
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from zkconsumer.testing import LocalCluster
from zkconsumer.testing.core import HOST, KAFKA_MAIN, ZOOKEEPER_MAIN
from zkconsumer.testing.errors import LocalClusterError
from zkconsumer.testing.properties import PropertyValue

from .kdc import LocalKdc, find_kdc_tools, jaas_section

__all__ = ["CLIENT", "OTHER_CLIENT", "KerberosListeners", "KerberosOptions", "kerberized_cluster", "realm_environment"]

#: The clients' principals (realm added): the consumer's, and a second identity for ACL tests.
CLIENT = "zkclient"
OTHER_CLIENT = "intruder"
ZOOKEEPER_PRINCIPAL = "zookeeper/localhost"
KAFKA_PRINCIPAL = "kafka/localhost"
SASL_AUTH_PROVIDER = "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"


@dataclass(frozen=True)
class KerberosOptions:
    """``ticket_lifetime``: the realm's longest ticket, seconds (short to test renewal)."""

    ticket_lifetime: int = 3600


class KerberosListeners(LocalCluster):
    """A LocalCluster whose ZooKeeper and brokers may be kerberized (``kerberos=True`` or a KerberosOptions)."""

    def __init__(self, *args: Any, kerberos: Union[KerberosOptions, bool, None] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._kerberos: Optional[KerberosOptions] = KerberosOptions() if kerberos is True else (kerberos or None)
        self._sasl_ports: Dict[int, int] = {}
        self._kdc: Optional[LocalKdc] = None
        self._jaas: Dict[str, Path] = {}

    def _allocate_ports(self, extra: int = 0) -> List[int]:
        """LocalCluster's ports, and a SASL_PLAINTEXT port per broker (with ``kerberos=``)."""
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
        kdc.add_principal(OTHER_CLIENT)
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
            if ssl_port is not None:  # with ssl=: the SSL port speaks SASL_SSL (the ssl.* settings apply to it)
                listeners += f",SASL_SSL://{HOST}:{ssl_port}"
            overrides.update({"listeners": listeners, "advertised.listeners": listeners, "host.name": None,
                              "port": None, "advertised.host.name": None, "advertised.port": None,
                              "security.inter.broker.protocol": "PLAINTEXT", "sasl.kerberos.service.name": "kafka"})
        return overrides

    def stop(self, grace: float = 5.0) -> None:
        """LocalCluster's stop(), then the KDC's."""
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

    # ------------------------------------------------------------------ for tests

    @property
    def kdc(self) -> LocalKdc:
        """The cluster's KDC (needs ``kerberos=``)."""
        self._require_kerberos()
        assert self._kdc is not None
        return self._kdc

    def sasl_port(self, broker_id: int) -> int:
        """The SASL_PLAINTEXT listener port of broker ``broker_id`` (needs ``kerberos=``)."""
        self._require_kerberos()
        self._check_broker_id(broker_id)
        return self._sasl_ports[broker_id]

    def kerberos_consumer_properties(self, principal: str = CLIENT, *, zookeeper: bool = True,
                                     protocol: str = "SASL_PLAINTEXT") -> Dict[str, str]:
        """zkconsumer properties logging in as ``principal`` from its keytab, SASL to brokers (and ZooKeeper);
        ``protocol="SASL_SSL"`` (a cluster with ``ssl=`` too) adds ``ssl.cafile`` trusting the test CA."""
        kdc = self.kdc
        props = {"security.protocol": protocol, "sasl.kerberos.service.name": "kafka",
                 "sasl.kerberos.keytab": str(kdc.keytab(principal)), "sasl.kerberos.principal": kdc.qualified(principal)}
        if zookeeper:
            props["zookeeper.sasl.enabled"] = "true"
        if protocol == "SASL_SSL":
            props["ssl.cafile"] = str(self.ssl_files.ca)
        return props

    def _require_kerberos(self) -> None:
        self._require_running()
        if self._kerberos is None:
            raise LocalClusterError("this cluster is not kerberized; create it with kerberos=True")


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


@contextlib.contextmanager
def kerberized_cluster(**options: Any) -> Iterator[Any]:
    """A started ``ProjectCluster(kerberos=..., **options)`` (``kerberos=True`` unless given) with this
    process pointed at its realm (:func:`realm_environment`); stopped, and the environment restored, on exit.

    Raises :class:`~zkconsumer.testing.errors.MissingDependencyError` (naming the Debian packages)
    before starting anything when MIT's KDC tools are missing.
    """
    from . import ProjectCluster  # the package imports this module

    find_kdc_tools()
    options.setdefault("kerberos", True)
    with ProjectCluster(**options) as cluster, realm_environment(cluster.kdc):
        yield cluster
