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

import json
import re
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from zkconsumer import ConfigurationError, ConsumerConfig, Whitelist

__all__ = [
    "PropsLike", "plain_props", "member_config", "MemberMetrics", "SourceOptions", "SOURCE_OPTIONS",
    "StartingOffsets", "parse_starting_offsets", "parse_duration_ms", "EARLIEST", "LATEST",
    "DEFAULT_MAX_TRIGGER_DELAY_MS",
]

#: Consumer properties as users give them: a mapping of Kafka's dotted names, or a config.
PropsLike = Union[Mapping[str, Any], ConsumerConfig]

#: Options of the ``zkconsumer`` data source that are not consumer properties, lowercased
#: (Spark's option names are case-insensitive: ``failOnDataLoss`` arrives as ``failondataloss``).
SOURCE_OPTIONS = ("topics", "topic.whitelist", "max.messages.per.trigger", "max.messages.per.partition",
                  "failondataloss", "startingoffsets", "maxoffsetspertrigger", "minoffsetspertrigger",
                  "maxtriggerdelay", "includeheaders")

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


def parse_starting_offsets(raw: Any) -> Optional[StartingOffsets]:
    """``earliest``, ``latest`` (any case) or Spark's JSON ``{"topic": {"0": 23, "1": -2}}``; ``None`` if unset.

    >>> parse_starting_offsets('{"t": {"0": 23, "1": -2}}').offsets
    {('t', 0): 23, ('t', 1): -2}
    """
    if raw is None or str(raw).strip() == "":
        return None
    text = str(raw).strip()
    if text.lower() in ("earliest", "latest"):
        return StartingOffsets(text.lower())
    bad = (f"invalid value {text!r}: expected earliest, latest, or JSON such as "
           '{"topic":{"0":23,"1":-2}} (-2: the log start, -1: the log end)')
    try:
        parsed = json.loads(text)
    except ValueError:
        raise ConfigurationError("startingOffsets", bad) from None
    if not isinstance(parsed, dict) or not parsed:
        raise ConfigurationError("startingOffsets", bad)
    offsets: Dict[Tuple[str, int], int] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict) or not partitions:
            raise ConfigurationError("startingOffsets", f"{bad}; topic {topic!r} has no partition object")
        for partition, offset in partitions.items():
            if not str(partition).isdigit():
                raise ConfigurationError("startingOffsets", f"{bad}; {partition!r} of {topic!r} is not a partition")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise ConfigurationError("startingOffsets", f"{bad}; offset {offset!r} of {topic}/{partition} is "
                                                            "not an offset, -1 or -2")
            offsets[(str(topic), int(partition))] = offset
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


@dataclass(frozen=True)
class SourceOptions:
    """The ``zkconsumer`` data source's options, validated.

    ``props`` are the consumer properties (every option not in
    :data:`SOURCE_OPTIONS`), validated by :class:`~zkconsumer.ConsumerConfig`.
    Exactly one of ``topics`` (from the comma list ``topics``) and ``whitelist``
    (``topic.whitelist``, Kafka's whitelist regex) is set.
    ``max_messages_per_trigger`` bounds a streaming micro-batch (option
    ``maxOffsetsPerTrigger``, or its older alias ``max.messages.per.trigger``);
    ``min_messages_per_trigger`` and ``max_trigger_delay_ms`` (options
    ``minOffsetsPerTrigger``, ``maxTriggerDelay``) delay a micro-batch until
    that many messages are there or that long passed since the last one;
    ``starting_offsets`` (option ``startingOffsets``) is where a query without
    a checkpoint starts (``None``: the group's committed offsets);
    ``max_messages_per_partition`` bounds what a batch read takes from each
    partition. ``fail_on_data_loss`` (option
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

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "SourceOptions":
        """Parse Spark's (case-insensitive, string-valued) options; ConfigurationError naming the bad one."""
        given = {str(k).lower(): v for k, v in options.items()}
        raw_topics = str(given.get("topics") or "").strip()
        raw_whitelist = str(given.get("topic.whitelist") or "").strip()
        if bool(raw_topics) == bool(raw_whitelist):
            raise ConfigurationError("topics", "give exactly one of the options topics (a comma list) and topic.whitelist")
        topics: Tuple[str, ...] = ()
        if raw_topics:
            topics = tuple(dict.fromkeys(t.strip() for t in raw_topics.split(",") if t.strip()))
            if not topics:
                raise ConfigurationError("topics", f"invalid value {raw_topics!r}: no topic names")
        else:
            Whitelist(raw_whitelist)  # raises SubscriptionError (a ConfigurationError) if invalid
        props = plain_props({k: v for k, v in given.items() if k not in SOURCE_OPTIONS})
        if _boolean(given, "includeheaders", "includeHeaders", False):
            raise ConfigurationError("includeHeaders", "does not apply: Kafka 0.8/0.9 messages have no headers "
                                                       "(leave it unset or false)")
        max_per_trigger = _positive_int(given, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
        alias = _positive_int(given, "max.messages.per.trigger")
        if max_per_trigger is not None and alias is not None and alias != max_per_trigger:
            raise ConfigurationError("maxOffsetsPerTrigger", f"is {max_per_trigger} but its alias "
                                                             f"max.messages.per.trigger is {alias}: give one")
        min_per_trigger = _positive_int(given, "minoffsetspertrigger", "minOffsetsPerTrigger")
        raw_delay = given.get("maxtriggerdelay")
        delay_ms = DEFAULT_MAX_TRIGGER_DELAY_MS
        if raw_delay is not None and str(raw_delay).strip():
            delay_ms = parse_duration_ms("maxTriggerDelay", raw_delay)
        if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
            raise ConfigurationError("minOffsetsPerTrigger", f"is {min_per_trigger}, above maxOffsetsPerTrigger "
                                                             f"{max_per_trigger}")
        starting = parse_starting_offsets(given.get("startingoffsets"))
        if starting is not None and starting.offsets is not None and topics:
            unknown = sorted({t for t, _ in starting.offsets} - set(topics))
            if unknown:
                raise ConfigurationError("startingOffsets", f"names topics not in the option topics: {unknown}")
        return cls(
            props=props,
            topics=topics,
            whitelist=raw_whitelist or None,
            max_messages_per_trigger=max_per_trigger if max_per_trigger is not None else alias,
            max_messages_per_partition=_positive_int(given, "max.messages.per.partition"),
            fail_on_data_loss=_boolean(given, "failondataloss", "failOnDataLoss", True),
            starting_offsets=starting,
            min_messages_per_trigger=min_per_trigger,
            max_trigger_delay_ms=delay_ms,
        )

    @property
    def config(self) -> ConsumerConfig:
        return ConsumerConfig(self.props)
