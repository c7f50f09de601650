"""``zkconsumer perf``: Kafka's ``ConsumerPerformance --zookeeper`` for this consumer.

::

    zkconsumer perf --zookeeper Z --topic T --messages N [--threads K] [--group G] [--batch]
                    [--fetch-size B] [--socket-buffer-size B] [--num-fetch-threads F]
                    [--from-latest] [--warmup-ms MS] [--timeout-ms MS] [--property k=v ...]

Joins group G (default ``perf-consumer-<random>``, as Kafka's tool), consumes N
messages on K streams (one thread each; ``--batch``: as Arrow record batches)
and prints Kafka's two summary lines (header, then ``start.time, end.time,
data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec``), then, as the
last line, one JSON object (see :mod:`zkconsumer.cli.measure`). While stderr is a
terminal, a status line there shows messages, msg/s (over the last half
second) and MB/s as it runs; stdout is unchanged.

Defaults are the Kafka tool's: ``fetch.message.max.bytes`` 1 MiB,
``socket.receive.buffer.bytes`` 2 MiB, one fetcher thread, ``consumer.timeout.ms``
1000, ``auto.offset.reset=smallest`` (``--from-latest``: largest), and the clock
starts one second after the streams are created (``--warmup-ms``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from typing import TYPE_CHECKING, Dict, List, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from ..config import PropertyValue
    from ..consumer.stream import KafkaStream

from .common import EXIT_OK, CliError, common_options, key_value, positive_int
from .progress import RateTicker, StatusLine, format_rate


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register ``perf``."""
    p = commands.add_parser("perf", parents=[common_options(client_config=False)],
                            help="measure consumer throughput (Kafka's ConsumerPerformance --zookeeper)")
    p.add_argument("--topic", required=True, metavar="TOPIC", help="the topic to read")
    p.add_argument("--messages", required=True, type=positive_int, metavar="N", help="messages to consume")
    p.add_argument("--threads", type=positive_int, default=1, metavar="K", help="streams, one thread each (default 1)")
    p.add_argument("--group", help="consumer group id (default perf-consumer-<random>)")
    p.add_argument("--batch", action="store_true", help="consume Arrow record batches (KafkaStream.batches())")
    p.add_argument("--max-batch-rows", type=positive_int, metavar="ROWS", help="with --batch: rows per batch at most")
    p.add_argument("--fetch-size", type=positive_int, default=1024 * 1024, metavar="BYTES",
                   help="fetch.message.max.bytes (default 1048576)")
    p.add_argument("--socket-buffer-size", type=positive_int, default=2 * 1024 * 1024, metavar="BYTES",
                   help="socket.receive.buffer.bytes (default 2097152)")
    p.add_argument("--num-fetch-threads", type=positive_int, default=1, metavar="F",
                   help="num.consumer.fetchers (default 1)")
    p.add_argument("--from-latest", action="store_true",
                   help="with no committed offset, start at the log end (default: the log start)")
    p.add_argument("--warmup-ms", type=int, default=1000, metavar="MS",
                   help="wait after creating the streams before starting the clock (default 1000, as Kafka's tool)")
    p.add_argument("--timeout-ms", type=positive_int, default=1000, metavar="MS",
                   help="consumer.timeout.ms: stop after this long without messages (default 1000)")
    p.add_argument("--rss-interval", type=float, metavar="SECONDS",
                   help="also sample this process's RSS every SECONDS during the run (rss_mb_samples)")
    p.add_argument("--property", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="any other consumer property (repeatable)")
    p.set_defaults(run=run_perf_command)


def perf_properties(args: argparse.Namespace) -> Dict[str, PropertyValue]:
    """The connector's properties: ``--property`` values, then what the options set (the options win)."""
    props: Dict[str, PropertyValue] = dict(args.property)
    props.update({
        "zookeeper.connect": args.zookeeper,
        "group.id": args.group or f"perf-consumer-{random.randrange(100000)}",
        "fetch.message.max.bytes": args.fetch_size,
        "socket.receive.buffer.bytes": args.socket_buffer_size,
        "num.consumer.fetchers": args.num_fetch_threads,
        "auto.offset.reset": "largest" if args.from_latest else "smallest",
        "consumer.timeout.ms": args.timeout_ms,
    })
    if args.zk_timeout_ms is not None:
        props["zookeeper.connection.timeout.ms"] = args.zk_timeout_ms
    return props


def _delivered(streams: List["KafkaStream"]) -> Tuple[int, int]:
    """Messages and bytes the streams handed out so far (plain counter reads: never blocks)."""
    messages = nbytes = 0
    for stream in list(streams):
        m, b = stream.delivered
        messages += m
        nbytes += b
    return messages, nbytes


def run_perf_command(args: argparse.Namespace) -> int:
    from ..config import ConsumerConfig
    from .measure import kafka_style_lines, run_perf

    if args.warmup_ms < 0:
        raise CliError("--warmup-ms must be >= 0", 2)
    if args.rss_interval is not None and args.rss_interval <= 0:
        raise CliError("--rss-interval must be > 0", 2)
    if args.batch:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise CliError("--batch needs pyarrow: pip install pyarrow", 2) from None
    config = ConsumerConfig(perf_properties(args))
    status = StatusLine(sys.stderr)
    watched: List["KafkaStream"] = []
    ticker = RateTicker(status, lambda: _delivered(watched),
                        lambda counts, elapsed, recent: format_rate(
                            f"perf {min(counts[0], args.messages):,}/{args.messages:,}", counts[0], counts[1],
                            elapsed, recent))

    def on_streams(streams: List["KafkaStream"]) -> None:
        watched.extend(streams)
        ticker.start()

    try:
        result = run_perf(config, args.topic, args.messages, threads=args.threads, batch=args.batch,
                          warmup_ms=args.warmup_ms, max_batch_rows=args.max_batch_rows,
                          rss_interval_s=args.rss_interval, on_streams=on_streams if status.enabled else None)
    finally:
        ticker.stop()
    for line in kafka_style_lines(result):
        print(line)
    print(json.dumps(result, sort_keys=True))
    sys.stdout.flush()
    return EXIT_OK
