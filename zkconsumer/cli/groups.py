"""``zkconsumer groups list|describe|status|delete|migrate``: Kafka's ConsumerGroupCommand/ConsumerOffsetChecker."""

from __future__ import annotations

import argparse
import os
import sys
import time

from .. import admin
from ..admin.group_list import list_all_groups, locate_groups
from ..admin.snapshot import snapshot_group
from ..admin.stores import CoordinatorOffsets
from ..monitoring.lag import LagMonitor
from . import migrate
from .common import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    add_storage_option,
    broker_access,
    common_options,
    positive_float,
    positive_int,
    zookeeper,
)
from .output import FORMATS, TtyProgress, render_description, render_group_lag, render_json, render_table
from .progress import terminal_caps
from .watch import DEFAULT_HISTORY_S, watch


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register ``groups`` and its subcommands."""
    common = common_options()
    groups = commands.add_parser("groups", help="list, describe or delete consumer groups")
    sub = groups.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = sub.add_parser("list", parents=[common],
                       help="list the consumer groups in ZooKeeper and at the brokers' group coordinators")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="table (for people, the default) or json (for scripts)")
    p.add_argument("--stores", action="store_true",
                   help="also say where each group's offsets and live members are: zookeeper, kafka or both "
                        "(asks each group's coordinator); the table gains OFFSETS and MEMBERSHIP columns, the "
                        "JSON lists objects instead of names")
    p.add_argument("--socket-timeout-ms", type=int, default=10000, metavar="MS",
                   help="timeout of each request to a broker (default 10000)")
    p.set_defaults(run=run_list)

    p = sub.add_parser("describe", parents=[common],
                       help="members, offsets, log end offsets, lag and owners of a group")
    p.add_argument("--group", required=True, metavar="GROUP", help="the consumer group to describe")
    p.add_argument("--format", choices=FORMATS, default="table",
                   help="table (for people, the default), json or csv (for scripts)")
    p.add_argument("--socket-timeout-ms", type=int, default=10000, metavar="MS",
                   help="timeout of each request to a broker (default 10000)")
    p.add_argument("--watch", type=positive_float, metavar="SECONDS",
                   help="redraw every SECONDS until Ctrl-C, with each partition's lag over the last minutes as a "
                        "sparkline (table format only; in place on a terminal, else one screen after another)")
    p.add_argument("--history-minutes", type=positive_float, default=DEFAULT_HISTORY_S / 60.0, metavar="M",
                   help=f"with --watch: minutes of lag history drawn (default {DEFAULT_HISTORY_S / 60.0:g})")
    add_storage_option(p)
    p.set_defaults(run=run_describe)

    p = sub.add_parser("status", parents=[common],
                       help="a group's lag and Burrow status (OK, WARN, STALL, STOP, ERR) over a few polls")
    p.add_argument("--group", required=True, metavar="GROUP", help="the consumer group to judge")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="table (for people, the default) or json (for scripts)")
    p.add_argument("--samples", type=positive_int, default=5, metavar="N",
                   help="polls of the group's offsets to judge (Burrow's window; default 5)")
    p.add_argument("--interval-ms", type=positive_int, default=1000, metavar="MS",
                   help="time between polls (default 1000)")
    p.add_argument("--socket-timeout-ms", type=int, default=10000, metavar="MS",
                   help="timeout of each request to a broker (default 10000)")
    add_storage_option(p)
    p.set_defaults(run=run_status)

    p = sub.add_parser("delete", parents=[common],
                       help="delete a group's ZooKeeper data (refused while it has live members)")
    p.add_argument("--group", required=True, metavar="GROUP", help="the consumer group to delete")
    p.add_argument("--topic", metavar="TOPIC", help="delete only this topic's offsets and owners")
    p.set_defaults(run=run_delete)

    migrate.add_parser(sub, common)


def run_list(args: argparse.Namespace) -> int:
    """The groups of ZooKeeper and of every broker (ListGroups), one name a line or a JSON list of names;
    with ``--stores``, where each keeps its offsets and members. A broker that cannot be asked is a
    warning on stderr: ZooKeeper's groups are listed all the same."""
    access = broker_access(args)
    with zookeeper(args) as zk:
        listing = list_all_groups(zk, socket_timeout_ms=args.socket_timeout_ms, access=access)
        located = (locate_groups(zk, listing, socket_timeout_ms=args.socket_timeout_ms, access=access)
                   if args.stores else None)
    for problem in listing.problems:
        sys.stderr.write(f"warning: could not list the groups of {problem}; groups known only to it may be "
                         "missing\n")
    if located is None:
        if args.format == "json":
            sys.stdout.write(render_json(listing.groups))
        else:
            sys.stdout.write("".join(f"{g}\n" for g in listing.groups))
        return EXIT_OK
    for found in located:
        if found.problem is not None:
            sys.stderr.write(f"warning: {found.problem}\n")
    if args.format == "json":
        sys.stdout.write(render_json([{"group": g.group, "offsets": g.offsets, "membership": g.membership}
                                      for g in located]))
    else:
        sys.stdout.write(render_table(["GROUP", "OFFSETS", "MEMBERSHIP"],
                                      [[g.group, g.offsets, g.membership] for g in located]))
    return EXIT_OK


def run_describe(args: argparse.Namespace) -> int:
    if args.watch is not None:
        return run_watch(args)
    progress = TtyProgress(f"describing {args.group}", sys.stderr)
    access = broker_access(args)
    with zookeeper(args) as zk, admin.BrokerOffsets(zk, socket_timeout_ms=args.socket_timeout_ms, access=access) as offsets, \
            CoordinatorOffsets(zk, args.group, socket_timeout_ms=args.socket_timeout_ms, access=access) as kafka:
        try:
            description = admin.describe_group(zk, args.group, offsets, progress, args.offsets_storage, kafka)
        finally:
            progress.finish()
    sys.stdout.write(render_description(description, args.format))
    if args.format == "csv":
        for warning in description.warnings:
            sys.stderr.write(f"warning: {warning}\n")
    return EXIT_OK


def run_watch(args: argparse.Namespace) -> int:
    """``describe --watch``: redraw until Ctrl-C (exit 0); see :mod:`.watch`.

    Transient failures of a refresh (ZooKeeper or broker errors) are shown on
    the screen and retried; a failure of the first one (e.g. an unknown group)
    ends the command as ``describe`` would.
    """
    from kazoo.exceptions import KazooException

    from ..errors import ZkConsumerError

    if args.format != "table":
        raise CliError("--watch draws a table: it cannot be combined with --format json or csv", EXIT_USAGE)
    caps = terminal_caps(sys.stdout)
    try:
        access = broker_access(args)
        with zookeeper(args) as zk, admin.BrokerOffsets(zk, socket_timeout_ms=args.socket_timeout_ms, access=access) as offsets, \
                CoordinatorOffsets(zk, args.group, socket_timeout_ms=args.socket_timeout_ms, access=access) as kafka:
            def describe() -> admin.GroupDescription:
                return admin.describe_group(zk, args.group, offsets, None, args.offsets_storage, kafka)

            watch(describe, sys.stdout, caps, args.watch,
                  history_s=args.history_minutes * 60.0, retriable=(ZkConsumerError, KazooException))
    except KeyboardInterrupt:  # while connecting or closing: still a clean exit
        pass
    except BrokenPipeError:  # the reader of a pipe went away: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    if caps.ansi:
        sys.stdout.write("\n")
        sys.stdout.flush()
    return EXIT_OK


def run_status(args: argparse.Namespace) -> int:
    """Poll the group ``--samples`` times, ``--interval-ms`` apart, and print Burrow's verdict on the last poll."""
    progress = TtyProgress(f"sampling {args.group}", sys.stderr, min_interval_s=0.0)
    monitor = LagMonitor(args.samples)
    access = broker_access(args)
    with zookeeper(args) as zk, admin.BrokerOffsets(zk, socket_timeout_ms=args.socket_timeout_ms, access=access) as offsets, \
            CoordinatorOffsets(zk, args.group, socket_timeout_ms=args.socket_timeout_ms, access=access) as kafka:
        try:
            for i in range(args.samples):
                if i:
                    time.sleep(args.interval_ms / 1000.0)
                snapshot = snapshot_group(zk, args.group, offsets, store=args.offsets_storage, kafka=kafka)
                result = monitor.observe(snapshot)
                progress(i + 1, args.samples)
        finally:
            progress.finish()
    sys.stdout.write(render_group_lag(result, args.format))
    (sys.stdout if args.format == "table" else sys.stderr).write(f"{snapshot.description.storage_note()}.\n")
    return EXIT_OK


def run_delete(args: argparse.Namespace) -> int:
    with zookeeper(args) as zk:
        deleted = admin.delete_group(zk, args.group, args.topic)
    if args.topic is None:
        sys.stdout.write(f"Deleted consumer group {args.group} ({deleted[0]}).\n")
    elif deleted:
        sys.stdout.write(f"Deleted the offsets and owners of topic {args.topic} in group {args.group}: "
                         f"{', '.join(deleted)}.\n")
    else:
        sys.stdout.write(f"Group {args.group} has no offsets or owners for topic {args.topic}; nothing deleted.\n")
    return EXIT_OK
