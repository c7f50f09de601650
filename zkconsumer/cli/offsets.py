"""``zkconsumer offsets export|import|reset``: ExportZkOffsets, ImportZkOffsets, and resets."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any, List, Optional

from .. import admin
from ..admin import atomic
from ..errors import ZooKeeperAccessError
from .common import EXIT_OK, CliError, common_options, zookeeper
from .output import FORMATS, TtyProgress, render_plan


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register ``offsets`` and its subcommands."""
    common = common_options()
    offsets = commands.add_parser("offsets", help="export, import or reset committed offsets")
    sub = offsets.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = sub.add_parser("export", parents=[common],
                       help="write committed offsets in ExportZkOffsets' format (/consumers/<g>/offsets/<t>/<p>:<offset>)")
    p.add_argument("--group", action="append", metavar="GROUP",
                   help="group to export (repeatable; default: every group)")
    p.add_argument("--output", required=True, metavar="FILE", help="file to write ('-' for stdout)")
    p.set_defaults(run=run_export)

    p = sub.add_parser("import", parents=[common],
                       help="write the offsets of an export file into ZooKeeper (ImportZkOffsets)")
    p.add_argument("--input", required=True, metavar="FILE", help="file to read ('-' for stdin)")
    p.add_argument("--force", action="store_true", help="import even into groups that have live members")
    p.set_defaults(run=run_import)

    p = sub.add_parser("reset", parents=[common],
                       help="move a group's offsets of a topic (prints the plan; writes only with --execute)")
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--to", required=True, type=reset_target, metavar="earliest|latest|OFFSET|shift:+N|shift:-N",
                   help="new position; explicit and shifted offsets are clamped into the log's range")
    p.add_argument("--partitions", type=partition_list, metavar="P[,P...]",
                   help="only these partitions (default: all)")
    p.add_argument("--execute", action="store_true", help="write the new offsets (default: dry run)")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("--socket-timeout-ms", type=int, default=10000, metavar="MS")
    p.set_defaults(run=run_reset)


def reset_target(text: str) -> admin.ResetTarget:
    """argparse type for ``--to``."""
    try:
        return admin.parse_reset_target(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def partition_list(text: str) -> List[int]:
    """argparse type: ``0,2,5`` → ``[0, 2, 5]``."""
    try:
        values = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated partition numbers, got {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated partition numbers >= 0, got {text!r}")
    return values


def _write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, so a failure never leaves half a file."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".zkconsumer-export-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def run_export(args: argparse.Namespace) -> int:
    with zookeeper(args) as zk:
        entries = admin.export_offsets(zk, args.group)
    text = admin.format_export(entries)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        try:
            _write_atomically(args.output, text)
        except OSError as exc:
            raise CliError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    groups = len({e.group for e in entries})
    sys.stderr.write(f"Exported {len(entries)} offsets of {groups} group(s)"
                     f"{'' if args.output == '-' else ' to ' + args.output}.\n")
    return EXIT_OK


def run_import(args: argparse.Namespace) -> int:
    source = "<stdin>" if args.input == "-" else args.input
    try:
        if args.input == "-":
            text = sys.stdin.read()
        else:
            with open(args.input, encoding="utf-8") as f:
                text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {source}: {getattr(exc, 'strerror', None) or exc}") from None
    entries = admin.parse_export(text, source)
    progress = TtyProgress("importing offsets", sys.stderr)
    writes: List[atomic.OffsetWrite] = []
    with zookeeper(args) as zk:
        try:
            try:
                written = admin.import_offsets(zk, entries, force=args.force, progress=progress, planned=writes)
            finally:
                progress.finish()
            groups = sorted({e.group for e in entries})
            sys.stdout.write(f"Imported {written} offsets into {len(groups)} group(s)"
                             f"{': ' + ', '.join(groups) if groups else ''}.\n")
            sys.stdout.flush()
        except KeyboardInterrupt as exc:
            sys.stderr.write(_interrupted_note(_outcome(zk, writes, exc) if writes else False,
                                               [w.describe() for w in writes]))
            raise
        except ZooKeeperAccessError:
            sys.stderr.write(NOTHING_WRITTEN)
            raise
    return EXIT_OK


def run_reset(args: argparse.Namespace) -> int:
    with zookeeper(args) as zk, admin.BrokerOffsets(zk, socket_timeout_ms=args.socket_timeout_ms) as offsets:
        live = admin.live_members(zk, args.group)
        if live:
            raise admin.GroupActiveError(args.group, live, "reset offsets")
        plan = admin.plan_reset(zk, args.group, args.topic, args.to, offsets, args.partitions)
        sys.stdout.write(render_plan(plan, args.format))
        notes = sys.stdout if args.format == "table" else sys.stderr
        if not args.execute:
            notes.write(f"Dry run: nothing changed ({len(plan.changes)} offset(s) would change). "
                        "Add --execute to apply.\n")
            return EXIT_OK
        progress = TtyProgress(f"resetting offsets of {args.group}", sys.stderr)
        writes = plan.writes()
        try:
            try:
                written = admin.apply_reset(zk, plan, progress)
            finally:
                progress.finish()
            notes.write(f"Reset {len(written)} offset(s) of group {args.group} topic {args.topic}, all in one "
                        f"ZooKeeper transaction{':' if written else '.'}\n")
            notes.write("".join(f"  {r.topic}/{r.partition}: {_text(r.current)} -> {r.new}\n" for r in written))
            notes.flush()
        except KeyboardInterrupt as exc:
            notes.write(_interrupted_note(_outcome(zk, writes, exc), [w.describe() for w in writes]))
            raise
        except ZooKeeperAccessError:
            notes.write(NOTHING_WRITTEN)
            raise
    return EXIT_OK


#: Said before an error that stopped an all-or-nothing write whose own message does not say so.
NOTHING_WRITTEN = "Nothing was written: the write is all-or-nothing.\n"


def _outcome(zk: Any, writes: List[atomic.OffsetWrite], interrupt: KeyboardInterrupt) -> Optional[bool]:
    """Whether an interrupted all-or-nothing write happened: from ZooKeeper's answer if it came
    (:class:`~zkconsumer.admin.atomic.Interrupted`), else read back from the nodes."""
    if isinstance(interrupt, atomic.Interrupted) and interrupt.applied is not None:
        return interrupt.applied
    return atomic.applied(zk, writes)


def _text(offset: Optional[int]) -> str:
    return "none" if offset is None else str(offset)


def _interrupted_note(applied: Optional[bool], writes: List[str]) -> str:
    """What an interrupted all-or-nothing write did, in words, naming each write if it happened or may have."""
    if applied is False:
        return "Interrupted: nothing was written.\n"
    listed = "".join(f"  {w}\n" for w in writes)
    if applied:
        return f"Interrupted after the write was applied: all {len(writes)} offset(s) were written:\n{listed}"
    return (f"Interrupted before ZooKeeper answered: either all {len(writes)} offset(s) below were written or "
            f"none was (one transaction); check with 'zkconsumer groups describe':\n{listed}")
