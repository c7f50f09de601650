"""Moving a running group off ZooKeeper membership: the live switch against stop-the-world, measured.

On one ProjectCluster (one broker, 8 partitions per topic) under a steady producer
(``--rate`` messages/s, kafka-python, acks=1), a group of 4 zkconsumer members (in this
process, 2 streams each, auto-commit every second, Kafka's default ``rebalance.backoff.ms``)
goes through:

* **live switch**: ZooKeeper membership with Kafka offsets (step 2), then
  ``zkconsumer groups migrate --to kafka --execute`` while consuming;
* **rollback**: the same group, ``groups migrate --to zookeeper --execute``;
* **stop-the-world**: a fresh group on ZooKeeper membership and ZooKeeper offsets is stopped
  (``shutdown()``, final commits), ``zkconsumer offsets copy --from zookeeper --to kafka
  --execute`` moves its offsets, and 4 coordinator members start (what users can do today).

For each: the longest time any partition went undelivered from 1 s before the step began to
``--settle`` seconds after it ended (deliveries of a partition are ~``8/rate`` s apart in the
steady state, so the longest gap is the hand-over), the (partition, offset) pairs delivered more
than once, and the acknowledged messages never delivered. Prints a table and a JSON line.

Run under the shared lock: ``flock /tmp/zkconsumer-cluster.lock scripts/bench-migration``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import uuid
from typing import Any, Dict, List, Set, Tuple

PARTITIONS = 8
MEMBERS = 4


class Recorder:
    """A member delivering on 2 streams, recording ``(time, partition, offset, value)``."""

    def __init__(self, props: Dict[str, object], topic: str, log: List[Tuple[float, int, int, bytes]]) -> None:
        from zkconsumer import ZookeeperConsumerConnector

        self.connector = ZookeeperConsumerConnector(props)
        self._log = log
        self._stop = threading.Event()
        self._threads: List[threading.Thread] = []
        self.joined = threading.Event()
        starter = threading.Thread(target=self._start, args=(topic,), daemon=True)
        starter.start()
        self._threads.append(starter)

    def _start(self, topic: str) -> None:
        for stream in self.connector.create_message_streams({topic: 2})[topic]:
            t = threading.Thread(target=self._drain, args=(stream,), daemon=True)
            t.start()
            self._threads.append(t)
        self.joined.set()

    def _drain(self, stream: Any) -> None:
        from zkconsumer import ConsumerTimeoutError

        while not self._stop.is_set():
            try:
                for m in stream:
                    self._log.append((time.monotonic(), m.partition, m.offset, m.message))
                    if self._stop.is_set():
                        return
                return
            except ConsumerTimeoutError:
                continue

    def stop(self) -> None:
        self._stop.set()
        self.connector.shutdown()
        for t in self._threads:
            t.join(15)


class SteadyProducer:
    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        from kafka import KafkaProducer

        self._producer = KafkaProducer(bootstrap_servers=bootstrap, api_version=(0, 9), acks=1, linger_ms=0)
        self.acked: Set[bytes] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(topic, rate), daemon=True)
        self._thread.start()

    def _run(self, topic: str, rate: int) -> None:
        i, started = 0, time.monotonic()
        while not self._stop.is_set():
            value = f"v{i:08d}".encode()
            self._producer.send(topic, value=value).add_callback(lambda _m, v=value: self.acked.add(v))
            i += 1
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)

    def stop(self) -> Set[bytes]:
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(30)
        self._producer.close(5)
        return set(self.acked)


def cli(zk_connect: str, *args: str) -> float:
    """Run ``zkconsumer ARGS`` (raising on failure); its duration in seconds."""
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "zkconsumer", *args, "--zookeeper", zk_connect],
                         capture_output=True, text=True, timeout=300)
    if out.returncode:
        raise RuntimeError(f"zkconsumer {' '.join(args)} failed: {out.stdout}{out.stderr}")
    return time.monotonic() - started


def measure(log: List[Tuple[float, int, int, bytes]], start: float, end: float) -> Dict[str, Any]:
    """Longest undelivered gap per partition within ``[start, end]`` and duplicates there."""
    window = sorted(e for e in log if start <= e[0] <= end)
    last: Dict[int, float] = {}
    gap = 0.0
    worst = -1
    seen: Set[Tuple[int, int]] = set()
    duplicates = 0
    for t, p, o, _ in window:
        before = last.get(p, start)
        if t - before > gap:
            gap, worst = t - before, p
        last[p] = t
        if (p, o) in seen:
            duplicates += 1
        seen.add((p, o))
    for p in range(PARTITIONS):  # a partition never delivered again before the end
        if end - last.get(p, start) > gap:
            gap, worst = end - last.get(p, start), p
    return {"longest_undelivered_s": round(gap, 3), "partition": worst, "duplicates": duplicates}


def props(cluster: Any, group: str, **extra: object) -> Dict[str, object]:
    base: Dict[str, object] = {
        "zookeeper.connect": cluster.zk_connect, "group.id": group, "auto.offset.reset": "smallest",
        "consumer.timeout.ms": 200, "auto.commit.enable": "true", "auto.commit.interval.ms": 1000,
        "zookeeper.session.timeout.ms": 6000, "session.timeout.ms": 6000, "heartbeat.interval.ms": 2000,
        "offsets.storage": "kafka", "dual.commit.enabled": "false",
    }
    base.update({k.replace("_", "."): v for k, v in extra.items()})
    return base


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


def run(args: argparse.Namespace) -> Dict[str, Any]:
    from harness.cluster import ProjectCluster

    results: Dict[str, Any] = {}
    with ProjectCluster(brokers=1, partitions=PARTITIONS) as cluster:
        # Live switch and its rollback, one group.
        topic = cluster.create_topic(f"mig-{uuid.uuid4().hex[:6]}", partitions=PARTITIONS, timeout=30)
        group = f"bench-live-{uuid.uuid4().hex[:6]}"
        log: List[Tuple[float, int, int, bytes]] = []
        producer = SteadyProducer(cluster.bootstrap_servers, topic, args.rate)
        members = [Recorder(props(cluster, group), topic, log) for _ in range(MEMBERS)]
        for m in members:
            m.joined.wait(120)
        time.sleep(args.settle)
        for name, to in (("live switch", "kafka"), ("rollback", "zookeeper")):
            print(f"{name}...", file=sys.stderr)
            start = time.monotonic()
            took = cli(cluster.zk_connect, "groups", "migrate", "--group", group, "--to", to, "--execute")
            end = time.monotonic()
            time.sleep(args.settle)
            results[name] = dict(measure(log, start - 1.0, end + args.settle), command_s=round(took, 2))
        acked = producer.stop()
        time.sleep(args.settle)
        delivered = {v for *_, v in log}
        lost = len(acked - delivered)
        for name in ("live switch", "rollback"):
            results[name]["lost"] = lost  # over the whole run of this group
        for m in members:
            m.stop()

        # Stop-the-world, a fresh group on ZooKeeper membership and ZooKeeper offsets.
        print("stop-the-world...", file=sys.stderr)
        topic = cluster.create_topic(f"stw-{uuid.uuid4().hex[:6]}", partitions=PARTITIONS, timeout=30)
        group = f"bench-stw-{uuid.uuid4().hex[:6]}"
        log = []
        producer = SteadyProducer(cluster.bootstrap_servers, topic, args.rate)
        members = [Recorder(props(cluster, group, offsets_storage="zookeeper"), topic, log) for _ in range(MEMBERS)]
        for m in members:
            m.joined.wait(120)
        time.sleep(args.settle)
        start = time.monotonic()
        for m in members:
            m.stop()
        cli(cluster.zk_connect, "offsets", "copy", "--group", group, "--from", "zookeeper", "--to", "kafka",
            "--execute")
        members = [Recorder(props(cluster, group, group_membership="kafka"), topic, log) for _ in range(MEMBERS)]
        for m in members:
            m.joined.wait(120)
        wait_for(lambda: sum(len(m.connector.status.owned) if m.connector.status else 0 for m in members)
                 == PARTITIONS, 120, "the coordinator members to own every partition")
        end = time.monotonic()
        time.sleep(args.settle)
        results["stop-the-world"] = dict(measure(log, start - 1.0, end + args.settle), command_s=round(end - start, 2))
        acked = producer.stop()
        time.sleep(args.settle)
        results["stop-the-world"]["lost"] = len(acked - {v for *_, v in log})
        for m in members:
            m.stop()
    return results


def main(argv: List[str] = sys.argv[1:]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=400, help="messages/s produced (default 400)")
    parser.add_argument("--settle", type=float, default=8.0, help="seconds consumed before and after each step")
    args = parser.parse_args(argv)
    results = run(args)
    print("| procedure | longest time a partition went undelivered | duplicates | lost | step took |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['longest_undelivered_s']:.2f} s (partition {r['partition']}) | {r['duplicates']} | "
              f"{r['lost']} | {r['command_s']:.1f} s |")
    print(json.dumps({"rate": args.rate, "members": MEMBERS, "partitions": PARTITIONS, "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
