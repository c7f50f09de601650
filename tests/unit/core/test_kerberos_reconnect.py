"""kazoo's view of a failed ZooKeeper SASL login: retriable when the KDC is out of reach, final otherwise.

kazoo retries a connection attempt that raises ``ConnectionDropped``, gives up for good on
``AuthFailedError`` (AUTH_FAILED; an error inside the mechanism's ``process()`` always becomes
one) and ends its connection thread on any exception it does not know (what a KDC out of reach
raised before). So zkconsumer's GSSAPI mechanism does what needs the KDC when pure-sasl creates it,
inside kazoo's connection attempt. Needs pure-sasl (the kerberos extra).
"""

from __future__ import annotations

import pytest
from kazoo.exceptions import AuthFailedError, ConnectionDropped

from zkconsumer import ConsumerConfig, kerberos
from zkconsumer.errors import ConfigurationError

CONFIG = ConsumerConfig({"zookeeper.connect": "127.0.0.1:2181", "group.id": "g", "zookeeper.sasl.enabled": "true"})


class FailingLogin:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def credentials(self) -> object:
        raise self.error


def mechanism_for(error: Exception) -> None:
    from puresasl.client import SASLClient  # type: ignore[import-untyped]

    options = kerberos.zookeeper_sasl_options(CONFIG, login=FailingLogin(error))  # type: ignore[arg-type]
    assert options is not None
    SASLClient(host="127.0.0.1", **options)


def test_a_kdc_out_of_reach_is_a_dropped_connection_kazoo_retries() -> None:
    with pytest.raises(ConnectionDropped, match="cannot reach the Kerberos KDC"):
        mechanism_for(kerberos.KdcUnavailableError("cannot reach the Kerberos KDC to get a ticket; retrying"))


def test_any_other_login_failure_stays_auth_failed() -> None:
    with pytest.raises(AuthFailedError, match="cannot log in as"):
        mechanism_for(ConfigurationError("sasl.kerberos.principal", "cannot log in as 'nobody@R' with keytab 'k'"))
