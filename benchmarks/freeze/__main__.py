"""``python -m benchmarks.freeze``: what ``scripts/bench-freeze`` runs (method: the package docstring)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from kazoo.client import KazooClient

from benchmarks.rebalance.members import KafkaLauncher, Launcher, Member, ZkconsumerLauncher
from benchmarks.report import read_cpu_times, steal_percent
from harness.cluster import ProjectCluster

SESSION_MS = 6000
KINDS = ("zkconsumer-default", "zkconsumer-quiet", "kafka")


class IdleZkconsumer(ZkconsumerLauncher):
    def __init__(self, heartbeat: str, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.heartbeat = heartbeat

    def properties(self) -> Dict[str, str]:
        props = super().properties()
        props.update({"zookeeper.session.timeout.ms": str(SESSION_MS), "auto.commit.interval.ms": "60000"})
        if self.heartbeat != "default":
            props["zookeeper.heartbeat"] = self.heartbeat
        return props


class IdleKafka(KafkaLauncher):
    def properties(self) -> Dict[str, str]:
        props = super().properties()
        props.update({"zookeeper.session.timeout.ms": str(SESSION_MS), "auto.commit.interval.ms": "60000"})
        return props


def ids(zk: KazooClient, group: str) -> List[str]:
    path = f"/consumers/{group}/ids"
    return sorted(zk.get_children(path)) if zk.exists(path) else []


def owner(zk: KazooClient, group: str, member_id: str) -> Optional[int]:
    stat = zk.exists(f"/consumers/{group}/ids/{member_id}")
    return None if stat is None else int(stat.ephemeralOwner)


def start_group(launcher: Launcher, zk: KazooClient, group: str, size: int) -> List[Tuple[Member, str]]:
    """Start ``size`` members one at a time; pair each with the id it registered."""
    members: List[Tuple[Member, str]] = []
    for _ in range(size):
        before = set(ids(zk, group))
        member = launcher.start()
        deadline = time.monotonic() + 90
        while True:
            new = set(ids(zk, group)) - before
            if new:
                members.append((member, new.pop()))
                break
            if not member.alive() or time.monotonic() > deadline:
                raise SystemExit(f"bench-freeze: {launcher.kind} member {member.name} did not register (log: {member.log})")
            time.sleep(0.1)
    return members


def wait_registered(zk: KazooClient, group: str, member_id: str, timeout: float = 60.0) -> Optional[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        session = owner(zk, group, member_id)
        if session is not None:
            return session
        time.sleep(0.2)
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench-freeze", description=__doc__)
    parser.add_argument("--freezes", default="3.0,3.5,4.0", help="freeze lengths in seconds (default 3.0,3.5,4.0)")
    parser.add_argument("--tries", type=int, default=8, help="freezes per length and kind (default 8)")
    parser.add_argument("--members", type=int, default=3, help="member processes per group (default 3)")
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--json", type=Path, default=None, help="where to save the results (JSON)")
    args = parser.parse_args(argv)
    freezes = [float(f) for f in args.freezes.split(",")]
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="bench-freeze-"))
    cpu_before = read_cpu_times()
    load_before = os.getloadavg()
    lost: Dict[str, Dict[float, int]] = {k: {f: 0 for f in freezes} for k in KINDS}
    tried: Dict[str, Dict[float, int]] = {k: {f: 0 for f in freezes} for k in KINDS}
    with ProjectCluster(brokers=1, partitions=6) as cluster:
        topic = "freeze-idle"
        cluster.create_topic(topic, partitions=6)
        zk = cluster.kazoo_client()
        groups: Dict[str, Tuple[str, Member, str]] = {}
        launchers: Dict[str, Launcher] = {
            "zkconsumer-default": IdleZkconsumer("default", cluster, "freeze-default", [topic], 1, work),
            "zkconsumer-quiet": IdleZkconsumer("quiet", cluster, "freeze-quiet", [topic], 1, work),
            "kafka": IdleKafka(cluster, "freeze-kafka", [topic], 1, work),
        }
        all_members: List[Member] = []
        try:
            for kind, launcher in launchers.items():
                members = start_group(launcher, zk, launcher.group, args.members)
                all_members += [m for m, _ in members]
                victim, victim_id = members[0]
                groups[kind] = (launcher.group, victim, victim_id)
            time.sleep(SESSION_MS / 1000.0)  # every group settled, every member idle
            for freeze in freezes:
                for attempt in range(args.tries):
                    sessions = {kind: wait_registered(zk, g, mid) for kind, (g, _, mid) in groups.items()}
                    time.sleep(rng.uniform(0.0, SESSION_MS / 3000.0))
                    for _, victim, _ in groups.values():
                        os.kill(victim.process.pid, signal.SIGSTOP)
                    time.sleep(freeze)
                    for _, victim, _ in groups.values():
                        os.kill(victim.process.pid, signal.SIGCONT)
                    time.sleep(2.0)
                    for kind, (group, _, member_id) in groups.items():
                        tried[kind][freeze] += 1
                        if sessions[kind] is None or owner(zk, group, member_id) != sessions[kind]:
                            lost[kind][freeze] += 1
                    print(f"freeze {freeze:.1f}s try {attempt + 1}/{args.tries}: lost so far "
                          + ", ".join(f"{k} {lost[k][freeze]}" for k in KINDS), file=sys.stderr, flush=True)
        finally:
            for member in all_members:
                try:
                    os.kill(member.process.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                member.process.kill()
                member.process.wait()
            zk.stop()
            zk.close()
    steal = steal_percent(cpu_before, read_cpu_times())
    header = f"| member SIGSTOPped for | {' | '.join(KINDS)} |"
    print(f"\nIdle members, T = {SESSION_MS / 1000:.0f} s, one of {args.members} per group frozen at a time "
          f"(sessions lost of tries); load {load_before[0]:.2f}, steal {steal if steal is not None else 'n/a'} %")
    print(header)
    print("|" + "---|" * (len(KINDS) + 1))
    for freeze in freezes:
        print(f"| {freeze:.1f} s | " + " | ".join(f"{lost[k][freeze]} of {tried[k][freeze]}" for k in KINDS) + " |")
    if args.json is not None:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        result = {
            "benchmark": "freeze", "command": "scripts/bench-freeze " + " ".join(argv or sys.argv[1:]),
            "commit": commit, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "load_average": load_before[0], "steal_pct": steal, "session_timeout_ms": SESSION_MS,
            "members_per_group": args.members, "tries": args.tries,
            "lost": {k: {str(f): lost[k][f] for f in freezes} for k in KINDS},
            "tried": {k: {str(f): tried[k][f] for f in freezes} for k in KINDS},
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"saved {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
