"""Consumer throughput on a LocalCluster: Kafka's own ZooKeeper consumer against zkconsumer and other clients.

The brokers run with the JVM options of ``kafka-server-start.sh`` (1 GB heap, G1, C2), not
LocalCluster's light test settings. For each message size (default 100, 1000 and 10,000
bytes) and codec (default none) it creates a 6-partition topic, fills it with Kafka's ProducerPerformance
(``compression.type`` = the codec; its payload is one byte value repeated, so
compressed topics compress far better than real data), then runs, in rotating order for ``--rounds``
rounds, each consumer from the log start as a new group member, for the same N:

* ``kafka``: ``kafka.tools.ConsumerPerformance --zookeeper`` (Kafka 0.9.0.1's Scala consumer,
  1 thread) with the JVM options of ``kafka-consumer-perf-test.sh`` (-Xmx512M, G1, C2);
* ``confluent``: confluent-kafka's ``Consumer`` (librdkafka), ``consume(10000)``;
* ``perf``, ``perf-batch``: ``zkconsumer perf`` per message / as Arrow record batches, 1 stream;
* ``perf-pure``: ``zkconsumer perf`` without the C extension;
* ``kafka-python``: kafka-python's ``KafkaConsumer``, iterating.

``--compare NAME=PATH`` (repeatable) adds, for each ``zkconsumer perf`` consumer chosen,
the same consumer run from another checkout at PATH (same interpreter and packages,
that tree's code; its C extension must be built there), as ``perf@NAME`` rows rotated
into the same rounds: a before/after comparison on one broker, one topic, one machine
state, instead of two runs whose machines differ. Their ``× this checkout`` column is the
median of the per-round ratios to the same consumer of this checkout.

Before round 1, each topic is read once, unmeasured, by ``zkconsumer perf --batch``:
right after the fill, the broker is still writing the log out, and whichever tool went
first in round 1 paid for it.

The slow ones (perf-pure, kafka-python) get ``--slow-messages`` N where given
(the table's N column says so). Per run: the tool's own timed rate, whole-process
CPU seconds per million messages and peak RSS (``wait4``), and the machine's steal
share from ``/proc/stat``. Tables show medians over rounds; ``× Kafka`` and
``× confluent`` are medians of the per-round ratios to those tools in the same round.

``--scaling`` instead starts a 3-broker cluster, spreads a 6-partition topic over it
and compares 1 stream with 2 streams and ``num.consumer.fetchers=2``, for Kafka's
tool (``--threads 2 --num-fetch-threads 2``) and zkconsumer's iterator and batch paths,
and with 2 ``zkconsumer perf`` processes of one group, 1 stream each, started together
(the streams of one process share its GIL; a Spark job's tasks are processes).

Prints progress on stderr and a Markdown report on stdout; ``--json FILE`` writes
every measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .report import Round, format_table, rotate, size_map, summarize
from .runner import ROOT, log
from .tools import KAFKA_SERVER_HEAP, KAFKA_SERVER_JVM, Tool, produce, run_tool, tree_commit

PARTITIONS = 6
#: N per size (and for the slow tools): at the rates of the README's table, every tool's timed window lasts 10 s or more.
DEFAULT_MESSAGES = "100=30000000,1000=10000000,10000=1500000"
DEFAULT_SLOW_MESSAGES = "100=3000000,1000=2500000,10000=700000"

TOOLS: Tuple[Tool, ...] = (
    Tool("kafka", "Kafka ConsumerPerformance --zookeeper (Scala, 1 thread)", "kafka"),
    Tool("confluent", "confluent-kafka Consumer.consume(10000)", "confluent"),
    Tool("perf", "zkconsumer perf (per message)", "perf"),
    Tool("perf-batch", "zkconsumer perf --batch (Arrow)", "perf-batch"),
    Tool("perf-pure", "zkconsumer perf, pure Python (no C extension)", "perf-pure", slow=True),
    Tool("kafka-python", "kafka-python KafkaConsumer (iterating)", "kafka-python", slow=True),
)
SCALING_TOOLS: Tuple[Tool, ...] = (
    Tool("kafka", "Kafka ConsumerPerformance, 1 thread, 1 fetcher", "kafka"),
    Tool("kafka-2x2", "Kafka ConsumerPerformance, 2 threads, 2 fetchers", "kafka", streams=2, fetchers=2),
    Tool("perf", "zkconsumer perf, 1 stream, 1 fetcher", "perf"),
    Tool("perf-2x2", "zkconsumer perf, 2 streams, 2 fetchers", "perf", streams=2, fetchers=2),
    Tool("perf-batch", "zkconsumer perf --batch, 1 stream, 1 fetcher", "perf-batch"),
    Tool("perf-batch-2x2", "zkconsumer perf --batch, 2 streams, 2 fetchers", "perf-batch", streams=2, fetchers=2),
    Tool("perf-2p", "zkconsumer perf, 2 processes x 1 stream (one group)", "perf", processes=2),
    Tool("perf-batch-2p", "zkconsumer perf --batch, 2 processes x 1 stream (one group)", "perf-batch", processes=2),
)
#: --scaling: each row's "× 1 stream" reference.
ONE_STREAM = {"kafka-2x2": "kafka", "perf-2x2": "perf", "perf-batch-2x2": "perf-batch", "perf-2p": "perf",
              "perf-batch-2p": "perf-batch"}


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/bench", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="message sizes in bytes (default 100,1000,10000)")
    parser.add_argument("--codecs", default="none",
                        help="compression codecs, one topic each: none,gzip,snappy,lz4 (default none)")
    parser.add_argument("--messages", type=size_map, default=size_map(DEFAULT_MESSAGES),
                        help=f"N per size, the same for every consumer (default {DEFAULT_MESSAGES})")
    parser.add_argument("--slow-messages", type=size_map, default=size_map(DEFAULT_SLOW_MESSAGES),
                        help="N per size for perf-pure and kafka-python, '' for the same N as the others "
                             f"(default {DEFAULT_SLOW_MESSAGES})")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip", action="append", default=[], help="leave a consumer out (repeatable): "
                        + ", ".join(dict.fromkeys(t.key for t in TOOLS + SCALING_TOOLS)))
    parser.add_argument("--scaling", action="store_true",
                        help="3 brokers: 1 stream against 2 streams + 2 fetchers (instead of the tool comparison)")
    parser.add_argument("--kafka-jvm", choices=("script", "cluster"), default="script",
                        help="JVM options of Kafka's tool: kafka-consumer-perf-test.sh's (default) or "
                             "LocalCluster's light ones (C1 only, serial GC)")
    parser.add_argument("--compare", action="append", default=[], metavar="NAME=PATH",
                        help="also run each zkconsumer perf consumer from the checkout at PATH, as perf@NAME "
                             "(repeatable; e.g. before=../zkconsumer-old)")
    parser.add_argument("--json", metavar="FILE", help="also write every measurement to FILE")
    args = parser.parse_args(argv)
    for spec in args.compare:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            parser.error(f"--compare {spec!r}: expected NAME=PATH")
        if not (Path(path) / "zkconsumer" / "__init__.py").is_file():
            parser.error(f"--compare {spec!r}: {path} is not a zkconsumer checkout (no zkconsumer/__init__.py)")
    known = {t.key for t in TOOLS + SCALING_TOOLS}
    unknown = sorted(set(args.skip) - known)
    if unknown:
        parser.error(f"--skip: unknown consumer(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return args


ATTEMPTS = 3


def compared(tools: Sequence[Tool], specs: Sequence[str]) -> List[Tool]:
    """``tools`` and, after them, each ``zkconsumer perf`` tool again for each ``NAME=PATH`` in ``specs``."""
    out = list(tools)
    for spec in specs:
        name, _, path = spec.partition("=")
        commit = tree_commit(path)
        out += [replace(t, key=f"{t.key}@{name}", label=f"{t.label} @ {name} ({commit})", tree=path)
                for t in tools if t.kind.startswith("perf")]
    return out


def run_complete(tool: Tool, cluster: Any, java: str, topic: str, n: int, kafka_jvm: str) -> Dict[str, Any]:
    """``tool``'s measurement of all ``n`` messages, with a new group each attempt.

    Kafka's tool hard-codes ``consumer.timeout.ms=1000`` (and ``zkconsumer perf`` defaults to it),
    so on a starved machine a one-second gap ends a run early; such a run is repeated, up to
    :data:`ATTEMPTS` times (the measurement counts them in ``attempts``), then RuntimeError.
    """
    for attempt in range(1, ATTEMPTS + 1):
        m = run_tool(tool, cluster, java, topic, n, kafka_jvm)
        if m["messages"] >= n:
            m["attempts"] = attempt
            return m
        log(f"{tool.key}: only {m['messages']:,} of {n:,} messages (a 1 s gap ended it); again")
    raise RuntimeError(f"{tool.key} consumed fewer than {n:,} messages in {ATTEMPTS} attempts")


def warm_up(cluster: Any, topic: str, n: int) -> None:
    """Read ``n`` messages of ``topic`` once, unmeasured (see the module docstring)."""
    log(f"warm-up read of {topic}")
    run_tool(Tool("warm-up", "warm-up", "perf-batch"), cluster, "", topic, n, "script")


def run_rounds(cluster: Any, java: str, topic: str, tools: Sequence[Tool], n: int, slow_n: int, rounds: int,
               kafka_jvm: str, what: str) -> List[Round]:
    """Every tool once per round, the order rotated each round."""
    by_key = {t.key: t for t in tools}
    out: List[Round] = []
    for r in range(rounds):
        this: Round = {}
        for key in rotate([t.key for t in tools], r):
            tool = by_key[key]
            m = run_complete(tool, cluster, java, topic, slow_n if tool.slow else n, kafka_jvm)
            this[key] = m
            log(f"{what} round {r + 1} {key:>14}: {m['msgs_per_sec']:>12,.0f} msgs/s in {m['seconds']:6.1f} s, "
                f"cpu {m['cpu_seconds']:6.1f} s, rss {m['peak_rss_mb']:5.0f} MB, steal {m['steal_pct']}%, "
                f"busy {m['busy_pct']}%, load {m['load'][0]:.1f}->{m['load'][1]:.1f}")
        out.append(this)
    return out


def tables(rounds: List[Round], tools: Sequence[Tool], title: str, scaling: bool) -> Tuple[str, List[Dict[str, Any]]]:
    """The Markdown table of one topic and its rows as dicts."""
    columns = ["× Kafka", "× 1 stream"] if scaling else ["× Kafka", "× confluent"]
    if any(tool.tree for tool in tools):
        columns.append("× this checkout")
    rows = []
    for tool in tools:
        refs = {"× Kafka": "kafka-2x2" if scaling and (tool.streams > 1 or tool.processes > 1) else "kafka"}
        if scaling:
            refs["× 1 stream"] = ONE_STREAM.get(tool.key, tool.key)
        else:
            refs["× confluent"] = "confluent"
        if "× this checkout" in columns:  # a --compare row against the same consumer of this checkout
            refs["× this checkout"] = tool.key.split("@")[0]
        row = summarize(rounds, tool.key, tool.label, refs)
        if row is not None:
            rows.append(row)
    return format_table(title, rows, columns), [r.as_dict() for r in rows]


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    from harness.cluster import ProjectCluster
    from zkconsumer.testing import find_java
    from zkconsumer.wire import messageset

    sizes = [int(s) for s in args.sizes.split(",")]
    codecs = [c.strip() for c in args.codecs.split(",") if c.strip()]
    catalogue = SCALING_TOOLS if args.scaling else TOOLS
    tools = compared([t for t in catalogue if t.key not in args.skip], args.compare)
    brokers = 3 if args.scaling else 1
    java = find_java()
    began = time.monotonic()
    results: Dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "scaling": args.scaling,
                               "brokers": brokers, "topics": [], "commit": tree_commit(str(ROOT)),
                               "compare": {t.key: {"path": t.tree, "commit": tree_commit(t.tree)}
                                           for t in tools if t.tree}}
    report: List[str] = []
    with ProjectCluster(brokers=brokers, partitions=PARTITIONS, heap=KAFKA_SERVER_HEAP,
                        broker_jvm_options=KAFKA_SERVER_JVM) as cluster:
        for size in sizes:
            for codec in codecs:
                n = args.messages.get(size, 1_000_000)
                slow_n = args.slow_messages.get(size, n)
                topic = f"bench-{size}-{codec}-{uuid.uuid4().hex[:6]}"
                log(f"producing {max(n, slow_n):,} messages of {size} bytes ({codec}) to {topic}")
                produced_in = produce(cluster, topic, max(n, slow_n), size, codec, PARTITIONS)
                log(f"produced in {produced_in:.1f} s")
                warm_up(cluster, topic, n)
                what = f"{size} B {codec}"
                rounds = run_rounds(cluster, java, topic, tools, n, slow_n, args.rounds, args.kafka_jvm, what)
                title = (f"{size}-byte messages, compression {codec}: {PARTITIONS} partitions on {brokers} "
                         f"broker{'s' if brokers > 1 else ''}, {len(rounds)} rounds")
                text, rows = tables(rounds, tools, title, args.scaling)
                report.append(text)
                results["topics"].append({"size": size, "codec": codec, "messages": n, "slow_messages": slow_n,
                                          "produce_seconds": produced_in, "rounds": rounds, "rows": rows})
                log("table so far:\n" + text)
                if args.json:  # after every topic, so an interrupted run keeps what it measured
                    Path(args.json).write_text(json.dumps(results, indent=1))
    steals = [m["steal_pct"] for t in results["topics"] for r in t["rounds"] for m in r.values()
              if m.get("steal_pct") is not None] or [0.0]
    loads = [x for t in results["topics"] for r in t["rounds"] for m in r.values() for x in m["load"]] or [0.0]
    results["elapsed_seconds"] = round(time.monotonic() - began, 1)
    command = " ".join(["scripts/bench", *(argv if argv is not None else sys.argv[1:])])
    header = [
        f"`{command}` ({results['elapsed_seconds'] / 60:.0f} min)",
        "",
        f"{brokers} Kafka 0.9.0.1 broker{'s' if brokers > 1 else ''} (LocalCluster), {os.cpu_count()} cores "
        f"shared with everything else: steal per run {min(steals):.1f}–{max(steals):.1f} %, 1-minute load "
        f"{min(loads):.1f}–{max(loads):.1f}. Python {sys.version.split()[0]}, C accelerator "
        f"{'on' if messageset.ACCELERATED else 'OFF'}. Kafka's tool runs with "
        f"{'kafka-consumer-perf-test.sh JVM options' if args.kafka_jvm == 'script' else 'LocalCluster JVM options'}. "
        "Rates are each tool's own timed window; CPU is the whole process's (start-up and JIT included).",
        "",
    ]
    if args.compare:
        header[-1:-1] = ["", f"Rows without @ run this checkout ({tree_commit(str(ROOT))}); "
                         + "; ".join(f"@{s.partition('=')[0]} runs {s.partition('=')[2]}" for s in args.compare) + "."]
    print("\n".join(header + ["\n\n".join(report)]))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0
