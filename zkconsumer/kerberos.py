"""Kerberos: SASL/GSSAPI to Kafka 0.9 brokers and to ZooKeeper, with the ``gssapi`` library.

Off by default; driven by :class:`~zkconsumer.config.ConsumerConfig` properties:

``security.protocol = SASL_PLAINTEXT`` (or ``SASL_SSL``)
    Every broker connection (:class:`~zkconsumer.wire.connection.BrokerConnection` with
    the ``authenticate`` of :func:`broker_authenticator`) authenticates right after
    connecting (after the TLS handshake with ``SASL_SSL``), as Kafka 0.9's clients do:
    there is no SaslHandshake request in 0.9, the GSSAPI tokens follow the connection
    directly, each framed by a 4-byte big-endian length, then the ordinary requests
    flow unwrapped (the brokers negotiate the ``auth`` quality of protection only). The
    service principal is ``<sasl.kerberos.service.name>/<host>@<realm>``, ``<host>``
    being the broker's registered host, or for an IP address its reverse-resolved name
    (Java's ``InetAddress.getHostName()``, which Kafka's clients use).

``zookeeper.sasl.enabled = true``
    The ZooKeeper session authenticates with SASL/GSSAPI through kazoo's
    ``sasl_options`` (:func:`zookeeper_sasl_options`), service principal
    ``<zookeeper.sasl.service.name>/<server host>``; with ``zookeeper.acl.enable`` the
    nodes a member creates carry ``sasl:<principal>`` ALL (see
    :func:`zkconsumer.security.zookeeper_acls`).

Who logs in (:class:`KerberosLogin`): with ``sasl.kerberos.keytab`` and
``sasl.kerberos.principal``, a keytab login kept in a private in-memory ticket cache
(MIT's ``client_keytab`` credential store), re-acquired from the keytab before its
tickets expire; without them, the default ticket cache (``KRB5CCNAME``, filled by
``kinit`` or ``k5start``), which the user keeps renewed.

Failures are named (:func:`explain`): a missing ticket, keytab or principal and an
unknown service principal raise :class:`~zkconsumer.errors.ConfigurationError` naming
the property to fix; an unreachable KDC raises :class:`KdcUnavailableError` (an
``OSError``, so broker connections treat it as a retriable connection failure).

May import: errors.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import socket
import threading
import time
from typing import Any, Callable, Dict, Optional, Protocol, Tuple

from .errors import ConfigurationError

#: ``gssapi.Credentials`` (the optional ``kerberos`` extra; the library has no type information).
Credentials = Any

__all__ = ["GssapiSasl", "KdcUnavailableError", "KerberosLogin", "KerberosSettings", "broker_authenticator",
           "explain", "krb5_config", "login_for", "preflight", "refused_ticket_causes", "service_host", "uses_sasl",
           "zookeeper_sasl_options"]

log = logging.getLogger(__name__)

SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
#: A login is renewed when less than this many seconds of its ticket remain (or half of its lifetime).
RENEW_MARGIN_S = 60.0
#: kazoo hands ``sasl_options`` to pure-sasl, which picks the mechanism by this name.
PURESASL_MECHANISM = "X-ZKCONSUMER-GSSAPI"
_MAX_TOKEN_BYTES = 1 << 20


class KdcUnavailableError(OSError):
    """The Kerberos KDC could not be reached to obtain a ticket (retriable: it may come back)."""


class KerberosSettings(Protocol):
    """The properties this module reads, read-only (a :class:`~zkconsumer.config.ConsumerConfig` has them all)."""

    @property
    def security_protocol(self) -> str: ...
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


def uses_sasl(protocol: str) -> bool:
    """Whether ``security.protocol`` authenticates with SASL (``SASL_PLAINTEXT``, ``SASL_SSL``)."""
    return str(protocol).upper() in SASL_PROTOCOLS


def _gssapi() -> Any:
    try:
        import gssapi
    except ImportError:
        raise ConfigurationError(
            "security.protocol", "Kerberos needs the `gssapi` package and MIT Kerberos's library: "
            "pip install gssapi; pip install pure-sasl (the kerberos extra, '.[kerberos]' from the source tree; "
            "Debian: apt-get install libkrb5-dev first)") from None
    return gssapi


def service_host(host: str) -> str:
    """The host part of a service principal for a server at ``host``, as Java's ``getHostName()``.

    A name is used as given; an IP address is reverse-resolved (its address is kept when
    that fails), so ``127.0.0.1`` usually becomes ``localhost``.
    """
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host
    try:
        return socket.gethostbyaddr(host)[0]
    except OSError:
        return host


def explain(error: Exception, *, service: str = "", host: str = "", keytab: Optional[str] = None,
            principal: Optional[str] = None, service_property: str = "sasl.kerberos.service.name") -> Exception:
    """The zkconsumer error for a GSSAPI failure: ConfigurationError naming the fix, or KdcUnavailableError."""
    text = str(error)
    lowered = text.lower()
    unknown_realm = re.search(r"cannot find kdc for realm\W*([^\s\"']+)", text, re.IGNORECASE)
    if unknown_realm:  # KRB5_REALM_UNKNOWN: krb5.conf has no [realms] entry (a KDC that is down says "contact")
        return KdcUnavailableError(
            f"this host's Kerberos configuration names no KDC for realm {unknown_realm.group(1)!r} "
            f"({_short(text)}): add the realm and its kdc to the [realms] section of {krb5_config()} (set "
            "KRB5_CONFIG to use another file), on every host that runs a consumer, Spark executors included; retrying")
    if "cannot contact any kdc" in lowered or "connection refused" in lowered:
        return KdcUnavailableError(f"cannot reach the Kerberos KDC to get a ticket ({_short(text)}); "
                                   "is the KDC up and krb5.conf (KRB5_CONFIG) pointing at it? retrying")
    if "clock skew" in lowered:
        return ConfigurationError("sasl.kerberos.principal", f"Kerberos refused the ticket ({_short(text)}): "
                                  f"{CLOCK_SKEW_HINT}")
    if re.search(r"server \S+ not found in kerberos database", lowered):
        return ConfigurationError(
            service_property, f"the KDC knows no service principal {service}/{host}: check {service_property} "
            f"({service!r}; the first part of the servers' principal) and that the servers' principal is for "
            f"host {host!r} ({_short(text)})")
    if keytab and not os.access(keytab, os.R_OK):
        return ConfigurationError("sasl.kerberos.keytab", f"cannot read keytab {keytab!r} ({_short(text)})")
    if keytab and ("no credentials" in lowered or "key table" in lowered or "keytab" in lowered
                   or "not found in kerberos database" in lowered):
        return ConfigurationError(
            "sasl.kerberos.principal", f"cannot log in as {principal!r} with keytab {keytab!r}: check "
            f"sasl.kerberos.principal and sasl.kerberos.keytab (klist -kt {keytab} lists its principals; "
            f"{_short(text)})")
    if "expired" in lowered and keytab:
        return ConfigurationError(
            "sasl.kerberos.keytab", f"a ticket of the keytab login as {principal!r} expired: the login is renewed "
            f"before expiry, so check this host's clock against the KDC's ({_short(text)})")
    if "expired" in lowered:
        return ConfigurationError(
            "sasl.kerberos.keytab", "the Kerberos ticket in the ticket cache has expired: renew it (kinit -R, "
            f"k5start) or set sasl.kerberos.keytab and sasl.kerberos.principal for a login that renews itself "
            f"({_short(text)})")
    if "no kerberos credentials" in lowered or "credentials cache" in lowered or "no credentials" in lowered:
        return ConfigurationError(
            "sasl.kerberos.keytab", "no Kerberos ticket: run kinit (KRB5CCNAME names the ticket cache) or set "
            f"sasl.kerberos.keytab and sasl.kerberos.principal ({_short(text)})")
    return ConfigurationError("sasl.kerberos.principal", f"Kerberos authentication failed: {_short(text)}")


#: The likely causes of a Kerberos ticket a server refuses after our side got it, and their fix.
CLOCK_SKEW_HINT = ("check that the clocks of this host, the KDC and the servers agree within the KDC's clock skew "
                   "(krb5.conf clockskew, default 5 minutes; NTP keeps them so)")


def krb5_config() -> str:
    """The krb5.conf MIT's library reads here: ``KRB5_CONFIG`` (its first file) or ``/etc/krb5.conf``."""
    configured = os.environ.get("KRB5_CONFIG", "").split(":")[0]
    return f"KRB5_CONFIG={configured}" if configured else "/etc/krb5.conf"


def refused_ticket_causes(service_property: str, service: str = "<service>") -> str:
    """What to check when a server refuses a Kerberos ticket we hold (it says no more than that; its log says
    why): clock skew first, then the servers' keytab, the error texts' common part."""
    return (f"{CLOCK_SKEW_HINT}; that the servers' keytab holds the current key of their principal "
            f"{service}/<host> ({service_property}; a principal re-created after its keytab was exported is "
            "refused so); the servers' log says which (e.g. \"Clock skew too great\")")


def _short(text: str) -> str:
    return " ".join(text.split())[:300]


class KerberosLogin:
    """One Kerberos identity's initiator credentials: a keytab login, or the default ticket cache.

    :meth:`credentials` is thread-safe and returns credentials with at least
    :data:`RENEW_MARGIN_S` (or half their lifetime) left: a keytab login is re-acquired
    from the keytab when they run short, the ticket cache is read again (``kinit -R``
    or ``k5start`` may have renewed it). Raises ConfigurationError (see :func:`explain`)
    or :class:`KdcUnavailableError`.
    """

    def __init__(self, keytab: Optional[str] = None, principal: Optional[str] = None) -> None:
        if keytab and not principal:
            raise ConfigurationError("sasl.kerberos.principal", "is required with sasl.kerberos.keytab "
                                     "(the principal to log in as, e.g. consumer@EXAMPLE.COM)")
        self.keytab = keytab or None
        self.principal = principal or None
        self._lock = threading.Lock()
        self._credentials: Optional[Credentials] = None
        self._renew_at = 0.0
        self._ccache = f"MEMORY:zkconsumer-{id(self):x}"

    def credentials(self) -> Credentials:
        """Valid initiator credentials (see the class docstring)."""
        with self._lock:
            if self._credentials is None or time.monotonic() >= self._renew_at:
                self._credentials = self._acquire()
            return self._credentials

    def refused(self) -> None:
        """A server refused a ticket of this login: the next :meth:`credentials` logs in afresh. A keytab
        login then gets a new ticket cache, so tickets and the KDC time offset MIT's library keeps with
        them (which a KDC with a wrong clock skews) are not reused once the clocks are fixed."""
        with self._lock:
            self._renew_at = 0.0

    @property
    def identity(self) -> str:
        """The logged-in principal, ``name@REALM`` (ZooKeeper's ``sasl`` ACL id)."""
        return str(self.credentials().name)

    def _acquire(self) -> Credentials:
        gssapi = _gssapi()
        name = gssapi.Name(self.principal, gssapi.NameType.kerberos_principal) if self.principal else None
        try:
            if self.keytab is not None:
                if self._credentials is not None:  # a fresh login: drop the old tickets
                    self._ccache = f"MEMORY:zkconsumer-{id(self):x}-{time.monotonic_ns():x}"
                store = {"client_keytab": self.keytab, "ccache": self._ccache}
                credentials = gssapi.Credentials(name=name, usage="initiate", store=store)
            else:
                credentials = gssapi.Credentials(name=name, usage="initiate")
            lifetime = float(credentials.lifetime)
        except gssapi.exceptions.GSSError as error:
            raise explain(error, keytab=self.keytab, principal=self.principal) from None
        if lifetime <= 0:
            raise explain(RuntimeError("ticket expired"), keytab=self.keytab, principal=self.principal)
        self._renew_at = time.monotonic() + max(1.0, min(lifetime - RENEW_MARGIN_S, lifetime / 2))
        log.debug("Kerberos login %s: tickets valid for %.0f s", credentials.name, lifetime)
        return credentials

    def __repr__(self) -> str:
        how = f"keytab {self.keytab!r}" if self.keytab else "ticket cache"
        return f"KerberosLogin({self.principal or 'default principal'}, {how})"


class GssapiSasl:
    """The client side of SASL GSSAPI (RFC 4752), ``auth`` quality of protection only.

    :meth:`step` takes the server's last token (``None`` at first) and returns the next
    token to send; :attr:`complete` turns true with the last one (the answer to the
    server's security-layer offer). GSSAPI errors come out as :func:`explain` says.
    """

    def __init__(self, credentials: Credentials, service: str, host: str,
                 service_property: str = "sasl.kerberos.service.name") -> None:
        gssapi = _gssapi()
        self.service, self.host, self._property = service, host, service_property
        self.complete = False
        target = gssapi.Name(f"{service}@{host}", gssapi.NameType.hostbased_service)
        flags = gssapi.RequirementFlag.mutual_authentication | gssapi.RequirementFlag.integrity
        self._context = gssapi.SecurityContext(name=target, creds=credentials, usage="initiate", flags=flags)

    def step(self, challenge: Optional[bytes]) -> bytes:
        """The token answering ``challenge`` (``b""`` when GSSAPI has nothing more to say)."""
        gssapi = _gssapi()
        try:
            if not self._context.complete:
                return self._context.step(challenge or None) or b""
            offer = self._context.unwrap(challenge or b"").message
            if len(offer) != 4 or not offer[0] & 0x01:
                raise ConfigurationError(self._property, f"the server at {self.host} does not offer SASL QOP "
                                         "'auth' (only auth-int/auth-conf, which zkconsumer does not speak)")
            self.complete = True
            return bytes(self._context.wrap(b"\x01\x00\x00\x00", False).message)  # auth, no buffer, no authzid
        except gssapi.exceptions.GSSError as error:
            raise explain(error, service=self.service, host=self.host,
                          service_property=self._property) from None


_LOGINS: Dict[Tuple[Optional[str], Optional[str], Optional[str]], KerberosLogin] = {}
_LOGINS_LOCK = threading.Lock()


def login_for(config: KerberosSettings) -> KerberosLogin:
    """The process's one :class:`KerberosLogin` for the config's keytab and principal (and, without a
    keytab, the ticket cache ``KRB5CCNAME`` names): shared by every connection and session of that
    identity, so tickets are obtained once."""
    keytab, principal = config.sasl_kerberos_keytab or None, config.sasl_kerberos_principal or None
    key = (keytab, principal, None if keytab else os.environ.get("KRB5CCNAME"))
    with _LOGINS_LOCK:
        login = _LOGINS.get(key)
        if login is None:
            login = _LOGINS[key] = KerberosLogin(keytab, principal)
        return login


def preflight(config: KerberosSettings) -> None:
    """Check, before connecting, what can be checked against the KDC alone.

    Logs in (no ticket, an unreadable keytab, a principal not in it: ConfigurationError
    naming the property) and, with ``zookeeper.sasl.enabled``, gets the service ticket of
    the first ZooKeeper server (a wrong ``zookeeper.sasl.service.name``: ConfigurationError).
    An unreachable KDC raises :class:`KdcUnavailableError`.
    """
    credentials = login_for(config).credentials()
    if config.zookeeper_sasl_enabled:
        first = str(getattr(config, "zookeeper_connect", "")).split("/", 1)[0].split(",")[0]
        host = first.rsplit(":", 1)[0].strip("[]") if ":" in first else first
        if host:
            GssapiSasl(credentials, config.zookeeper_sasl_service_name, service_host(host),
                       "zookeeper.sasl.service.name").step(None)


# =========================================================================== brokers


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError(f"connection closed during SASL/GSSAPI authentication after {len(data)} of {n} bytes")
        data += chunk
    return bytes(data)


def broker_authenticator(config: KerberosSettings,
                         login: Optional[KerberosLogin] = None) -> Optional[Callable[[socket.socket, str], None]]:
    """``authenticate(sock, host)`` for :class:`~zkconsumer.wire.connection.BrokerConnection`, or ``None``
    when ``security.protocol`` is not SASL.

    The exchange is Kafka 0.9's: length-framed GSSAPI tokens right after connecting; the
    broker closes the connection when it refuses us (an ``EOFError`` here, retriable).
    """
    if not uses_sasl(config.security_protocol):
        return None
    service = config.sasl_kerberos_service_name
    login = login or login_for(config)

    def authenticate(sock: socket.socket, host: str) -> None:
        sasl = GssapiSasl(login.credentials(), service, service_host(host))
        token = sasl.step(None)
        while True:
            sock.sendall(len(token).to_bytes(4, "big") + token)
            if sasl.complete:
                return
            try:
                size = int.from_bytes(_recv_exactly(sock, 4), "big", signed=True)
            except (EOFError, ConnectionResetError) as exc:  # a ticket refused: Kafka 0.9 just closes
                login.refused()
                raise EOFError(f"{exc}; if the listener at {host} speaks {config.security_protocol}, the broker "
                               f"refused our Kerberos ticket: "
                               f"{refused_ticket_causes('sasl.kerberos.service.name', service)}") from exc
            if not 0 <= size <= _MAX_TOKEN_BYTES:
                raise EOFError(f"implausible SASL token size {size}: is the broker's listener at {host} "
                               f"{config.security_protocol}?")
            token = sasl.step(_recv_exactly(sock, size))

    return authenticate


# =========================================================================== ZooKeeper


def zookeeper_sasl_options(config: KerberosSettings,
                           login: Optional[KerberosLogin] = None) -> Optional[Dict[str, Any]]:
    """kazoo's ``sasl_options`` for a GSSAPI session, or ``None`` without ``zookeeper.sasl.enabled``.

    The mechanism is this module's own GSSAPI client registered with pure-sasl (which
    kazoo drives), so ZooKeeper and the brokers share one login and one library.
    """
    if not config.zookeeper_sasl_enabled:
        return None
    _register_puresasl_mechanism()
    login = login or login_for(config)
    return {"mechanism": PURESASL_MECHANISM, "service": config.zookeeper_sasl_service_name, "login": login}


_registered = threading.Lock()


def _kazoo_exceptions() -> Any:
    from kazoo import exceptions

    return exceptions


def _register_puresasl_mechanism() -> None:
    try:
        from puresasl import mechanisms  # type: ignore[import-untyped]
    except ImportError:
        raise ConfigurationError("zookeeper.sasl.enabled", "kazoo's SASL needs the `pure-sasl` package: "
                                 "pip install gssapi; pip install pure-sasl (the kerberos extra, '.[kerberos]' "
                                 "from the source tree)") from None
    with _registered:
        if PURESASL_MECHANISM in mechanisms.mechanisms:
            return

        class ZkConsumerGssapi(mechanisms.Mechanism):  # type: ignore[misc]
            name = PURESASL_MECHANISM
            score = 0
            allows_anonymous = False
            uses_plaintext = False
            active_safe = True

            def __init__(self, sasl: Any, login: KerberosLogin, **props: Any) -> None:
                super().__init__(sasl)
                # Everything that needs the KDC (a login, the service ticket) happens here, where kazoo
                # lets a ConnectionDropped through as a retriable connection failure: an error in
                # process() becomes AUTH_FAILED, after which kazoo never reconnects.
                try:
                    self._sasl = GssapiSasl(login.credentials(), sasl.service, service_host(sasl.host),
                                            "zookeeper.sasl.service.name")
                    self._first: Optional[bytes] = self._sasl.step(None)
                except KdcUnavailableError as error:
                    log.warning("ZooKeeper SASL/GSSAPI: %s", error)
                    raise _kazoo_exceptions().ConnectionDropped(str(error)) from error
                except Exception as error:  # not retriable: kazoo's AUTH_FAILED, as in process()
                    log.error("ZooKeeper SASL/GSSAPI authentication failed: %s", error)
                    raise _kazoo_exceptions().AuthFailedError(str(error)) from error

            def process(self, challenge: Optional[bytes] = None) -> bytes:
                try:
                    if self._first is not None and not challenge:
                        response, self._first = self._first, None
                    else:
                        response = self._sasl.step(challenge)
                except Exception as error:  # kazoo logs only "Unknown error": say what it was
                    log.error("ZooKeeper SASL/GSSAPI authentication failed: %s", error)
                    raise
                self.complete = self._sasl.complete
                return response

            def dispose(self) -> None:
                pass

        mechanisms.mechanisms[PURESASL_MECHANISM] = ZkConsumerGssapi
