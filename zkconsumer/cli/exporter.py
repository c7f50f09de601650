"""``zkconsumer exporter``: serve every group's lag and Burrow status as Prometheus metrics.

Runs until interrupted (SIGINT or SIGTERM), then stops polling, stops the HTTP
server and exits 0. Read-only: it never writes to ZooKeeper.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from prometheus_client import CollectorRegistry

from ..metrics.http import MetricsServer
from ..monitoring.burrow import DEFAULT_WINDOW
from ..monitoring.exporter import LagCollector, LagExporter
from .common import EXIT_OK, add_storage_option, broker_access, common_options, positive_int, zookeeper

#: Default port (not registered with Prometheus' port allocation list; pick another with --port).
DEFAULT_PORT = 9311


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = commands.add_parser("exporter", parents=[common_options()],
                            help="serve consumer lag and Burrow status of groups as Prometheus metrics")
    p.add_argument("--group", action="append", metavar="G",
                   help="a group to watch (repeatable; default: every group under /consumers)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"HTTP port (default {DEFAULT_PORT}; 0: any)")
    p.add_argument("--addr", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--interval-s", type=positive_float, default=10.0, metavar="S",
                   help="seconds between polls of ZooKeeper and the brokers (default 10)")
    p.add_argument("--window", type=positive_int, default=DEFAULT_WINDOW, metavar="N",
                   help=f"offsets kept per partition for Burrow's rules (default {DEFAULT_WINDOW})")
    p.add_argument("--socket-timeout-ms", type=int, default=10000, metavar="MS",
                   help="timeout of each request to a broker (default 10000)")
    add_storage_option(p, "read (for each group)")
    p.set_defaults(run=run_exporter)


def run_exporter(args: argparse.Namespace) -> int:
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    access = broker_access(args)
    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        with zookeeper(args) as zk:
            exporter = LagExporter(zk, groups=args.group, window=args.window, interval_s=args.interval_s,
                                   socket_timeout_ms=args.socket_timeout_ms, offsets_storage=args.offsets_storage,
                                   access=access)
            registry = CollectorRegistry()
            registry.register(LagCollector(exporter))
            server = MetricsServer(registry, args.port, args.addr)
            try:
                exporter.start()
                sys.stderr.write(f"zkconsumer exporter: serving {server.url} "
                                 f"(polling every {args.interval_s:g} s, window {args.window}, "
                                 f"offsets from {args.offsets_storage})\n")
                sys.stderr.flush()
                try:
                    while not stop.wait(0.5):
                        pass
                except KeyboardInterrupt:
                    pass
            finally:
                exporter.stop()
                server.close()
    finally:
        signal.signal(signal.SIGTERM, previous)
    return EXIT_OK
