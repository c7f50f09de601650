"""Where a zkconsumer member's CPU goes at a steady rate: user and system time, context switches (issue 44).

``python -m benchmarks.cpu_split [--rate 1000] [--window 15] [--profile] iterator batch ...``

Starts a one-broker :class:`~zkconsumer.testing.LocalCluster` (6 partitions), and per kind named
(``iterator``: ``for m in stream``; ``batch``: ``stream.batches()``; ``iterator-read`` and ``batch-read``:
the same, each message's partition and stamp read as ``benchmarks.latency``'s worker reads them;
``confluent``: confluent-kafka's consumer, ``poll(0.1)`` per message, with the latency benchmark's settings, for
the same split of a peer; ``floor``: the latency benchmark's bare Python fetch loop, no consumer around it;
``glue``: the member's wire path in C with the least Python a round can have, a bound for a round run in C;
``glue-same`` and ``glue-distinct``: the same plus 40 calls per round, of one function or of 40 functions;
``lean``: the member's queue and iterator, fed by a round whose bookkeeping is one Python frame,
``benchmarks.lean_round``)
one member of a new group with the library's defaults (``auto.offset.reset=largest``, ``consumer.timeout.ms=100``),
while a kafka-python producer in another process sends 100 B messages at ``--rate`` msg/s round-robin over
the partitions. Over ``--window`` seconds (after 4 s of warm-up) it prints, per message delivered,
the process's user and system CPU (``getrusage``: every thread of the member, none of the
producer's), its voluntary and involuntary context switches and Python's garbage collections in the window,
then the same per thread (from
``/proc/self/task``, named by ``threading``; CPU there is counted in clock ticks, 10 ms, so only
the busy threads' figures mean much). With ``--profile``, cProfile
runs on the consuming thread (where, with ``fetch.on.consumer.thread``, the fetch rounds run
too) and its top functions are printed (``--profile-sort ncalls`` orders them by calls: with the
total, how many Python and built-in calls a message costs); the CPU figures then include cProfile's own cost, so
measure with and without it.

Hold ``/tmp/zkconsumer-cluster.lock`` while it runs (``flock``): a loaded machine's figures mean
little. The latency benchmark (``scripts/bench-latency``) gives the same CPU per message beside
the peers; this one splits it.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import os
import pstats
import resource
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from zkconsumer import ConsumerConfig, ConsumerTimeoutError, ZookeeperConsumerConnector
from zkconsumer.testing import LocalCluster
from zkconsumer.wire.connection import BrokerConnection
from zkconsumer.wire.messageset import speedups
from zkconsumer.wire.protocol import LATEST_TIME, FetchPartitionResponse

from .latency.floor_worker import FloorLoop
from .latency.settings import CONFLUENT_BASE
from .latency.stamps import STAMP
from .latency.zk_worker import keep_nothing, read_batch
from .lean_round import lean_stream

PARTITIONS = 6

_CORRELATION = struct.Struct(">i")

PRODUCER = r"""
import sys, time
from kafka import KafkaProducer
producer = KafkaProducer(bootstrap_servers=sys.argv[1], api_version=(0, 9), linger_ms=0, acks=1)
rate, seconds = int(sys.argv[3]), float(sys.argv[4])
start = time.monotonic()
for i in range(int(rate * seconds)):
    ahead = start + i / rate - time.monotonic()
    if ahead > 0:
        time.sleep(ahead)
    producer.send(sys.argv[2], value=b"x" * 100, partition=i % int(sys.argv[5]))
producer.flush()
producer.close()
"""


def consume(stream: Any, kind: str, seconds: float) -> int:
    """Messages delivered in ``seconds`` through the iterator or as batches (``-read``: each message's
    partition and stamp read as the latency benchmark's worker reads them, into a recorder that keeps
    nothing)."""
    delivered, end = 0, time.monotonic() + seconds
    unpack = STAMP.unpack_from
    while time.monotonic() < end:
        try:
            if kind == "batch-read":
                for batch in stream.batches():
                    read_batch(batch, keep_nothing, keep_nothing, 0)
                    delivered += batch.num_rows
                    if time.monotonic() >= end:
                        break
            elif kind == "batch":
                for batch in stream.batches():
                    delivered += batch.num_rows
                    if time.monotonic() >= end:
                        break
            elif kind == "iterator-read":
                for m in stream:
                    keep_nothing(m.partition, unpack(m.message)[0], 0)
                    delivered += 1
                    if time.monotonic() >= end:
                        break
            else:
                for _ in stream:
                    delivered += 1
                    if time.monotonic() >= end:
                        break
        except ConsumerTimeoutError:
            continue
    return delivered


def thread_counters() -> Dict[int, Tuple[float, int, int]]:
    """``{thread id: (CPU s, voluntary, involuntary context switches)}`` of this process's threads (Linux)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: Dict[int, Tuple[float, int, int]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:  # ended meanwhile
            continue
        cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime (fields 14 and 15 of stat)
        out[int(tid)] = (cpu, int(status["voluntary_ctxt_switches"]), int(status["nonvoluntary_ctxt_switches"]))
    return out


def print_threads(before: Dict[int, Tuple[float, int, int]], after: Dict[int, Tuple[float, int, int]], n: int,
                  names: Dict[Optional[int], str]) -> None:
    """Per thread of ``after`` (``names``: Python's threads by native id, taken while they ran), per message."""
    rows = []
    for tid, (cpu, vol, invol) in after.items():
        cpu0, vol0, invol0 = before.get(tid, (0.0, 0, 0))
        rows.append((cpu - cpu0, vol - vol0, invol - invol0, names.get(tid, f"thread {tid} (not started by Python)")))
    for cpu, vol, invol, name in sorted(rows, reverse=True):
        if cpu or vol or invol:
            print(f"    {cpu / n * 1e6:7.1f} us/msg  {vol / n:5.2f} voluntary  {invol / n:5.2f} involuntary  {name}")


class GcClock:
    """Python's cyclic garbage collections while it is installed (``gc.callbacks``): per generation,
    how many ran and their time (wall-clock, on whichever thread triggered them)."""

    def __init__(self) -> None:
        self.runs = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __enter__(self) -> "GcClock":
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: Dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.runs[info["generation"]] += 1
            self.seconds[info["generation"]] += time.perf_counter() - self._started

    def report(self, n: int) -> str:
        per = ", ".join(f"gen{g} {self.runs[g]} ({self.seconds[g] / n * 1e6:.2f} us/msg)" for g in range(3))
        return f"garbage collections: {per}"


class ConfluentStream:
    """confluent-kafka's consumer as the latency benchmark's worker runs it (``poll(0.1)``, one message at a
    time), shaped like a stream for :func:`consume`: iterating yields messages, ``ConsumerTimeoutError`` after an
    empty poll."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer  # only this kind needs it

        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"cpu-split-confluent-{time.time_ns()}",
                                   **CONFLUENT_BASE})
        self._consumer.subscribe([topic])

    def __iter__(self) -> Iterator[Any]:
        poll = self._consumer.poll
        while True:
            message = poll(0.1)
            if message is None:
                raise ConsumerTimeoutError("no message within 100 ms")
            if message.error() is None:
                yield message

    def close(self) -> None:
        self._consumer.close()


def floor_stream(bootstrap: str, topic: str) -> Iterator[Any]:
    """The latency benchmark's floor (:class:`benchmarks.latency.floor_worker.FloorLoop`) as a stream: a bare Python
    fetch loop on one connection, every partition in one Fetch (``fetch.min.bytes`` 1, a 1 s wait), no consumer
    around it."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with BrokerConnection(host, int(port), "cpu-split-floor", 30000, 65536, reuse_buffer=True) as conn:
        loop = FloorLoop(conn, topic, PARTITIONS)
        while True:
            for _, messages in loop.messages(loop.fetch()):
                yield from messages


class _Watermark:
    """What ``_speedups.fetch_walk`` writes an empty partition's high watermark into (a fetcher's partition state)."""

    __slots__ = ("high_watermark",)

    def __init__(self) -> None:
        self.high_watermark = -1


#: Python calls the ``glue-same`` and ``glue-distinct`` kinds add to each round (about the Python frames of a
#: member's round at 1,000 msg/s).
EXTRA_CALLS = 40


def extra_calls(n: int, distinct: bool) -> List[Callable[[], int]]:
    """``n`` calls for a round: ``distinct``, ``n`` functions, each with its own code object, globals and counter
    (the breadth of a round that touches ``n`` pieces of code and data); else one such function ``n`` times."""
    calls: List[Callable[[], int]] = []
    for i in range(n if distinct else 1):
        namespace: Dict[str, Any] = {"box": [0]}
        source = f"def call_{i}():\n    box[0] += {i + 1}\n    return box[0]\n"
        exec(compile(source, f"<cpu-split-call-{i}>", "exec"), namespace)  # noqa: S102 - our own source
        calls.append(namespace[f"call_{i}"])
    return calls if distinct else calls * n


def glue_stream(bootstrap: str, topic: str, extra: Sequence[Callable[[], Any]] = ()) -> Iterator[Any]:
    """The member's wire path with the least Python a round can have: per round, the C extension's calls alone
    (``fetch_request`` writes the Fetch of every partition, ``recv_frame`` sends it and reads the answer with the
    GIL released once, ``fetch_walk`` walks it, ``decode`` decodes each partition with data), driven from this one
    generator frame. What Python would still run if a round were one C call: a bound for such a redesign.
    Every partition from its end, ``fetch.min.bytes`` 1, a 1 s wait; no consumer around it. ``extra``: called
    once each per round, after the answer came (see :func:`extra_calls`)."""
    if speedups is None:
        raise SystemExit("the glue kind needs the C extension (python setup.py build_ext --inplace)")
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with BrokerConnection(host, int(port), "cpu-split-glue", 30000, 65536) as conn:
        offsets = {p: conn.list_offsets(topic, p, LATEST_TIME) for p in range(PARTITIONS)}
    requested: Dict[Tuple[str, int], Tuple[_Watermark, int]] = {
        (topic, p): (_Watermark(), o) for p, o in offsets.items()}
    request, recv_frame, walk, decode = speedups.fetch_request, speedups.recv_frame, speedups.fetch_walk, speedups.decode
    buffer = bytearray(4 << 20)
    view = memoryview(buffer)
    lowat = 0
    with socket.create_connection((host, int(port)), 30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        fd, correlation = sock.fileno(), 0
        while True:
            correlation += 1
            frame = request(correlation, "cpu-split-glue", 1000, 1, requested, 1048576)
            state, size, got, lowat = recv_frame(fd, buffer, 30000, frame, lowat)
            if state != 0 or size < 4 or got < size or size > len(buffer):
                raise SystemExit(f"glue: read of a {size}-byte response failed (state {state}, {got} bytes read)")
            answered = _CORRELATION.unpack_from(buffer, 0)[0]
            if answered != correlation:
                raise SystemExit(f"glue: response to request {answered}, expected {correlation}")
            for call in extra:
                call()
            walked = walk(view[4:size], FetchPartitionResponse, requested)
            if walked is None:
                raise SystemExit(f"glue: a {size}-byte fetch response the walk refused")
            for st, offset, part in walked[2]:
                if part.error_code:
                    raise SystemExit(f"fetch error {part.error_code} on partition {part.partition}")
                block, _, next_offset, status, _, reason = decode(part.message_set, 0, offset, True)
                if status > speedups.TRUNCATED:
                    raise SystemExit(f"glue: partition {part.partition} at {offset}: {reason} (status {status})")
                requested[(topic, part.partition)] = (st, offset if next_offset is None else next_offset)
                yield from block


@contextlib.contextmanager
def open_stream(cluster: LocalCluster, topic: str, kind: str) -> Iterator[Any]:
    """The stream ``kind`` reads: for ``iterator``, ``batch`` and their ``-read`` forms, one member of a new group
    with the library's defaults (``auto.offset.reset=largest``, ``consumer.timeout.ms=100``, no auto-commit); for
    ``confluent``, confluent-kafka's consumer with the latency benchmark's settings; for ``floor`` and the ``glue``
    kinds, a bare fetch loop (:func:`floor_stream`, :func:`glue_stream`; ``glue-same`` and ``glue-distinct`` add
    :data:`EXTRA_CALLS` calls per round, of one function or of as many functions: :func:`extra_calls`); for
    ``lean``, a real stream iterator and queue fed by :class:`~benchmarks.lean_round.LeanRound`."""
    if kind == "floor":
        yield floor_stream(cluster.bootstrap_servers, topic)
        return
    if kind == "lean":
        with lean_stream(cluster.bootstrap_servers, topic, PARTITIONS) as lean:
            yield lean
        return
    if kind.startswith("glue"):
        extra = extra_calls(EXTRA_CALLS, kind == "glue-distinct") if kind != "glue" else []
        yield glue_stream(cluster.bootstrap_servers, topic, extra)
        return
    if kind == "confluent":
        confluent = ConfluentStream(cluster.bootstrap_servers, topic)
        try:
            yield confluent
        finally:
            confluent.close()
        return
    props = {"zookeeper.connect": cluster.zk_connect, "group.id": f"cpu-split-{kind}-{time.time_ns()}",
             "auto.offset.reset": "largest", "auto.commit.enable": "false", "consumer.timeout.ms": "100"}
    with ZookeeperConsumerConnector(ConsumerConfig(props)) as connector:
        yield connector.create_message_streams({topic: 1})[topic][0]


def measure(cluster: LocalCluster, topic: str, kind: str, rate: int, window: float, profile: bool,
            sort: str = "tottime", top: int = 25) -> None:
    with open_stream(cluster, topic, kind) as stream:
        producer = subprocess.Popen([sys.executable, "-c", PRODUCER, cluster.bootstrap_servers, topic, str(rate),
                                     str(window + 8), str(PARTITIONS)])
        try:
            consume(stream, kind, 4.0)  # warm-up
            profiler: Optional[cProfile.Profile] = cProfile.Profile() if profile else None
            threads_before = thread_counters()
            before = resource.getrusage(resource.RUSAGE_SELF)
            if profiler is not None:
                profiler.enable()
            with GcClock() as gc_clock:
                n = max(1, consume(stream, kind, window))
            if profiler is not None:
                profiler.disable()
            after = resource.getrusage(resource.RUSAGE_SELF)
            threads_after = thread_counters()
            names = {t.native_id: t.name for t in threading.enumerate()}
        finally:
            producer.wait(window + 60)
    user, system = (after.ru_utime - before.ru_utime) / n * 1e6, (after.ru_stime - before.ru_stime) / n * 1e6
    print(f"{kind}: {n} messages in {window:.0f} s; CPU {user + system:.1f} us/msg (user {user:.1f}, system "
          f"{system:.1f}); context switches per message: voluntary {(after.ru_nvcsw - before.ru_nvcsw) / n:.2f}, "
          f"involuntary {(after.ru_nivcsw - before.ru_nivcsw) / n:.2f}; cProfile {'on' if profiler else 'off'}")
    print(f"    {gc_clock.report(n)}")
    print_threads(threads_before, threads_after, n, names)
    if profiler is not None:
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        print(f"{kind}: {stats.total_calls / n:.1f} function calls per message on the consuming thread")  # type: ignore[attr-defined]
        stats.sort_stats(sort).print_stats(top)
        print(out.getvalue())


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("kinds", nargs="+", choices=["iterator", "batch", "iterator-read", "batch-read",
                                                        "confluent", "floor", "glue", "glue-same",
                                                        "glue-distinct", "lean"])
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--window", type=float, default=15.0)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-sort", default="tottime", choices=["tottime", "cumulative", "ncalls"])
    parser.add_argument("--profile-top", type=int, default=25, help="how many functions --profile prints")
    args = parser.parse_args(argv)
    with LocalCluster(brokers=1, partitions=PARTITIONS) as cluster:
        topic = cluster.create_topic("cpu-split", PARTITIONS)
        for kind in args.kinds:
            measure(cluster, topic, kind, args.rate, args.window, args.profile, args.profile_sort, args.profile_top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
