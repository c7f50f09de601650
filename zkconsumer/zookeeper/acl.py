"""ZooKeeper digest authentication and the ACLs of the group's nodes.

Two features, each off by default and driven by two properties of
:class:`~zkconsumer.config.ConsumerConfig` (any object with the attributes of
:class:`ZooKeeperAuthConfig` will do):

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

Example::

    config = ConsumerConfig({"zookeeper.connect": "zk:2181", "group.id": "billing",
                             "zookeeper.auth": "billing:s3cret", "zookeeper.acl.enable": "true"})
    zookeeper_acls(config)   # [ACL(31, digest billing:<sha1>), ACL(1, world anyone)]
"""

from __future__ import annotations

from typing import List, NoReturn, Optional, Protocol, Sequence, Tuple

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Permissions, make_acl, make_digest_acl, make_digest_acl_credential

from .. import kerberos
from ..errors import ConfigurationError
from . import zkformat

__all__ = ["ZooKeeperAuthConfig", "digest_id", "prepare_zookeeper", "zookeeper_acls", "zookeeper_auth_data"]

#: Kafka's root of every consumer group; always created with an open ACL.
CONSUMERS_PATH = zkformat.CONSUMERS_PATH


class ZooKeeperAuthConfig(Protocol):
    """The properties this module reads, read-only (a :class:`~zkconsumer.config.ConsumerConfig` has them)."""

    @property
    def group_id(self) -> str: ...
    @property
    def zookeeper_auth(self) -> Optional[str]: ...
    @property
    def zookeeper_acl_enable(self) -> bool: ...


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


def zookeeper_auth_data(config: ZooKeeperAuthConfig) -> Optional[List[Tuple[str, str]]]:
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


def zookeeper_acls(config: ZooKeeperAuthConfig) -> Optional[List[ACL]]:
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
        acl.append(make_acl("sasl", kerberos.login_for(config).identity, all=True))  # type: ignore[arg-type]
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


def prepare_zookeeper(client: KazooClient, config: ZooKeeperAuthConfig) -> None:
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
    sasl = kerberos.login_for(config).identity if getattr(config, "zookeeper_sasl_enabled", False) else None  # type: ignore[arg-type]
    if identity is not None and identity.split(":", 1)[0] == "super":
        return  # may be ZooKeeper's superDigest user, whom no ACL restricts
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
