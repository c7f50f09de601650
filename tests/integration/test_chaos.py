"""The chaos schedules of ``scripts/chaos``, shortened (~1 minute per side).

Three zkconsumer member processes on six partitions (replication 3, ``acks=all``
producer) go through ``kill -9`` of a member, a member joining, a member stopped
with SIGSTOP past its session timeout and resumed, and a SIGKILL of a leader
broker (restarted before the end). Method and definitions:
:mod:`benchmarks.chaos`. Each run starts a dedicated cluster, so these
tests do not touch the session cluster.

The ``zk`` schedule (a member's session expired, a member partitioned from
ZooKeeper through its proxy, ZooKeeper SIGSTOPped, ZooKeeper killed and
restarted on its data directory, ~1 minute) and item 10's ``zk-outage``
(commit-fatal members through a ZooKeeper pause and restart; marked ``slow``)
run shortened too.

The same schedule with Kafka's own Scala consumer as members runs only when
``ZKCONSUMER_CHAOS_KAFKA=1`` (it adds about a minute of four extra JVMs on top
of the cluster's); ``scripts/chaos`` always runs it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.chaos.members import read_recordings
from benchmarks.chaos.monitors import OffsetMonitor, OwnershipMonitor
from benchmarks.chaos.report import format_table, tally
from benchmarks.chaos.run import ChaosRun
from benchmarks.chaos.settings import ChaosSettings, schedule

SHORT = ChaosSettings(duration_s=45, members=3, partitions=6, messages_per_second=50, seed=7)
#: The zk schedule in 40 s: ZooKeeper paused 8 s, dead 5 s; the member partition lasts 6 + 4 s.
SHORT_ZK = ChaosSettings(duration_s=40, members=3, partitions=6, messages_per_second=50, seed=7, schedule="zk",
                         zk_pause_s=8, zk_down_s=5)
#: Item 10: commit-fatal members; ZooKeeper SIGSTOPped 15 s, later killed and restarted after 10 s.
SHORT_OUTAGE = ChaosSettings(duration_s=40, members=3, partitions=12, messages_per_second=50, seed=7,
                             schedule="zk-outage", settle_timeout_s=30)


# ------------------------------------------------------------------ the accounting itself (no cluster)


def test_a_message_the_group_skipped_is_lost_even_though_the_drain_ran() -> None:
    t = tally(acked=["chaos-0000000000", "chaos-0000000001", "chaos-0000000002"],
              recordings=[{"chaos-0000000000": 1}], drained=["chaos-0000000002"],
              log_values=["chaos-0000000000", "chaos-0000000001", "chaos-0000000002"])
    assert t.lost == ["chaos-0000000001"]
    assert t.missing_from_log == 0


def test_partial_last_lines_and_both_line_formats_are_read(tmp_path: Path) -> None:
    out = tmp_path / "m.out"
    out.write_bytes(b"3 17 chaos-0000000005\nchaos-0000000006\nnoise\n2 9 chaos-00000")
    counts, malformed = read_recordings(out)
    assert counts == {"chaos-0000000005": 1, "chaos-0000000006": 1}
    assert malformed == 1


class _Stat:
    def __init__(self, version: int) -> None:
        self.version = version


class _FakeZooKeeper:
    """Just what OffsetMonitor uses: DataWatch and get."""

    def __init__(self) -> None:
        self.nodes: dict = {}
        self.watchers: dict = {}

    def DataWatch(self, path: str, func) -> None:  # noqa: N802 (kazoo's name)
        self.watchers[path] = func

    def get(self, path: str):
        from kazoo.exceptions import NoNodeError

        if path not in self.nodes:
            raise NoNodeError(path)
        return self.nodes[path]

    def write(self, path: str, value: int, version: int) -> None:
        self.nodes[path] = (str(value).encode(), _Stat(version))
        self.watchers[path](*self.nodes[path])


def test_offset_monitor_counts_decreases_in_version_order_only() -> None:
    zk = _FakeZooKeeper()
    monitor = OffsetMonitor(zk, "g", "t", 1, pending_end=lambda p: 0, interval_s=3600)  # type: ignore[arg-type]
    monitor.start()
    try:
        path = "/consumers/g/offsets/t/0"
        zk.write(path, 0, 0)
        zk.write(path, 50, 1)
        zk.write(path, 80, 2)
        zk.watchers[path](b"50", _Stat(1))  # a late, stale read of version 1: not a regression
        assert monitor.regressions == []
        zk.write(path, 60, 3)
        assert [(r.partition, r.before, r.after) for r in monitor.regressions] == [(0, 80, 60)]
        assert monitor.writes() == (4, 4)
    finally:
        monitor.stop()


def test_ownership_monitor_counts_ownerless_time_only_while_the_group_has_live_members() -> None:
    m = OwnershipMonitor(None, "g", "t", 2, lambda: True, clock=lambda: 0.0)  # type: ignore[arg-type]
    both = {0: "g_a-0", 1: "g_a-0"}
    m.record(1.0, ["g_a"], both, live=True)
    m.record(2.0, [], {}, live=False)  # nobody alive: not counted
    m.record(9.0, [], {}, live=False)
    m.record(10.0, ["g_a"], {0: "g_a-0"}, live=True)
    m.fault_ended()  # at clock 0.0, before the next samples
    m.record(11.5, ["g_a"], {0: "g_a-0"}, live=True)
    assert m.longest_ownerless() == (1.5, "partition 1 from 10.0s to 11.5s")
    assert m.settled_again() is None  # not complete at the end
    m.record(12.0, ["g_b"], both, live=True)  # owners of a member no longer registered: not complete
    assert m.settled_again() is None
    m.record(13.0, ["g_a"], both, live=True)
    assert m.settled_again() == 13.0


def test_a_commit_fatal_member_commits_itself() -> None:
    from benchmarks.chaos.member import member_properties, parse_args

    args = parse_args(["--zookeeper", "z:1", "--group", "g", "--topic", "t", "--out", "o", "--commit-fatal",
                       "--property", "auto.commit.enable=true"])
    assert args.commit_fatal and args.commit_interval == 0.5
    assert member_properties(args)["auto.commit.enable"] == "false"


def test_schedules_fit_their_durations() -> None:
    for settings in (SHORT, SHORT_ZK, SHORT_OUTAGE, ChaosSettings(duration_s=60, schedule="zk")):
        settings.validate()
    assert [e.action for e in schedule(SHORT_ZK)] == ["expire_member", "partition_member", "pause_zookeeper",
                                                      "restart_zookeeper"]
    assert SHORT_OUTAGE.fatal_commits and not SHORT_ZK.fatal_commits
    with pytest.raises(ValueError, match="duration must be >="):
        ChaosSettings(duration_s=30, schedule="zk").validate()


# ------------------------------------------------------------------ the schedule against real processes


def test_zkconsumer_group_loses_nothing_and_never_regresses_offsets_under_chaos(tmp_path: Path) -> None:
    result = ChaosRun("zkconsumer", SHORT, tmp_path / "zkconsumer").run()
    table = format_table({"zkconsumer": result}) + "\n" + "\n".join(result.events)

    assert result.acknowledged >= 0.8 * SHORT.duration_s * SHORT.messages_per_second, table
    assert result.lost == 0, table
    assert result.missing_from_log == 0, table
    assert result.regressions == 0, table
    assert result.failed_members == 0, table
    assert result.stalled_partitions == 0, table
    assert result.drained == 0, table
    assert [m.killed_by_schedule for m in result.members].count(True) == 1, table
    assert any(m.paused_by_schedule and not m.failed for m in result.members), table


@pytest.mark.skipif(os.environ.get("ZKCONSUMER_CHAOS_KAFKA", "") in ("", "0"),
                    reason="Kafka's consumer side of the chaos test runs with ZKCONSUMER_CHAOS_KAFKA=1 "
                           "(and always in scripts/chaos)")
def test_zkconsumer_does_no_worse_than_kafkas_consumer_under_the_same_chaos(tmp_path: Path) -> None:
    results = {kind: ChaosRun(kind, SHORT, tmp_path / kind).run() for kind in ("zkconsumer", "kafka")}
    zk, kafka = results["zkconsumer"], results["kafka"]
    table = format_table(results)

    assert kafka.acknowledged > 0 and kafka.lost == kafka.missing_from_log, table  # Kafka's side ran
    assert zk.lost == 0 and zk.regressions == 0 and zk.failed_members == 0, table
    assert zk.duplicate_pct <= kafka.duplicate_pct, table


def test_zkconsumer_group_loses_nothing_and_never_regresses_offsets_under_zookeeper_faults(tmp_path: Path) -> None:
    result = ChaosRun("zkconsumer", SHORT_ZK, tmp_path / "zkconsumer").run()
    table = format_table({"zkconsumer": result}) + "\n" + "\n".join(result.events)

    assert result.acknowledged >= 0.5 * SHORT_ZK.duration_s * SHORT_ZK.messages_per_second, table
    assert result.lost == 0, table
    assert result.regressions == 0, table
    assert result.failed_members == 0, table  # no member gave up through the ZooKeeper faults
    assert result.settled_again, table  # after the last fault, every partition owned by a live member again
    assert result.stalled_partitions == 0, table
    assert any(m.partitioned_by_schedule for m in result.members), table
    assert any(m.expired_by_schedule for m in result.members), table
    assert any("expired session" in e for e in result.events), table


@pytest.mark.slow
def test_commit_fatal_members_survive_a_zookeeper_outage(tmp_path: Path) -> None:
    """Item 10: an application that treats any commit exception as fatal loses no member to a
    ZooKeeper outage (SIGSTOP 15 s, then kill -9 and restart after 10 s)."""
    result = ChaosRun("zkconsumer", SHORT_OUTAGE, tmp_path / "zkconsumer").run()
    table = format_table({"zkconsumer": result}) + "\n" + "\n".join(result.events)

    assert result.lost == 0, table
    assert result.failed_members == 0, table
    assert result.settled_again, table
    assert result.regressions == 0, table
