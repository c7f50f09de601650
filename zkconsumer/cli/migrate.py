"""``zkconsumer groups migrate``: move a running group between ZooKeeper and coordinator membership.

A dry run by default: prints who is registered where and what would be refused. ``--execute``
writes the group's migration node (:mod:`zkconsumer.zookeeper.migration`); the members switch
themselves (:mod:`zkconsumer.consumer.switching`). The command then waits, bounded by
``--timeout-s``, with progress on stderr, until the group is settled on the target membership:
no registration under ``/consumers/<g>/ids`` and every member at the coordinator (``--to kafka``),
or the reverse (``--to zookeeper``). A member registered when the node was written whose ZooKeeper
session has ended since (stopped, or killed and its session expired; its fence node tells) is not
waited for. If it gives up (the message says who is left and why) or is interrupted the node stays, the members
finish by themselves, and running the command again (or the other way) is safe.

Refused (exit 1, nothing written) ``--to kafka`` when Kafka's own ZooKeeper consumers are
registered (they would not follow: named), or when a partition's offset in ZooKeeper is not in
Kafka (steps 1 and 2 of the documentation's page *Migration from Kafka's consumer* first).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import List, Mapping, Optional, Set, Tuple

from kazoo.client import KazooClient

from ..admin import reads
from ..admin.errors import AdminError
from ..admin.stores import CoordinatorOffsets, group_partitions, read_group_offsets
from ..zookeeper import migration
from .common import EXIT_ERROR, EXIT_OK, CliError, broker_access, positive_float, zookeeper


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]", common: argparse.ArgumentParser) -> None:
    """Register ``groups migrate``."""
    p = sub.add_parser("migrate", parents=[common],
                       help="move a running group of zkconsumer members to coordinator membership (or back) without "
                            "stopping it (prints the plan; switches only with --execute)")
    p.add_argument("--group", required=True, metavar="GROUP", help="the consumer group to move")
    p.add_argument("--to", dest="to", required=True, choices=migration.MEMBERSHIPS,
                   help="kafka: the brokers' group coordinator; zookeeper: back to ZooKeeper membership")
    p.add_argument("--execute", action="store_true", help="write the migration node and wait (default: dry run)")
    p.add_argument("--timeout-s", type=positive_float, default=120.0, metavar="S",
                   help="how long to wait for the group to settle (default 120; the members go on without it)")
    p.add_argument("--socket-timeout-ms", type=int, default=10000, metavar="MS",
                   help="timeout of each request to a broker (default 10000)")
    p.set_defaults(run=run_migrate)


def _where(zk: KazooClient, coordinator: CoordinatorOffsets, group: str) -> Tuple[List[str], Optional[List[str]]]:
    """``(registered in ZooKeeper, members at the coordinator or None if it cannot tell)``."""
    registered = reads.live_members(zk, group)
    try:
        at_coordinator: Optional[List[str]] = coordinator.live_members()
    except Exception:  # noqa: BLE001 - no coordinator answer: progress says so, the wait goes on
        at_coordinator = None
    return registered, at_coordinator


def _offsets_not_in_kafka(zk: KazooClient, group: str, coordinator: CoordinatorOffsets) -> List[str]:
    """Partitions whose ZooKeeper offset Kafka does not hold (none, or an older one)."""
    try:
        partitions = group_partitions(zk, group)
    except AdminError:
        return []  # no offsets in ZooKeeper at all: nothing to miss
    found = read_group_offsets(zk, group, partitions, "both", coordinator)
    return [f"{r.topic}/{r.partition} (ZooKeeper {r.zookeeper}, Kafka {r.kafka if r.kafka is not None else 'none'})"
            for r in found.rows if r.zookeeper is not None and (r.kafka is None or r.kafka < r.zookeeper)]


def run_migrate(args: argparse.Namespace) -> int:
    group, to = args.group, args.to
    access = broker_access(args)
    with zookeeper(args) as zk, CoordinatorOffsets(zk, group, socket_timeout_ms=args.socket_timeout_ms, access=access) as coord:
        intent = migration.read_intent(zk, group)
        registered, at_coordinator = _where(zk, coord, group)
        sys.stdout.write(f"group {group}: {len(registered)} member(s) registered in ZooKeeper, "
                         f"{'unknown' if at_coordinator is None else len(at_coordinator)} at the coordinator; "
                         f"migration node: {'none' if intent is None else 'to ' + intent.to}\n")
        if to == "kafka":
            foreign = migration.foreign_members(zk, group)
            if foreign:
                raise CliError(f"refusing to move group {group} to coordinator membership: {len(foreign)} member(s) "
                               f"are Kafka's own ZooKeeper consumers, which cannot follow: {', '.join(foreign)}. "
                               "Replace them with zkconsumer members first (the documentation's page Migration from "
                               "Kafka's consumer)", EXIT_ERROR)
            missing = _offsets_not_in_kafka(zk, group, coord)
            if missing:
                raise CliError(f"refusing to move group {group} to coordinator membership: its offsets are not in "
                               f"Kafka yet ({len(missing)} partition(s): {', '.join(missing[:5])}). Run steps 1 and 2 "
                               "of the documentation's migration page first (offsets.storage=kafka, dual.commit.enabled=false)",
                               EXIT_ERROR)
        if not args.execute:
            sys.stdout.write(f"Dry run: nothing changed. Add --execute to move group {group} to {to} membership.\n")
            return EXIT_OK
        start = _Start(migration.member_fences(zk, group), list(at_coordinator or ()))
        migration.write_intent(zk, group, to)
        sys.stderr.write(f"wrote {migration.migration_path(group)}: to {to}; the members switch themselves\n")
        return _wait_settled(zk, coord, group, to, args.timeout_s, start)


@dataclass(frozen=True)
class _Start:
    """Who was where when the node was written: the members registered in ZooKeeper (consumer id -> the
    fence nodes of its session, :func:`~zkconsumer.zookeeper.migration.member_fences`) and at the coordinator."""

    fences: Mapping[str, List[str]]
    at_coordinator: List[str]


def _sessions_ended(zk: KazooClient, start: _Start, known: Set[str]) -> List[str]:
    """Members of ``start.fences`` not in ``known`` whose session has ended: none of its fence nodes is left."""
    return [cid for cid, paths in sorted(start.fences.items())
            if cid not in known and paths and not any(zk.retry(zk.exists, p) is not None for p in paths)]


def _wanted(start: _Start, to: str, gone: Set[str], at_coordinator: Optional[List[str]]) -> int:
    """How many members the group must have on ``to``: every member registered at the start whose ZooKeeper
    session lives, and, to ``kafka``, those at the coordinator at the start still listed (one that leaves it
    is gone), to ``zookeeper`` every one at the coordinator at the start (the coordinator cannot tell a member
    that left to register in ZooKeeper from one killed). At least one when the group had none at the start
    (the command waits for a member to appear); none once every member it had is gone."""
    if to == "kafka":
        others = len(set(start.at_coordinator) & set(at_coordinator or ()))
    else:
        others = len(start.at_coordinator)
    return max(0 if start.fences or start.at_coordinator else 1, len(start.fences) - len(gone) + others)


def _not_settled(to: str, registered: List[str], at_coordinator: Optional[List[str]], want: int) -> str:
    """Why the group is not settled on ``to``: who is left on the other membership and what to expect of them."""
    if to == "kafka" and registered:
        return (f"still registered in ZooKeeper: {', '.join(registered)} (a member not switched yet, or one that was "
                "stopped or killed and whose ZooKeeper session has not expired yet: its registration goes when the "
                "session expires, after its zookeeper.session.timeout.ms, and the other members join the "
                "coordinator then)")
    if to == "kafka":
        return (f"{'an unknown number' if at_coordinator is None else len(at_coordinator)} of the {want} live "
                "member(s) at the coordinator; the others' ZooKeeper sessions live, so they are still joining")
    if at_coordinator:
        return (f"still at the coordinator: {', '.join(at_coordinator)} (a member not switched yet, a client that is "
                "not zkconsumer and does not follow the migration node, or one killed, which the coordinator "
                "removes after its session.timeout.ms)")
    return (f"{len(registered)} of the {want} member(s) expected are registered in ZooKeeper and "
            f"{'the coordinator cannot be asked' if at_coordinator is None else 'none is at the coordinator'}: "
            "a member that was stopped or killed at the coordinator does not come back; if one was, the switch is "
            f"complete for the {len(registered)} registered")


def _wait_settled(zk: KazooClient, coord: CoordinatorOffsets, group: str, to: str, timeout_s: float,
                  start: _Start) -> int:
    """Wait until no member is left on the other membership and every member of ``start`` still alive is on
    ``to`` (:func:`_wanted`). A member registered in ZooKeeper at the start whose session has ended since
    (stopped, or killed and its session expired) is not waited for, and is named on stderr."""
    started = time.monotonic()
    said = ""
    gone: Set[str] = set()
    while True:
        registered, at_coordinator = _where(zk, coord, group)
        for cid in _sessions_ended(zk, start, gone):
            gone.add(cid)
            sys.stderr.write(f"{cid}: its ZooKeeper session ended (the member stopped, or was killed and its "
                             "session expired): not waiting for it\n")
        want = _wanted(start, to, gone, at_coordinator)
        if to == "kafka":
            settled = not registered and len(at_coordinator or ()) >= want
        else:
            settled = at_coordinator == [] and len(registered) >= want
        line = (f"{time.monotonic() - started:5.1f}s: {len(registered)} in ZooKeeper, "
                f"{'?' if at_coordinator is None else len(at_coordinator)} at the coordinator")
        if line.split(": ", 1)[1] != said:
            said = line.split(": ", 1)[1]
            sys.stderr.write(line + "\n")
        if settled:
            count = len(at_coordinator or ()) if to == "kafka" else len(registered)
            sys.stdout.write(f"group {group} is on {to} membership: {count} member(s), "
                             f"{'none registered in ZooKeeper' if to == 'kafka' else 'none at the coordinator'} "
                             f"({time.monotonic() - started:.1f}s)\n")
            return EXIT_OK
        if time.monotonic() - started > timeout_s:
            raise CliError(f"group {group} did not settle on {to} membership within {timeout_s:g}s: "
                           f"{_not_settled(to, registered, at_coordinator, want)}. The migration node stays: "
                           "members finish by themselves; run the command again to keep waiting", EXIT_ERROR)
        time.sleep(0.5)
