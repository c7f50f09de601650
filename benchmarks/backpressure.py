"""Back-pressure per partition, measured: a stalled stream must not slow its member's other stream.

On a one-broker ProjectCluster (a LocalCluster with Kafka's tools) it fills, with Kafka's ProducerPerformance,

* ``alone``: one partition of ``--messages`` messages, and
* ``stalled``: two partitions of ``--messages`` messages each,

then runs ``--rounds`` rounds, each with two fresh members (new group ids,
reading from the log start), one after the other, with the same layout: one
connector, ``{topic: 2}`` streams (Range: stream A gets partition 0, stream B
partition 1), ``num.consumer.fetchers=1`` and ``fetcher.connections=1`` (both partitions
share one fetcher thread), ``queued.max.message.chunks=--chunks``, ``fetch.message.max.bytes=--fetch-bytes``:

* *alone*: stream A reads topic ``alone`` (stream B has no partition);
* *beside stalled*: stream A reads topic ``stalled`` while stream B's consumer
  does not read for ``--stall`` seconds (or until A has read its backlog);
  then B reads its backlog. Every message of both partitions must be delivered
  exactly once, in order per partition (checked; the bench fails otherwise).

A's rate is messages / seconds from its first to its last message within the
window. Memory: B's queue length and the number of parked chunks are sampled
every 10,000 messages of A (in both phases, so both pay the same); peak RSS (``VmHWM``, reset through
``/proc/self/clear_refs`` before each phase when the kernel allows) is per
phase. The bound per stream is ``(chunks + partitions of the stream) x fetch bytes``
of message data (see ``zkconsumer/fetch/fetcher_thread.py``).

Usage::

    PYTHONPATH=$PWD .venv/bin/python scripts/bench-backpressure [--messages 2000000] [--rounds 4]
        [--stall 20] [--chunks 2] [--fetch-bytes 65536] [--record-size 20]

Progress goes to stderr, the report to stdout.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_EVERY = 10_000  # messages of A between two samples of B's queue and the parked chunks

from harness.cluster import ProjectCluster  # noqa: E402
from zkconsumer import ConsumerTimeoutError, KafkaStream, ZookeeperConsumerConnector  # noqa: E402
from zkconsumer.wire.connection import BrokerConnection  # noqa: E402
from zkconsumer.wire.protocol import LATEST_TIME  # noqa: E402


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def status_kb(field: str) -> Optional[int]:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); ``False`` if not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def fill(cluster: ProjectCluster, topic: str, partitions: int, messages: int, size: int) -> Dict[int, int]:
    cluster.create_topic(topic, partitions=partitions)
    cluster.run_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records",
                     str(messages), "--record-size", str(size), "--throughput", "-1", "--producer-props",
                     f"bootstrap.servers={cluster.bootstrap_servers}", "acks=1", "batch.size=262144",
                     "linger.ms=5", timeout=1200, check=True, jvm_options=["-Xmx512m"])
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with BrokerConnection(host, int(port), "bench", 30000, 65536) as conn:
        ends = {p: conn.list_offsets(topic, p, LATEST_TIME) for p in range(partitions)}
    if sum(ends.values()) != messages:
        raise RuntimeError(f"{topic}: {ends}, wanted {messages} messages")
    return ends


class Reader:
    """Reads one stream, checking offsets are exactly 0, 1, 2, ... of one partition."""

    def __init__(self, stream: KafkaStream, partition: int) -> None:
        self.stream = stream
        self.partition = partition
        self.count = 0
        self.first = self.last = 0.0

    def read(self, until_count: int, until_time: float, sample=None) -> None:
        it = iter(self.stream)
        while self.count < until_count and time.monotonic() < until_time:
            try:
                for m in it:
                    if m.partition != self.partition or m.offset != self.count:
                        raise AssertionError(f"stream of partition {self.partition}: got {m.partition}/"
                                             f"{m.offset} where offset {self.count} was due")
                    self.count += 1
                    if self.count == 1:
                        self.first = time.monotonic()
                    if self.count % SAMPLE_EVERY == 0:
                        if sample is not None:
                            sample()
                        if time.monotonic() >= until_time:
                            break
                    if self.count >= until_count:
                        break
            except ConsumerTimeoutError:
                pass
        self.last = time.monotonic()

    @property
    def rate(self) -> float:
        return (self.count - 1) / max(self.last - self.first, 1e-9)

    def assert_nothing_more(self) -> None:
        try:
            extra = next(iter(self.stream))
        except ConsumerTimeoutError:
            return
        raise AssertionError(f"delivered more than the log holds: {extra}")


def props(cluster: ProjectCluster, args: argparse.Namespace) -> Dict[str, Any]:
    return {"zookeeper.connect": cluster.zk_connect, "group.id": f"bench-bp-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "smallest", "consumer.timeout.ms": 500, "auto.commit.enable": "false",
            "queued.max.message.chunks": args.chunks, "fetch.message.max.bytes": args.fetch_bytes,
            "num.consumer.fetchers": 1, "fetcher.connections": 1}


def sampler(member: ZookeeperConsumerConnector, b: KafkaStream, peak: Dict[str, int]):
    """What A's reader calls every SAMPLE_EVERY messages: peak of B's queue length and of parked chunks."""
    def sample() -> None:
        peak["queue"] = max(peak["queue"], len(b.queue))
        parked = sum(1 for p in member._fetchers.metrics()["partitions"].values() if p.get("parked"))
        peak["parked"] = max(peak["parked"], parked)
    return sample


def run_alone(cluster: ProjectCluster, args: argparse.Namespace, topic: str, n: int) -> Dict[str, Any]:
    reset = reset_peak_rss()
    with ZookeeperConsumerConnector(props(cluster, args)) as member:
        a, b = member.create_message_streams({topic: 2})[topic]
        reader = Reader(a, 0)
        reader.read(n, time.monotonic() + args.stall + 60, sampler(member, b, {"queue": 0, "parked": 0}))
        if reader.count != n:
            raise AssertionError(f"alone: read {reader.count} of {n}")
    return {"rate": reader.rate, "read": reader.count, "seconds": reader.last - reader.first,
            "peak_rss_kb": status_kb("VmHWM") if reset else None}


def run_beside(cluster: ProjectCluster, args: argparse.Namespace, topic: str, ends: Dict[int, int]) -> Dict[str, Any]:
    reset = reset_peak_rss()
    peak = {"queue": 0, "parked": 0}
    with ZookeeperConsumerConnector(props(cluster, args)) as member:
        a, b = member.create_message_streams({topic: 2})[topic]
        ra, rb = Reader(a, 0), Reader(b, 1)
        started = time.monotonic()
        ra.read(ends[0], started + args.stall, sampler(member, b, peak))  # B's consumer does not read meanwhile
        stalled_for = time.monotonic() - started
        result = {"rate": ra.rate, "read": ra.count, "seconds": ra.last - ra.first, "stalled_for": stalled_for,
                  "b_queue_peak": peak["queue"], "parked_peak": peak["parked"],
                  "peak_rss_kb": status_kb("VmHWM") if reset else None}
        # B resumes (and A reads whatever it had left): exactly once, in order, nothing more.
        rb.read(ends[1], time.monotonic() + 300)
        ra.read(ends[0], time.monotonic() + 300)
        if (ra.count, rb.count) != (ends[0], ends[1]):
            raise AssertionError(f"beside: read {ra.count}/{ends[0]} and {rb.count}/{ends[1]}")
        time.sleep(0.5)
        ra.assert_nothing_more()
        rb.assert_nothing_more()
    return result


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=2_000_000, help="backlog per partition")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--stall", type=float, default=20.0, help="seconds B's consumer does not read")
    parser.add_argument("--chunks", type=int, default=2, help="queued.max.message.chunks")
    parser.add_argument("--fetch-bytes", type=int, default=65536, help="fetch.message.max.bytes")
    parser.add_argument("--record-size", type=int, default=20)
    args = parser.parse_args(argv)

    with ProjectCluster(brokers=1, partitions=1) as cluster:
        note(f"filling topics ({args.messages:,} messages per partition of {args.record_size} bytes)")
        alone_topic, stalled_topic = f"alone-{uuid.uuid4().hex[:6]}", f"stalled-{uuid.uuid4().hex[:6]}"
        alone_end = fill(cluster, alone_topic, 1, args.messages, args.record_size)[0]
        ends = fill(cluster, stalled_topic, 2, 2 * args.messages, args.record_size)
        note("warm-up read")
        run_alone(cluster, args, alone_topic, alone_end)
        alone: List[Dict[str, Any]] = []
        beside: List[Dict[str, Any]] = []
        for i in range(args.rounds):
            order = ("alone", "beside") if i % 2 == 0 else ("beside", "alone")
            for what in order:
                if what == "alone":
                    alone.append(run_alone(cluster, args, alone_topic, alone_end))
                    note(f"round {i + 1}: A alone {alone[-1]['rate']:,.0f} msg/s")
                else:
                    beside.append(run_beside(cluster, args, stalled_topic, ends))
                    note(f"round {i + 1}: A beside stalled B {beside[-1]['rate']:,.0f} msg/s "
                         f"(B stalled {beside[-1]['stalled_for']:.1f} s)")

    rate_alone = statistics.median(r["rate"] for r in alone)
    rate_beside = statistics.median(r["rate"] for r in beside)
    rss = [r["peak_rss_kb"] for r in alone + beside if r["peak_rss_kb"] is not None]
    print("# Back-pressure per partition: stream A while stream B of the same member does not read")
    print(f"backlog: {args.messages:,} messages of {args.record_size} bytes per partition; "
          f"queued.max.message.chunks={args.chunks}, fetch.message.max.bytes={args.fetch_bytes}, "
          f"num.consumer.fetchers=1, fetcher.connections=1, {args.rounds} rounds (median)")
    def each(rows: List[Dict[str, Any]], key: str, fmt: str) -> str:
        return ", ".join(format(r[key], fmt) for r in rows)

    print(f"A alone:               {rate_alone:12,.0f} msg/s  (rounds: {each(alone, 'rate', ',.0f')})")
    print(f"A beside stalled B:    {rate_beside:12,.0f} msg/s  (rounds: {each(beside, 'rate', ',.0f')}; "
          f"B stalled {each(beside, 'stalled_for', '.1f')} s, A read {each(beside, 'read', ',')} messages meanwhile)")
    print(f"ratio (beside / alone): {rate_beside / rate_alone:.2f}  (target >= 0.90)")
    print(f"B's queue: peak {max(r['b_queue_peak'] for r in beside)} chunks (bound {args.chunks}); "
          f"peak parked chunks {max(r['parked_peak'] for r in beside)} (bound: 1 per partition); "
          f"bound per stream {args.chunks} + 1 chunks x {args.fetch_bytes:,} bytes")
    if rss:
        print(f"peak RSS (VmHWM) per phase: alone {', '.join(str(r['peak_rss_kb'] // 1024) for r in alone)} MiB; "
              f"beside {', '.join(str(r['peak_rss_kb'] // 1024) for r in beside)} MiB")
    print(f"process peak RSS (VmHWM now): {(status_kb('VmHWM') or 0) // 1024} MiB")
    print("delivery after B resumed: every message of both partitions exactly once, in order (checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
