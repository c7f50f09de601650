"""Validating what users pass in: consumer properties and data source options (pure).

Everything here runs on the driver before any Spark job starts, so a typo fails
fast with :class:`~zkconsumer.errors.ConfigurationError` naming the property,
instead of inside a task on an executor.

Properties travel to executors as a plain ``{name: str}`` dict
(:func:`plain_props`) and are parsed again there into a
:class:`~zkconsumer.ConsumerConfig`: a ``ConsumerConfig`` never needs to be
pickled.
"""

from __future__ import annotations

import difflib
import logging
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple, Union

from zkconsumer import ConfigurationError, ConsumerConfig, Whitelist
from zkconsumer.structs import TopicPartition

from .spark_json import OFFSETS_EXAMPLE, TIMESTAMPS_EXAMPLE, parse_assign, parse_partition_numbers

__all__ = [
    "PropsLike", "plain_props", "member_config", "MemberMetrics", "SourceOptions", "SOURCE_OPTIONS",
    "StartingOffsets", "parse_starting_offsets", "parse_duration_ms", "EARLIEST", "LATEST",
    "DEFAULT_MAX_TRIGGER_DELAY_MS", "OPTION_NAMES", "UNSUPPORTED_OPTIONS", "check_option_names",
]

#: Consumer properties as users give them: a mapping of Kafka's dotted names, or a config.
PropsLike = Union[Mapping[str, Any], ConsumerConfig]

#: The ``zkconsumer`` data source's own options (not consumer properties): lowercased (Spark's option
#: names are case-insensitive: ``failOnDataLoss`` arrives as ``failondataloss``) -> the documented spelling.
OPTION_NAMES = {name.lower(): name for name in (
    "subscribe", "subscribePattern", "assign", "topics", "topic.whitelist",
    "startingOffsets", "startingOffsetsByTimestamp", "startingTimestamp", "endingOffsets",
    "minPartitions", "maxRecordsPerPartition", "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
    "failOnDataLoss", "includeHeaders", "max.messages.per.trigger", "max.messages.per.partition",
)}
SOURCE_OPTIONS = tuple(OPTION_NAMES)

#: Options of Spark's Kafka source this source does not take, and what to do instead (lowercased).
UNSUPPORTED_OPTIONS = {
    "kafka.bootstrap.servers": "this source finds the brokers through zookeeper.connect (give that instead)",
    "kafka.group.id": "give group.id: the group whose offsets in ZooKeeper this source reads and writes",
    "groupidprefix": "this source reads as the group named by group.id",
    "endingoffsetsbytimestamp": "is not supported; give endingOffsets (batch queries)",
    "endingtimestamp": "is not supported; give endingOffsets (batch queries)",
    "startingoffsetsbytimestampstrategy": "is not supported: a timestamp after the last message starts at the "
                                          "log end (what Spark's strategy 'latest' does)",
    "kafkaconsumer.polltimeoutms": "is not used: fetches wait per the consumer property fetch.wait.max.ms",
    "fetchoffset.numretries": "is not used: offset lookups retry per refresh.leader.backoff.ms",
    "fetchoffset.retryintervalms": "is not used: offset lookups retry per refresh.leader.backoff.ms",
}

#: The subscription options, in the order an error names them: Spark's names, then this source's aliases.
STRATEGIES = ("subscribe", "subscribepattern", "assign", "topics", "topic.whitelist")

#: In a ``startingOffsets`` JSON, the partition's log start (as in Spark's Kafka source).
EARLIEST = -2
#: In a ``startingOffsets`` JSON, the partition's log end.
LATEST = -1
#: ``maxTriggerDelay``'s default, as in Spark's Kafka source (15 minutes).
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000

_DURATION = re.compile(r"^\s*(\d+)\s*(us|ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_MS = {"us": 0.001, "ms": 1, None: 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                "d": 86_400_000}


def parse_duration_ms(name: str, raw: str) -> int:
    """A Spark time string (``"15m"``, ``"10s"``, ``"500ms"``, ``"1h"``; no unit: milliseconds) in ms.

    >>> parse_duration_ms("maxTriggerDelay", "15m"), parse_duration_ms("maxTriggerDelay", "250")
    (900000, 250)
    """
    match = _DURATION.match(str(raw))
    if not match:
        raise ConfigurationError(name, f"invalid value {raw!r}: expected a duration such as 30s, 500ms, 15m or 1h")
    unit = match.group(2).lower() if match.group(2) else None
    return int(int(match.group(1)) * _DURATION_MS[unit])


@dataclass(frozen=True)
class StartingOffsets:
    """The option ``startingOffsets``: where a query without a checkpoint starts.

    ``kind`` is ``"earliest"``, ``"latest"`` or ``"specific"``; for
    ``"specific"``, ``offsets`` maps every ``(topic, partition)`` to an offset,
    :data:`EARLIEST` (-2) or :data:`LATEST` (-1).
    """

    kind: str
    offsets: Optional[Dict[Tuple[str, int], int]] = None


def parse_starting_offsets(raw: Any, option: str = "startingOffsets") -> Optional[StartingOffsets]:
    """``earliest``, ``latest`` (any case) or Spark's JSON ``{"topic": {"0": 23, "1": -2}}``; ``None`` if unset.

    ``option`` names the option in errors (``endingOffsets`` takes the same values).

    >>> parse_starting_offsets('{"t": {"0": 23, "1": -2}}').offsets
    {('t', 0): 23, ('t', 1): -2}
    """
    if raw is None or str(raw).strip() == "":
        return None
    text = str(raw).strip()
    if text.lower() in ("earliest", "latest"):
        return StartingOffsets(text.lower())
    if not text.startswith("{"):
        raise ConfigurationError(option, f"invalid value {text!r}: expected earliest, latest, or JSON such as "
                                         '{"topic":{"0":23,"1":-2}} (-2: the log start, -1: the log end)')
    offsets = parse_partition_numbers(option, text, OFFSETS_EXAMPLE, EARLIEST,
                                      "an offset, -1 (the log end) or -2 (the log start)")
    return StartingOffsets("specific", offsets)


def plain_props(props: PropsLike) -> Dict[str, str]:
    """Validate ``props`` (raising ConfigurationError) and return them as ``{name: str}``.

    Only the properties given explicitly are kept (defaults are re-derived on
    the executor), with booleans spelled ``true``/``false`` as Kafka does.
    """
    config = props if isinstance(props, ConsumerConfig) else ConsumerConfig(props)
    return {name: _text(value) for name, value in config.explicit_properties().items()}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def member_config(props: PropsLike, max_messages: Optional[int]) -> ConsumerConfig:
    """The config of a ``foreach_stream`` member: manual commits, and a stream that ends.

    ``auto.commit.enable`` must be unset or false (it is set to false): offsets
    are committed only after the handler returns. The stream must be able to
    end: ``consumer.timeout.ms >= 0`` or ``max_messages`` given.
    """
    config = props if isinstance(props, ConsumerConfig) else ConsumerConfig(props)
    if "auto.commit.enable" in config.explicit_properties() and config.auto_commit_enable:
        raise ConfigurationError(
            "auto.commit.enable",
            "must be false for foreach_stream: offsets are committed only after the handler returns",
        )
    if config.consumer_timeout_ms < 0 and max_messages is None:
        raise ConfigurationError(
            "consumer.timeout.ms",
            f"is {config.consumer_timeout_ms} (block forever), so a stream would never end and never commit; "
            "set consumer.timeout.ms >= 0 (the stream ends after that long without a message) or pass max_messages",
        )
    if max_messages is not None and max_messages < 1:
        raise ValueError(f"max_messages must be >= 1, not {max_messages}")
    return config.with_overrides(**{"auto.commit.enable": False})


@dataclass(frozen=True)
class MemberMetrics:
    """How the members of a ``foreach_stream`` job expose their Prometheus metrics (both optional).

    ``port``: member ``i`` (its Spark partition index) serves on ``port + i``;
    ``0`` gives every member a free port of its own (reported in its
    :class:`~spark_integration.streams.StreamResult` and logged).
    ``pushgateway``: ``host:port`` (or a URL) of a Prometheus Pushgateway
    each member pushes to every 10 s and when it leaves.

    >>> MemberMetrics(port=9400).port_for(3), MemberMetrics(port=0).port_for(3), MemberMetrics().port_for(3)
    (9403, 0, None)
    """

    port: Optional[int] = None
    pushgateway: Optional[str] = None

    @property
    def enabled(self) -> bool:
        return self.port is not None or bool(self.pushgateway)

    def validate(self, members: int) -> "MemberMetrics":
        """Raise ConfigurationError unless ``members`` ports from :attr:`port` are valid TCP ports; returns self."""
        if self.port is not None:
            if isinstance(self.port, bool) or not isinstance(self.port, int) or self.port < 0:
                raise ConfigurationError("metrics_port", f"must be a port number >= 0 (0: any free port), "
                                                         f"not {self.port!r}")
            if self.port and self.port + max(0, members - 1) > 65535:
                raise ConfigurationError("metrics_port", f"{self.port} + {members - 1} (one port per member) is "
                                                         "above 65535")
        if self.pushgateway is not None and (not isinstance(self.pushgateway, str) or not self.pushgateway.strip()):
            raise ConfigurationError("metrics_pushgateway", f"must be host:port or a URL, not {self.pushgateway!r}")
        return self

    def port_for(self, index: int) -> Optional[int]:
        """The port member ``index`` serves on (``None``: it serves none)."""
        if self.port is None:
            return None
        return self.port + index if self.port else 0


def _positive_int(options: Mapping[str, str], key: str, name: Optional[str] = None) -> Optional[int]:
    """The lowercased option ``key`` as an integer >= 1 (``None`` if unset); ConfigurationError naming ``name``."""
    name = name or key
    raw = options.get(key)
    if raw is None or str(raw).strip() == "":
        return None
    text = str(raw).strip()
    if not text.isdigit() or int(text) < 1:
        raise ConfigurationError(name, f"invalid value {raw!r}: expected a positive integer")
    return int(text)


def _boolean(options: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    """``true``/``false`` (any case) of the lowercased option ``key``; ConfigurationError naming ``name``."""
    raw = options.get(key)
    if raw is None or str(raw).strip() == "":
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ConfigurationError(name, f"invalid value {raw!r}: expected true or false")
    return text == "true"


def check_option_names(names: Iterable[str]) -> None:
    """ConfigurationError for the first name that is neither an option of this source nor a consumer property.

    The error names the option as given and the closest known one (or, for an
    option of Spark's Kafka source this source does not take, what to use instead).
    """
    for name in names:
        key = str(name).lower()
        if key in OPTION_NAMES or key in ConsumerConfig.PROPERTIES:
            continue
        if key in UNSUPPORTED_OPTIONS:
            raise ConfigurationError(name, f"option of Spark's Kafka source that the zkconsumer source does not take: "
                                           f"{UNSUPPORTED_OPTIONS[key]}")
        if key.startswith("kafka."):
            bare = key[len("kafka."):]
            hint = f"; did you mean {bare}?" if bare in ConsumerConfig.PROPERTIES else ""
            raise ConfigurationError(name, "Spark's kafka.-prefixed Kafka client properties do not apply: give this "
                                           f"consumer's (Kafka 0.8) properties without the prefix{hint}")
        known = {**{k: v for k, v in OPTION_NAMES.items()}, **{p: p for p in ConsumerConfig.PROPERTIES}}
        close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
        hint = f"; did you mean {known[close[0]]}?" if close else (
            " (the options are listed on the documentation's *Spark* page; any Kafka 0.8 consumer property is accepted too)")
        raise ConfigurationError(name, f"unknown option {name!r} of the zkconsumer source{hint}")


def _subscription(given: Mapping[str, Any]) -> Tuple[Tuple[str, ...], Optional[str], Tuple[TopicPartition, ...]]:
    """``(topics, whitelist, assign)`` from exactly one of ``subscribe``/``topics``,
    ``subscribePattern``/``topic.whitelist`` and ``assign``, with Spark's errors."""
    present = [key for key in STRATEGIES if str(given.get(key) or "").strip() or
               (key in given and key == "assign")]
    listed = "subscribe, subscribePattern, assign (or this source's older names topics, topic.whitelist)"
    if not present:
        raise ConfigurationError("subscribe", f"One of the following options must be specified for Kafka source: "
                                              f"{listed}")
    if len(present) > 1:
        raise ConfigurationError(OPTION_NAMES[present[0]], "Only one of the following options can be specified for "
                                                           f"Kafka source: {listed}; given: "
                                                           + ", ".join(OPTION_NAMES[k] for k in present))
    key = present[0]
    raw = str(given[key]).strip()
    if key in ("subscribe", "topics"):
        topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
        if not topics:
            raise ConfigurationError(OPTION_NAMES[key], f"invalid value {raw!r}: no topic names (No topics to "
                                                        "subscribe to)")
        return topics, None, ()
    if key == "assign":
        return (), None, parse_assign(raw)
    Whitelist(raw)  # raises SubscriptionError (a ConfigurationError) if invalid
    return (), raw, ()


def _timestamp(given: Mapping[str, Any], key: str) -> Optional[int]:
    raw = given.get(key)
    if raw is None or str(raw).strip() == "":
        return None
    text = str(raw).strip()
    if not text.isdigit():
        raise ConfigurationError(OPTION_NAMES[key], f"invalid value {raw!r}: expected a timestamp in milliseconds "
                                                    "since the epoch")
    return int(text)


def _trigger_limits(given: Mapping[str, Any]) -> Tuple[Optional[int], Optional[int], int]:
    """``(maxOffsetsPerTrigger or its alias, minOffsetsPerTrigger, maxTriggerDelay in ms)``, checked together."""
    max_per_trigger = _positive_int(given, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    alias = _positive_int(given, "max.messages.per.trigger")
    if max_per_trigger is not None and alias is not None and alias != max_per_trigger:
        raise ConfigurationError("maxOffsetsPerTrigger", f"is {max_per_trigger} but its alias "
                                                         f"max.messages.per.trigger is {alias}: give one")
    if max_per_trigger is None:
        max_per_trigger = alias
    min_per_trigger = _positive_int(given, "minoffsetspertrigger", "minOffsetsPerTrigger")
    raw_delay = given.get("maxtriggerdelay")
    delay_ms = DEFAULT_MAX_TRIGGER_DELAY_MS
    if raw_delay is not None and str(raw_delay).strip():
        delay_ms = parse_duration_ms("maxTriggerDelay", raw_delay)
    if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
        raise ConfigurationError("minOffsetsPerTrigger", f"is {min_per_trigger}, above maxOffsetsPerTrigger "
                                                         f"{max_per_trigger}")
    return max_per_trigger, min_per_trigger, delay_ms


def _check_topics(option: str, named: Iterable[TopicPartition], topics: Tuple[str, ...],
                  assign: Tuple[TopicPartition, ...]) -> None:
    """ConfigurationError if the JSON of ``option`` names a topic not subscribed (or a partition not assigned)."""
    named = set(named)
    if topics:
        unknown = sorted({t for t, _ in named} - set(topics))
        if unknown:
            raise ConfigurationError(option, f"names topics not in the option subscribe: {unknown}")
    if assign:
        extra = sorted(named - set(assign))
        if extra:
            raise ConfigurationError(option, "names partitions not in the option assign: "
                                             + ", ".join(f"{t}/{p}" for t, p in extra))


@dataclass(frozen=True)
class SourceOptions:
    """The ``zkconsumer`` data source's options, validated (the table is on the documentation's *Spark* page).

    ``props`` are the consumer properties (every option not in
    :data:`SOURCE_OPTIONS`), validated by :class:`~zkconsumer.ConsumerConfig`.
    Exactly one of ``topics`` (option ``subscribe``, alias ``topics``: a comma
    list), ``whitelist`` (``subscribePattern``, alias ``topic.whitelist``: a Java
    regex) and ``assign`` (``assign``: fixed partitions) is set.
    ``max_messages_per_trigger`` bounds a streaming micro-batch (option
    ``maxOffsetsPerTrigger``, or its older alias ``max.messages.per.trigger``);
    ``min_messages_per_trigger`` and ``max_trigger_delay_ms`` (options
    ``minOffsetsPerTrigger``, ``maxTriggerDelay``) delay a micro-batch until
    that many messages are there or that long passed since the last one;
    ``starting_offsets`` (option ``startingOffsets``),
    ``starting_timestamps`` (``startingOffsetsByTimestamp``) and
    ``starting_timestamp`` (``startingTimestamp``, every partition) say where a
    query without a checkpoint, or a batch read, starts (``None``: the group's
    committed offsets; the timestamps take precedence, as in Spark);
    ``ending_offsets`` (``endingOffsets``, batch only) where a batch read ends;
    ``min_partitions`` and ``max_records_per_partition`` (``minPartitions``,
    ``maxRecordsPerPartition``) split ranges across Spark tasks;
    ``max_messages_per_partition`` (``max.messages.per.partition``) cuts what a
    batch read takes from each partition. ``fail_on_data_loss`` (option
    ``failOnDataLoss``, default true, as in Spark's Kafka source): whether
    messages that can no longer be read (deleted by retention, a topic deleted
    and re-created, a log truncated by an unclean leader election, a partition
    gone) fail the query, or are skipped with a warning
    (:mod:`~spark_integration.data_loss`).
    """

    props: Dict[str, str]
    topics: Tuple[str, ...]
    whitelist: Optional[str]
    max_messages_per_trigger: Optional[int] = None
    max_messages_per_partition: Optional[int] = None
    fail_on_data_loss: bool = True
    starting_offsets: Optional[StartingOffsets] = None
    min_messages_per_trigger: Optional[int] = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    assign: Tuple[TopicPartition, ...] = ()
    starting_timestamps: Optional[Dict[TopicPartition, int]] = None
    starting_timestamp: Optional[int] = None
    ending_offsets: Optional[StartingOffsets] = None
    min_partitions: Optional[int] = None
    max_records_per_partition: Optional[int] = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "SourceOptions":
        """Parse Spark's (case-insensitive, string-valued) options; ConfigurationError naming the bad one."""
        check_option_names(options)
        given = {str(k).lower(): v for k, v in options.items()}
        topics, whitelist, assign = _subscription(given)
        props = plain_props({k: v for k, v in given.items() if k not in SOURCE_OPTIONS})
        if _boolean(given, "includeheaders", "includeHeaders", False):
            raise ConfigurationError("includeHeaders", "does not apply: Kafka 0.8/0.9 messages have no headers "
                                                       "(leave it unset or false)")
        max_per_trigger, min_per_trigger, delay_ms = _trigger_limits(given)
        starting = parse_starting_offsets(given.get("startingoffsets"))
        ending = parse_starting_offsets(given.get("endingoffsets"), "endingOffsets")
        timestamps = None
        raw_timestamps = given.get("startingoffsetsbytimestamp")
        if raw_timestamps is not None and str(raw_timestamps).strip():
            timestamps = parse_partition_numbers("startingOffsetsByTimestamp", str(raw_timestamps),
                                                 TIMESTAMPS_EXAMPLE, 0, "a timestamp in ms since the epoch")
        for option, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
            if spec is not None and spec.offsets is not None:
                _check_topics(option, spec.offsets, topics, assign)
        if timestamps is not None:
            _check_topics("startingOffsetsByTimestamp", timestamps, topics, assign)
        return cls(
            props=props,
            topics=topics,
            whitelist=whitelist,
            max_messages_per_trigger=max_per_trigger,
            max_messages_per_partition=_positive_int(given, "max.messages.per.partition"),
            fail_on_data_loss=_boolean(given, "failondataloss", "failOnDataLoss", True),
            starting_offsets=starting,
            min_messages_per_trigger=min_per_trigger,
            max_trigger_delay_ms=delay_ms,
            assign=assign,
            starting_timestamps=timestamps,
            starting_timestamp=_timestamp(given, "startingtimestamp"),
            ending_offsets=ending,
            min_partitions=_positive_int(given, "minpartitions", "minPartitions"),
            max_records_per_partition=_positive_int(given, "maxrecordsperpartition", "maxRecordsPerPartition"),
        )

    @property
    def config(self) -> ConsumerConfig:
        return ConsumerConfig(self.props)

    @property
    def by_timestamp(self) -> bool:
        """Whether the start is looked up by time (``startingTimestamp`` or ``startingOffsetsByTimestamp``)."""
        return self.starting_timestamp is not None or self.starting_timestamps is not None

    def check_stream(self) -> "SourceOptions":
        """ConfigurationError for what a streaming query cannot take (Spark's messages); returns self."""
        if self.ending_offsets is not None:
            raise ConfigurationError("endingOffsets", "ending offset not valid in streaming queries")
        return self

    def check_batch(self, logger: Optional[logging.Logger] = None) -> "SourceOptions":
        """ConfigurationError for what a batch query cannot take (Spark's messages); returns self.

        ``maxOffsetsPerTrigger`` and ``minOffsetsPerTrigger`` are ignored with a warning, as in Spark.
        """
        start, end = self.starting_offsets, self.ending_offsets
        if start is not None and not self.by_timestamp:
            if start.kind == "latest":
                raise ConfigurationError("startingOffsets", "starting offset can't be latest for batch queries "
                                                            "on Kafka")
            for (topic, partition), offset in sorted((start.offsets or {}).items()):
                if offset == LATEST:
                    raise ConfigurationError("startingOffsets", f"startingOffsets for {topic}-{partition} can't "
                                                                "be latest for batch queries on Kafka")
        if end is not None:
            if end.kind == "earliest":
                raise ConfigurationError("endingOffsets", "ending offset can't be earliest for batch queries on "
                                                          "Kafka")
            for (topic, partition), offset in sorted((end.offsets or {}).items()):
                if offset == EARLIEST:
                    raise ConfigurationError("endingOffsets", f"ending offset for {topic}-{partition} can't be "
                                                              "earliest for batch queries on Kafka")
        if logger is not None:
            for value, name in ((self.max_messages_per_trigger, "maxOffsetsPerTrigger"),
                                (self.min_messages_per_trigger, "minOffsetsPerTrigger")):
                if value is not None:
                    logger.warning("%s option ignored in batch queries", name)
        return self
