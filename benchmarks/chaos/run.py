"""One side of a chaos run (:class:`ChaosRun`) and :func:`run_chaos`."""

from __future__ import annotations

import random
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from benchmarks.chaos.members import AckedProducer, KafkaLauncher, Member, MemberLauncher, ZkconsumerLauncher, read_recordings
from benchmarks.chaos.monitors import LogReader, OffsetMonitor, OwnershipMonitor, read_committed, zookeeper_serving
from benchmarks.chaos.report import SideResult, tally
from benchmarks.chaos.settings import BROKER_CONFIG, CLEAN_EXIT, KINDS, TOPIC, ZK_UNAVAILABLE, ChaosError, ChaosSettings, schedule
from harness.cluster import ProjectCluster
from harness.cluster.proxy import expire_zookeeper_session
from zkconsumer.testing import processes
from zkconsumer.testing.errors import LocalClusterError


class ChaosRun:
    """One side of a chaos run: members of ``kind`` under the schedule; see the module docstring.

    ``run()`` returns the :class:`SideResult`; every process it started is gone
    when it returns or raises. Member outputs and logs stay in ``directory``.
    """

    def __init__(self, kind: str, settings: ChaosSettings, directory: Path,
                 say: Callable[[str], None] = lambda line: None, keep_cluster_dir: bool = False) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        settings.validate()
        self.kind = kind
        self.settings = settings
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.group = f"chaos-{kind}"
        self._say = say
        self._keep_cluster_dir = keep_cluster_dir
        self._rng = random.Random(settings.seed)
        self._t0: Optional[float] = None
        self._members: List[Member] = []
        self._next_index = 1
        self._killed_broker: Optional[int] = None
        self._ownership: Optional[OwnershipMonitor] = None
        self.result = SideResult(kind, run_dir=str(directory))
        if kind == "zkconsumer" and settings.fatal_commits:
            self.result.commits = f"app, {settings.fatal_commit_interval_s:g}s, fatal"
        else:
            self.result.commits = f"auto, {settings.commit_interval_ms / 1000:g}s"

    # -------------------------------------------------------------- helpers

    def _elapsed(self) -> float:
        return 0.0 if self._t0 is None else time.monotonic() - self._t0

    def _event(self, text: str) -> None:
        line = f"[{self.kind} {self._elapsed():6.1f}s] {text}"
        self.result.events.append(line)
        self._say(line)

    def _start_member(self, launcher: MemberLauncher) -> Member:
        prefix = "zk" if self.kind == "zkconsumer" else "kafka"
        member = launcher.start(f"{prefix}-m{self._next_index}")
        self._next_index += 1
        self._members.append(member)
        return member

    def _live_members(self) -> List[Member]:
        return [m for m in self._members if m.alive() and not m.report.killed_by_schedule]

    def _has_live_members(self) -> bool:
        return any(m.alive() and not m.report.killed_by_schedule for m in list(self._members))

    def _fault_ended(self) -> None:
        if self._ownership is not None:
            self._ownership.fault_ended()

    def _zk_retry(self, what: str, call: Callable[[], Any], timeout: float = 90.0) -> Any:
        """``call()``, retried while ZooKeeper is unavailable (paused, restarting); ChaosError after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return call()
            except ZK_UNAVAILABLE as exc:
                if time.monotonic() > deadline:
                    raise ChaosError(f"ZooKeeper unavailable for {timeout:.0f}s while {what}: {exc!r}") from exc
                time.sleep(0.5)

    def _check_early_exits(self) -> None:
        for member in self._members:
            r = member.report
            if r.killed_by_schedule or r.exit_status is not None or member.alive():
                continue
            r.exit_status = member.process.returncode
            r.failed = True
            r.why.append(f"exited on its own with status {r.exit_status} at {self._elapsed():.1f}s")
            self._event(f"member {member.name} exited on its own (status {r.exit_status})")

    # -------------------------------------------------------------- the run

    def run(self) -> SideResult:
        started = time.monotonic()
        s = self.settings
        cluster = ProjectCluster(brokers=3, partitions=s.partitions, broker_config=BROKER_CONFIG,
                               keep_work_dir=self._keep_cluster_dir)
        producer: Optional[AckedProducer] = None
        monitor: Optional[OffsetMonitor] = None
        launcher: Optional[MemberLauncher] = None
        try:
            self._say(f"[{self.kind}] starting ZooKeeper and 3 brokers ({s.schedule} schedule, "
                      f"commits {self.result.commits})")
            cluster.start()
            if self._keep_cluster_dir:
                self._say(f"[{self.kind}] cluster logs (kept): {cluster.log_dir}")
            cluster.create_topic(TOPIC, partitions=s.partitions, replication=3)
            # the engine's own session outlives every ZooKeeper pause of the schedules (ZooKeeper's
            # maximum, 60 s), so its monitors resume at once instead of opening a new session
            zk = cluster.kazoo_client(timeout=60.0)
            for p in range(s.partitions):  # see KafkaLauncher: the group starts at offset 0, for both kinds
                zk.create(f"/consumers/{self.group}/offsets/{TOPIC}/{p}", b"0", makepath=True)
            launcher = (ZkconsumerLauncher if self.kind == "zkconsumer" else KafkaLauncher)(
                cluster, self.group, TOPIC, self.directory, s)
            producer = AckedProducer(cluster.bootstrap_servers, TOPIC, s.messages_per_second)
            monitor = OffsetMonitor(zk, self.group, TOPIC, s.partitions, producer.acked_end)
            monitor.start()
            for _ in range(s.members):
                self._start_member(launcher)
            self._wait_group_ready(zk, s.join_timeout_s)
            self._say(f"[{self.kind}] {s.members} members own every partition; producing for {s.duration_s:.0f}s")
            self._ownership = OwnershipMonitor(zk, self.group, TOPIC, s.partitions, self._has_live_members)
            producer.start()
            self._t0 = time.monotonic()
            self._ownership.start()
            self._play(cluster, launcher, producer)
            self._sleep_until(s.duration_s)
            self._event(f"stopping the producer ({producer.sent} sent)")
            producer.stop()
            self._event(f"producer stopped: {producer.acked_count()} acknowledged, "
                        f"{sum(producer.failures.values())} failed")
            if self._killed_broker is not None and not cluster.is_running(self._killed_broker):
                self._restart_broker(cluster)
            reader = LogReader(cluster.bootstrap_servers, TOPIC, s.partitions)
            try:
                ends = reader.end_offsets()
                self._settle(zk, ends)
                self._ownership.stop()
                self._stop_members(launcher)
                drained = self._drain(zk, reader, ends)
                scan = reader.read({p: (0, ends[p]) for p in range(s.partitions)})
            finally:
                reader.close()
            monitor.stop()
            self._account(producer, monitor, drained, scan)
        finally:
            if self._ownership is not None:
                self._ownership.stop()
            if monitor is not None:
                monitor.stop()
            if cluster.zookeeper_running():
                try:
                    cluster.resume_zookeeper()  # in case a failure interrupted a pause
                except LocalClusterError:
                    pass
            if producer is not None:
                try:
                    producer.stop(flush_timeout=5)
                except Exception:
                    pass
            alive = [m.process for m in self._members if m.process.poll() is None]
            processes.kill_all(alive)
            if launcher is not None:
                for member in self._members:
                    launcher.forget(member)
            cluster.stop()
            self.result.elapsed_s = round(time.monotonic() - started, 1)
        return self.result

    def _wait_group_ready(self, zk: KazooClient, timeout: float) -> None:
        """Until every live member is registered and every partition is owned by a live member."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_early_exits()
            ids = {f"{self.group}_{m.name}" for m in self._live_members()}
            owners = self._owners(zk)
            registered = set(self._children(zk, f"/consumers/{self.group}/ids"))
            if ids and ids <= registered and len(owners) == self.settings.partitions and all(
                    any(o.startswith(i + "-") for i in ids) for o in owners.values()):
                return
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {m.log_path}\n{processes.tail(str(m.log_path), 15)}" for m in self._members)
                raise ChaosError(f"the {self.kind} group did not form within {timeout:.0f}s "
                                 f"(registered {sorted(registered)}, owners {owners})\n{logs}")
            time.sleep(0.2)

    @staticmethod
    def _children(zk: KazooClient, path: str) -> List[str]:
        try:
            return list(zk.get_children(path))
        except NoNodeError:
            return []

    def _owners(self, zk: KazooClient) -> Dict[int, str]:
        base = f"/consumers/{self.group}/owners/{TOPIC}"
        found: Dict[int, str] = {}
        for child in self._children(zk, base):
            try:
                found[int(child)] = zk.get(f"{base}/{child}")[0].decode("utf-8")
            except NoNodeError:
                continue
        return found

    def _sleep_until(self, at_s: float) -> None:
        while True:
            self._check_early_exits()
            remaining = at_s - self._elapsed()
            if remaining <= 0:
                return
            time.sleep(min(remaining, 0.5))

    def _play(self, cluster: ProjectCluster, launcher: MemberLauncher, producer: AckedProducer) -> None:
        for event in schedule(self.settings):
            self._sleep_until(event.at_s)
            late = self._elapsed() - event.at_s
            if late > 1.0:
                self._event(f"(running {event.action} {late:.1f}s late)")
            if event.action == "kill_member":
                victim = self._pick_member()
                victim.signal(signal.SIGKILL)
                victim.process.wait()
                victim.report.killed_by_schedule = True
                victim.report.exit_status = victim.process.returncode
                self._event(f"kill -9 member {victim.name} (pid {victim.pid}); acked so far {producer.acked_count()}")
            elif event.action == "add_member":
                member = self._start_member(launcher)
                self._event(f"added member {member.name} (pid {member.pid})")
            elif event.action == "pause_member":
                victim = self._pick_member()
                victim.report.paused_by_schedule = True
                victim.signal(signal.SIGSTOP)
                self._event(f"SIGSTOP member {victim.name} (pid {victim.pid}) for {self.settings.pause_s:.0f}s")
                self._sleep_until(event.at_s + self.settings.pause_s)
                victim.signal(signal.SIGCONT)
                self._event(f"SIGCONT member {victim.name}")
            elif event.action == "expire_member":
                self._expire_member(cluster)
            elif event.action == "partition_member":
                victim = self._pick_member()
                victim.report.partitioned_by_schedule = True
                victim.proxy.cut("blackhole")
                self._event(f"partitioned member {victim.name} from ZooKeeper for {self.settings.pause_s:.0f}s "
                            f"(its proxy {victim.proxy.address} blackholes)")
                self._sleep_until(event.at_s + self.settings.pause_s)
                victim.proxy.heal()
                self._event(f"healed the partition of member {victim.name}")
            elif event.action == "pause_zookeeper":
                cluster.pause_zookeeper()
                self._event(f"SIGSTOP ZooKeeper for {self.settings.zk_pause_s:.0f}s")
                self._sleep_until(event.at_s + self.settings.zk_pause_s)
                cluster.resume_zookeeper()
                self._event("SIGCONT ZooKeeper")
            elif event.action == "restart_zookeeper":
                cluster.kill_zookeeper()
                self._event(f"kill -9 ZooKeeper; restarting it in {self.settings.zk_down_s:.0f}s")
                self._sleep_until(event.at_s + self.settings.zk_down_s)
                self._start_zookeeper(cluster)
                continue  # _start_zookeeper marked the fault's end: when ZooKeeper served again
            elif event.action == "kill_leader_broker":
                partition = self._rng.randrange(self.settings.partitions)
                broker = cluster.leader(TOPIC, partition)
                if broker < 0:
                    self._event(f"partition {partition} has no leader; no broker killed")
                    continue
                cluster.kill_broker(broker)
                self._killed_broker = broker
                self._event(f"SIGKILL broker {broker} (leader of partition {partition})")
            elif event.action == "restart_broker":
                self._restart_broker(cluster)
            self._fault_ended()

    def _start_zookeeper(self, cluster: ProjectCluster) -> None:
        """Start ZooKeeper again; the fault ends when it serves (``srvr`` answers), which is
        earlier than ``start_zookeeper()`` returns (that also waits for the cluster's own client)."""
        errors: List[BaseException] = []

        def start() -> None:
            try:
                cluster.start_zookeeper()
            except BaseException as exc:  # re-raised below, in the engine's thread
                errors.append(exc)

        starter = threading.Thread(target=start, name="chaos-zookeeper-start", daemon=True)
        starter.start()
        while starter.is_alive() and not zookeeper_serving(cluster.zk_port):
            starter.join(0.1)
        if not errors:
            self._event("ZooKeeper serving again (same port and data directory)")
            self._fault_ended()
        starter.join(180.0)
        if errors:
            raise errors[0]
        if starter.is_alive():
            raise ChaosError("LocalCluster.start_zookeeper() did not return within 180 s")

    def _expire_member(self, cluster: ProjectCluster) -> None:
        """Expire the ZooKeeper session(s) a member holds, as seen through its proxy."""
        victim = self._pick_member()
        victim.report.expired_by_schedule = True
        sessions = victim.proxy.sessions()
        if not sessions:
            self._event(f"member {victim.name} has no ZooKeeper session open; none expired")
            return
        for session_id, password in sessions:
            expire_zookeeper_session(cluster.zk_connect, (session_id, password))
            self._event(f"expired session 0x{session_id:x} of member {victim.name}")

    def _pick_member(self) -> Member:
        """A live member chosen by the seeded generator among the live ones, by name order."""
        candidates = sorted(self._live_members(), key=lambda m: m.name)
        if not candidates:
            raise ChaosError("no live member left to pick")
        return candidates[self._rng.randrange(len(candidates))]

    def _restart_broker(self, cluster: ProjectCluster) -> None:
        broker = self._killed_broker
        if broker is None or cluster.is_running(broker):
            return
        self._event(f"restarting broker {broker}")
        cluster.start_broker(broker)
        self._event(f"broker {broker} registered again")

    def _settle(self, zk: KazooClient, ends: Mapping[int, int]) -> None:
        """Give the group ``settle_timeout_s`` to commit every log end; then judge stalls and members."""
        s = self.settings
        settle_start = time.monotonic()
        deadline = settle_start + s.settle_timeout_s
        read = lambda: read_committed(zk, self.group, TOPIC, s.partitions)  # noqa: E731
        committed = self._zk_retry("reading committed offsets", read)
        while any((committed[p] or 0) < ends[p] for p in ends) and time.monotonic() < deadline:
            self._check_early_exits()
            time.sleep(0.2)
            committed = self._zk_retry("reading committed offsets", read)
        behind = {p: ends[p] - (committed[p] or 0) for p in ends if (committed[p] or 0) < ends[p]}
        if not behind:
            self.result.settle_s = round(time.monotonic() - settle_start, 1)
            self._event(f"group caught up: every committed offset at the log end ({sum(ends.values())} messages)")
        else:
            self._event(f"group did NOT catch up within {s.settle_timeout_s:.0f}s; behind: {behind}")
        self._check_early_exits()
        owners = self._zk_retry("reading owners", lambda: self._owners(zk))
        registered = set(self._zk_retry("reading members", lambda: self._children(zk, f"/consumers/{self.group}/ids")))
        for member in self._live_members():
            if f"{self.group}_{member.name}" not in registered:
                member.report.failed = True
                member.report.why.append("alive but not registered in the group at the end of the settle phase")
        for partition, lag in sorted(behind.items()):
            owner = owners.get(partition)
            holder = next((m for m in self._members if owner and owner.startswith(f"{self.group}_{m.name}-")), None)
            self.result.stalled_detail[partition] = f"{lag} behind, owner {owner or 'none'}"
            if holder is not None and not holder.report.killed_by_schedule:
                holder.report.failed = True
                holder.report.why.append(f"owned partition {partition} but left it {lag} messages behind")
        self.result.stalled_partitions = len(behind)

    def _stop_members(self, launcher: MemberLauncher) -> None:
        live = self._live_members()
        self._event(f"stopping {len(live)} members with SIGTERM")
        processes.terminate_all([m.process for m in live], self.settings.stop_grace_s)
        for member in live:
            r = member.report
            r.exit_status = member.process.returncode
            if r.exit_status not in CLEAN_EXIT[self.kind]:
                r.failed = True
                r.why.append(f"unclean stop: exit status {r.exit_status}"
                             + (" (needed SIGKILL)" if r.exit_status == -signal.SIGKILL else ""))
            launcher.forget(member)

    def _drain(self, zk: KazooClient, reader: LogReader, ends: Mapping[int, int]) -> List[str]:
        """Read every partition from the group's committed offset to the log end (see the docstring)."""
        committed = self._zk_retry("reading committed offsets",
                                   lambda: read_committed(zk, self.group, TOPIC, self.settings.partitions))
        ranges = {p: (committed[p] or 0, ends[p]) for p in ends}
        found = reader.read(ranges)
        values = [v for p in sorted(found) for _o, v in found[p]]
        self._event(f"drain from the committed offsets read {len(values)} messages")
        return values

    def _account(self, producer: AckedProducer, monitor: OffsetMonitor, drained: List[str],
                 scan: Mapping[int, List[Tuple[int, str]]]) -> None:
        r = self.result
        recordings = []
        for member in self._members:
            counts, malformed = read_recordings(member.out_path)
            member.report.lines = sum(counts.values())
            if malformed:
                member.report.why.append(f"{malformed} malformed output lines")
            recordings.append(counts)
            r.members.append(member.report)
        t = tally(producer.acked, recordings, drained, [v for entries in scan.values() for _o, v in entries])
        r.sent = producer.sent
        r.send_failures = sum(producer.failures.values())
        r.acknowledged = t.acknowledged
        r.recorded_total = t.recorded_total
        r.distinct_recorded = t.distinct_recorded
        r.lost = len(t.lost)
        r.missing_from_log = t.missing_from_log
        r.lost_examples = [f"{v} at (partition, offset) {producer.acked[v]}" for v in t.lost[:10]]
        r.duplicate_pct = t.duplicate_pct
        r.consumer_duplicate_pct = t.consumer_duplicate_pct
        r.log_duplicates = t.log_duplicates
        r.drained = len(drained)
        r.regressions = len(monitor.regressions)
        r.regression_examples = monitor.regressions[:10]
        r.failed_members = sum(1 for m in r.members if m.failed)
        r.max_stall_s = round(max(monitor.max_stall.values(), default=0.0), 1)
        if self._ownership is not None:
            r.longest_ownerless_s, r.longest_ownerless_detail = self._ownership.longest_ownerless()
            r.settled_again_s = self._ownership.settled_again()
            r.settled_again = r.settled_again_s is not None
        r.offset_writes_seen, r.offset_writes_total = monitor.writes()
        if self._ownership is not None:
            self._event(f"ownership monitor: {self._ownership.samples} samples, "
                        f"{self._ownership.skipped} unreadable (ZooKeeper unavailable)")



def run_chaos(settings: ChaosSettings, kinds: Sequence[str] = KINDS, directory: Optional[Path] = None,
              say: Callable[[str], None] = lambda line: None,
              keep_cluster_dir: bool = False) -> Dict[str, SideResult]:
    """Run the schedule once per kind (sequentially, a fresh cluster each); results by kind.

    Member outputs and logs go to ``directory/<kind>/`` (a new temporary
    directory if None; the caller removes it). ``keep_cluster_dir`` keeps each
    cluster's directory (broker and ZooKeeper logs) too.
    """
    settings.validate()
    base = directory or Path(tempfile.mkdtemp(prefix="zkconsumer-chaos-"))
    return {kind: ChaosRun(kind, settings, base / kind, say, keep_cluster_dir).run() for kind in kinds}


