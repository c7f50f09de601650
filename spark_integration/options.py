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

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from zkconsumer import ConfigurationError, ConsumerConfig, Whitelist

__all__ = [
    "PropsLike", "plain_props", "member_config", "MemberMetrics", "SourceOptions", "SOURCE_OPTIONS",
]

#: Consumer properties as users give them: a mapping of Kafka's dotted names, or a config.
PropsLike = Union[Mapping[str, Any], ConsumerConfig]

#: Options of the ``zkconsumer`` data source that are not consumer properties, lowercased
#: (Spark's option names are case-insensitive: ``failOnDataLoss`` arrives as ``failondataloss``).
SOURCE_OPTIONS = ("topics", "topic.whitelist", "max.messages.per.trigger", "max.messages.per.partition",
                  "failondataloss")


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


def _positive_int(options: Mapping[str, str], name: str) -> Optional[int]:
    raw = options.get(name)
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
    ``max_messages_per_trigger`` bounds a streaming micro-batch (as Spark's
    ``maxOffsetsPerTrigger``); ``max_messages_per_partition`` bounds what a
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
        return cls(
            props=props,
            topics=topics,
            whitelist=raw_whitelist or None,
            max_messages_per_trigger=_positive_int(given, "max.messages.per.trigger"),
            max_messages_per_partition=_positive_int(given, "max.messages.per.partition"),
            fail_on_data_loss=_boolean(given, "failondataloss", "failOnDataLoss", True),
        )

    @property
    def config(self) -> ConsumerConfig:
        return ConsumerConfig(self.props)
