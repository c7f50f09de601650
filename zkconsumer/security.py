"""Security: ZooKeeper digest authentication and ACLs, TLS to brokers.

Three independent features, each off by default and driven by
:class:`~zkconsumer.config.ConsumerConfig` properties:

``zookeeper.auth = user:password``
    The ZooKeeper session authenticates with the ``digest`` scheme
    (:func:`zookeeper_auth_data`), as ``zkCli.sh addauth digest user:password``
    does. ZooKeeper 3.4 accepts *any* digest credential at login: a wrong password
    is only noticed when an ACL refuses a write. :func:`prepare_zookeeper` therefore
    checks, once at connect time, that the session may create nodes under the
    group's existing nodes, and raises a :class:`~zkconsumer.errors.ConfigurationError`
    naming ``zookeeper.auth`` (and the node and its owner) when it may not.

``zookeeper.acl.enable = true`` (requires ``zookeeper.auth``)
    Every node this member creates under ``/consumers/<group>`` (the group node,
    ``ids``/``owners``/``offsets`` and their children) carries the ACL of
    :func:`zookeeper_acls`: READ for ``world:anyone``, ALL for the credential's
    digest id ``user:base64(sha1("user:password"))``. Anyone (Kafka's
    ``ConsumerOffsetChecker``, ``kafka-consumer-groups``, Burrow, monitoring) can
    read offsets, owners and registrations; only holders of the credential can
    join the group, claim partitions, commit or delete. The shared parent
    ``/consumers`` is created with an open ACL, as Kafka 0.9 does
    (``ZkUtils.makeSurePersistentPathExists``), so other groups stay creatable.
    Nodes that already exist keep their ACL (migrate them with ``setAcl``).

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
                             "zookeeper.auth": "billing:s3cret", "zookeeper.acl.enable": "true",
                             "security.protocol": "SSL", "ssl.cafile": "/etc/kafka/ca.pem"})
    zookeeper_acls(config)   # [ACL(31, digest billing:<sha1>), ACL(1, world anyone)]
    broker_ssl_context(config).verify_mode   # ssl.CERT_REQUIRED

``zookeeper.sasl.enabled`` and ``security.protocol = SASL_PLAINTEXT/SASL_SSL``
    Kerberos, see :mod:`zkconsumer.kerberos`; with ``zookeeper.acl.enable`` the
    ACL's ALL entry is ``sasl:<the login's principal>`` (beside the digest one when
    ``zookeeper.auth`` is set too).

May import: errors, config, zookeeper, kerberos.
"""

from __future__ import annotations

import logging
import os
import ssl
from typing import List, NoReturn, Optional, Protocol, Sequence, Tuple

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Permissions, make_acl, make_digest_acl, make_digest_acl_credential

from . import kerberos
from .errors import ConfigurationError
from .zookeeper import zkformat

__all__ = [
    "SecurityConfig",
    "broker_ssl_context",
    "check_config",
    "digest_id",
    "prepare_zookeeper",
    "zookeeper_acls",
    "zookeeper_auth_data",
]

log = logging.getLogger(__name__)

#: Kafka's root of every consumer group; always created with an open ACL.
CONSUMERS_PATH = zkformat.CONSUMERS_PATH
_SSL_FILE_PROPERTIES = ("ssl.cafile", "ssl.certfile", "ssl.keyfile")


class SecurityConfig(Protocol):
    """The properties this module reads (a :class:`~zkconsumer.config.ConsumerConfig` has them all)."""

    group_id: str
    zookeeper_auth: Optional[str]
    zookeeper_acl_enable: bool
    security_protocol: str
    ssl_cafile: Optional[str]
    ssl_certfile: Optional[str]
    ssl_keyfile: Optional[str]
    ssl_check_hostname: bool
    sasl_kerberos_service_name: str
    sasl_kerberos_keytab: Optional[str]
    sasl_kerberos_principal: Optional[str]
    zookeeper_sasl_enabled: bool
    zookeeper_sasl_service_name: str
    zookeeper_connect: str


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
    ignored = [p for p in _SSL_FILE_PROPERTIES if getattr(config, p.replace(".", "_"), None)]
    if ignored:
        log.warning("%s set but security.protocol is %s: broker connections are not encrypted "
                    "(set security.protocol=SSL to use them)", ", ".join(ignored), config.security_protocol)


# =========================================================================== ZooKeeper


def _split_credential(auth: str) -> Tuple[str, str]:
    """``"user:password"`` -> ``("user", "password")``; the password may contain colons."""
    user, colon, password = auth.partition(":")
    if not colon or not user:
        raise ConfigurationError("zookeeper.auth", "invalid value '***': expected user:password")
    return user, password


def digest_id(auth: str) -> str:
    """ZooKeeper's digest ACL id for credential ``auth``: ``user:base64(sha1("user:password"))``.

    The same value ZooKeeper's ``DigestAuthenticationProvider.generateDigest`` computes
    (only the first colon separates user and password):

    >>> digest_id("alice:secret")
    'alice:aYXlLOpEooaV1cRAvUL1fp9Qt7E='
    """
    user, password = _split_credential(auth)
    return str(make_digest_acl_credential(user, password))


def zookeeper_auth_data(config: SecurityConfig) -> Optional[List[Tuple[str, str]]]:
    """Kazoo's ``auth_data`` for the session: ``[("digest", "user:password")]``, or ``None``.

    >>> from types import SimpleNamespace
    >>> zookeeper_auth_data(SimpleNamespace(zookeeper_auth="alice:secret"))
    [('digest', 'alice:secret')]
    """
    auth = config.zookeeper_auth
    if not auth:
        return None
    _split_credential(auth)
    return [("digest", auth)]


def zookeeper_acls(config: SecurityConfig) -> Optional[List[ACL]]:
    """The ACL of every node this member creates, or ``None`` (kazoo's open ACL) when disabled.

    With ``zookeeper.acl.enable``: ALL for the digest id of ``zookeeper.auth``, READ
    for ``world:anyone`` (Kafka's tools and monitoring read offsets and owners).
    Raises ConfigurationError naming ``zookeeper.acl.enable`` when ``zookeeper.auth``
    is missing (the nodes would be writable by nobody).
    """
    if not config.zookeeper_acl_enable:
        return None
    auth = config.zookeeper_auth
    sasl = getattr(config, "zookeeper_sasl_enabled", False)
    if not auth and not sasl:
        raise ConfigurationError("zookeeper.acl.enable", "true requires zookeeper.auth (user:password) or "
                                 "zookeeper.sasl.enabled")
    acl: List[ACL] = []
    if auth:
        user, password = _split_credential(auth)
        acl.append(make_digest_acl(user, password, all=True))
    if sasl:
        acl.append(make_acl("sasl", kerberos.login_for(config).identity, all=True))
    return acl + [make_acl("world", "anyone", read=True)]


def _grants(acl: Sequence[ACL], permission: int, identity: Optional[str], sasl: Optional[str] = None) -> bool:
    """Whether ``acl`` grants ``permission`` to a session authenticated as digest ``identity``.

    ``world:anyone`` and a matching digest id grant; ACL entries of schemes this
    client cannot evaluate (``ip``, ``sasl``, ``x509``...) are given the benefit of
    the doubt, so the check never refuses a session ZooKeeper would accept.
    """
    for entry in acl:
        if not entry.perms & permission:
            continue
        scheme, ident = entry.id.scheme, entry.id.id
        if scheme == "world" and ident == "anyone":
            return True
        if scheme == "digest":
            if identity is not None and ident == identity:
                return True
            continue
        if scheme == "sasl" and sasl is not None:
            if ident in (sasl, sasl.split("@", 1)[0], sasl.split("@", 1)[0].split("/", 1)[0]):
                return True  # the full principal, or as servers with kerberos.remove*FromPrincipal see it
            continue
        return True  # a scheme we cannot evaluate
    return False


def _describe_writers(acl: Sequence[ACL], permission: int) -> str:
    names = [f"{e.id.scheme} user {e.id.id.split(':', 1)[0]!r}" if e.id.scheme == "digest"
             else f"{e.id.scheme}:{e.id.id}" for e in acl if e.perms & permission]
    return ", ".join(names) or "nobody"


def prepare_zookeeper(client: KazooClient, config: SecurityConfig) -> None:
    """Get a started session ready for the group's ACLs; call once, before registering.

    1. With ``zookeeper.acl.enable``, create ``/consumers`` (and a missing chroot) with
       an open ACL, so Kafka's shared parent does not get the group's restricted ACL.
    2. Check that the session may create children of the group's nodes that exist
       (``/consumers/<g>``, its ``ids``, ``owners`` and ``offsets``; or ``/consumers``
       for a new group). Digest login never fails in ZooKeeper 3.4, so this is where
       a missing or wrong ``zookeeper.auth`` shows: ConfigurationError naming
       ``zookeeper.auth``, the node and who may write it.

    Kazoo errors (connection loss...) propagate. Nodes of topics (``owners/<t>``,
    ``offsets/<t>``) are not checked; a refusal there surfaces as kazoo's
    ``NoAuthError`` from the write.
    """
    if config.zookeeper_acl_enable:
        client.ensure_path(CONSUMERS_PATH, acl=OPEN_ACL_UNSAFE)  # and a missing chroot, open as in Kafka
    auth = config.zookeeper_auth
    identity = digest_id(auth) if auth else None
    if identity is not None and identity.split(":", 1)[0] == "super":
        return  # may be ZooKeeper's superDigest user, whom no ACL restricts
    sasl = kerberos.login_for(config).identity if getattr(config, "zookeeper_sasl_enabled", False) else None
    paths = zkformat.GroupPaths(config.group_id)
    if client.exists(paths.root) is None:
        candidates = [CONSUMERS_PATH]
    else:
        candidates = [paths.root, paths.ids, paths.owners, paths.offsets]
    for path in candidates:
        try:
            acl, _ = client.get_acls(path)
        except NoNodeError:
            continue
        if not _grants(acl, Permissions.CREATE, identity, sasl):
            _refuse(path, acl, auth)


def _refuse(path: str, acl: Sequence[ACL], auth: Optional[str]) -> NoReturn:
    writers = _describe_writers(acl, Permissions.CREATE)
    if auth is None:
        hint = "set zookeeper.auth to the credential the group's nodes were created with"
    else:
        user = auth.split(":", 1)[0]
        hint = (f"zookeeper.auth (user {user!r}) does not match it: check the user and password "
                "(ZooKeeper accepts any digest login; only the ACL check fails)")
    raise ConfigurationError(
        "zookeeper.auth", f"ZooKeeper node {path} may be written only by {writers}; {hint}")


# =========================================================================== TLS


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


def broker_ssl_context(config: SecurityConfig) -> Optional[ssl.SSLContext]:
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
