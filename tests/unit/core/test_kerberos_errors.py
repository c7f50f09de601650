"""The texts of Kerberos failures a server, not our side, decides: a refused ticket (clock skew first among
the causes) from ZooKeeper (AUTH_FAILED) and from a broker (it closes the connection), and a krb5.conf that
knows no KDC for the realm. No KDC and no gssapi: the GSSAPI side is faked, the refusals are real sockets
and kazoo's exception; the real refusals are in tests/integration/test_kerberos*.py."""

from __future__ import annotations

import socket
import threading
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

import pytest
from kazoo.exceptions import AuthFailedError

from zkconsumer import kerberos
from zkconsumer.consumer.zk_session import auth_failed_text
from zkconsumer.errors import BrokerUnavailableError, ConfigurationError, ZooKeeperAccessError
from zkconsumer.wire.connection import BrokerConnection
from zkconsumer.zookeeper.zkcalls import BoundedZooKeeper

from .test_kerberos import config

UNKNOWN_REALM = ("Major (851968): Unspecified GSS failure.  Minor code may provide more information, "
                 "Minor (2529639062): Cannot find KDC for realm \"CORP.EXAMPLE.COM\"")
SKEW = "Major (851968): Unspecified GSS failure. Minor (2529638949): Clock skew too great"


def test_a_realm_krb5_conf_does_not_know_is_named_with_the_file_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KRB5_CONFIG", "/opt/app/krb5.conf")
    error = kerberos.explain(RuntimeError(UNKNOWN_REALM), keytab=__file__, principal="app@CORP.EXAMPLE.COM")
    assert isinstance(error, kerberos.KdcUnavailableError)  # retriable, as before: only the text changed
    text = str(error)
    assert "names no KDC for realm 'CORP.EXAMPLE.COM'" in text and "[realms] section of KRB5_CONFIG=/opt/app/krb5.conf" in text
    assert "cannot reach" not in text
    monkeypatch.delenv("KRB5_CONFIG")
    assert "[realms] section of /etc/krb5.conf (set KRB5_CONFIG" in str(kerberos.explain(RuntimeError(UNKNOWN_REALM)))


def test_a_kdc_that_is_down_is_still_unreachable() -> None:
    error = kerberos.explain(RuntimeError("Minor (2529639068): Cannot contact any KDC for realm 'R'"))
    assert isinstance(error, kerberos.KdcUnavailableError) and "cannot reach the Kerberos KDC" in str(error)


def test_clock_skew_our_side_sees_is_named() -> None:
    error = kerberos.explain(RuntimeError(SKEW), service="kafka", host="b1")
    assert isinstance(error, ConfigurationError) and error.property == "sasl.kerberos.principal"
    assert "clocks of this host, the KDC and the servers agree within the KDC's clock skew" in str(error)


def test_zookeeper_refusing_the_ticket_names_clock_skew_and_the_keytab() -> None:
    text = auth_failed_text(config(**{"zookeeper.sasl.enabled": "true", "zookeeper.sasl.service.name": "zk"}),
                            AuthFailedError())
    assert text.startswith("ZooKeeper at zookeeper.connect='127.0.0.1:2181' refused our Kerberos ticket (AUTH_FAILED")
    assert "clock skew (krb5.conf clockskew, default 5 minutes" in text
    assert "current key of their principal zk/<host> (zookeeper.sasl.service.name" in text
    assert "Clock skew too great" in text
    assert auth_failed_text(config(), AuthFailedError()) == ("ZooKeeper at zookeeper.connect='127.0.0.1:2181' failed "
                                                             "while connecting: AuthFailedError()")


class _Result:
    def get(self, timeout: float) -> None:
        raise AuthFailedError()


@pytest.mark.parametrize("sasl,words", [
    ({"mechanism": "X", "service": "zk"}, "refused our Kerberos ticket (AUTH_FAILED): check that the clocks"),
    (None, "authentication failed: check zookeeper.auth"),
])
def test_a_session_refused_later_says_why(sasl: Optional[Dict[str, str]], words: str) -> None:
    raw: Any = SimpleNamespace(_connection=SimpleNamespace(sasl_options=sasl),
                               handler=SimpleNamespace(timeout_exception=TimeoutError))
    with pytest.raises(ZooKeeperAccessError, match=r"\(.*" + words.replace("(", r"\(").replace(")", r"\)")):
        BoundedZooKeeper(raw, 1.0)._wait("reading", "/consumers/g", _Result())


class _FakeSasl:
    """GssapiSasl's shape: one token, never complete (the broker closes before answering)."""

    complete = False

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def step(self, challenge: Optional[bytes]) -> bytes:
        return b"token"


def test_a_broker_closing_during_sasl_names_clock_skew(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kerberos, "GssapiSasl", _FakeSasl)
    listener = socket.create_server(("127.0.0.1", 0))

    def refuse() -> None:  # what Kafka 0.9 does with a ticket it refuses: read it, close
        conn, _ = listener.accept()
        with conn:
            conn.recv(64)

    thread = threading.Thread(target=refuse, daemon=True)
    thread.start()
    refusals: List[bool] = []
    login: Any = SimpleNamespace(credentials=lambda: object(), refused=lambda: refusals.append(True))
    authenticate = kerberos.broker_authenticator(config(**{"security.protocol": "SASL_PLAINTEXT"}), login)
    connection = BrokerConnection("127.0.0.1", listener.getsockname()[1], "c", 5000, 0, authenticate=authenticate)
    try:
        with pytest.raises(BrokerUnavailableError) as info:
            connection.metadata([])
    finally:
        connection.close()
        thread.join(10)
        listener.close()
    text = str(info.value)
    assert info.value.retriable and "closed the connection during SASL authentication" in text
    assert "if the listener at 127.0.0.1 speaks SASL_PLAINTEXT, the broker refused our Kerberos ticket" in text
    assert "clocks of this host, the KDC and the servers agree" in text
    assert "principal kafka/<host> (sasl.kerberos.service.name" in text
    assert not thread.is_alive()
    assert refusals == [True]  # the next attempt logs in afresh


def test_a_refused_login_logs_in_afresh_next_time() -> None:
    login = kerberos.KerberosLogin("/etc/app.keytab", "app@R")
    login._credentials, login._renew_at = object(), float("inf")
    login.refused()
    assert login._renew_at == 0.0  # credentials() re-acquires, into a new ticket cache (a keytab login)
