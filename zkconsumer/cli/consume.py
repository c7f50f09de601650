"""``zkconsumer consume``: Kafka's console consumer on :class:`ZookeeperConsumerConnector`.

One stream; each message's value is written raw to stdout followed by a
newline (a null value as ``null``, as Kafka's DefaultMessageFormatter does).
While stderr is a terminal, a status line there shows the messages so far and
the rate (erased before each message when stdout is the same terminal, and at
the end); piped or redirected stderr gets none. Stops after ``--max-messages``, when idle for ``--timeout-ms`` (exit 0), on
Ctrl-C (exit 130) or when stdout is closed (a pipe reader exited); offsets of
everything written are committed before exiting. The count of messages goes
to stderr, as in Kafka's tool.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, BinaryIO, Dict, List, Optional, Tuple

from .common import EXIT_INTERRUPTED, EXIT_OK, CliError, common_options, positive_int
from .progress import RateTicker, StatusLine, format_rate, terminal_caps

if TYPE_CHECKING:  # pragma: no cover
    from ..config import PropertyValue
    from ..consumer.stream import KafkaStream


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register ``consume``."""
    p = commands.add_parser("consume", parents=[common_options()],
                            help="print messages of a topic as a member of a consumer group")
    p.add_argument("--group", required=True)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--topic")
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


def key_value(text: str) -> Tuple[str, str]:
    """argparse type: ``k=v`` → ``("k", "v")``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


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
    out.write(b"null" if value is None else value)
    out.write(b"\n")
    out.flush()


def run_consume(args: argparse.Namespace) -> int:
    # Imported here so the admin commands work without the consumer's dependencies loaded.
    from ..config import ConsumerConfig
    from ..connector import ZookeeperConsumerConnector
    from ..consumer.topic_count import Whitelist
    from ..errors import ConsumerTimeoutError

    props = consumer_properties(args)
    if args.consumer_config:
        try:
            config = ConsumerConfig.from_properties(args.consumer_config, **props)
        except OSError as exc:
            raise CliError(f"cannot read {args.consumer_config}: {exc.strerror or exc}") from None
    else:
        config = ConsumerConfig(props)
    sys.stdout.flush()
    out: BinaryIO = sys.stdout.buffer
    count = 0
    exit_code = EXIT_OK
    status = StatusLine(sys.stderr)
    # stdout on the same terminal: the status line is erased before each message is written under it.
    shared_terminal = status.enabled and terminal_caps(sys.stdout).tty
    with ZookeeperConsumerConnector(config) as connector:
        if args.topic is not None:
            streams: List[KafkaStream] = connector.create_message_streams({args.topic: 1})[args.topic]
        else:
            streams = connector.create_message_streams_by_filter(Whitelist(args.whitelist), 1)
        ticker = RateTicker(status, lambda: (count, 0),
                            lambda counts, elapsed, recent: format_rate("consumed", counts[0], None, elapsed, recent))
        ticker.start()
        try:
            for message in streams[0]:
                if shared_terminal:
                    with status.lock:
                        status.clear_locked()
                        write_message(out, message.message)
                else:
                    write_message(out, message.message)
                count += 1
                if args.max_messages is not None and count >= args.max_messages:
                    break
        except ConsumerTimeoutError:
            pass
        except KeyboardInterrupt:
            exit_code = EXIT_INTERRUPTED
        except BrokenPipeError:
            pass  # the reader went away: stop quietly
        finally:
            ticker.stop()
        try:
            out.flush()
        except BrokenPipeError:
            pass
        connector.commit_offsets()
    sys.stderr.write(f"Processed a total of {count} messages\n")
    return exit_code
