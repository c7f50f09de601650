"""Moving a running group off ZooKeeper membership, and on to modern clients, measured.

On one ProjectCluster (one broker, 8 partitions per topic) under a steady producer
(``--rate`` messages/s, kafka-python, acks=1), groups of 4 members go through these phases,
each on a topic and group of its own (``--phases``, default all):

* ``switch``: 4 zkconsumer members (in this process, 2 streams each, auto-commit every second,
  Kafka's default ``rebalance.backoff.ms``; on coordinator membership a heartbeat every
  ``--heartbeat-ms``, 2000 by default) on ZooKeeper membership with Kafka offsets (step 2);
  **live switch**: ``zkconsumer groups migrate --to kafka --execute`` while they consume; then
  **rollback**: ``groups migrate --to zookeeper --execute``;
* ``handover``: the same start, the live switch (not measured again), then the **hand-over to
  modern clients**: one member at a time, a zkconsumer member stops (``shutdown()``: final
  commits, LeaveGroup), the group settles on 3 (DescribeGroups: ``Stable``), a modern client
  starts in a process of its own (Kafka 0.9's Java ``KafkaConsumer`` through ``ConsoleConsumer
  --new-consumer``, kafka-python, confluent-kafka, kafka-python again; range assignor,
  auto-commit every 200 ms, a heartbeat every 500 ms) and the group settles on 4 again (the longest gap of each step is
  reported too);
* ``rolling``: the baseline, a **rolling restart** of 4 zkconsumer members on ZooKeeper
  membership (Kafka offsets): one at a time, ``shutdown()`` and a new member started with the
  same configuration, until every partition is owned again; ``rolling-coordinator``: the same on
  coordinator membership (the normal rebalance of the group the hand-over works on);
* ``stw``: **stop-the-world**, a group on ZooKeeper membership and ZooKeeper offsets is stopped
  (``shutdown()``, final commits), ``zkconsumer offsets copy --from zookeeper --to kafka
  --execute`` moves its offsets, and 4 coordinator members start (what users can do today).

For each, over the window from 1 s before the step began to ``--settle`` seconds after it ended
(:mod:`benchmarks.migration_report` defines the figures): the longest time any partition went
undelivered (deliveries of a partition are ~``8/rate`` s apart in the steady state, so the
longest gap is the hand-over), duplicates, partitions delivered by two members at once
(overlap), and, over the group's whole run, the acknowledged messages never delivered (lost).

Run under the shared lock: ``flock /tmp/zkconsumer-cluster.lock scripts/bench-migration``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

from benchmarks.migration_members import ClientMember, Recorder, SteadyProducer
from benchmarks.migration_report import Delivery, figures, longest_gap, lost, resolve, table

PARTITIONS = 8
MEMBERS = 4
PHASES = ("switch", "handover", "rolling", "rolling-coordinator", "stw")
MODERN_KINDS = ("java", "kafka-python", "confluent", "kafka-python")


T0 = time.monotonic()


def progress(what: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f} s] {what}", file=sys.stderr, flush=True)


def cli(zk_connect: str, *args: str) -> float:
    """Run ``zkconsumer ARGS`` (raising on failure); its duration in seconds."""
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "zkconsumer", *args, "--zookeeper", zk_connect],
                         capture_output=True, text=True, timeout=300)
    if out.returncode:
        raise RuntimeError(f"zkconsumer {' '.join(args)} failed: {out.stdout}{out.stderr}")
    return time.monotonic() - started


def props(cluster: Any, group: str, **extra: object) -> Dict[str, object]:
    base: Dict[str, object] = {
        "zookeeper.connect": cluster.zk_connect, "group.id": group, "auto.offset.reset": "smallest",
        "consumer.timeout.ms": 200, "auto.commit.enable": "true", "auto.commit.interval.ms": 1000,
        "zookeeper.session.timeout.ms": 6000, "session.timeout.ms": 6000, "heartbeat.interval.ms": 2000,
        "offsets.storage": "kafka", "dual.commit.enabled": "false",
    }
    base.update({k.replace("_", "."): v for k, v in extra.items()})
    return base


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(interval)


class Phase:
    """One group on a topic of its own under a steady producer: its members, what they delivered."""

    def __init__(self, cluster: Any, prefix: str, args: argparse.Namespace) -> None:
        self.cluster = cluster
        self.heartbeat_ms = args.heartbeat_ms
        self.topic = cluster.create_topic(f"{prefix}-{uuid.uuid4().hex[:6]}", partitions=PARTITIONS, timeout=30)
        self.group = f"bench-{prefix}-{uuid.uuid4().hex[:6]}"
        self.log: List[Delivery] = []
        self.printed: List[Tuple[float, str, bytes]] = []  # child processes: (time, member, value)
        self.members: List[Recorder] = []
        self.clients: List[ClientMember] = []
        self._count = 0
        self.producer = SteadyProducer(cluster.bootstrap_servers, self.topic, args.rate)

    def start_member(self, **extra: object) -> Recorder:
        self._count += 1
        settings = props(self.cluster, self.group, heartbeat_interval_ms=self.heartbeat_ms, **extra)
        member = Recorder(f"zk-{self._count}", settings, self.topic, self.log)
        self.members.append(member)
        return member

    def start_client(self, kind: str) -> ClientMember:
        self._count += 1
        client = ClientMember(kind, f"{kind}-{self._count}", self.cluster, self.group, self.topic, self.printed)
        self.clients.append(client)
        return client

    def all_owned(self) -> bool:
        return sum(m.owned() for m in self.members) == PARTITIONS

    def coordinator_stable(self, members: int) -> bool:
        """The coordinator holds ``members`` members of the group, settled (``Stable``)."""
        from kazoo.client import KazooClient

        from zkconsumer.admin.stores import CoordinatorOffsets

        zk = KazooClient(hosts=self.cluster.zk_connect)
        zk.start(30)
        try:
            with CoordinatorOffsets(zk, self.group) as coordinator:
                described = coordinator.describe()
        except Exception:  # noqa: BLE001 - between generations, or the coordinator moving: look again
            return False
        finally:
            zk.stop()
            zk.close()
        return described.state == "Stable" and len(described.members) == members

    def deliveries(self) -> List[Delivery]:
        return list(self.log) + resolve(list(self.printed), self.producer.where)

    def judge(self, start: float, end: float, took: float) -> Dict[str, Any]:
        judged = dict(figures(self.deliveries(), start, end, PARTITIONS), command_s=round(took, 2))
        if not judged["delivered_by"]:
            raise RuntimeError(f"nothing was delivered in group {self.group}: no figures to give")
        return judged

    def finish(self, results: Dict[str, Dict[str, Any]], names: List[str], timeout: float = 60) -> None:
        """Stop the producer, wait (up to ``timeout`` s) for every acknowledged message, record
        ``lost`` in each of ``names``, stop every member."""
        acked = self.producer.stop()
        if not acked:
            raise RuntimeError(f"the producer to {self.topic} had nothing acknowledged: no figures to give")
        values = set(acked)

        def delivered() -> List[bytes]:
            placed = {(p, o): v for v, (p, o) in acked.items()}
            return [placed[(p, o)] for _, _, p, o in self.deliveries() if (p, o) in placed]

        deadline = time.monotonic() + timeout
        while lost(values, delivered()) and time.monotonic() < deadline:
            time.sleep(0.5)
        for name in names:
            results[name]["lost"] = lost(values, delivered())
        for member in self.members:
            member.stop()
        for client in self.clients:
            client.stop()


def started(phase: Phase, settle: float, **extra: object) -> None:
    """Start ``MEMBERS`` zkconsumer members, wait until they own every partition, consume ``settle`` s."""
    for _ in range(MEMBERS):
        phase.start_member(**extra)
    for m in phase.members:
        m.joined.wait(120)
    wait_for(phase.all_owned, 120, "the members to own every partition")
    time.sleep(settle)


def switch_and_rollback(cluster: Any, args: argparse.Namespace, results: Dict[str, Dict[str, Any]]) -> None:
    phase = Phase(cluster, "mig", args)
    started(phase, args.settle)
    for name, to in (("live switch", "kafka"), ("rollback", "zookeeper")):
        progress(f"{name}...")
        start = time.monotonic()
        took = cli(cluster.zk_connect, "groups", "migrate", "--group", phase.group, "--to", to, "--execute")
        end = time.monotonic()
        time.sleep(args.settle)
        results[name] = phase.judge(start - 1.0, end + args.settle, took)
    phase.finish(results, ["live switch", "rollback"])


def handover(cluster: Any, args: argparse.Namespace, results: Dict[str, Dict[str, Any]]) -> None:
    phase = Phase(cluster, "hand", args)
    started(phase, args.settle)
    progress("live switch (before the hand-over)...")
    cli(cluster.zk_connect, "groups", "migrate", "--group", phase.group, "--to", "kafka", "--execute")
    wait_for(lambda: phase.coordinator_stable(MEMBERS), 120, "the switched group to settle", 0.5)
    time.sleep(args.settle)
    progress("hand-over to modern clients...")
    start = time.monotonic()
    marks: List[Tuple[str, float]] = []
    for kind in MODERN_KINDS:
        progress(f"a zkconsumer member leaves, {kind} takes its place")
        marks.append((f"{len(marks) + 1}: {kind}", time.monotonic()))
        phase.members.pop(0).stop()
        wait_for(lambda: phase.coordinator_stable(MEMBERS - 1), 120, f"the group to settle before {kind} joins", 0.5)
        phase.start_client(kind)
        wait_for(lambda: phase.coordinator_stable(MEMBERS), 120, f"{kind} to join", 0.5)
    end = time.monotonic()
    time.sleep(args.settle)
    name = "hand-over to modern clients"
    results[name] = phase.judge(start - 1.0, end + args.settle, end - start)
    bounds = [t for _, t in marks[1:]] + [end + args.settle]
    results[name]["longest_undelivered_by_step_s"] = {
        step: round(longest_gap(phase.deliveries(), t, until, PARTITIONS)[0], 3)
        for (step, t), until in zip(marks, bounds)}
    phase.finish(results, [name])


def rolling_restart(cluster: Any, args: argparse.Namespace, results: Dict[str, Dict[str, Any]],
                    membership: str = "zookeeper") -> None:
    phase = Phase(cluster, "roll", args)
    started(phase, args.settle, group_membership=membership)
    name = f"rolling restart ({'ZooKeeper' if membership == 'zookeeper' else 'coordinator'} membership)"
    progress(f"{name}...")
    start = time.monotonic()
    for _ in range(MEMBERS):
        phase.members.pop(0).stop()
        member = phase.start_member(group_membership=membership)
        member.joined.wait(120)
        wait_for(phase.all_owned, 120, "the restarted member's group to own every partition")
    end = time.monotonic()
    time.sleep(args.settle)
    results[name] = phase.judge(start - 1.0, end + args.settle, end - start)
    phase.finish(results, [name])


def stop_the_world(cluster: Any, args: argparse.Namespace, results: Dict[str, Dict[str, Any]]) -> None:
    phase = Phase(cluster, "stw", args)
    started(phase, args.settle, offsets_storage="zookeeper")
    progress("stop-the-world...")
    start = time.monotonic()
    while phase.members:
        phase.members.pop().stop()
    cli(cluster.zk_connect, "offsets", "copy", "--group", phase.group, "--from", "zookeeper", "--to", "kafka",
        "--execute")
    for _ in range(MEMBERS):
        phase.start_member(group_membership="kafka")
    for m in phase.members:
        m.joined.wait(120)
    wait_for(phase.all_owned, 120, "the coordinator members to own every partition")
    end = time.monotonic()
    time.sleep(args.settle)
    results["stop-the-world"] = phase.judge(start - 1.0, end + args.settle, end - start)
    phase.finish(results, ["stop-the-world"])


def rolling_restart_coordinator(cluster: Any, args: argparse.Namespace, results: Dict[str, Dict[str, Any]]) -> None:
    rolling_restart(cluster, args, results, membership="kafka")


RUNS = {"switch": switch_and_rollback, "handover": handover, "rolling": rolling_restart,
        "rolling-coordinator": rolling_restart_coordinator, "stw": stop_the_world}


def run(args: argparse.Namespace) -> Dict[str, Dict[str, Any]]:
    from harness.cluster import ProjectCluster

    results: Dict[str, Dict[str, Any]] = {}
    with ProjectCluster(brokers=1, partitions=PARTITIONS) as cluster:
        progress("cluster up")
        for phase in args.phases:
            RUNS[phase](cluster, args, results)
    return results


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rate", type=int, default=400, help="messages/s produced (default 400)")
    parser.add_argument("--settle", type=float, default=8.0, help="seconds consumed before and after each step")
    parser.add_argument("--heartbeat-ms", type=int, default=2000,
                        help="the zkconsumer members' heartbeat.interval.ms on coordinator membership (default 2000)")
    parser.add_argument("--phases", type=lambda s: s.split(","), default=list(PHASES),
                        help=f"comma-separated, in order (default {','.join(PHASES)})")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    unknown = set(args.phases) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases {sorted(unknown)}; known: {', '.join(PHASES)}")
    results = run(args)
    print(table(results))
    print(json.dumps({"rate": args.rate, "heartbeat_ms": args.heartbeat_ms, "members": MEMBERS,
                      "partitions": PARTITIONS, "phases": args.phases,
                      "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
