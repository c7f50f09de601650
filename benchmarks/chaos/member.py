"""A zkconsumer group member as a process, for the chaos test (:mod:`benchmarks.chaos`).

Usage::

    python -m benchmarks.chaos.member --zookeeper 127.0.0.1:2181 --group G --topic T \\
        --out member.out [--consumer-id m1] [--streams 1] [--property key=value ...]

It joins group ``G`` with auto-commit every ``auto.commit.interval.ms`` (1000 by
default here) and ``zookeeper.session.timeout.ms`` 6000, iterates its stream(s)
and appends one line per message to ``--out``::

    <partition> <offset> <value>\\n

Contract with the chaos engine:

* **A message counts as consumed once its line is in the file.** Each line is
  written and flushed (one ``write(2)``) before the next message is taken, so a
  ``kill -9`` loses at most the message being handed over, and a partial line
  is never followed by another line; readers must ignore a last line without
  ``\\n``. Values are written as text (``latin-1``, so any byte value survives).
* The auto-committer may commit a message's offset in the instant between the
  iterator handing it out and its line being flushed; a ``kill -9`` landing in
  exactly that window loses it. This is the at-least-once contract of Kafka's
  auto-commit (Kafka's own ``ConsoleConsumer`` has the same window), and it lasts
  microseconds per message: the engine reports any loss rather than hiding it.
* SIGTERM or SIGINT: ``connector.shutdown()`` (final commit, session closed),
  every stream thread ends, the file is closed, exit status 0.
* Exit status 3: a stream raised (a background failure of the connector),
  printed with its traceback on stderr; 4: could not join the group
  (ZooKeeper unreachable, bad configuration); 2: bad arguments.
* ``--commit-fatal`` (an application that cannot tolerate a failed commit):
  ``auto.commit.enable`` is forced off and the member's own loop calls
  ``connector.commit_offsets()`` every ``--commit-interval`` seconds (0.5 by
  default), and once more before ``shutdown()`` on SIGTERM. **Any** exception
  from ``commit_offsets()`` or from iterating a stream is fatal: it is logged
  with its traceback (a line ``chaos-member FATAL <what>: <exception>``) and the
  process exits at once with status 5, without a shutdown, as an application
  that crashes on the error would.
* Diagnostics (zkconsumer's INFO log: rebalances, session events, fenced
  commits) go to stderr with wall-clock timestamps, and one line
  ``chaos-member READY <consumer id>`` once the first assignment is done.
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import signal
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from types import FrameType
from typing import Dict, List, Mapping, Optional, Sequence

from zkconsumer.testing import processes

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_STREAM_FAILED = 3
EXIT_JOIN_FAILED = 4
EXIT_FATAL = 5

#: Settings of a chaos member unless overridden with ``--property``.
DEFAULT_PROPERTIES: Dict[str, str] = {
    "auto.commit.enable": "true",
    "auto.commit.interval.ms": "1000",
    "zookeeper.session.timeout.ms": "6000",
    "auto.offset.reset": "smallest",
}

log = logging.getLogger("zkconsumer.chaos_member")


class LineSink:
    """Appends ``partition offset value`` lines to a file, one flushed ``write`` per line.

    Thread-safe (stream threads share it). ``count`` is the number of lines written.
    """

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()
        self.count = 0

    def write(self, partition: int, offset: int, value: Optional[bytes]) -> None:
        text = "null" if value is None else value.decode("latin-1")
        data = f"{partition} {offset} {text}\n".encode("latin-1")
        with self._lock:
            view = memoryview(data)
            while view:  # O_APPEND writes of a few bytes are atomic; loop only for safety
                written = os.write(self._fd, view)
                view = view[written:]
            self.count += 1

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def spawn_member(zk_connect: str, group: str, topic: str, out: Path, log: Path, cwd: Path,
                 properties: Mapping[str, object], consumer_id: Optional[str] = None,
                 commit_fatal: bool = False, commit_interval_s: float = 0.5,
                 streams: int = 1) -> "subprocess.Popen[bytes]":
    """Start this module as a member process (output to ``out``, logs to ``log``).

    ``topic`` may name several topics separated by commas; ``streams`` is per topic.
    ``properties`` are passed as ``--property`` (``group.id``/``consumer.id`` come from
    the arguments). ``commit_fatal``: the ``--commit-fatal`` mode (see the module
    docstring). The child imports this checkout's zkconsumer whether or not it is
    installed.
    """
    argv = [sys.executable, "-m", "benchmarks.chaos.member", "--zookeeper", zk_connect,
            "--group", group, "--topic", topic, "--out", str(out)]
    if consumer_id is not None:
        argv += ["--consumer-id", consumer_id]
    if streams != 1:
        argv += ["--streams", str(streams)]
    if commit_fatal:
        argv += ["--commit-fatal", "--commit-interval", str(commit_interval_s)]
    for key, value in properties.items():
        if key not in ("group.id", "consumer.id"):
            argv += ["--property", f"{key}={value}"]
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    with open(log, "ab") as log_file:
        return processes.spawn(argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                               env=env, cwd=str(cwd))


def count_requests(client: object) -> "collections.Counter[str]":
    """Count the ZooKeeper requests ``client`` sends from now on, by type and path kind (diagnostics).

    Uses kazoo's private connection handler; installed once connected, before the
    member joins (``ZKCONSUMER_COUNT_REQUESTS=1``); printed at exit as ``chaos-member REQUESTS``.
    """
    counts: "collections.Counter[str]" = collections.Counter()
    connection = getattr(client, "_connection", None)
    submit = getattr(connection, "_submit", None)
    if submit is None:
        return counts

    def counted(request: object, timeout: object, xid: object = None) -> object:
        path = str(getattr(request, "path", "") or "")
        kind = next((k for k in ("/owners/", "/offsets/", "/ids", "/brokers/ids", "/brokers/topics") if k in path), "")
        counts[f"{type(request).__name__}{kind}"] += 1
        return submit(request, timeout, xid)

    connection._submit = counted  # type: ignore[union-attr]
    return counts


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chaos.member",
                                     description="A zkconsumer group member recording what it consumes.")
    parser.add_argument("--zookeeper", required=True, help="zookeeper.connect")
    parser.add_argument("--group", required=True, help="group.id")
    parser.add_argument("--topic", required=True, help="topic, or several separated by commas")
    parser.add_argument("--out", required=True, help="file to append 'partition offset value' lines to")
    parser.add_argument("--consumer-id", help="consumer.id (the member is <group>_<consumer-id>)")
    parser.add_argument("--streams", type=int, default=1, help="streams (consumer threads) of this member per topic")
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="any consumer property (repeatable); overrides the defaults")
    parser.add_argument("--commit-fatal", action="store_true",
                        help="commit with commit_offsets() every --commit-interval s; any commit or "
                             "iteration exception kills the member (exit status 5)")
    parser.add_argument("--commit-interval", type=float, default=0.5, help="seconds between commits (--commit-fatal)")
    args = parser.parse_args(argv)
    if args.commit_interval <= 0:
        parser.error("--commit-interval must be > 0")
    if args.streams < 1:
        parser.error("--streams must be >= 1")
    for item in args.property:
        if "=" not in item:
            parser.error(f"--property {item!r}: expected KEY=VALUE")
    return args


def member_properties(args: argparse.Namespace) -> Dict[str, str]:
    """The consumer properties of this member: defaults, then the command line."""
    props = dict(DEFAULT_PROPERTIES)
    props.update({"zookeeper.connect": args.zookeeper, "group.id": args.group})
    if args.consumer_id:
        props["consumer.id"] = args.consumer_id
    for item in args.property:
        key, value = item.split("=", 1)
        props[key.strip()] = value.strip()
    if args.commit_fatal:
        props["auto.commit.enable"] = "false"  # the application's own loop commits
    return props


def die(what: str, exc: BaseException) -> None:
    """``--commit-fatal``: log ``exc`` with its traceback and end the process at once with EXIT_FATAL."""
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    print(f"chaos-member FATAL {what}: {exc!r}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(EXIT_FATAL)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s.%(msecs)03d %(levelname)s %(threadName)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    stop = threading.Event()

    def on_signal(signum: int, _frame: Optional[FrameType]) -> None:
        log.info("signal %d: shutting down", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    from zkconsumer import ZkConsumerError, ZookeeperConsumerConnector  # after logging is set up

    sink = LineSink(args.out)
    try:
        connector = ZookeeperConsumerConnector(member_properties(args))
        request_counts = count_requests(connector.zk_client) if os.environ.get("ZKCONSUMER_COUNT_REQUESTS") else None
        topics = [t for t in args.topic.split(",") if t]
        by_topic = connector.create_message_streams({t: args.streams for t in topics})
        streams = [stream for t in topics for stream in by_topic[t]]
    except ZkConsumerError as exc:
        log.error("could not join group %s: %s", args.group, exc)
        sink.close()
        return EXIT_JOIN_FAILED
    print(f"chaos-member READY {connector.consumer_id}", file=sys.stderr, flush=True)

    failures: List[BaseException] = []

    def consume(index: int) -> None:
        try:
            for message in streams[index]:
                sink.write(message.partition, message.offset, message.message)
            if not stop.is_set():  # only shutdown() may end a stream
                raise RuntimeError(f"stream {index} ended before shutdown")
        except BaseException as exc:  # reported by the main thread
            if args.commit_fatal:
                die(f"iterating stream {index}", exc)
            failures.append(exc)
            traceback.print_exc(file=sys.stderr)
            stop.set()

    threads = [threading.Thread(target=consume, args=(i,), name=f"chaos-stream-{i}", daemon=True)
               for i in range(len(streams))]
    for thread in threads:
        thread.start()
    while not stop.wait(args.commit_interval if args.commit_fatal else 0.5):
        if args.commit_fatal:
            try:
                connector.commit_offsets()
            except BaseException as exc:
                die("commit_offsets()", exc)
    if args.commit_fatal and not failures:
        try:
            connector.commit_offsets()  # auto-commit is off: shutdown() would not commit
        except BaseException as exc:
            die("final commit_offsets()", exc)
    status = EXIT_STREAM_FAILED if failures else EXIT_OK
    try:
        connector.shutdown()  # ends every stream with the shutdown sentinel, commits
    except Exception:
        traceback.print_exc(file=sys.stderr)
        status = status or EXIT_STREAM_FAILED
    for thread in threads:
        thread.join(30)
        if thread.is_alive():
            log.error("%s did not end after shutdown", thread.name)
            status = status or EXIT_STREAM_FAILED
    sink.close()
    if request_counts is not None:
        print("chaos-member REQUESTS " + " ".join(f"{k}={v}" for k, v in request_counts.most_common()),
              file=sys.stderr, flush=True)
    rebalance = connector.status
    if rebalance is not None:
        print(f"chaos-member STATUS rebalances={rebalance.rebalances} failed_attempts={rebalance.failed_attempts} "
              f"gave_up={rebalance.gave_up}", file=sys.stderr, flush=True)
    log.info("wrote %d lines; exit status %d", sink.count, status)
    return status


if __name__ == "__main__":
    sys.exit(main())
