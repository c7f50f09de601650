"""SSL listeners on a LocalCluster's brokers, with throw-away TLS material generated at run time.

This project's security tests prove zkconsumer's TLS client against Kafka's SSL
listener (:class:`SslListeners`, a LocalCluster subclass taking ``ssl=``). A
user's own tests exercise their application, whose TLS is zkconsumer's, and need
no SSL broker of their own.

:func:`generate_ssl_files` makes, in one directory and without any network access:

- a test CA (``ca.pem``), valid for a couple of days;
- a broker certificate and key signed by it, with subject alternative names for
  every host given (``127.0.0.1`` and ``localhost`` by default), in PEM and in the
  PKCS12 keystore ``broker.p12`` the brokers load (``ssl.keystore.type=PKCS12``);
- the Java truststore ``truststore.p12`` holding the CA (for ``ssl.client.auth``);
- a client certificate and key (``client.pem``, ``client-key.pem``, key unencrypted)
  for ``ssl.certfile``/``ssl.keyfile``.

Keys are ECDSA P-256 (fast to generate; JSSE on Java 17 and OpenSSL both speak it).
The PKCS12 files use the ``cryptography`` package; a truststore needs the Java
"trusted certificate" attribute, which ``cryptography`` writes from version 45
(``serialize_java_truststore``); with an older version the JDK's ``keytool`` makes
it. ``cryptography`` is a test dependency only.

Example::

    with ProjectCluster(brokers=1, ssl=SslOptions(client_auth="required")) as cluster:
        cluster.ssl_bootstrap_servers                   # "127.0.0.1:<ssl port>"
        cluster.ssl_files.consumer_properties()         # security.protocol=SSL, ssl.cafile, ...
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from zkconsumer.testing.cluster import ClusterBase
from zkconsumer.testing.core import HOST
from zkconsumer.testing.errors import LocalClusterError, MissingDependencyError
from zkconsumer.testing.properties import PropertyValue, format_value

__all__ = ["CLIENT_AUTH_CHOICES", "SslFiles", "SslListeners", "SslOptions", "generate_ssl_files",
           "ssl_listener_properties"]

#: Values of Kafka 0.9's ``ssl.client.auth``.
CLIENT_AUTH_CHOICES = ("none", "requested", "required")
#: Password of the generated keystores (they guard throw-away keys in a temp directory).
STORE_PASSWORD = "zkconsumer-test"


@dataclass(frozen=True)
class SslOptions:
    """How LocalCluster's SSL listeners are set up.

    ``client_auth`` is the brokers' ``ssl.client.auth`` (``none``, ``requested`` or
    ``required``); ``hosts`` go into the broker certificate's subject alternative
    names (IP addresses as IP entries, the rest as DNS names); ``valid_days`` bounds
    every certificate.
    """

    client_auth: str = "none"
    hosts: Tuple[str, ...] = ("127.0.0.1", "localhost")
    valid_days: int = 2

    def __post_init__(self) -> None:
        if self.client_auth not in CLIENT_AUTH_CHOICES:
            raise ValueError(f"client_auth must be one of {', '.join(CLIENT_AUTH_CHOICES)}, not {self.client_auth!r}")
        if not self.hosts:
            raise ValueError("hosts must name at least one host for the broker certificate")
        if self.valid_days < 1:
            raise ValueError("valid_days must be >= 1")


@dataclass(frozen=True)
class SslFiles:
    """Paths of the generated material (all inside ``directory``).

    PEM: ``ca`` (the CA certificate), ``client_cert``/``client_key``,
    ``broker_cert``/``broker_key``. Java: ``keystore`` (broker key and chain) and
    ``truststore`` (the CA), both PKCS12 with password ``password``.
    """

    directory: Path
    ca: Path
    client_cert: Path
    client_key: Path
    broker_cert: Path
    broker_key: Path
    keystore: Path
    truststore: Path
    password: str = STORE_PASSWORD

    def consumer_properties(self, client_cert: bool = True) -> Dict[str, str]:
        """zkconsumer properties for an SSL consumer trusting the test CA (with the client certificate)."""
        props = {"security.protocol": "SSL", "ssl.cafile": str(self.ca)}
        if client_cert:
            props.update({"ssl.certfile": str(self.client_cert), "ssl.keyfile": str(self.client_key)})
        return props

    def broker_properties(self, client_auth: str = "none") -> Dict[str, str]:
        """Kafka 0.9 broker settings loading this keystore/truststore (``listeners`` not included)."""
        return {
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.keystore),
            "ssl.keystore.password": self.password,
            "ssl.key.password": self.password,
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": str(self.truststore),
            "ssl.truststore.password": self.password,
            "ssl.client.auth": client_auth,
        }


def _crypto() -> Any:
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise MissingDependencyError(
            "ProjectCluster(ssl=...) generates certificates with the `cryptography` package: "
            "pip install cryptography") from None
    return cryptography


def _name(common_name: str) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "zkconsumer tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _san(hosts: Sequence[str]) -> Any:
    from cryptography import x509

    entries: List[Any] = []
    for host in hosts:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            entries.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(entries)


def _issue(subject: str, key: Any, issuer: Optional[Tuple[Any, Any]], days: int, *,
           hosts: Sequence[str] = (), server: bool = False, client: bool = False) -> Any:
    """A certificate for ``key``: self-signed CA when ``issuer`` is None, else signed by (cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID

    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(_name(subject))
               .public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=days))
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False))
    if issuer is None:
        builder = (builder.issuer_name(_name(subject))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                content_commitment=False, key_encipherment=False,
                                                data_encipherment=False, key_agreement=False,
                                                encipher_only=False, decipher_only=False), critical=True))
        return builder.sign(key, hashes.SHA256())
    issuer_cert, issuer_key = issuer
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
    builder = (builder.issuer_name(issuer_cert.subject)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                              critical=False)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                            content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=True,
                                            encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
    if hosts:
        builder = builder.add_extension(_san(hosts), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, data: bytes, private: bool = False) -> Path:
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def _pem_cert(cert: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(cert.public_bytes(serialization.Encoding.PEM))


def _pem_key(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))


def _java_truststore(path: Path, ca_cert: Any, ca_pem: Path, password: str, keytool: Optional[str]) -> None:
    """A PKCS12 truststore with ``ca_cert`` as a trusted entry (cryptography >= 45, else keytool)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    if hasattr(pkcs12, "serialize_java_truststore"):
        data = pkcs12.serialize_java_truststore([pkcs12.PKCS12Certificate(ca_cert, b"ca")],
                                                serialization.BestAvailableEncryption(password.encode()))
        _write(path, data)
        return
    if keytool is None or not os.access(keytool, os.X_OK):
        raise MissingDependencyError(
            "writing a Java truststore needs cryptography >= 45 or the JDK's keytool next to java")
    subprocess.run([keytool, "-importcert", "-noprompt", "-alias", "ca", "-file", str(ca_pem),
                    "-keystore", str(path), "-storetype", "PKCS12", "-storepass", password],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)


def generate_ssl_files(directory: Path, options: SslOptions = SslOptions(), *,
                       keytool: Optional[str] = None) -> SslFiles:
    """Create ``directory`` (mode 0700) and write a fresh CA, broker and client material into it.

    ``keytool`` (path of the JDK's keytool) is used only when ``cryptography`` is too
    old to write a Java truststore. Raises MissingDependencyError without
    ``cryptography``. Takes well under a second.
    """
    _crypto()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12

    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    days = options.valid_days
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _issue("zkconsumer test CA", ca_key, None, days)
    broker_key = ec.generate_private_key(ec.SECP256R1())
    broker_cert = _issue(options.hosts[0], broker_key, (ca_cert, ca_key), days, hosts=options.hosts, server=True)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client_cert = _issue("zkconsumer test client", client_key, (ca_cert, ca_key), days, client=True)

    files = SslFiles(
        directory=directory,
        ca=_write(directory / "ca.pem", _pem_cert(ca_cert)),
        client_cert=_write(directory / "client.pem", _pem_cert(client_cert)),
        client_key=_write(directory / "client-key.pem", _pem_key(client_key), private=True),
        broker_cert=_write(directory / "broker.pem", _pem_cert(broker_cert)),
        broker_key=_write(directory / "broker-key.pem", _pem_key(broker_key), private=True),
        keystore=directory / "broker.p12",
        truststore=directory / "truststore.p12",
    )
    keystore = pkcs12.serialize_key_and_certificates(
        b"broker", broker_key, broker_cert, [ca_cert],
        serialization.BestAvailableEncryption(files.password.encode()))
    _write(files.keystore, keystore, private=True)
    _java_truststore(files.truststore, ca_cert, files.ca, files.password, keytool)
    return files


def ssl_listener_properties(host: str, port: int, ssl_port: int,
                            ssl_settings: Mapping[str, PropertyValue]) -> Dict[str, Optional[str]]:
    """Broker overrides adding an SSL listener on ``ssl_port`` beside PLAINTEXT on ``port``.

    Kafka 0.9 ignores ``host.name``/``port`` once ``listeners`` is set and registers
    ``advertised.listeners`` (both protocols) in ``/brokers/ids``; the old single-listener
    keys are removed (``None``) so the file says one thing. ``ssl_settings`` are the
    keystore/truststore/``ssl.client.auth`` settings (see ``SslFiles.broker_properties``).
    Meant as ``merge``'s overrides, below the caller's own overrides.

    >>> ssl_listener_properties("127.0.0.1", 9092, 9093, {})["listeners"]
    'PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093'
    """
    listeners = f"PLAINTEXT://{host}:{port},SSL://{host}:{ssl_port}"
    props: Dict[str, Optional[str]] = {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "host.name": None,
        "port": None,
        "advertised.host.name": None,
        "advertised.port": None,
    }
    props.update({key: format_value(value) for key, value in ssl_settings.items()})
    return props


class SslListeners(ClusterBase):
    """A LocalCluster whose brokers may also have an SSL listener.

    ``ssl`` (an :class:`SslOptions`, or ``True`` for the defaults) adds an SSL listener
    to every broker, with material generated at start (:attr:`ssl_files`,
    :attr:`ssl_bootstrap_servers`, :meth:`ssl_port`); without it nothing TLS-related
    happens. Every other argument is LocalCluster's.
    """

    def __init__(self, *args: Any, ssl: Union[SslOptions, bool, None] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ssl_options: Optional[SslOptions] = SslOptions() if ssl is True else (ssl or None)
        self._ssl_ports: Dict[int, int] = {}
        self._ssl_files: Optional[SslFiles] = None

    def _allocate_ports(self, extra: int = 0) -> List[int]:
        """LocalCluster's ports, and an SSL port per broker (with ``ssl=``)."""
        count = len(self.broker_ids) if self._ssl_options is not None else 0
        ports = super()._allocate_ports(extra + count)
        self._ssl_ports = dict(zip(self.broker_ids, ports[:count]))
        return ports[count:]

    def _start_zookeeper(self) -> None:
        """ZooKeeper, then (the brokers start next) the SSL material their listeners need."""
        super()._start_zookeeper()
        if self._ssl_options is not None:
            keytool = str(Path(self._java).resolve().parent / "keytool")
            self._ssl_files = generate_ssl_files(self.work_dir / "ssl", self._ssl_options, keytool=keytool)

    def _broker_overrides(self, broker_id: int) -> Dict[str, Optional[PropertyValue]]:
        overrides = super()._broker_overrides(broker_id)
        if self._ssl_options is not None and self._ssl_files is not None:
            overrides.update(ssl_listener_properties(
                HOST, self._broker_ports[broker_id], self._ssl_ports[broker_id],
                self._ssl_files.broker_properties(self._ssl_options.client_auth)))
        return overrides

    @property
    def ssl_bootstrap_servers(self) -> str:
        """Every broker's SSL listener, ``127.0.0.1:s0,...`` in id order (needs ``ssl=``)."""
        self._require_ssl()
        return ",".join(f"{HOST}:{self._ssl_ports[i]}" for i in self.broker_ids)

    def ssl_port(self, broker_id: int) -> int:
        """The SSL listener port of broker ``broker_id`` (needs ``ssl=``)."""
        self._require_ssl()
        self._check_broker_id(broker_id)
        return self._ssl_ports[broker_id]

    @property
    def ssl_files(self) -> SslFiles:
        """The generated CA, client certificate/key and broker stores (needs ``ssl=``)."""
        self._require_ssl()
        assert self._ssl_files is not None
        return self._ssl_files

    def _require_ssl(self) -> None:
        self._require_running()
        if self._ssl_options is None:
            raise LocalClusterError("this cluster has no SSL listeners; create it with ssl=SslOptions(...)")
