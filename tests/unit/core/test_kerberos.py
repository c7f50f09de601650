"""zkconsumer.kerberos without a KDC: properties, the errors GSSAPI failures become, sasl ACLs.

The exchanges themselves (brokers, ZooKeeper, logins, renewal) are proven against a real MIT
KDC in tests/integration/test_kerberos.py and test_kerberos_renewal.py; the GSSAPI messages
below are the ones MIT's library gave there.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Dict, List

import pytest
from kazoo.security import ACL, Id, Permissions

from zkconsumer import ConsumerConfig, kerberos
from zkconsumer.errors import ConfigurationError
from zkconsumer.wire import tls
from zkconsumer.zookeeper import acl

from .test_security import FakeZk, group_nodes

NO_CACHE = ("Major (458752): No credentials were supplied, or the credentials were unavailable or inaccessible, "
            "Minor (2529639107): No credentials cache found")
UNKNOWN_SERVER = ("Major (851968): Unspecified GSS failure.  Minor code may provide more information, "
                  "Minor (2529638919): Server zk/localhost@ZKCONSUMER.TEST not found in Kerberos database")
NO_KDC = ("Major (458752): No credentials were supplied, or the credentials were unavailable or inaccessible, "
          "Minor (2529639068): Cannot contact any KDC for realm 'ZKCONSUMER.TEST'")
EXPIRED = "Major (851968): Unspecified GSS failure. Minor (2529638944): Ticket expired"


def config(**props: object) -> ConsumerConfig:
    base: Dict[str, object] = {"zookeeper.connect": "127.0.0.1:2181", "group.id": "g1"}
    base.update(props)
    return ConsumerConfig(base)


def test_defaults_and_protocols() -> None:
    c = config()
    assert (c.sasl_kerberos_service_name, c.zookeeper_sasl_service_name) == ("kafka", "zookeeper")
    assert not kerberos.uses_sasl(c.security_protocol)
    assert kerberos.broker_authenticator(c) is None and kerberos.zookeeper_sasl_options(c) is None
    assert config(**{"security.protocol": "sasl_ssl"}).security_protocol == "SASL_SSL"
    assert kerberos.uses_sasl("SASL_PLAINTEXT") and kerberos.uses_sasl("SASL_SSL") and not kerberos.uses_sasl("SSL")


def test_keytab_needs_a_principal() -> None:
    with pytest.raises(ConfigurationError) as info:
        config(**{"sasl.kerberos.keytab": "/etc/app.keytab"})
    assert info.value.property == "sasl.kerberos.principal"


def test_acl_enable_is_satisfied_by_sasl_alone() -> None:
    assert config(**{"zookeeper.acl.enable": "true", "zookeeper.sasl.enabled": "true"}).zookeeper_acl_enable
    with pytest.raises(ConfigurationError, match="zookeeper.auth .* or zookeeper.sasl.enabled"):
        config(**{"zookeeper.acl.enable": "true"})


def test_sasl_ssl_gets_a_tls_context_too() -> None:
    assert tls.broker_ssl_context(config(**{"security.protocol": "SASL_SSL"})) is not None
    assert tls.broker_ssl_context(config(**{"security.protocol": "SASL_PLAINTEXT"})) is None


@pytest.mark.parametrize("text,keytab,prop,words", [
    (NO_CACHE, None, "sasl.kerberos.keytab", "no Kerberos ticket: run kinit"),
    (NO_CACHE, __file__, "sasl.kerberos.principal", "cannot log in as 'who@R' with keytab"),
    (NO_CACHE, "/nonexistent.keytab", "sasl.kerberos.keytab", "cannot read keytab '/nonexistent.keytab'"),
    (UNKNOWN_SERVER, None, "sasl.kerberos.service.name", "the KDC knows no service principal zk/localhost"),
    (EXPIRED, None, "sasl.kerberos.keytab", "has expired: renew it (kinit -R, k5start)"),
    (EXPIRED, __file__, "sasl.kerberos.keytab", "check this host's clock"),
])
def test_gssapi_failures_name_the_property_to_fix(text: str, keytab: str, prop: str, words: str) -> None:
    error = kerberos.explain(RuntimeError(text), service="zk", host="localhost", keytab=keytab, principal="who@R")
    assert isinstance(error, ConfigurationError) and error.property == prop
    assert words in str(error)


def test_an_unreachable_kdc_is_a_retriable_connection_failure() -> None:
    error = kerberos.explain(RuntimeError(NO_KDC), keytab=__file__, principal="who@R")
    assert isinstance(error, kerberos.KdcUnavailableError) and isinstance(error, OSError)
    assert "cannot reach the Kerberos KDC" in str(error)


def test_service_host_reverse_resolves_addresses_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kerberos.socket, "gethostbyaddr", lambda ip: ("broker1.example.com", [], [ip]))
    assert kerberos.service_host("10.1.2.3") == "broker1.example.com"
    assert kerberos.service_host("broker2.example.com") == "broker2.example.com"

    def unknown(ip: str) -> None:
        raise OSError("no PTR")

    monkeypatch.setattr(kerberos.socket, "gethostbyaddr", unknown)
    assert kerberos.service_host("10.1.2.3") == "10.1.2.3"


@pytest.fixture
def logged_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kerberos, "login_for", lambda config: SimpleNamespace(identity="app@EXAMPLE.COM"))


def sasl_config(**props: object) -> ConsumerConfig:
    return config(**{"zookeeper.sasl.enabled": "true", "zookeeper.acl.enable": "true", **props})


def test_sasl_acls_give_the_principal_everything_and_the_world_read(logged_in: None) -> None:
    assert acl.zookeeper_acls(sasl_config()) == [ACL(Permissions.ALL, Id("sasl", "app@EXAMPLE.COM")),
                                                      ACL(Permissions.READ, Id("world", "anyone"))]
    both = acl.zookeeper_acls(sasl_config(**{"zookeeper.auth": "alice:secret"}))
    assert both is not None and [a.id.scheme for a in both] == ["digest", "sasl", "world"]


def sasl_owned(ident: str) -> List[ACL]:
    return [ACL(Permissions.ALL, Id("sasl", ident)), ACL(Permissions.READ, Id("world", "anyone"))]


@pytest.mark.parametrize("ident", ["app@EXAMPLE.COM", "app"])
def test_prepare_accepts_nodes_of_our_principal(logged_in: None, ident: str) -> None:
    acl.prepare_zookeeper(FakeZk(group_nodes(sasl_owned(ident))), sasl_config())  # type: ignore[arg-type]


def test_prepare_refuses_nodes_of_another_principal(logged_in: None) -> None:
    with pytest.raises(ConfigurationError, match="sasl:other@EXAMPLE.COM"):
        acl.prepare_zookeeper(FakeZk(group_nodes(sasl_owned("other@EXAMPLE.COM"))),  # type: ignore[arg-type]
                                   sasl_config())
