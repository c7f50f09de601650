"""The ``zkconsumer`` command line: Kafka's ZooKeeper consumer tools, in one command.

::

    zkconsumer consume  --zookeeper Z --group G (--topic T | --whitelist RE) [--from-beginning]
                        [--max-messages N] [--timeout-ms MS] [--property k=v ...]
    zkconsumer groups   list     --zookeeper Z [--format table|json]
    zkconsumer groups   describe --zookeeper Z --group G [--format table|json|csv]
                                 [--watch SECONDS [--history-minutes M]]
    zkconsumer groups   status   --zookeeper Z --group G [--samples N] [--interval-ms MS] [--format table|json]
    zkconsumer groups   delete   --zookeeper Z --group G [--topic T]
    zkconsumer exporter --zookeeper Z [--group G ...] [--port P] [--interval-s S] [--window N]
    zkconsumer offsets  export   --zookeeper Z [--group G ...] --output F
    zkconsumer offsets  import   --zookeeper Z --input F [--force]
    zkconsumer offsets  reset    --zookeeper Z --group G --topic T
                                 --to earliest|latest|OFFSET|shift:+N|shift:-N [--execute]
    zkconsumer offsets  copy     --zookeeper Z --group G --from zookeeper|kafka --to kafka|zookeeper
                                 [--topic T ...] [--execute] [--force] [--format table|json]
    zkconsumer --version

``groups describe|status``, ``offsets export|import|reset`` and ``exporter`` take
``--offsets-storage detect|zookeeper|kafka|both`` (default ``detect``: where the group's
offsets are; :mod:`zkconsumer.admin.stores`).

One module per command group (:mod:`.groups`, :mod:`.offsets` with :mod:`.copy`, :mod:`.consume`);
rendering in :mod:`.output`; connection and exit codes in :mod:`.common`;
terminal-only progress in :mod:`.progress` and ``describe --watch`` in :mod:`.watch`.
:func:`run` parses and dispatches; it never raises for user errors.

May import: anything but testing.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Optional, Sequence

from kazoo.exceptions import KazooException, NoAuthError

from .. import __version__
from ..errors import ConfigurationError, ZkConsumerError, ZooKeeperAccessError
from . import consume, exporter, groups, offsets, perf
from .common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, NOAUTH_HINT, CliError, quiet_kazoo

__all__ = ["build_parser", "run"]


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree; each leaf sets ``run`` (a function of the parsed namespace)."""
    parser = argparse.ArgumentParser(
        prog="zkconsumer",
        description="Operate Kafka consumer groups stored in ZooKeeper (Kafka 0.8's consumer format).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    consume.add_parser(commands)
    groups.add_parser(commands)
    offsets.add_parser(commands)
    perf.add_parser(commands)
    exporter.add_parser(commands)
    return parser


def _error(message: str) -> None:
    sys.stderr.write(f"zkconsumer: error: {message}\n")


def run(argv: Optional[Sequence[str]] = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the command, return its exit code.

    User errors print one line on stderr: exit 2 for usage and configuration
    errors, 1 for operational ones (ZooKeeper unreachable, unknown group, live
    group, malformed node, broker errors). Only bugs raise.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2, message already printed)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.verbose:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        with quiet_kazoo(args.verbose):
            code: int = args.run(args)
            return code
    except CliError as exc:
        _error(str(exc))
        return exc.exit_code
    except ConfigurationError as exc:
        _error(str(exc))
        return EXIT_USAGE
    except (NoAuthError, ZooKeeperAccessError) as exc:
        where = f" ({exc.operation} {exc.path})" if isinstance(exc, ZooKeeperAccessError) else ""
        _error(f"ZooKeeper {args.zookeeper} refused the change (NoAuth){where}: {NOAUTH_HINT}")
        return EXIT_ERROR
    except ZkConsumerError as exc:
        _error(str(exc))
        return EXIT_ERROR
    except KazooException as exc:
        _error(f"ZooKeeper {args.zookeeper}: {type(exc).__name__} {exc}".rstrip())
        return EXIT_ERROR
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED
