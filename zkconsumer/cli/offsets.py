"""``zkconsumer offsets export|import|reset|copy``: ExportZkOffsets, ImportZkOffsets, resets, and copies
between ZooKeeper and Kafka (:mod:`.copy`)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any, Dict, List, Optional

from .. import admin
from ..admin import atomic, stored_io
from ..admin.access import PLAINTEXT, BrokerAccess
from ..admin.stores import CoordinatorOffsets, GroupOffsets, group_partitions, read_group_offsets
from ..errors import ZooKeeperAccessError
from . import copy, seek
from .common import EXIT_OK, CliError, add_storage_option, broker_access, common_options, zookeeper
from .output import FORMATS, TtyProgress, render_plan
from .targets import TIME_HELP, datetime_target, duration_target, partition_list, reset_target


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register ``offsets`` and its subcommands."""
    common = common_options()
    offsets = commands.add_parser("offsets", help="export, import, reset or copy committed offsets")
    sub = offsets.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = sub.add_parser("export", parents=[common],
                       help="write committed offsets in ExportZkOffsets' format (/consumers/<g>/offsets/<t>/<p>:<offset>)")
    p.add_argument("--group", action="append", metavar="GROUP",
                   help="group to export (repeatable; default: every group)")
    p.add_argument("--output", required=True, metavar="FILE", help="file to write ('-' for stdout)")
    p.add_argument("--socket-timeout-ms", type=int, default=10000, metavar="MS",
                   help="timeout of each request to a broker (default 10000)")
    add_storage_option(p, "read")
    p.set_defaults(run=run_export)

    p = sub.add_parser("import", parents=[common],
                       help="write the offsets of an export file into ZooKeeper (ImportZkOffsets)")
    p.add_argument("--input", required=True, metavar="FILE", help="file to read ('-' for stdin)")
    p.add_argument("--force", action="store_true", help="import even into groups that have live members")
    p.add_argument("--socket-timeout-ms", type=int, default=10000, metavar="MS",
                   help="timeout of each request to a broker (default 10000)")
    add_storage_option(p, "write")
    p.set_defaults(run=run_import)

    p = sub.add_parser("reset", parents=[common],
                       help="move a group's offsets of a topic (prints the plan; writes only with --execute)")
    p.add_argument("--group", required=True, metavar="GROUP", help="the consumer group whose offsets to move")
    p.add_argument("--topic", required=True, metavar="TOPIC", help="the topic whose offsets to move")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to", type=reset_target, metavar="earliest|latest|OFFSET|shift:+N|shift:-N",
                    help="new position; explicit and shifted offsets are clamped into the log's range")
    to.add_argument("--to-datetime", dest="to", type=datetime_target, metavar="YYYY-MM-DDTHH:MM:SS[.sss][Z|+HH:MM]",
                    help="new position by time (no zone: local time): " + TIME_HELP)
    to.add_argument("--by-duration", dest="to", type=duration_target, metavar="PnDTnHnMnS|1h30m",
                    help="new position by time, this long before now (ISO-8601 e.g. PT1H, or e.g. 30m): same "
                         "resolution as --to-datetime")
    p.add_argument("--partitions", type=partition_list, metavar="P[,P...]",
                   help="only these partitions (default: all)")
    p.add_argument("--execute", action="store_true", help="write the new offsets (default: dry run)")
    p.add_argument("--format", choices=FORMATS, default="table",
                   help="table (for people, the default), json or csv (for scripts)")
    p.add_argument("--socket-timeout-ms", type=int, default=10000, metavar="MS",
                   help="timeout of each request to a broker (default 10000)")
    add_storage_option(p, "read and write")
    p.set_defaults(run=run_reset)

    copy.add_parser(sub, common)
    seek.add_parser(sub, common)


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


class Coordinators:
    """One :class:`CoordinatorOffsets` per group, made on first use and closed together."""

    def __init__(self, zk: Any, socket_timeout_ms: int, access: BrokerAccess = PLAINTEXT) -> None:
        self._zk, self._timeout, self._access = zk, socket_timeout_ms, access
        self._open: Dict[str, CoordinatorOffsets] = {}

    def __call__(self, group: str) -> CoordinatorOffsets:
        if group not in self._open:
            self._open[group] = CoordinatorOffsets(self._zk, group, socket_timeout_ms=self._timeout,
                                                   access=self._access)
        return self._open[group]

    def close(self) -> None:
        for kafka in self._open.values():
            kafka.close()


def run_export(args: argparse.Namespace) -> int:
    with zookeeper(args) as zk:
        coordinators = Coordinators(zk, args.socket_timeout_ms, broker_access(args))
        try:
            entries, notes = stored_io.export_stored(zk, args.group, args.offsets_storage, coordinators)
        finally:
            coordinators.close()
    sys.stderr.write("".join(f"{note}\n" for note in notes))
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
        coordinators = Coordinators(zk, args.socket_timeout_ms, broker_access(args))
        try:
            stores = _import_stores(zk, entries, args.offsets_storage, coordinators, args.force)
            to_kafka = [e for e in entries if stores[e.group] != "zookeeper"]
            entries = [e for e in entries if stores[e.group] != "kafka"]
            if to_kafka and not entries:
                _import_kafka(to_kafka, coordinators, stores)
        except BaseException:
            coordinators.close()
            raise
        if to_kafka and not entries:
            coordinators.close()
            return EXIT_OK
        try:
            try:
                written = admin.import_offsets(zk, entries, force=args.force, progress=progress, planned=writes)
            finally:
                progress.finish()
            groups = sorted({e.group for e in entries})
            sys.stdout.write(f"Imported {written} offsets into {len(groups)} group(s)"
                             f"{': ' + ', '.join(groups) if groups else ''}"
                             f"{' in ZooKeeper' if to_kafka or args.offsets_storage != 'zookeeper' else ''}.\n")
            sys.stdout.flush()
            _import_kafka(to_kafka, coordinators, stores, " (their ZooKeeper offsets were written)")
        except KeyboardInterrupt as exc:
            sys.stderr.write(_interrupted_note(_outcome(zk, writes, exc) if writes else False,
                                               [w.describe() for w in writes]))
            raise
        except ZooKeeperAccessError:
            sys.stderr.write(NOTHING_WRITTEN)
            raise
        finally:
            coordinators.close()
    return EXIT_OK


def _import_stores(zk: Any, entries: List[admin.OffsetEntry], store: str, coordinators: Coordinators,
                   force: bool) -> Dict[str, str]:
    """Each group's store to import into (``detect``: where its offsets are now, for the file's partitions);
    refuses, unless ``force``, groups with members at the coordinator (ZooKeeper's are checked by the import)."""
    stores: Dict[str, str] = {}
    for group in sorted({e.group for e in entries}):
        partitions = [(e.topic, e.partition) for e in entries if e.group == group]
        stores[group] = store if store != "detect" else stored_io.detect_store(zk, group, coordinators(group),
                                                                                partitions)
        if stores[group] != "zookeeper" and not force:
            stored_io.refuse_if_live_anywhere(zk, group, coordinators(group), "import offsets")
    return stores


def _import_kafka(entries: List[admin.OffsetEntry], coordinators: Coordinators, stores: Dict[str, str],
                  written_elsewhere: str = "") -> None:
    """Commit ``entries`` to Kafka, one request per group, and say so."""
    for group in sorted({e.group for e in entries}):
        offsets = {(e.topic, e.partition): e.offset for e in entries if e.group == group}
        kafka = coordinators(group)
        stored_io.commit_kafka(kafka, offsets, written_elsewhere if stores[group] == "both" else "")
        sys.stdout.write(f"Imported {len(offsets)} offsets into group {group} in Kafka, in one OffsetCommit "
                         f"request to its coordinator ({kafka.coordinator}).\n")
    sys.stdout.flush()


def run_reset(args: argparse.Namespace) -> int:
    access = broker_access(args)
    with zookeeper(args) as zk, admin.BrokerOffsets(zk, socket_timeout_ms=args.socket_timeout_ms, access=access) as offsets, \
            CoordinatorOffsets(zk, args.group, socket_timeout_ms=args.socket_timeout_ms, access=access) as kafka:
        live = admin.live_members(zk, args.group)
        if live:
            raise admin.GroupActiveError(args.group, live, "reset offsets")
        found = _stored_for_reset(zk, args, kafka)
        if found is not None:
            stored_io.refuse_if_live_anywhere(zk, args.group, kafka, "reset offsets")
        current = None if found is None else {r.tp: r.offset for r in found.rows}
        plan = admin.plan_reset(zk, args.group, args.topic, args.to, offsets, args.partitions, current)
        sys.stdout.write(render_plan(plan, args.format))
        notes = sys.stdout if args.format == "table" else sys.stderr
        if args.to.kind == "time":
            notes.write(admin.SEGMENT_NOTE + "\n")
        if found is not None or args.offsets_storage == "detect":
            notes.write(f"{found.source_note() if found is not None else 'Offsets read from ZooKeeper (detected)'}."
                        "\n")
        if not args.execute:
            notes.write(f"Dry run: nothing changed ({len(plan.changes)} offset(s) would change). "
                        "Add --execute to apply.\n")
            return EXIT_OK
        if found is not None:
            return _reset_kafka(zk, plan, found, kafka, notes)
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


def _stored_for_reset(zk: Any, args: argparse.Namespace, kafka: CoordinatorOffsets) -> Optional[GroupOffsets]:
    """The group's offsets of the reset's partitions when they are (also) in Kafka; ``None``: ZooKeeper's alone."""
    if args.offsets_storage == "zookeeper":
        return None
    partitions = [tp for tp in group_partitions(zk, args.group, [args.topic])
                  if args.partitions is None or tp[1] in args.partitions]
    found = read_group_offsets(zk, args.group, partitions, args.offsets_storage, kafka)
    return None if found.store == "zookeeper" else found


def _reset_kafka(zk: Any, plan: admin.ResetPlan, found: GroupOffsets, kafka: CoordinatorOffsets, notes: Any) -> int:
    """Write a reset planned from Kafka's offsets (or both stores'): ZooKeeper's in one multi first, then Kafka's."""
    zk_writes, kafka_offsets = stored_io.reset_writes(plan, found)
    if zk_writes:
        try:
            atomic.write_offsets(zk, zk_writes)
        except ZooKeeperAccessError:
            notes.write(NOTHING_WRITTEN)
            raise
        notes.write(f"Reset {len(zk_writes)} offset(s) of group {plan.group} topic {plan.topic} in ZooKeeper, all in "
                    "one transaction:\n" + "".join(f"  {w.topic}/{w.partition}: {_text(w.previous)} -> {w.offset}\n"
                                                   for w in zk_writes))
    stored = {r.tp: r for r in found.rows}
    stored_io.commit_kafka(kafka, kafka_offsets, " (ZooKeeper's were written)" if zk_writes else "")
    notes.write(f"Reset {len(kafka_offsets)} offset(s) of group {plan.group} topic {plan.topic} in Kafka, in one "
                f"OffsetCommit request to the coordinator ({kafka.coordinator}){':' if kafka_offsets else '.'}\n"
                + "".join(f"  {t}/{p}: {_text(stored[(t, p)].kafka)} -> {o}\n" for (t, p), o in sorted(kafka_offsets.items())))
    notes.flush()
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
