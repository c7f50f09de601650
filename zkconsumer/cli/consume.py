"""``zkconsumer consume``: Kafka's console consumer on :class:`ZookeeperConsumerConnector`.

One stream; each message's value is written raw to stdout followed by a
newline (a null value as ``null``, as Kafka's DefaultMessageFormatter does).
While stderr is a terminal, a status line there shows the messages so far and
the rate (erased before each message when stdout is the same terminal, and at
the end); piped or redirected stderr gets none. Stops after ``--max-messages``, when idle for ``--timeout-ms`` (exit 0), on
Ctrl-C (exit 130) or when stdout is closed (a pipe reader exited). The count
of messages goes to stderr, as in Kafka's tool.

What is committed is what was written, never more: a message counts once all
of it was written to stdout (:mod:`.sink`), and the command, not the
connector, commits (:class:`ConsumeLoop`): every ``auto.commit.interval.ms``
between two messages (``auto.commit.enable``, default true) and once before
exiting, including after Ctrl-C and a closed pipe. The message being written
when the reader went away, or when Ctrl-C ended a write waiting for a full
pipe, is neither counted nor committed: the group's next consumer reads it
again. Ctrl-C stops the loop only between two messages or while a write waits
(:class:`~.interrupt.InterruptLatch`), so "written" and "recorded as written"
cannot be told apart by where it lands. Partitions that move to another
member in a rebalance are consumed again there from the last commit (the
connector commits nothing of its own, as with ``auto.commit.enable=false``).
A periodic commit that fails is logged and made again at the next interval;
it waits for ZooKeeper (up to ``offsets.commit.timeout.ms``) in the loop, so
output pauses meanwhile.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Dict, List, Optional

from .common import EXIT_INTERRUPTED, EXIT_OK, CliError, common_options, key_value, positive_int
from .interrupt import InterruptLatch
from .progress import RateTicker, StatusLine, format_rate, terminal_caps
from .sink import line_of, sink_for

if TYPE_CHECKING:  # pragma: no cover
    from ..config import ConsumerConfig, PropertyValue
    from ..consumer.stream import KafkaStream, MessageAndMetadata

log = logging.getLogger(__name__)


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register ``consume``."""
    p = commands.add_parser("consume", parents=[common_options(client_config=False)],
                            help="print messages of a topic as a member of a consumer group")
    p.add_argument("--group", required=True, metavar="GROUP",
                   help="the consumer group to join (group.id); its committed offsets say where to start")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--topic", metavar="TOPIC", help="consume this topic")
    what.add_argument("--whitelist", metavar="REGEX", help="consume every topic matching REGEX")
    p.add_argument("--from-beginning", action="store_true",
                   help="with no committed offset, start at the log start (auto.offset.reset=smallest)")
    p.add_argument("--max-messages", type=positive_int, metavar="N", help="exit after N messages")
    p.add_argument("--timeout-ms", type=int, metavar="MS",
                   help="exit when no message arrives for MS milliseconds (consumer.timeout.ms)")
    p.add_argument("--property", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="a consumer property, e.g. auto.commit.interval.ms=1000 (repeatable)")
    p.add_argument("--consumer-config", metavar="FILE", help="a consumer.properties file")
    p.set_defaults(run=run_consume)


def consumer_properties(args: argparse.Namespace) -> Dict[str, PropertyValue]:
    """The connector's properties: ``--property`` values, then what the options imply.

    ``zookeeper.connect`` and ``group.id`` come from ``--zookeeper``/``--group``;
    ``--from-beginning`` sets ``auto.offset.reset=smallest``, ``--timeout-ms``
    sets ``consumer.timeout.ms`` and ``--zk-timeout-ms``
    ``zookeeper.connection.timeout.ms``, overriding ``--property``.
    """
    props: Dict[str, PropertyValue] = dict(args.property)
    props["zookeeper.connect"] = args.zookeeper
    if args.zookeeper_auth:
        props["zookeeper.auth"] = args.zookeeper_auth
    props["group.id"] = args.group
    if args.zk_timeout_ms is not None:
        props["zookeeper.connection.timeout.ms"] = args.zk_timeout_ms
    if args.from_beginning:
        props["auto.offset.reset"] = "smallest"
    if args.timeout_ms is not None:
        props["consumer.timeout.ms"] = args.timeout_ms
    return props


def write_message(out: BinaryIO, value: Optional[bytes]) -> None:
    """One message as the console consumer prints it: the raw value and a newline, flushed.

    Flushed at once (as Kafka's console consumer does) so a reader of a slow
    topic sees each message when it arrives, not when a buffer fills.
    """
    out.write(line_of(value))
    out.flush()


#: How often the loop wakes up while no message arrives: to notice a Ctrl-C, the idle
#: limit (``--timeout-ms``) and a commit that is due.
TICK_MS = 100


@dataclass(frozen=True)
class LoopSettings:
    """What the user's configuration asks of the loop (the connector itself runs with
    ``auto.commit.enable=false`` and ``consumer.timeout.ms`` = :attr:`tick_ms`)."""

    commit_interval_s: Optional[float]  # None: auto.commit.enable=false, commit only at exit
    idle_limit_s: Optional[float]  # None: wait for messages forever
    tick_ms: int

    @classmethod
    def of(cls, config: "ConsumerConfig") -> "LoopSettings":
        idle_ms: int = config.consumer_timeout_ms
        return cls(
            commit_interval_s=config.auto_commit_interval_ms / 1000.0 if config.auto_commit_enable else None,
            idle_limit_s=None if idle_ms < 0 else idle_ms / 1000.0,
            tick_ms=TICK_MS if idle_ms < 0 else min(TICK_MS, idle_ms),
        )


def connector_config(config: "ConsumerConfig", settings: LoopSettings) -> "ConsumerConfig":
    """The connector's configuration: the user's, with nothing committed behind the command's back
    (it commits what it wrote itself) and iteration waking up every tick."""
    return config.with_overrides(**{"auto.commit.enable": False, "consumer.timeout.ms": settings.tick_ms})


def run_consume(args: argparse.Namespace) -> int:
    # Imported here so the admin commands work without the consumer's dependencies loaded.
    from ..config import ConsumerConfig
    from ..connector import ZookeeperConsumerConnector
    from ..consumer.topic_count import Whitelist

    props = consumer_properties(args)
    if args.consumer_config:
        try:
            config = ConsumerConfig.from_properties(args.consumer_config, **props)
        except OSError as exc:
            raise CliError(f"cannot read {args.consumer_config}: {exc.strerror or exc}") from None
    else:
        config = ConsumerConfig(props)
    settings = LoopSettings.of(config)
    sys.stdout.flush()
    status = StatusLine(sys.stderr)
    with ZookeeperConsumerConnector(connector_config(config, settings)) as connector:
        if args.topic is not None:
            streams: List[KafkaStream] = connector.create_message_streams({args.topic: 1})[args.topic]
        else:
            streams = connector.create_message_streams_by_filter(Whitelist(args.whitelist), 1)
        with InterruptLatch() as latch:
            loop = ConsumeLoop(connector, streams[0], sys.stdout.buffer, status, settings, args.max_messages,
                               stop=lambda: latch.is_set)
            loop.run()
            loop.commit_written()
        count = loop.count
    sys.stderr.write(f"Processed a total of {count} messages\n")
    if loop.write_error is not None:
        raise CliError(f"cannot write to stdout: {loop.write_error.strerror or loop.write_error}")
    return EXIT_INTERRUPTED if latch.is_set else EXIT_OK


class ConsumeLoop:
    """Hands messages from ``stream`` to ``out`` and commits exactly what was written.

    Contract: a message counts (``count``, the committed offsets) once every byte of it
    was written; the committed offset of a partition never passes a message whose write
    did not complete. Commits (:meth:`ZookeeperConsumerConnector.commit_offsets`, fenced as
    every commit) are made only from this loop, between messages, where what the stream
    handed out was all written: every ``commit_interval_s`` while running, and once at the
    end (:meth:`commit_written`) of the positions handed out with the message whose write
    failed left out (explicit offsets).

    Stops after ``max_messages``, after ``idle_limit_s`` without a message, once ``stop()``
    (the Ctrl-C latch) is true, when the reader closed the pipe (quietly) and when writing
    fails otherwise (``write_error``). ``stop()`` is checked at every message and tick,
    and while a write waits for a full pipe.
    """

    def __init__(self, connector: Any, stream: "KafkaStream", out: BinaryIO, status: StatusLine,
                 settings: LoopSettings, max_messages: Optional[int], stop: Callable[[], bool]) -> None:
        self._connector = connector
        self._stream = stream
        self._status = status
        self._settings = settings
        self._max = max_messages
        self._stop = stop
        self._sink = sink_for(out, stop)
        # stdout on the same terminal as the status line: erase it before each message.
        self._shared_terminal = status.enabled and terminal_caps(sys.stdout).tty
        self.count = 0
        #: The message handed out whose write did not complete (never committed).
        self.unwritten: Optional["MessageAndMetadata"] = None
        self.write_error: Optional[OSError] = None

    def run(self) -> None:
        from ..errors import ConsumerTimeoutError

        ticker = RateTicker(self._status, lambda: (self.count, 0),
                            lambda counts, elapsed, recent: format_rate("consumed", counts[0], None, elapsed, recent))
        ticker.start()
        iterator = iter(self._stream)
        now = time.monotonic()
        last_message = last_commit = now
        interval, idle_limit = self._settings.commit_interval_s, self._settings.idle_limit_s
        try:
            while not self._stop():
                try:
                    message = next(iterator)
                except ConsumerTimeoutError:
                    now = time.monotonic()
                    if idle_limit is not None and now - last_message >= idle_limit:
                        return
                    if interval is not None and now - last_commit >= interval:
                        last_commit = self._commit_running(now)
                    continue
                except StopIteration:
                    return
                if not self._write(message):
                    self.unwritten = message
                    return
                self.count += 1
                if self._max is not None and self.count >= self._max:
                    return
                now = last_message = time.monotonic()
                if interval is not None and now - last_commit >= interval:
                    last_commit = self._commit_running(now)
        finally:
            ticker.stop()

    def _write(self, message: "MessageAndMetadata") -> bool:
        """Whether all of ``message`` was written; ``False`` also when the reader went away or
        writing failed (``write_error``)."""
        try:
            if self._shared_terminal:
                with self._status.lock:
                    self._status.clear_locked()
                    return self._sink.write_line(message.message)
            return self._sink.write_line(message.message)
        except BrokenPipeError:
            return False  # the reader went away: stop quietly
        except OSError as exc:
            self.write_error = exc
            return False

    def _commit_running(self, now: float) -> float:
        """A periodic commit (everything handed out was written); a failure is logged and the next
        one tries again, as auto-commit does. Returns when it was made."""
        from ..errors import ZkConsumerError

        try:
            self._connector.commit_offsets()
        except ZkConsumerError as exc:
            log.warning("committing offsets failed, will retry in %.1fs: %s", self._settings.commit_interval_s, exc)
        return now

    def commit_written(self) -> None:
        """The final commit: every message written, none that was not.

        The positions handed out (:meth:`ZookeeperConsumerConnector.positions`), with the
        partition of the message whose write failed set back to that message. A position not
        where that message left it (it cannot be, with this loop the only reader) commits
        nothing more of that partition: consumed again, never lost.
        """
        positions = self._connector.positions()
        unwritten = self.unwritten
        if unwritten is not None:
            tp = (unwritten.topic, unwritten.partition)
            if positions.get(tp) == unwritten.offset + 1:
                positions[tp] = unwritten.offset
            elif tp in positions:
                log.warning("%s-%d: position %s, not %d after the message at %d; not committing it",
                            tp[0], tp[1], positions.pop(tp), unwritten.offset + 1, unwritten.offset)
        if positions:
            self._connector.commit_offsets(positions)
