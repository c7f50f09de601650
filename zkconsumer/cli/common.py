"""What every CLI command shares: options, the ZooKeeper connection, exit codes.

Exit codes: :data:`EXIT_OK` 0, :data:`EXIT_ERROR` 1 (an operational error:
unreachable ZooKeeper, unknown group, live group, malformed node),
:data:`EXIT_USAGE` 2 (bad arguments or configuration). Commands raise
:class:`CliError` (or any ``ZkConsumerError``) for expected failures; the
entry point turns them into one ``zkconsumer: error: ...`` line on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
from typing import TYPE_CHECKING, Any, Dict, Iterator, Optional, Tuple

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from ..admin.access import PLAINTEXT, BrokerAccess
from ..admin.stores import STORE_CHOICES
from ..errors import ZooKeeperUnavailableError
from ..zookeeper.reachability import diagnose

if TYPE_CHECKING:  # pragma: no cover
    from ..config import ConsumerConfig

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: How long the admin commands wait for a ZooKeeper connection unless ``--zk-timeout-ms`` says otherwise.
DEFAULT_ZK_TIMEOUT_MS = 5000

#: Logger handed to kazoo: quiet unless ``--verbose`` (kazoo logs every refused connection).
ZK_LOGGER = logging.getLogger("zkconsumer.cli.zookeeper")


#: What a command says when ZooKeeper refuses it for lack of permission (NoAuth): the two logins a
#: group's ACL can name, and how a command logs in as each.
NOAUTH_HINT = ("the group's nodes are protected by an ACL that this command's login does not satisfy (zkCli.sh's "
               "getAcl shows it). Log in as the identity it names: a digest user (digest:USER:...) with "
               "--zookeeper-auth USER:PASSWORD (or ZKCONSUMER_ZOOKEEPER_AUTH), or a Kerberos principal "
               "(sasl:PRINCIPAL) with zookeeper.sasl.enabled=true, sasl.kerberos.principal and "
               "sasl.kerberos.keytab (or a kinit ticket cache) in --consumer-config FILE or as --property KEY=VALUE")


class CliError(Exception):
    """An expected failure: printed as one line, exit with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        self.exit_code = exit_code
        super().__init__(message)


def common_options(client_config: bool = True) -> argparse.ArgumentParser:
    """The options every command accepts (used as an argparse parent parser).

    With ``client_config`` (every command but ``consume`` and ``perf``, whose own
    ``--property``/``--consumer-config`` take every consumer property), ``--consumer-config``
    and ``--property`` give the security settings the command connects with
    (:func:`client_settings`).
    """
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("connection")
    group.add_argument("--zookeeper", required=True, metavar="HOST:PORT[,...][/CHROOT]",
                       help="ZooKeeper connect string, as zookeeper.connect")
    group.add_argument("--zk-timeout-ms", type=positive_int, metavar="MS",
                       help=f"give up connecting to ZooKeeper after this long (default {DEFAULT_ZK_TIMEOUT_MS}; "
                            "for consume, zookeeper.connection.timeout.ms)")
    group.add_argument("--zookeeper-auth", metavar="USER:PASSWORD", default=os.environ.get("ZKCONSUMER_ZOOKEEPER_AUTH"),
                       help="ZooKeeper digest credential, as zookeeper.auth (default: $ZKCONSUMER_ZOOKEEPER_AUTH); "
                            "needed to change groups whose nodes have ACLs")
    if client_config:
        group.add_argument("--consumer-config", metavar="FILE",
                           help="a consumer.properties file whose security settings the command uses: "
                                "security.protocol, ssl.*, sasl.kerberos.*, zookeeper.sasl.* (others are ignored)")
        group.add_argument("--property", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                           help="a security setting, as in --consumer-config, overriding it (repeatable)")
    parent.add_argument("-v", "--verbose", action="store_true", help="log progress and ZooKeeper connection details")
    return parent


def key_value(text: str) -> Tuple[str, str]:
    """argparse type: ``k=v`` → ``("k", "v")``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def client_settings(args: argparse.Namespace) -> Optional["ConsumerConfig"]:
    """The configuration ``--consumer-config`` and ``--property`` give (``None`` without either).

    Only its security settings are used. The security settings are checked
    (:func:`zkconsumer.security.check_config`: a Kerberos login, TLS files) before anything
    connects; a refused setting raises ConfigurationError naming it.
    """
    path: Optional[str] = getattr(args, "consumer_config", None)
    overrides: Dict[str, Any] = dict(getattr(args, "property", None) or [])
    if path is None and not overrides:
        return None
    from ..config import ConsumerConfig  # the consumer's configuration, loaded only when asked for
    from ..security import check_config

    overrides.update({"zookeeper.connect": args.zookeeper, "group.id": overrides.get("group.id", "zkconsumer-admin")})
    try:
        config = ConsumerConfig.from_properties(path, **overrides) if path else ConsumerConfig(overrides)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}", EXIT_USAGE) from None
    check_config(config)
    return config


def broker_access(args: argparse.Namespace) -> BrokerAccess:
    """How the command reaches the brokers: :data:`~zkconsumer.admin.access.PLAINTEXT` unless
    ``--consumer-config``/``--property`` say otherwise."""
    config = client_settings(args)
    return PLAINTEXT if config is None else BrokerAccess.from_config(config)


def add_storage_option(parser: argparse.ArgumentParser, what: str = "read") -> None:
    """``--offsets-storage detect|zookeeper|kafka|both`` (default ``detect``: where the group has offsets)."""
    parser.add_argument(
        "--offsets-storage", choices=STORE_CHOICES, default="detect",
        help=f"where to {what} the group's offsets: zookeeper, kafka (the group's coordinator, as "
             "offsets.storage=kafka), both (each, side by side, flagging partitions where they disagree), or "
             "detect (default: the store(s) holding the group's offsets; ZooKeeper if neither does)")


def positive_float(text: str) -> float:
    """argparse type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


@contextlib.contextmanager
def zookeeper(args: argparse.Namespace) -> Iterator[KazooClient]:
    """A started KazooClient for ``args.zookeeper``, stopped and closed on exit.

    Raises :class:`~zkconsumer.errors.ZooKeeperUnavailableError` naming the
    address if no connection is made within ``args.zk_timeout_ms``, and
    :class:`CliError` (usage) for a connect string kazoo cannot parse.
    """
    ZK_LOGGER.setLevel(logging.DEBUG if args.verbose else logging.CRITICAL)
    config = client_settings(args)
    sasl_options = None
    if config is not None and config.zookeeper_sasl_enabled:
        from ..kerberos import zookeeper_sasl_options

        sasl_options = zookeeper_sasl_options(config)
    timeout_ms = args.zk_timeout_ms or DEFAULT_ZK_TIMEOUT_MS
    timeout_s = timeout_ms / 1000.0
    try:
        client = KazooClient(
            hosts=args.zookeeper,
            timeout=max(timeout_s, 4.0),
            connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 1.0},
            command_retry={"max_tries": 3, "delay": 0.1, "backoff": 2, "max_delay": 1.0},
            auth_data=[("digest", args.zookeeper_auth)] if args.zookeeper_auth else None,
            sasl_options=sasl_options,
            logger=ZK_LOGGER,
        )
    except ValueError as exc:
        raise CliError(f"invalid --zookeeper {args.zookeeper!r}: {exc}", EXIT_USAGE) from None
    try:
        client.start(timeout=timeout_s)
    except KazooTimeoutError:
        _close(client)
        raise ZooKeeperUnavailableError(
            f"cannot connect to ZooKeeper at {args.zookeeper} within {timeout_ms} ms: {diagnose(args.zookeeper)}"
        ) from None
    try:
        yield client
    finally:
        _close(client)


@contextlib.contextmanager
def quiet_kazoo(verbose: bool) -> Iterator[None]:
    """Unless ``verbose``, silence kazoo's own loggers for the duration (restored after).

    kazoo logs every refused connection attempt; the CLI reports an
    unreachable ZooKeeper in one line of its own instead.
    """
    logger = logging.getLogger("kazoo")
    previous = logger.level
    if not verbose:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(previous)


def _close(client: KazooClient) -> None:
    """Stop, then close ``client``.

    If ``stop()`` is cut short (a Ctrl-C while it waits for ZooKeeper to acknowledge the
    close), kazoo refuses ``close()`` ("Cannot close connection until it is stopped"): that
    refusal must not replace the ``KeyboardInterrupt`` (the command would end with a
    traceback and status 1), so it is only logged. The connection thread left behind is a
    daemon and ends with the process.
    """
    try:
        client.stop()
    except BaseException:
        try:
            client.close()
        except Exception as exc:  # kazoo's plain Exception: the connection is still stopping
            ZK_LOGGER.debug("ZooKeeper client not closed after an interrupted stop: %s", exc)
        raise
    client.close()
