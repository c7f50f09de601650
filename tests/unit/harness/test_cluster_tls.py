"""harness.cluster.tls and the SSL listener settings: generated material, checked without a JVM broker."""

from __future__ import annotations

import ipaddress
import shutil
import socket
import ssl
import stat
import subprocess
import threading
from pathlib import Path
from typing import List, Optional

import pytest

from harness.cluster.tls import SslFiles, SslOptions, generate_ssl_files, ssl_listener_properties
from zkconsumer import ConsumerConfig
from zkconsumer.testing.properties import broker_properties
from zkconsumer.wire.tls import broker_ssl_context

cryptography = pytest.importorskip("cryptography", reason="the test certificates are generated with cryptography")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> SslFiles:
    return generate_ssl_files(tmp_path_factory.mktemp("tls") / "ssl")


def load(path: Path) -> "cryptography.x509.Certificate":
    from cryptography import x509

    return x509.load_pem_x509_certificate(path.read_bytes())


def test_every_file_is_written_and_keys_are_private(files: SslFiles) -> None:
    for path in (files.ca, files.client_cert, files.client_key, files.broker_cert, files.broker_key,
                 files.keystore, files.truststore):
        assert path.is_file() and path.parent == files.directory
    for path in (files.client_key, files.broker_key, files.keystore):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(files.directory.stat().st_mode) == 0o700


def test_broker_certificate_names_loopback_and_is_signed_by_the_ca(files: SslFiles) -> None:
    from cryptography import x509

    ca, broker, client = load(files.ca), load(files.broker_cert), load(files.client_cert)
    san = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    broker.verify_directly_issued_by(ca)
    client.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_keystore_holds_the_broker_key_and_chain(files: SslFiles) -> None:
    from cryptography.hazmat.primitives.serialization import pkcs12

    key, cert, extra = pkcs12.load_key_and_certificates(files.keystore.read_bytes(), files.password.encode())
    assert key is not None and cert == load(files.broker_cert) and extra == [load(files.ca)]


def test_custom_hosts_go_into_the_san(tmp_path: Path) -> None:
    from cryptography import x509

    made = generate_ssl_files(tmp_path / "x", SslOptions(hosts=("broker.test", "::1")))
    san = load(made.broker_cert).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["broker.test"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("::1")]


@pytest.mark.parametrize("kwargs", [{"client_auth": "sometimes"}, {"hosts": ()}, {"valid_days": 0}])
def test_ssl_options_are_validated(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        SslOptions(**kwargs)


def test_consumer_properties_point_at_the_files(files: SslFiles) -> None:
    assert files.consumer_properties() == {"security.protocol": "SSL", "ssl.cafile": str(files.ca),
                                           "ssl.certfile": str(files.client_cert),
                                           "ssl.keyfile": str(files.client_key)}
    assert "ssl.certfile" not in files.consumer_properties(client_cert=False)


def test_broker_listener_settings_replace_the_single_listener_keys(files: SslFiles) -> None:
    overrides = ssl_listener_properties("127.0.0.1", 9092, 9093, files.broker_properties("required"))
    props = broker_properties(0, 9092, "/d", "zk:1", cluster_size=1, partitions=1, overrides=overrides)
    assert props["listeners"] == props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093"
    assert not {"host.name", "port", "advertised.host.name", "advertised.port"} & set(props)
    assert props["ssl.client.auth"] == "required" and props["ssl.keystore.type"] == "PKCS12"
    assert props["ssl.keystore.location"] == str(files.keystore)


class TlsServer:
    """A one-shot TLS server on loopback presenting the broker certificate (stands in for a broker)."""

    def __init__(self, files: SslFiles, require_client_cert: bool) -> None:
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(str(files.broker_cert), str(files.broker_key))
        self.ctx.load_verify_locations(cafile=str(files.ca))
        self.ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_NONE
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.peer: List[Optional[dict]] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        conn.settimeout(5)
        try:
            with self.ctx.wrap_socket(conn, server_side=True) as tls:
                self.peer.append(tls.getpeercert())
                tls.sendall(b"ok")
        except (ssl.SSLError, OSError):
            self.peer.append(None)
        finally:
            self.listener.close()

    def connect(self, ctx: ssl.SSLContext, server_hostname: str) -> bytes:
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname=server_hostname) as tls:
                return tls.recv(2)


def consumer_config(files: SslFiles, **props: object) -> ConsumerConfig:
    return ConsumerConfig({"zookeeper.connect": "127.0.0.1:2181", "group.id": "g",
                           **files.consumer_properties(), **props})


@pytest.mark.parametrize("hostname", ["127.0.0.1", "localhost"])
def test_security_context_completes_a_mutual_tls_handshake(files: SslFiles, hostname: str) -> None:
    server = TlsServer(files, require_client_cert=True)
    ctx = broker_ssl_context(consumer_config(files))
    assert ctx is not None
    assert server.connect(ctx, hostname) == b"ok"
    server.thread.join(5)
    peer = server.peer[0]
    assert peer is not None and (("commonName", "zkconsumer test client"),) in peer["subject"]


def test_a_host_not_in_the_certificate_is_refused_unless_hostname_checks_are_off(files: SslFiles) -> None:
    server = TlsServer(files, require_client_cert=False)
    ctx = broker_ssl_context(consumer_config(files))
    assert ctx is not None
    with pytest.raises(ssl.SSLCertVerificationError, match="[Hh]ostname"):
        server.connect(ctx, "broker.elsewhere.test")
    server.thread.join(5)
    relaxed = broker_ssl_context(consumer_config(files, **{"ssl.check.hostname": "false"}))
    assert relaxed is not None
    server = TlsServer(files, require_client_cert=False)
    assert server.connect(relaxed, "broker.elsewhere.test") == b"ok"


def test_a_broker_signed_by_another_ca_is_refused(files: SslFiles, tmp_path: Path) -> None:
    other = generate_ssl_files(tmp_path / "other")
    server = TlsServer(other, require_client_cert=False)
    ctx = broker_ssl_context(consumer_config(files))
    assert ctx is not None
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        server.connect(ctx, "127.0.0.1")


@pytest.mark.skipif(shutil.which("keytool") is None, reason="no JDK keytool on PATH")
def test_truststore_falls_back_to_keytool_with_an_older_cryptography(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from cryptography.hazmat.primitives.serialization import pkcs12

    monkeypatch.delattr(pkcs12, "serialize_java_truststore", raising=False)
    keytool = shutil.which("keytool")
    made = generate_ssl_files(tmp_path / "kt", keytool=keytool)
    listing = subprocess.run([str(keytool), "-list", "-keystore", str(made.truststore), "-storetype", "PKCS12",
                              "-storepass", made.password], capture_output=True, text=True, timeout=60, check=True)
    assert "trustedCertEntry" in listing.stdout


@pytest.mark.skipif(shutil.which("keytool") is None, reason="no JDK keytool on PATH")
def test_java_reads_the_truststore_as_a_trusted_ca(files: SslFiles) -> None:
    listing = subprocess.run(["keytool", "-list", "-keystore", str(files.truststore), "-storetype", "PKCS12",
                              "-storepass", files.password], capture_output=True, text=True, timeout=60, check=True)
    assert "1 entry" in listing.stdout and "trustedCertEntry" in listing.stdout
