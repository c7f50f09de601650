"""Consumer configuration: every Kafka 0.8.2.2 consumer property, declared once.

:data:`PROPERTIES` is the one table of accepted properties (Kafka's dotted names,
types, defaults and a line of documentation each). Kafka's own properties come
first, then zkconsumer's extensions; a feature that needs a new property adds one
:class:`Property` row to ``_TABLE`` and nothing else.

:class:`ConsumerConfig` parses values once (strings from ``.properties`` files or
Spark options, or Python ints/bools), validates them once, and is immutable
afterwards. Every property is an attribute with dots turned into underscores::

    config = ConsumerConfig({"zookeeper.connect": "zk:2181/kafka", "group.id": "g1"})
    config.group_id, config.client_id, config.rebalance_backoff_ms   # 'g1', 'g1', 2000
    config.get("auto.offset.reset")                                  # 'largest'
    config2 = config.with_overrides(**{"group.id": "g2"})            # client.id follows: 'g2'

Validation (all errors are :class:`~zkconsumer.errors.ConfigurationError` naming
the property):

* unknown names are rejected (Kafka only logs a warning), with a suggestion when a
  known name is close ("did you mean group.id?");
* values must parse, and Kafka's own properties parse exactly as Kafka's consumer
  parses them, so that a properties file shared by zkconsumer and Kafka members
  means the same to both or is refused by zkconsumer (see "Kafka's spelling" below);
  zkconsumer's extensions are lenient (trimmed, enums and booleans in any case);
* ranges: sizes, counts and timeouts must be positive, backoffs non-negative;
  ``consumer.timeout.ms`` may be any integer (negative blocks forever, as in Kafka);
* ``group.id`` and ``client.id`` match ``[a-zA-Z0-9._-]+``;
* combinations: ``fetch.wait.max.ms <= socket.timeout.ms`` (Kafka's own rule),
  ``zookeeper.acl.enable`` needs ``zookeeper.auth``, ``ssl.keyfile`` needs
  ``ssl.certfile``, ``group.membership=kafka`` needs ``offsets.storage=kafka``,
  and then ``heartbeat.interval.ms < session.timeout.ms``.

Derived defaults, as in Kafka: ``client.id`` = ``group.id``;
``rebalance.backoff.ms`` = ``zookeeper.sync.time.ms``;
``zookeeper.connection.timeout.ms`` = ``zookeeper.session.timeout.ms``;
``dual.commit.enabled`` = (``offsets.storage`` == ``kafka``);
``session.timeout.ms`` = ``zookeeper.session.timeout.ms`` and
``heartbeat.interval.ms`` = ``session.timeout.ms`` / 3 (``group.membership=kafka``:
a member is declared dead as fast as its ZooKeeper session would expire). A
derived default follows its source, also through :meth:`ConsumerConfig.with_overrides`.

Kafka's spelling. Kafka 0.8.2.2's ``VerifiableProperties`` hands the consumer the
value exactly as ``java.util.Properties`` read it (0.9.0.1 trims it first), and:

* booleans (``auto.commit.enable``, ``dual.commit.enabled``,
  ``exclude.internal.topics``) must be exactly ``true`` or ``false``: a
  ``require`` runs before Scala's (case-insensitive) ``toBoolean``, so ``True``,
  ``TRUE`` and ``"true "`` are refused;
* integers go through ``Integer.parseInt``: an optional sign and ASCII digits, no
  whitespace (``+5`` is 5, ``" 5"`` is refused);
* ``auto.offset.reset`` must be exactly ``smallest`` or ``largest``
  (``InvalidConfigException`` otherwise);
* ``offsets.storage`` is lower-cased (Java ``toLowerCase``), then must be
  ``zookeeper`` or ``kafka``: ``Kafka`` is accepted, ``"kafka "`` is not;
* ``partition.assignment.strategy``: 0.9.0.1 refuses anything but ``range`` and
  ``roundrobin``; 0.8.2.2 validates nothing and assigns by Range for every value
  but exactly ``roundrobin`` (so ``RoundRobin`` or ``"roundrobin "`` silently
  mean Range there). zkconsumer accepts exactly ``range`` and ``roundrobin``,
  the only values both versions read alike.

Values given as Python ``bool``/``int`` need no spelling. Surrounding whitespace
of a value that Kafka would read differently is reported as such in the error.

The attributes' types for mypy: ``config_attributes.py``, written by ``python -m zkconsumer.config_types --write``.

May import: errors, properties_file, config_checks, config_attributes.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, List, Mapping, Optional, Tuple, Union

from .config_checks import check_combinations, unknown_property
from .errors import ConfigurationError
from .properties_file import parse_properties_with_lines

if TYPE_CHECKING:  # declarations only: at run time __getattr__ answers (and a stale file cannot break an import)
    from .config_attributes import PropertyAttributes
else:
    PropertyAttributes = object

__all__ = ["PROPERTIES", "ConsumerConfig", "Property", "PropertyValue"]

#: What a property value may be given as.
PropertyValue = Union[str, int, bool, float, None]

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LEGAL_ID = re.compile(r"[a-zA-Z0-9._-]+")
_INT_TEXT = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True)
class Property:
    """One consumer property.

    ``type`` is ``"str"``, ``"int"``, ``"bool"`` or ``"enum"`` (a lowercase or,
    for ``security.protocol``, uppercase string from ``choices``). The default is
    ``default``, unless ``derived_from`` names another property whose value is the
    default, or ``default_fn`` computes it from the other values.

    ``kafka`` properties (Kafka's own) parse strictly, as Kafka's consumer does
    (see the module docstring); ``lower_cased`` marks a Kafka enum that Kafka
    lower-cases before validating (``offsets.storage``). zkconsumer's extensions
    (``kafka=False``) are trimmed, and their enums and booleans read in any case.
    """

    name: str
    type: str
    default: Any
    doc: str
    required: bool = False
    choices: Tuple[str, ...] = ()
    minimum: Optional[int] = None
    derived_from: Optional[str] = None
    default_fn: Optional[Callable[[Mapping[str, Any]], Any]] = field(default=None, compare=False)
    default_doc: Optional[str] = None
    legal_id: bool = False
    secret: bool = False
    kafka: bool = True
    lower_cased: bool = False

    @property
    def attribute(self) -> str:
        """The attribute name on :class:`ConsumerConfig`: dots become underscores."""
        return self.name.replace(".", "_")

    @property
    def default_text(self) -> str:
        """The default as documentation shows it (``"30000"``, ``"= group.id"``, ``"(required)"``)."""
        if self.required:
            return "(required)"
        if self.default_doc is not None:
            return self.default_doc
        if self.derived_from is not None:
            return f"= {self.derived_from}"
        if self.default is None:
            return "(none)"
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        return str(self.default)


def _dual_commit_default(values: Mapping[str, Any]) -> bool:
    return bool(values["offsets.storage"] == "kafka")


def _heartbeat_default(values: Mapping[str, Any]) -> int:
    return max(1, int(values["session.timeout.ms"]) // 3)


# The one declarative table. Kafka 0.8.2.2's ConsumerConfig/ZKConfig properties, then
# zkconsumer's extensions (kafka=False).
_TABLE: Tuple[Property, ...] = (
    Property("zookeeper.connect", "str", None, "ZooKeeper connect string host:port[,host:port...][/chroot]", required=True),
    Property("group.id", "str", None, "the consumer group this member belongs to", required=True, legal_id=True),
    Property("consumer.id", "str", None, "fixed consumer id (the member is <group.id>_<consumer.id>); generated if unset"),
    Property("client.id", "str", None, "client id sent to brokers", derived_from="group.id", legal_id=True),
    Property("socket.timeout.ms", "int", 30000, "socket timeout for broker requests; at least fetch.wait.max.ms", minimum=1),
    Property("socket.receive.buffer.bytes", "int", 65536, "socket receive buffer for broker connections", minimum=1),
    Property("fetch.message.max.bytes", "int", 1048576, "bytes per partition per fetch request; bounds the largest message",
             minimum=1),
    Property("num.consumer.fetchers", "int", 1, "fetcher threads per broker", minimum=1),
    Property("auto.commit.enable", "bool", True, "commit consumed offsets periodically"),
    Property("auto.commit.interval.ms", "int", 60000, "how often offsets are committed when auto.commit.enable", minimum=1),
    Property("queued.max.message.chunks", "int", 2, "fetched chunks buffered per stream (each up to fetch.message.max.bytes)",
             minimum=1),
    Property("rebalance.max.retries", "int", 4, "rebalance attempts before reporting failure", minimum=1),
    Property("fetch.min.bytes", "int", 1, "minimum bytes a broker returns for a fetch (it waits up to fetch.wait.max.ms)",
             minimum=0),
    Property("fetch.wait.max.ms", "int", 100, "longest a broker blocks a fetch waiting for fetch.min.bytes", minimum=0),
    Property("rebalance.backoff.ms", "int", None, "backoff between rebalance attempts",
             minimum=0, derived_from="zookeeper.sync.time.ms"),
    Property("refresh.leader.backoff.ms", "int", 200, "backoff before looking for a partition's new leader", minimum=0),
    Property("offsets.channel.backoff.ms", "int", 1000, "backoff before retrying the offsets channel (offsets.storage=kafka)",
             minimum=0),
    Property("offsets.channel.socket.timeout.ms", "int", 10000,
             "socket timeout of offset fetch/commit requests (offsets.storage=kafka)", minimum=1),
    Property("offsets.commit.max.retries", "int", 5, "retries of the offset commit at shutdown", minimum=0),
    Property("offsets.storage", "enum", "zookeeper", "where offsets are committed: zookeeper or kafka",
             choices=("zookeeper", "kafka"), lower_cased=True),
    Property(
        "dual.commit.enabled", "bool", None, "also commit to ZooKeeper when offsets.storage=kafka (migration)",
        default_fn=_dual_commit_default, default_doc="true if offsets.storage=kafka, else false",
    ),
    Property("auto.offset.reset", "enum", "largest", "where to start without a valid committed offset: smallest or largest",
             choices=("smallest", "largest")),
    Property("consumer.timeout.ms", "int", -1,
             "raise ConsumerTimeoutError after this long without a message; negative blocks forever"),
    Property("exclude.internal.topics", "bool", True, "never consume internal topics (__consumer_offsets) through wildcards"),
    Property("partition.assignment.strategy", "enum", "range", "partition assignment: exactly range or roundrobin",
             choices=("range", "roundrobin")),
    Property("zookeeper.session.timeout.ms", "int", 6000, "ZooKeeper session timeout", minimum=1),
    Property("zookeeper.connection.timeout.ms", "int", None, "longest wait to connect to ZooKeeper",
             minimum=1, derived_from="zookeeper.session.timeout.ms"),
    Property("zookeeper.sync.time.ms", "int", 2000, "how far a ZooKeeper follower may lag its leader", minimum=0),
    # ---- zkconsumer extensions
    Property("zookeeper.auth", "str", None, 'ZooKeeper digest credential "user:password"', secret=True, kafka=False),
    Property("zookeeper.acl.enable", "bool", False, "create znodes readable by all but writable only by zookeeper.auth's user",
             kafka=False),
    Property("security.protocol", "enum", "PLAINTEXT", "broker connections: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
             choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"), kafka=False),
    Property("sasl.kerberos.service.name", "str", "kafka", "first part of the brokers' Kerberos principal", kafka=False),
    Property("sasl.kerberos.keytab", "str", None, "keytab to log in from (else the ticket cache, KRB5CCNAME)", kafka=False),
    Property("sasl.kerberos.principal", "str", None, "principal to log in as (required with the keytab)", kafka=False),
    Property("zookeeper.sasl.enabled", "bool", False, "authenticate the ZooKeeper session with SASL/GSSAPI", kafka=False),
    Property("zookeeper.sasl.service.name", "str", "zookeeper", "first part of ZooKeeper's principal", kafka=False),
    Property("ssl.cafile", "str", None, "CA bundle (PEM) to verify brokers; system CAs if unset", kafka=False),
    Property("ssl.certfile", "str", None, "client certificate (PEM) for SSL client authentication", kafka=False),
    Property("ssl.keyfile", "str", None, "private key (PEM) of ssl.certfile, if not inside it", kafka=False),
    Property("ssl.check.hostname", "bool", True, "verify the broker's certificate matches its host name", kafka=False),
    Property("zookeeper.heartbeat", "enum", "kafka",
             "how an idle member keeps its ZooKeeper session alive: kafka = the margins of Kafka's own client (a "
             "ping after a third of the negotiated session timeout without traffic; a server dropped only after "
             "two thirds of it without a byte), sent by a thread that needs no GIL where the C extension is built "
             "(Linux), else by kazoo; quiet = opt-in, a ping after 0.7 of it and a server dropped after a sixth "
             "without an answer, at the cost of those margins: a process freeze or server pause longer than ~0.27 "
             "of the session timeout can expire the session (a member's session lease syncs every 0.27 of it "
             "in either mode, so quiet no longer halves a member's idle packets)",
             choices=("kafka", "quiet"), lower_cased=True, kafka=False),
    Property("fetcher.connections", "int", 3,
             "the most connections per fetcher (num.consumer.fetchers), shared among the brokers it reads from "
             "(at least one each: 3 on one broker, 2 each on two, 1 each on three or more), each on its own "
             "thread with a disjoint share of the partitions, so one response is decoded while the broker serves "
             "another fetch. Used only while they pay: a fetcher fetches over one connection per broker until a "
             "response carries, for some partition, at least half of fetch.message.max.bytes (a backlog the "
             "fetch size cut); it then spreads its partitions on that broker over its connections, and gathers "
             "them back onto one after 5 s without such a response (an idle or live-stream member sends one "
             "long-poll per broker, as Kafka's consumer does); 1 is Kafka's one connection per fetcher and "
             "broker at every rate", minimum=1, kafka=False),
    Property("fetch.on.consumer.thread", "bool", True,
             "whether a stream's consumer that finds its queue empty sends the fetch and decodes the response "
             "itself, on its own thread, while one fetcher connection serves that stream alone and its responses "
             "are small: one thread woken per response instead of two (at a few thousand messages a second "
             "every message is a response of its own). The fetcher thread fetches ahead as before once the "
             "consumer has not waited for 50 ms (the application is busy with what it got), while responses "
             "are large (a backlog) or spread over several connections; a consumer's fetch, its wait on the socket included, "
             "ends at most 50 ms after its consumer.timeout.ms whatever the broker does (a broker that does not answer for "
             "socket.timeout.ms over such fetches fails as it would on the fetcher thread). "
             "false: only fetcher threads fetch",
             kafka=False),
    Property(
        "offsets.commit.timeout.ms", "int", 60000,
        "how long commit_offsets() (and each auto-commit) keeps retrying while ZooKeeper or the offsets "
        "coordinator is unavailable before raising a retriable error; 0 tries once",
        minimum=0, kafka=False,
    ),
    Property(
        "commit.processed.only", "bool", False,
        "commits (commit_offsets(), auto-commit, before a rebalance releases a partition, at shutdown) advance "
        "each partition only over messages acked processed (stream.ack(message)): to its first message handed "
        "out and not acked; workers may ack out of order", kafka=False,
    ),
    Property(
        "group.membership", "enum", "zookeeper",
        "who keeps the group's members and assignment: zookeeper (Kafka 0.8) or kafka (the brokers' group "
        "coordinator, as Kafka 0.9; needs offsets.storage=kafka)", choices=("zookeeper", "kafka"), kafka=False,
    ),
    Property(
        "session.timeout.ms", "int", None,
        "group.membership=kafka: a member not heard from for this long is removed; within the brokers' "
        "group.min.session.timeout.ms..group.max.session.timeout.ms (6000..30000 by default)",
        minimum=1, derived_from="zookeeper.session.timeout.ms", kafka=False,
    ),
    Property(
        "heartbeat.interval.ms", "int", None, "group.membership=kafka: time between heartbeats; below session.timeout.ms",
        minimum=1, default_fn=_heartbeat_default, default_doc="session.timeout.ms / 3", kafka=False,
    ),
)

#: Every accepted property by dotted name, in documentation order.
PROPERTIES: Mapping[str, Property] = {p.name: p for p in _TABLE}
_ATTRIBUTES: Mapping[str, str] = {p.attribute: p.name for p in _TABLE}


# --------------------------------------------------------------------------- parsing values


def _shown(prop: Property, raw: object) -> str:
    return "'***'" if prop.secret else repr(raw)


def _bad(prop: Property, raw: object, expected: str) -> ConfigurationError:
    return ConfigurationError(prop.name, f"invalid value {_shown(prop, raw)}: {expected}")


def _whitespace_note(raw: str) -> str:
    if raw != raw.strip():
        return " (the surrounding whitespace is part of the value for Kafka 0.8.2's consumer)"
    return ""


def _parse_int_text(prop: Property, raw: str) -> int:
    # Kafka: Integer.parseInt on the value as given (no trimming in 0.8.2.2).
    text = raw if prop.kafka else raw.strip()
    if not _INT_TEXT.fullmatch(text):
        raise _bad(prop, raw, "expected an integer" + (_whitespace_note(raw) if prop.kafka else ""))
    return int(text)


def _parse_bool_text(prop: Property, raw: str) -> bool:
    if prop.kafka:
        # Kafka: require(v == "true" || v == "false") before v.toBoolean.
        if raw in ("true", "false"):
            return raw == "true"
        raise _bad(prop, raw, "expected exactly true or false, as Kafka's consumer requires" + _whitespace_note(raw))
    text = raw.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise _bad(prop, raw, "expected true or false")


def _parse_enum_text(prop: Property, raw: str) -> str:
    if prop.kafka:
        text = raw.lower() if prop.lower_cased else raw
        if text in prop.choices:
            return text
        spelling = "in any case" if prop.lower_cased else "exactly"
        raise _bad(
            prop, raw,
            f"valid values are {spelling} {' and '.join(prop.choices)}, as Kafka's consumer requires"
            + _whitespace_note(raw),
        )
    text = raw.strip()
    for choice in prop.choices:
        if text.lower() == choice.lower():
            return choice
    raise _bad(prop, raw, f"valid values are {', '.join(prop.choices[:-1])} and {prop.choices[-1]}")


def _parse(prop: Property, raw: PropertyValue) -> Any:
    """Turn a given value into the property's typed value (no cross-property checks).

    Strings of Kafka's own properties are read as Kafka's consumer reads them (see
    the module docstring); zkconsumer's extensions are trimmed and case-insensitive.
    """
    if prop.type == "int":
        if isinstance(raw, bool):
            raise _bad(prop, raw, "expected an integer, not a boolean")
        if isinstance(raw, float):
            if not raw.is_integer():
                raise _bad(prop, raw, "expected an integer")
            raw = int(raw)
        if isinstance(raw, str):
            value = _parse_int_text(prop, raw)
        elif isinstance(raw, int):
            value = raw
        else:
            raise _bad(prop, raw, "expected an integer")
        if not _INT_MIN <= value <= _INT_MAX:
            raise _bad(prop, raw, "out of range for a 32-bit integer")
        if prop.minimum is not None and value < prop.minimum:
            raise _bad(prop, raw, f"must be >= {prop.minimum}")
        return value

    if prop.type == "bool":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str):
            return _parse_bool_text(prop, raw)
        raise _bad(prop, raw, "expected true or false")

    if prop.type == "enum":
        if isinstance(raw, str):
            return _parse_enum_text(prop, raw)
        raise _bad(prop, raw, f"valid values are {', '.join(prop.choices[:-1])} and {prop.choices[-1]}")

    # str
    if isinstance(raw, bool) or not isinstance(raw, (str, int)):
        raise _bad(prop, raw, "expected a string")
    text = str(raw).strip()
    if not text:
        if prop.required:
            raise ConfigurationError(prop.name, "must not be empty")
        return None  # empty means "not set" for optional strings
    if prop.legal_id and not _LEGAL_ID.fullmatch(text):
        raise ConfigurationError(
            prop.name,
            f"{text!r} is illegal, contains a character other than ASCII alphanumerics, '.', '_' and '-'",
        )
    return text


# --------------------------------------------------------------------------- names


def _unknown(name: str) -> ConfigurationError:
    return unknown_property(name, PROPERTIES)


def _property_name(key: object, allow_attribute: bool) -> str:
    if not isinstance(key, str):
        raise ConfigurationError(repr(key), "property names must be strings")
    if key in PROPERTIES:
        return key
    if allow_attribute and key in _ATTRIBUTES:
        return _ATTRIBUTES[key]
    raise _unknown(key)


# --------------------------------------------------------------------------- the config


class ConsumerConfig(PropertyAttributes):
    """An immutable, validated consumer configuration.

    ``props`` maps Kafka's dotted property names to values (``str``, ``int``,
    ``bool``; an integral ``float`` is accepted for integers). ``overrides`` are
    applied on top; pass dotted names through ``**{"group.id": "g2"}`` (the
    attribute spelling ``group_id=...`` is accepted too). A value of ``None``, or
    an empty string for an optional string property, means "not set".

    Raises :class:`~zkconsumer.errors.ConfigurationError` naming the property for
    an unknown name, a bad value, a missing required property or an inconsistent
    combination. See the module docstring for the rules and :data:`PROPERTIES`
    for every property.

    >>> c = ConsumerConfig({"zookeeper.connect": "zk:2181", "group.id": "g1", "auto.offset.reset": "smallest"})
    >>> c.auto_offset_reset, c.client_id, c.zookeeper_connection_timeout_ms, c.consumer_timeout_ms
    ('smallest', 'g1', 6000, -1)
    """

    __slots__ = ("_given", "_values")

    #: Every accepted property (same object as the module's :data:`PROPERTIES`).
    PROPERTIES: ClassVar[Mapping[str, Property]] = PROPERTIES

    _given: Dict[str, PropertyValue]
    _values: Dict[str, Any]

    def __init__(
        self,
        props: Union[Mapping[str, PropertyValue], "ConsumerConfig", None] = None,
        **overrides: PropertyValue,
    ) -> None:
        given: Dict[str, PropertyValue] = {}
        if isinstance(props, ConsumerConfig):
            given.update(props._given)
        elif props is not None:
            if not isinstance(props, Mapping):
                raise TypeError(f"props must be a mapping of property names to values, not {type(props).__name__}")
            for key, value in props.items():
                given[_property_name(key, allow_attribute=False)] = value
        for key, value in overrides.items():
            given[_property_name(key, allow_attribute=True)] = value
        given = {k: v for k, v in given.items() if v is not None}

        values: Dict[str, Any] = {}
        for prop in _TABLE:
            if prop.name in given:
                values[prop.name] = _parse(prop, given[prop.name])
                if values[prop.name] is None:  # an empty optional string: not set
                    del given[prop.name]
                    values[prop.name] = prop.default
            elif prop.required:
                raise ConfigurationError(prop.name, "required property is missing")
            else:
                values[prop.name] = prop.default
        for prop in _TABLE:  # derived defaults, from the values resolved above
            if prop.name not in given:
                if prop.derived_from is not None:
                    values[prop.name] = values[prop.derived_from]
                elif prop.default_fn is not None:
                    values[prop.name] = prop.default_fn(values)
        check_combinations(values)

        object.__setattr__(self, "_given", given)
        object.__setattr__(self, "_values", values)

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_properties(cls, path: Union[str, "os.PathLike[str]"], **overrides: PropertyValue) -> "ConsumerConfig":
        """Read a Java ``.properties`` file (see :func:`parse_properties`), then apply ``overrides``.

        The file is read as UTF-8, or as ISO-8859-1 (Java's own encoding for
        ``Properties.load``) if it is not valid UTF-8. ``OSError`` propagates. A property
        of the file that is refused is named with the file and its line.
        """
        with open(path, "rb") as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("iso-8859-1")
        if text.startswith("\ufeff"):
            text = text[1:]
        try:
            lines = parse_properties_with_lines(text)
        except ConfigurationError as exc:
            raise ConfigurationError(exc.property, f"{exc.detail} (in {os.fspath(path)})") from None
        try:
            return cls({key: value for key, (value, _) in lines.items()}, **overrides)
        except ConfigurationError as exc:
            if exc.property not in lines or exc.property in {k.replace("_", ".") for k in overrides}:
                raise
            where = f"{os.fspath(path)}, line {lines[exc.property][1]}"
            raise ConfigurationError(exc.property, f"{exc.detail} (in {where})") from None

    def with_overrides(self, **overrides: PropertyValue) -> "ConsumerConfig":
        """A new config: this one's explicitly given properties plus ``overrides``.

        Derived defaults are derived again, so ``with_overrides(**{"group.id": "g2"})``
        also changes ``client.id`` unless ``client.id`` was given explicitly. A
        ``None`` override removes an explicit setting (back to the default).
        """
        return type(self)(self._given, **overrides)

    # ------------------------------------------------------------------ access

    def get(self, name: str) -> Any:
        """The typed value of a property by its dotted name (e.g. ``"group.id"``)."""
        if name not in PROPERTIES:
            raise _unknown(name)
        return self._values[name]

    def to_dict(self) -> Dict[str, Any]:
        """Every property (dotted name -> typed value), defaults included.

        Includes ``zookeeper.auth`` unmasked: do not log the result.
        """
        return dict(self._values)

    def explicit_properties(self) -> Dict[str, Any]:
        """The properties that were given explicitly (dotted name -> typed value).

        ``ConsumerConfig(c.explicit_properties()) == c`` for every config ``c``;
        useful to ship a config to another process.
        """
        return {name: self._values[name] for name in PROPERTIES if name in self._given}

    if not TYPE_CHECKING:  # hidden from mypy, which reads the typed attributes of PropertyAttributes instead

        def __getattr__(self, name: str) -> Any:
            if name.startswith("_"):
                raise AttributeError(name)
            dotted = _ATTRIBUTES.get(name)
            if dotted is None:
                suggestion = difflib.get_close_matches(name, list(_ATTRIBUTES), n=1, cutoff=0.7)
                hint = f"; did you mean {suggestion[0]}?" if suggestion else ""
                raise AttributeError(f"ConsumerConfig has no property attribute {name!r}{hint}")
            return self._values[dotted]

    def __dir__(self) -> List[str]:
        return sorted(set(super().__dir__()) | set(_ATTRIBUTES))

    # ------------------------------------------------------------------ immutability

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("ConsumerConfig is immutable; use with_overrides() to derive a new one")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("ConsumerConfig is immutable; use with_overrides() to derive a new one")

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (dict(self._given),))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConsumerConfig):
            return NotImplemented
        return self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(self._values.items()))

    def __repr__(self) -> str:
        shown = {
            name: ("***" if PROPERTIES[name].secret else value)
            for name, value in self.explicit_properties().items()
        }
        return f"ConsumerConfig({shown!r})"


def _install_attributes() -> None:
    """Every property's attribute as a read-only property of :class:`ConsumerConfig`: read on every fetch
    round, a property costs a tenth of the failed lookup that reaches ``__getattr__`` (which stays for the
    error naming a misspelt attribute)."""
    def reader(dotted: str) -> property:
        def read(self: ConsumerConfig) -> Any:
            return self._values[dotted]
        return property(read)

    for attribute, dotted in _ATTRIBUTES.items():
        if not hasattr(ConsumerConfig, attribute):
            setattr(ConsumerConfig, attribute, reader(dotted))


_install_attributes()
