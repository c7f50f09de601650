"""``zkconsumer offsets seek``: move a *running* group to an offset or a time (:mod:`zkconsumer.admin.seek`).

A dry run by default (prints the targets, as a reset plan); ``--execute`` writes the
request, waits (``--timeout-s``) until each partition's owner applied and acknowledged it,
and reports who did; exit status 1 if some did not (the request then stays pending, and
is applied by each partition's next owner, until ``--cancel``).
"""

from __future__ import annotations

import argparse
import sys

from .. import admin
from ..admin import seek as seeking
from .common import EXIT_ERROR, EXIT_OK, CliError, broker_access, zookeeper
from .output import FORMATS, render_plan
from .targets import TIME_HELP, datetime_target, duration_target, partition_list, reset_target


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]", common: argparse.ArgumentParser) -> None:
    """Register ``offsets seek``."""
    p = sub.add_parser("seek", parents=[common],
                       help="move a RUNNING group's position (ZooKeeper membership): each member applies it live "
                            "(prints the targets; asks the group only with --execute)")
    p.add_argument("--group", required=True, metavar="GROUP", help="the running consumer group to move")
    p.add_argument("--topic", metavar="TOPIC", help="the topic whose positions to move (not with --cancel)")
    to = p.add_mutually_exclusive_group()
    to.add_argument("--to", type=reset_target, metavar="earliest|latest|OFFSET",
                    help="new position (an offset is clamped into the log's range)")
    to.add_argument("--to-datetime", dest="to", type=datetime_target, metavar="YYYY-MM-DDTHH:MM:SS[.sss][Z|+HH:MM]",
                    help="new position by time (no zone: local time): " + TIME_HELP)
    to.add_argument("--by-duration", dest="to", type=duration_target, metavar="PnDTnHnMnS|1h30m",
                    help="new position by time, this long before now: same resolution as --to-datetime")
    to.add_argument("--cancel", action="store_true",
                    help="remove the group's pending seek (partitions not acknowledged stay where they are)")
    p.add_argument("--partitions", type=partition_list, metavar="P[,P...]", help="only these partitions (default: all)")
    p.add_argument("--execute", action="store_true", help="ask the group to move (default: dry run)")
    p.add_argument("--timeout-s", type=float, default=60.0, metavar="S",
                   help="how long --execute waits for every partition's acknowledgement (default 60)")
    p.add_argument("--format", choices=FORMATS, default="table",
                   help="table (for people, the default), json or csv (for scripts): the targets")
    p.add_argument("--socket-timeout-ms", type=int, default=10000, metavar="MS",
                   help="timeout of each request to a broker (default 10000)")
    p.set_defaults(run=run_seek)


def run_seek(args: argparse.Namespace) -> int:
    if args.cancel:
        with zookeeper(args) as zk:
            removed = seeking.cancel_seek(zk, args.group)
        sys.stdout.write(f"Cancelled seek {removed.id} of group {args.group} (to {removed.target}).\n" if removed
                         else f"Group {args.group} has no pending seek.\n")
        return EXIT_OK
    if args.topic is None or args.to is None:
        raise CliError("offsets seek needs --topic and one of --to, --to-datetime, --by-duration (or --cancel)")
    if args.to.kind == "shift":
        raise CliError("offsets seek takes earliest, latest, an offset or a time, not a shift")
    access = broker_access(args)
    with zookeeper(args) as zk, admin.BrokerOffsets(zk, socket_timeout_ms=args.socket_timeout_ms, access=access) as offsets:
        plan = admin.plan_reset(zk, args.group, args.topic, args.to, offsets, args.partitions)
        sys.stdout.write(render_plan(plan, args.format).replace("Reset group", "Seek group", 1))
        notes = sys.stdout if args.format == "table" else sys.stderr
        if args.to.kind == "time":
            notes.write(admin.SEGMENT_NOTE + "\n")
        live = admin.live_members(zk, args.group)
        notes.write(f"Live members: {', '.join(live) if live else 'none'} (CURRENT is the committed offset; "
                    "members may be ahead of it).\n")
        if not args.execute:
            notes.write(f"Dry run: nothing asked ({len(plan.rows)} partition(s) would move to their target). "
                        "Add --execute to ask the running group.\n")
            return EXIT_OK
        request = seeking.start_seek(zk, plan)
        notes.write(f"Asked group {args.group} to seek (request {request.id}); waiting up to {args.timeout_s:g} s "
                    "for every partition's owner to apply it...\n")
        notes.flush()
        progress = seeking.wait_for_seek(zk, args.group, request, args.timeout_s)
        for tp in sorted(request.offsets):
            who = progress.acked.get(tp)
            state = f"applied by {who}" if who else f"NOT acknowledged (owner: {progress.owners.get(tp) or 'none'})"
            notes.write(f"  {tp[0]}/{tp[1]} -> {request.offsets[tp]}: {state}\n")
        if progress.done:
            seeking.finish_seek(zk, args.group, request)
            notes.write(f"Seek done: all {len(request.offsets)} partition(s) moved and committed their target.\n")
            return EXIT_OK
        if progress.gone:
            notes.write("The request was removed (cancelled) before every partition acknowledged it.\n")
            return EXIT_ERROR
        notes.write(f"Timed out: {len(progress.missing)} partition(s) not acknowledged. The request stays pending: "
                    "their next owner applies it when it claims them. Remove it with 'zkconsumer offsets seek "
                    f"--group {args.group} --cancel'.\n")
        return EXIT_ERROR
