"""Security settings checked together: ZooKeeper digest authentication and ACLs, TLS to brokers.

The features live with what they secure: :mod:`zkconsumer.zookeeper.acl` (``zookeeper.auth``,
``zookeeper.acl.enable``: the session's credential, the ACL of the group's nodes, the check at
connect time) and :mod:`zkconsumer.wire.tls` (``security.protocol=SSL`` and ``ssl.*``: the broker
TLS context). This module checks every setting of both before anything connects
(:func:`check_config`).

``zookeeper.sasl.enabled`` and ``security.protocol = SASL_PLAINTEXT/SASL_SSL`` are Kerberos
(:mod:`zkconsumer.kerberos`): :func:`check_config` logs in first; with ``zookeeper.acl.enable`` the
ACL's ALL entry is ``sasl:<the login's principal>`` (beside the digest one when ``zookeeper.auth``
is set too).

May import: kerberos, wire, zookeeper.
"""

from __future__ import annotations

import logging
from typing import Optional, Protocol

from . import kerberos
from .wire.tls import SSL_FILE_PROPERTIES, TLSConfig, broker_ssl_context
from .zookeeper.acl import ZooKeeperAuthConfig, zookeeper_acls, zookeeper_auth_data

__all__ = [
    "SecurityConfig",
    "check_config",
]

log = logging.getLogger(__name__)


class SecurityConfig(TLSConfig, ZooKeeperAuthConfig, Protocol):
    """The properties of both, and Kerberos's (a :class:`~zkconsumer.config.ConsumerConfig` has them all)."""

    @property
    def sasl_kerberos_service_name(self) -> str: ...
    @property
    def sasl_kerberos_keytab(self) -> Optional[str]: ...
    @property
    def sasl_kerberos_principal(self) -> Optional[str]: ...
    @property
    def zookeeper_sasl_enabled(self) -> bool: ...
    @property
    def zookeeper_sasl_service_name(self) -> str: ...
    @property
    def zookeeper_connect(self) -> str: ...


def check_config(config: SecurityConfig) -> None:
    """Check every security setting that can be checked without a server; call before connecting.

    Raises ConfigurationError naming the property for ``zookeeper.acl.enable``
    without ``zookeeper.auth``, a malformed ``zookeeper.auth``, and any TLS file
    :func:`broker_ssl_context` cannot use. Logs a warning when ``ssl.cafile``,
    ``ssl.certfile`` or ``ssl.keyfile`` is set while ``security.protocol`` is
    PLAINTEXT (they then do nothing: connections are not encrypted).
    """
    zookeeper_auth_data(config)
    zookeeper_acls(config)
    if kerberos.uses_sasl(config.security_protocol) or config.zookeeper_sasl_enabled:
        kerberos.preflight(config)
    if str(config.security_protocol).upper() in ("SSL", "SASL_SSL"):
        broker_ssl_context(config)
        return
    ignored = [p for p in SSL_FILE_PROPERTIES if getattr(config, p.replace(".", "_"), None)]
    if ignored:
        log.warning("%s set but security.protocol is %s: broker connections are not encrypted "
                    "(set security.protocol=SSL to use them)", ", ".join(ignored), config.security_protocol)
