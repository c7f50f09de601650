"""TLS to brokers: the client context of every broker connection when ``security.protocol`` is SSL.

Driven by five properties of :class:`~zkconsumer.config.ConsumerConfig` (any object with the
attributes of :class:`TLSConfig` will do):

``security.protocol = SSL``
    Fetch and metadata connections use the brokers' ``SSL`` endpoint from
    ``/brokers/ids`` (Kafka 0.9 ``listeners=...,SSL://host:port``) over TLS with the
    context of :func:`broker_ssl_context`: brokers are verified against
    ``ssl.cafile`` or, **when ``ssl.cafile`` is unset, against the system's default
    CA store** (as Kafka's Java clients fall back to the JVM's ``cacerts``);
    ``ssl.certfile`` (+ ``ssl.keyfile``) is presented for ``ssl.client.auth``;
    ``ssl.check.hostname=false`` skips the host-name match but never the chain
    check. Every unusable file raises ConfigurationError naming the property and
    the file; an encrypted private key is refused (no property carries a password,
    and OpenSSL would otherwise prompt on the terminal).

Example::

    config = ConsumerConfig({"zookeeper.connect": "zk:2181", "group.id": "billing",
                             "security.protocol": "SSL", "ssl.cafile": "/etc/kafka/ca.pem"})
    broker_ssl_context(config).verify_mode   # ssl.CERT_REQUIRED
"""

from __future__ import annotations

import os
import ssl
from typing import NoReturn, Optional, Protocol

from ..errors import ConfigurationError

__all__ = ["SSL_FILE_PROPERTIES", "TLSConfig", "broker_ssl_context"]

#: The properties naming TLS files (unused, and warned about, with PLAINTEXT).
SSL_FILE_PROPERTIES = ("ssl.cafile", "ssl.certfile", "ssl.keyfile")


class TLSConfig(Protocol):
    """The properties this module reads, read-only (a :class:`~zkconsumer.config.ConsumerConfig` has them)."""

    @property
    def security_protocol(self) -> str: ...
    @property
    def ssl_cafile(self) -> Optional[str]: ...
    @property
    def ssl_certfile(self) -> Optional[str]: ...
    @property
    def ssl_keyfile(self) -> Optional[str]: ...
    @property
    def ssl_check_hostname(self) -> bool: ...


def _fail(prop: str, path: str, problem: str) -> NoReturn:
    raise ConfigurationError(prop, f"{path!r} {problem}")


def _read_text(prop: str, path: str) -> str:
    """The file's text (PEM is ASCII); ConfigurationError naming ``prop`` if unreadable."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("ascii", "replace")
    except IsADirectoryError:
        _fail(prop, path, "is a directory, not a PEM file")
    except OSError as exc:
        _fail(prop, path, f"cannot be read: {exc.strerror or exc}")


def _reason(exc: ssl.SSLError) -> str:
    return str(exc.reason or exc).replace("_", " ").lower()


def _load_ca(ctx: ssl.SSLContext, cafile: Optional[str]) -> None:
    if cafile is None:
        paths = ssl.get_default_verify_paths()
        if not any(p and os.path.exists(p) for p in (paths.cafile, paths.capath)):
            raise ConfigurationError(
                "ssl.cafile", "is not set and this system has no default CA store "
                f"({paths.openssl_cafile} / {paths.openssl_capath}); set ssl.cafile to the CA that signed "
                "the brokers' certificates")
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        return
    if "-----BEGIN CERTIFICATE-----" not in _read_text("ssl.cafile", cafile):
        _fail("ssl.cafile", cafile, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    try:
        ctx.load_verify_locations(cafile=cafile)
    except ssl.SSLError as exc:
        _fail("ssl.cafile", cafile, f"holds no usable CA certificate: {_reason(exc)}")


def _load_client_cert(ctx: ssl.SSLContext, certfile: str, keyfile: Optional[str]) -> None:
    cert_text = _read_text("ssl.certfile", certfile)
    if "-----BEGIN CERTIFICATE-----" not in cert_text:
        _fail("ssl.certfile", certfile, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    if keyfile is None:
        if "PRIVATE KEY-----" not in cert_text:
            _fail("ssl.certfile", certfile, "holds no private key; set ssl.keyfile to the client key")
        key_prop, key_path = "ssl.certfile", certfile
    else:
        if "PRIVATE KEY-----" not in _read_text("ssl.keyfile", keyfile):
            _fail("ssl.keyfile", keyfile, "holds no PEM private key (-----BEGIN ... PRIVATE KEY-----)")
        key_prop, key_path = "ssl.keyfile", keyfile

    def no_password() -> NoReturn:  # OpenSSL asks for a password: the key is encrypted
        _fail(key_prop, key_path, "holds an encrypted private key; zkconsumer needs an unencrypted PEM key "
                                  "(e.g. openssl pkey -in key.pem -out plain.pem)")

    try:
        ctx.load_cert_chain(certfile, keyfile, password=no_password)
    except ssl.SSLError as exc:
        if exc.reason in ("KEY_VALUES_MISMATCH", "NO_CERTIFICATE_ASSIGNED") or "KEY_VALUES_MISMATCH" in str(exc):
            _fail(key_prop, key_path, f"holds a private key that does not match the certificate in {certfile!r}")
        _fail(key_prop, key_path, f"cannot be loaded as certificate/private key: {_reason(exc)}")


def broker_ssl_context(config: TLSConfig) -> Optional[ssl.SSLContext]:
    """The TLS client context for broker connections, or ``None`` when ``security.protocol`` is PLAINTEXT.

    Contract: protocol TLS 1.2+ (Kafka 0.9 offers 1.2), ``verify_mode`` always
    ``CERT_REQUIRED``, ``check_hostname`` = ``ssl.check.hostname``; trust from
    ``ssl.cafile`` or the system store; client certificate from ``ssl.certfile`` and
    ``ssl.keyfile`` (or a combined PEM in ``ssl.certfile``) when set. Raises
    ConfigurationError naming the property and the file when a file cannot be
    read, holds no PEM certificate/key, holds an encrypted key, or the key does
    not match the certificate. With PLAINTEXT, ``ssl.*`` settings are ignored
    (:func:`check_config` warns about them).
    """
    if str(config.security_protocol).upper() not in ("SSL", "SASL_SSL"):
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_ca(ctx, config.ssl_cafile or None)
    if config.ssl_certfile:
        _load_client_cert(ctx, config.ssl_certfile, config.ssl_keyfile or None)
    elif config.ssl_keyfile:
        raise ConfigurationError("ssl.keyfile", "is set but ssl.certfile is not")
    ctx.check_hostname = bool(config.ssl_check_hostname)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx
