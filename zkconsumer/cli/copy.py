"""``zkconsumer offsets copy``: a group's offsets from ZooKeeper to Kafka, or back (:mod:`zkconsumer.admin.copy`).

A dry run by default (prints the plan: partition, offset in the source, offset
to write, offset now at the destination); ``--execute`` writes, all in one
ZooKeeper transaction or one Kafka OffsetCommit request, and says what was written.
Refused while the group has live members unless ``--force``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List

from ..admin import copy as copying
from ..admin.stores import CoordinatorOffsets
from ..errors import ZooKeeperAccessError
from .common import EXIT_ERROR, EXIT_OK, EXIT_USAGE, CliError, broker_access, zookeeper
from .output import render_json, render_table


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]", common: argparse.ArgumentParser) -> None:
    """Register ``offsets copy``."""
    p = sub.add_parser("copy", parents=[common],
                       help="copy a group's offsets from ZooKeeper to Kafka or back (prints the plan; writes only "
                            "with --execute)")
    p.add_argument("--group", required=True, metavar="GROUP", help="the consumer group whose offsets to copy")
    p.add_argument("--from", dest="source", required=True, choices=copying.COPY_STORES,
                   help="the store to read the offsets from")
    p.add_argument("--to", dest="destination", required=True, choices=copying.COPY_STORES,
                   help="the store to write them to")
    p.add_argument("--topic", action="append", metavar="TOPIC",
                   help="only this topic (repeatable; default: the topics the group has offsets or owners for in "
                        "ZooKeeper; needed for a group ZooKeeper does not know)")
    p.add_argument("--execute", action="store_true", help="write the offsets (default: dry run)")
    p.add_argument("--force", action="store_true",
                   help="copy even while the group has live members (they may overwrite the copy at their next "
                        "commit)")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="table (for people, the default) or json (one object, for scripts)")
    p.add_argument("--socket-timeout-ms", type=int, default=10000, metavar="MS",
                   help="timeout of each request to a broker (default 10000)")
    p.set_defaults(run=run_copy)


def _action(row: copying.CopyRow) -> str:
    if row.source is None:
        return "skip (no offset)"
    return "write" if row.changes else "unchanged"


def render_copy_plan(plan: copying.CopyPlan, fmt: str) -> str:
    """The plan as a table or JSON (``{"group", "from", "to", "live_members", "partitions": [...]}``)."""
    if fmt == "json":
        return render_json({
            "group": plan.group, "from": plan.source, "to": plan.destination, "live_members": plan.live,
            "partitions": [{"topic": r.topic, "partition": r.partition, "from_offset": r.source,
                            "to_offset": r.source, "current_offset": r.current, "action": _action(r)}
                           for r in plan.rows]})
    headers = ["TOPIC", "PARTITION", f"FROM ({plan.source})", f"TO ({plan.destination})",
               f"NOW IN {plan.destination.upper()}", "ACTION"]
    return render_table(headers, [[r.topic, r.partition, r.source, r.source if r.source is not None else None,
                                   r.current, _action(r)] for r in plan.rows])


def run_copy(args: argparse.Namespace) -> int:
    if args.source == args.destination:
        raise CliError(f"nothing to copy: --from and --to are both {args.source}", EXIT_USAGE)
    notes = sys.stdout if args.format == "table" else sys.stderr
    access = broker_access(args)
    with zookeeper(args) as zk, \
            CoordinatorOffsets(zk, args.group, socket_timeout_ms=args.socket_timeout_ms, access=access) as kafka:
        plan = copying.plan_copy(zk, args.group, args.source, args.destination, kafka, args.topic)
        sys.stdout.write(render_copy_plan(plan, args.format))
        if plan.live:
            notes.write(f"Group {args.group} has {len(plan.live)} live member(s): {', '.join(plan.live)}"
                        f"{'' if args.force else '; --execute will refuse unless --force'}.\n")
        if not args.execute:
            notes.write(f"Dry run: nothing changed ({len(plan.changes)} offset(s) would be written to "
                        f"{args.destination}). Add --execute to apply.\n")
            return EXIT_OK
        try:
            result = copying.apply_copy(zk, plan, kafka, force=args.force)
        except ZooKeeperAccessError:
            notes.write("Nothing was written: the write is all-or-nothing.\n")
            raise
        how = ("all in one ZooKeeper transaction" if args.destination == "zookeeper"
               else f"in one OffsetCommit request to the coordinator ({kafka.coordinator})")
        notes.write(f"Copied {len(result.written)} offset(s) of group {args.group} from {args.source} to "
                    f"{args.destination}, {how}{':' if result.written else '.'}\n")
        notes.write("".join(f"  {r.topic}/{r.partition}: {_text(r.current)} -> {r.source}\n" for r in result.written))
        if result.failed:
            details: Dict[str, List[str]] = {}
            for (topic, partition), why in sorted(result.failed.items()):
                details.setdefault(why, []).append(f"{topic}/{partition}")
            raise CliError(f"the coordinator refused {len(result.failed)} offset(s): "
                           + "; ".join(f"{why}: {', '.join(tps)}" for why, tps in details.items()), EXIT_ERROR)
    return EXIT_OK


def _text(offset: Any) -> str:
    return "none" if offset is None else str(offset)
