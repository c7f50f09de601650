"""zkconsumer.security, zookeeper.acl and wire.tls without servers: credentials, ACLs, the TLS context and its errors."""

from __future__ import annotations

import base64
import hashlib
import logging
import ssl
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Optional, Tuple

import pytest
from kazoo.exceptions import NoNodeError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions

from harness.cluster.tls import SslFiles, generate_ssl_files
from zkconsumer import ConsumerConfig
from zkconsumer.errors import ConfigurationError
from zkconsumer.security import check_config
from zkconsumer.wire.tls import broker_ssl_context
from zkconsumer.zookeeper.acl import digest_id, prepare_zookeeper, zookeeper_acls, zookeeper_auth_data


def config(**props: object) -> ConsumerConfig:
    base: Dict[str, object] = {"zookeeper.connect": "127.0.0.1:2181", "group.id": "g1"}
    base.update(props)
    return ConsumerConfig(base)


def expected_digest(user: str, password: str) -> str:
    """ZooKeeper's DigestAuthenticationProvider.generateDigest, computed here independently."""
    return user + ":" + base64.b64encode(hashlib.sha1(f"{user}:{password}".encode()).digest()).decode()


# --------------------------------------------------------------------------- ZooKeeper credentials and ACLs


def test_digest_id_is_zookeepers_digest_and_splits_at_the_first_colon() -> None:
    assert digest_id("alice:secret") == expected_digest("alice", "secret")
    assert digest_id("bob:pa:ss") == expected_digest("bob", "pa:ss")


def test_auth_data_is_a_digest_credential_or_none() -> None:
    assert zookeeper_auth_data(config()) is None
    assert zookeeper_auth_data(config(**{"zookeeper.auth": "alice:secret"})) == [("digest", "alice:secret")]


def test_no_acls_unless_enabled() -> None:
    assert zookeeper_acls(config(**{"zookeeper.auth": "alice:secret"})) is None


def test_acls_give_the_credential_everything_and_the_world_read() -> None:
    acls = zookeeper_acls(config(**{"zookeeper.auth": "alice:secret", "zookeeper.acl.enable": "true"}))
    assert acls == [ACL(Permissions.ALL, Id("digest", expected_digest("alice", "secret"))),
                    ACL(Permissions.READ, Id("world", "anyone"))]


def test_acl_enable_without_auth_names_the_property() -> None:
    with pytest.raises(ConfigurationError) as info:
        config(**{"zookeeper.acl.enable": "true"})
    assert info.value.property == "zookeeper.acl.enable" and "zookeeper.auth" in str(info.value)
    bare = SimpleNamespace(zookeeper_acl_enable=True, zookeeper_auth=None)  # bypassing ConsumerConfig
    with pytest.raises(ConfigurationError) as info:
        zookeeper_acls(bare)  # type: ignore[arg-type]
    assert info.value.property == "zookeeper.acl.enable"


def test_malformed_auth_is_refused_without_echoing_it() -> None:
    with pytest.raises(ConfigurationError) as info:
        config(**{"zookeeper.auth": "no-colon-secret"})
    assert info.value.property == "zookeeper.auth" and "no-colon-secret" not in str(info.value)


class FakeZk:
    """Just enough of KazooClient for prepare_zookeeper: nodes with ACLs."""

    def __init__(self, nodes: Dict[str, List[ACL]]) -> None:
        self.nodes = dict(nodes)
        self.created: List[Tuple[str, Optional[List[ACL]]]] = []

    def exists(self, path: str) -> Optional[object]:
        return object() if path in self.nodes else None

    def get_acls(self, path: str) -> Tuple[List[ACL], object]:
        if path not in self.nodes:
            raise NoNodeError(path)
        return self.nodes[path], object()

    def ensure_path(self, path: str, acl: Optional[List[ACL]] = None) -> bool:
        if path not in self.nodes:
            self.nodes[path] = list(acl or OPEN_ACL_UNSAFE)
            self.created.append((path, acl))
        return True


def secured_by(user: str, password: str) -> List[ACL]:
    return [ACL(Permissions.ALL, Id("digest", expected_digest(user, password))),
            ACL(Permissions.READ, Id("world", "anyone"))]


def group_nodes(acl: List[ACL]) -> Dict[str, List[ACL]]:
    return {"/consumers": list(OPEN_ACL_UNSAFE), "/consumers/g1": acl, "/consumers/g1/ids": acl,
            "/consumers/g1/owners": acl, "/consumers/g1/offsets": acl}


def test_prepare_creates_consumers_open_when_acls_are_enabled() -> None:
    zk = FakeZk({})
    prepare_zookeeper(zk, config(**{"zookeeper.auth": "alice:secret", "zookeeper.acl.enable": "true"}))  # type: ignore[arg-type]
    assert zk.created == [("/consumers", OPEN_ACL_UNSAFE)]
    prepare_zookeeper(zk, config(**{"zookeeper.auth": "alice:secret", "zookeeper.acl.enable": "true"}))  # type: ignore[arg-type]
    assert len(zk.created) == 1  # already there: left alone


def test_prepare_creates_nothing_without_acls() -> None:
    zk = FakeZk({})
    prepare_zookeeper(zk, config())  # type: ignore[arg-type]
    assert zk.created == []


def test_prepare_accepts_the_matching_credential_and_open_groups() -> None:
    prepare_zookeeper(FakeZk(group_nodes(secured_by("alice", "secret"))),  # type: ignore[arg-type]
                      config(**{"zookeeper.auth": "alice:secret"}))
    prepare_zookeeper(FakeZk(group_nodes(list(OPEN_ACL_UNSAFE))), config())  # type: ignore[arg-type]


def test_prepare_gives_schemes_it_cannot_evaluate_the_benefit_of_the_doubt() -> None:
    ip_only = [ACL(Permissions.ALL, Id("ip", "10.0.0.0/8")), ACL(Permissions.READ, Id("world", "anyone"))]
    prepare_zookeeper(FakeZk(group_nodes(ip_only)), config())  # type: ignore[arg-type]


def test_prepare_refuses_a_wrong_password_naming_zookeeper_auth_and_the_node() -> None:
    zk = FakeZk(group_nodes(secured_by("alice", "secret")))
    with pytest.raises(ConfigurationError) as info:
        prepare_zookeeper(zk, config(**{"zookeeper.auth": "alice:wrong"}))  # type: ignore[arg-type]
    message = str(info.value)
    assert info.value.property == "zookeeper.auth"
    assert "/consumers/g1" in message and "'alice'" in message and "password" in message
    assert "wrong" not in message  # the password is never echoed


def test_prepare_refuses_a_missing_credential() -> None:
    zk = FakeZk(group_nodes(secured_by("alice", "secret")))
    with pytest.raises(ConfigurationError) as info:
        prepare_zookeeper(zk, config())  # type: ignore[arg-type]
    assert info.value.property == "zookeeper.auth" and "set zookeeper.auth" in str(info.value)


def test_prepare_checks_subdirectories_too() -> None:
    nodes = group_nodes(list(OPEN_ACL_UNSAFE))
    nodes["/consumers/g1/offsets"] = secured_by("alice", "secret")
    with pytest.raises(ConfigurationError, match="/consumers/g1/offsets"):
        prepare_zookeeper(FakeZk(nodes), config())  # type: ignore[arg-type]


def test_prepare_checks_consumers_for_a_new_group() -> None:
    zk = FakeZk({"/consumers": secured_by("admin", "x")})
    with pytest.raises(ConfigurationError, match="ZooKeeper node /consumers may be written only by digest user 'admin'"):
        prepare_zookeeper(zk, config())  # type: ignore[arg-type]


# --------------------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> SslFiles:
    pytest.importorskip("cryptography", reason="the test certificates are generated with cryptography")
    return generate_ssl_files(tmp_path_factory.mktemp("tls"))


def ssl_config(tls: SslFiles, client_cert: bool = True, **props: object) -> ConsumerConfig:
    return config(**{**tls.consumer_properties(client_cert), **props})


def test_plaintext_has_no_context() -> None:
    assert broker_ssl_context(config()) is None


def test_ssl_context_verifies_the_broker_and_presents_the_client_certificate(tls: SslFiles) -> None:
    ctx = broker_ssl_context(ssl_config(tls))
    assert ctx is not None
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.minimum_version >= ssl.TLSVersion.TLSv1_2
    (ca,) = ctx.get_ca_certs()
    assert (("commonName", "zkconsumer test CA"),) in ca["subject"]


def test_check_hostname_false_still_verifies_the_chain(tls: SslFiles) -> None:
    ctx = broker_ssl_context(ssl_config(tls, **{"ssl.check.hostname": "false"}))
    assert ctx is not None and not ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED


def test_combined_pem_in_certfile_is_accepted(tls: SslFiles, tmp_path: Path) -> None:
    combined = tmp_path / "combined.pem"
    combined.write_bytes(tls.client_cert.read_bytes() + tls.client_key.read_bytes())
    assert broker_ssl_context(ssl_config(tls, False, **{"ssl.certfile": str(combined)})) is not None


def test_without_cafile_the_system_store_is_used(tls: SslFiles, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config(**{"security.protocol": "SSL"})
    real = ssl.get_default_verify_paths()
    if any(p and Path(p).exists() for p in (real.cafile, real.capath)):
        assert broker_ssl_context(cfg) is not None
    missing = real._replace(cafile=None, capath="/nonexistent/certs", openssl_cafile="/nonexistent/cert.pem",
                            openssl_capath="/nonexistent/certs")
    monkeypatch.setattr(ssl, "get_default_verify_paths", lambda: missing)
    with pytest.raises(ConfigurationError) as info:
        broker_ssl_context(cfg)
    assert info.value.property == "ssl.cafile" and "no default CA store" in str(info.value)


def expect_error(cfg: ConsumerConfig, prop: str, *fragments: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        broker_ssl_context(cfg)
    assert info.value.property == prop, str(info.value)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


def test_missing_cafile(tls: SslFiles, tmp_path: Path) -> None:
    path = str(tmp_path / "nope.pem")
    expect_error(ssl_config(tls, **{"ssl.cafile": path}), "ssl.cafile", path, "No such file")


def test_cafile_that_is_a_directory(tls: SslFiles, tmp_path: Path) -> None:
    expect_error(ssl_config(tls, **{"ssl.cafile": str(tmp_path)}), "ssl.cafile", "directory")


def test_cafile_without_a_certificate(tls: SslFiles) -> None:
    expect_error(ssl_config(tls, **{"ssl.cafile": str(tls.client_key)}), "ssl.cafile", str(tls.client_key),
                 "no PEM certificate")


def test_cafile_with_a_corrupt_certificate(tls: SslFiles, tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    expect_error(ssl_config(tls, **{"ssl.cafile": str(bad)}), "ssl.cafile", str(bad), "no usable CA certificate")


def test_missing_certfile(tls: SslFiles, tmp_path: Path) -> None:
    path = str(tmp_path / "client.pem")
    expect_error(ssl_config(tls, **{"ssl.certfile": path}), "ssl.certfile", path, "cannot be read")


def test_certfile_without_key_and_no_keyfile(tls: SslFiles) -> None:
    expect_error(ssl_config(tls, False, **{"ssl.certfile": str(tls.client_cert)}), "ssl.certfile",
                 "no private key", "ssl.keyfile")


def test_keyfile_without_a_key(tls: SslFiles) -> None:
    expect_error(ssl_config(tls, **{"ssl.keyfile": str(tls.ca)}), "ssl.keyfile", str(tls.ca), "no PEM private key")


def test_key_that_does_not_match_the_certificate(tls: SslFiles) -> None:
    expect_error(ssl_config(tls, **{"ssl.keyfile": str(tls.broker_key)}), "ssl.keyfile", "does not match",
                 str(tls.client_cert))


def test_encrypted_key_is_refused_without_prompting(tls: SslFiles, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(tls.client_key.read_bytes(), None)
    encrypted = tmp_path / "encrypted-key.pem"
    encrypted.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.BestAvailableEncryption(b"pw")))
    expect_error(ssl_config(tls, **{"ssl.keyfile": str(encrypted)}), "ssl.keyfile", str(encrypted), "encrypted")


def test_check_config_fails_early_on_bad_tls_files(tls: SslFiles, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="ssl.cafile"):
        check_config(ssl_config(tls, **{"ssl.cafile": str(tmp_path / "missing.pem")}))
    check_config(ssl_config(tls))


def test_check_config_warns_when_ssl_files_are_set_for_plaintext(tls: SslFiles,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="zkconsumer.security"):
        check_config(config(**{"ssl.cafile": str(tls.ca)}))
    assert "ssl.cafile set but security.protocol is PLAINTEXT" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="zkconsumer.security"):
        check_config(config())
    assert caplog.text == ""


def test_fetcher_manager_uses_the_security_context(tls: SslFiles) -> None:
    """FetcherManager builds its connections' context through broker_ssl_context (errors included)."""
    from zkconsumer.fetch.manager import FetcherManager

    with pytest.raises(ConfigurationError, match="ssl.cafile"):
        FetcherManager(ssl_config(tls, **{"ssl.cafile": str(tls.client_key)}), list, pytest.fail)
    manager = FetcherManager(ssl_config(tls), list, pytest.fail)
    manager.stop()
