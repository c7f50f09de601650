"""How the admin reads reach the brokers: the endpoint, TLS and SASL of a client configuration.

:class:`BrokerAccess` bundles ``security.protocol`` (which ``/brokers/ids`` endpoint to use),
the TLS context (``SSL``, ``SASL_SSL``) and the SASL/GSSAPI authenticator (``SASL_*``), as a
member's own connections have them; :data:`PLAINTEXT` is the default of every admin reader.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..kerberos import broker_authenticator
from ..wire.connection import BrokerConnection
from ..wire.tls import broker_ssl_context

__all__ = ["BrokerAccess", "PLAINTEXT"]


@dataclass(frozen=True)
class BrokerAccess:
    """The endpoint ``protocol`` and the ``ssl_context``/``authenticate`` its connections need."""

    protocol: str = "PLAINTEXT"
    ssl_context: Optional[ssl.SSLContext] = None
    authenticate: Optional[Callable[[socket.socket, str], None]] = None

    @classmethod
    def from_config(cls, config: Any) -> "BrokerAccess":
        """The access a :class:`~zkconsumer.config.ConsumerConfig`'s ``security.protocol``, ``ssl.*`` and
        ``sasl.*`` settings describe (ConfigurationError for unusable TLS files)."""
        return cls(str(config.security_protocol).upper(), broker_ssl_context(config), broker_authenticator(config))

    def connection(self, host: str, port: int, client_id: str, socket_timeout_ms: int) -> BrokerConnection:
        """A (lazily connecting) connection to ``host:port`` with this access's TLS and SASL."""
        return BrokerConnection(host, port, client_id, socket_timeout_ms, 0, self.ssl_context,
                                authenticate=self.authenticate)


#: No TLS, no SASL: the brokers' PLAINTEXT endpoints.
PLAINTEXT = BrokerAccess()
