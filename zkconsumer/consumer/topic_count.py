"""What a group member subscribes to: Kafka's ``TopicCount`` and ``TopicFilter``.

A member subscribes either *statically* (``{"events": 2}``: two streams, i.e. two
consumer threads, for topic ``events``) or by *wildcard* (a :class:`Whitelist` or
:class:`Blacklist` regex and a stream count applied to every matching topic). The
member writes its subscription into its registration node (see
:func:`zkconsumer.zookeeper.zkformat.encode_registration`); every member rebuilds every other
member's :class:`TopicCount` from those nodes with
:func:`topic_count_from_registration` and expands it into consumer thread ids
(``"<consumerId>-<i>"``) per topic, the input of :mod:`zkconsumer.assignors`.

Wildcards are expanded by the *evaluating* member against the topics under
``/brokers/topics``, as in Kafka: Java ``String.matches`` (the whole topic must
match) of the normalised regex, read with Java's regex grammar
(:mod:`zkconsumer.java_regex`), skipping internal topics (``__consumer_offsets``)
when ``exclude.internal.topics`` is true.

Pure: no I/O.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar, Dict, FrozenSet, Iterable, List, Mapping

from ..assignors import java_string_key
from ..errors import ConfigurationError, UnsupportedPatternError
from ..java_regex import JavaRegexSyntaxError, compile_java_regex, translate

if TYPE_CHECKING:  # pragma: no cover
    from ..zookeeper.zkformat import Registration

__all__ = [
    "INTERNAL_TOPICS",
    "PATTERN_BLACKLIST",
    "PATTERN_STATIC",
    "PATTERN_WHITELIST",
    "Blacklist",
    "StaticTopicCount",
    "SubscriptionError",
    "TopicCount",
    "TopicFilter",
    "Whitelist",
    "WildcardTopicCount",
    "consumers_per_topic",
    "make_thread_id",
    "normalize_topic_regex",
    "topic_count_from_registration",
]

#: Topics Kafka treats as internal (``kafka.common.Topic.InternalTopics``).
INTERNAL_TOPICS: FrozenSet[str] = frozenset({"__consumer_offsets"})

#: The ``pattern`` values of a registration node.
PATTERN_STATIC = "static"
PATTERN_WHITELIST = "white_list"
PATTERN_BLACKLIST = "black_list"


class SubscriptionError(ConfigurationError):
    """A subscription is invalid: a bad topic name, a stream count below 1, or a bad regex.

    ``property`` names what was wrong: ``"topic_count_map"``, ``"num_streams"``,
    ``"Whitelist"`` or ``"Blacklist"``.
    """


# --------------------------------------------------------------------------- filters


# Kafka strips quotes with Java's replaceAll: its "$" also matches before a final line terminator.
_LEADING_QUOTES = compile_java_regex(r"""^["']+""")
_TRAILING_QUOTES = compile_java_regex(r"""["']+$""")


def _java_trim(s: str) -> str:
    """Java's ``String.trim()``: drop leading/trailing characters <= U+0020."""
    start, end = 0, len(s)
    while start < end and s[start] <= " ":
        start += 1
    while end > start and s[end - 1] <= " ":
        end -= 1
    return s[start:end]


def normalize_topic_regex(raw_regex: str) -> str:
    """Normalise a topic filter regex exactly as Kafka's ``TopicFilter`` does.

    In order: trim (Java ``trim``: characters <= U+0020), replace every ``,`` with
    ``|``, remove every space, strip leading and trailing runs of ``"`` and ``'``
    (properties files and shells may bring quotes).

    >>> normalize_topic_regex(' "events, logs.*" ')
    'events|logs.*'
    """
    regex = _java_trim(raw_regex).replace(",", "|").replace(" ", "")
    regex = _LEADING_QUOTES.sub("", regex)
    return _TRAILING_QUOTES.sub("", regex)


class TopicFilter(ABC):
    """A regex over topic names; :class:`Whitelist` keeps matches, :class:`Blacklist` the rest.

    ``regex`` is the normalised regex (:func:`normalize_topic_regex`) and is what
    goes into the registration node. It is a *Java* regex: it is translated by
    :func:`zkconsumer.java_regex.translate`, so Java-only syntax (``\\p{Lower}``,
    ``\\Q...\\E``, ``[a-z&&[^x]]``, possessive quantifiers, flags in mid-pattern,
    ``\\v``, ``\\h``...) matches exactly the topics Java's ``String.matches`` does.

    Raises :class:`SubscriptionError` if Java would reject the regex (Kafka's own
    ``TopicFilter`` throws then too), and
    :class:`~zkconsumer.errors.UnsupportedPatternError` if it uses Java syntax
    with no Python equivalent (``\\p{InGreek}``, ``\\X``...): a member never
    matches topics differently from Kafka's members.

    Filters compare equal when they are of the same kind with the same normalised
    regex.
    """

    __slots__ = ("raw_regex", "regex", "_compiled")

    #: ``"white_list"`` or ``"black_list"``: the registration's ``pattern``.
    pattern: ClassVar[str]

    def __init__(self, raw_regex: str) -> None:
        kind = type(self).__name__
        if not isinstance(raw_regex, str):
            raise SubscriptionError(kind, f"the regex must be a string, not {type(raw_regex).__name__}")
        self.raw_regex = raw_regex
        self.regex = normalize_topic_regex(raw_regex)
        try:
            self._compiled = re.compile(translate(self.regex))
        except JavaRegexSyntaxError as exc:
            raise SubscriptionError(kind, f"{self.regex} is an invalid regex ({exc})") from None
        except UnsupportedPatternError as exc:
            reason = str(exc)
            head = f"unsupported Java regular expression {self.regex!r}: "
            reason = reason[len(head):] if reason.startswith(head) else reason
            raise UnsupportedPatternError(self.regex, f"{kind} cannot be evaluated as Java would: {reason}") from None

    def matches(self, topic: str) -> bool:
        """Java ``topic.matches(regex)``: the regex matches the *whole* topic name."""
        return self._compiled.fullmatch(topic) is not None

    @abstractmethod
    def is_topic_allowed(self, topic: str, exclude_internal_topics: bool) -> bool:
        """Whether a member with this filter consumes ``topic``."""

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.regex == self.regex

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.regex))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.regex!r})"

    def __str__(self) -> str:
        return self.regex


class Whitelist(TopicFilter):
    """Consume every topic whose whole name matches the regex.

    >>> w = Whitelist("ev.*, logs")
    >>> w.regex, w.is_topic_allowed("events", True), w.is_topic_allowed("xevents", True)
    ('ev.*|logs', True, False)
    >>> Whitelist(".*").is_topic_allowed("__consumer_offsets", True)
    False
    """

    __slots__ = ()
    pattern = PATTERN_WHITELIST

    def is_topic_allowed(self, topic: str, exclude_internal_topics: bool) -> bool:
        return self.matches(topic) and not (exclude_internal_topics and topic in INTERNAL_TOPICS)


class Blacklist(TopicFilter):
    """Consume every topic whose whole name does *not* match the regex.

    >>> b = Blacklist("test.*")
    >>> b.is_topic_allowed("events", True), b.is_topic_allowed("test1", True)
    (True, False)
    >>> b.is_topic_allowed("__consumer_offsets", False)
    True
    """

    __slots__ = ()
    pattern = PATTERN_BLACKLIST

    def is_topic_allowed(self, topic: str, exclude_internal_topics: bool) -> bool:
        return not self.matches(topic) and not (exclude_internal_topics and topic in INTERNAL_TOPICS)


# --------------------------------------------------------------------------- topic counts


def make_thread_id(consumer_id: str, index: int) -> str:
    """Kafka's consumer thread id: ``"<consumerId>-<index>"``."""
    return f"{consumer_id}-{index}"


def _thread_ids(consumer_id: str, num_streams: int) -> List[str]:
    return sorted((make_thread_id(consumer_id, i) for i in range(num_streams)), key=java_string_key)


def _check_streams(prop: str, what: str, n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise SubscriptionError(prop, f"the stream count for {what} must be an integer >= 1, not {n!r}")
    if n < 1:
        raise SubscriptionError(prop, f"the stream count for {what} must be >= 1, not {n}")
    return n


def _check_topic(topic: object) -> str:
    if not isinstance(topic, str) or not topic:
        raise SubscriptionError("topic_count_map", f"a topic name must be a non-empty string, not {topic!r}")
    if "/" in topic or topic in (".", ".."):
        raise SubscriptionError("topic_count_map", f"{topic!r} is not a valid topic name")
    return topic


class TopicCount(ABC):
    """One member's subscription, expandable into consumer thread ids per topic."""

    consumer_id: str

    @property
    @abstractmethod
    def pattern(self) -> str:
        """``"static"``, ``"white_list"`` or ``"black_list"``: the registration's ``pattern``."""

    @property
    @abstractmethod
    def subscription(self) -> Dict[str, int]:
        """The registration's ``subscription``: topic -> streams, or ``{regex: streams}``."""

    @abstractmethod
    def consumer_thread_ids(self, all_topics: Iterable[str] = ()) -> Dict[str, List[str]]:
        """Topic -> this member's thread ids for it, sorted as Java strings.

        ``all_topics`` are the topics under ``/brokers/topics``; only wildcard
        counts use them.
        """


class StaticTopicCount(TopicCount):
    """A fixed topic -> stream count map (Kafka's ``StaticTopicCount``).

    The map is used as is, whether or not the topics exist (a missing topic simply
    has no partitions to assign).

    >>> StaticTopicCount("g_c1", {"events": 2, "logs": 1}).consumer_thread_ids()
    {'events': ['g_c1-0', 'g_c1-1'], 'logs': ['g_c1-0']}
    """

    __slots__ = ("consumer_id", "topic_count_map")

    def __init__(self, consumer_id: str, topic_count_map: Mapping[str, int]) -> None:
        if not isinstance(topic_count_map, Mapping):
            raise SubscriptionError("topic_count_map", f"expected a mapping of topic -> streams, not {topic_count_map!r}")
        self.consumer_id = consumer_id
        self.topic_count_map: Dict[str, int] = {
            _check_topic(t): _check_streams("topic_count_map", f"topic {t!r}", n) for t, n in topic_count_map.items()
        }

    @property
    def pattern(self) -> str:
        return PATTERN_STATIC

    @property
    def subscription(self) -> Dict[str, int]:
        return dict(self.topic_count_map)

    def consumer_thread_ids(self, all_topics: Iterable[str] = ()) -> Dict[str, List[str]]:
        return {t: _thread_ids(self.consumer_id, n) for t, n in sorted(self.topic_count_map.items())}

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, StaticTopicCount)
            and other.consumer_id == self.consumer_id
            and other.topic_count_map == self.topic_count_map
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StaticTopicCount({self.consumer_id!r}, {self.topic_count_map!r})"


class WildcardTopicCount(TopicCount):
    """``num_streams`` streams for every topic the filter allows (Kafka's ``WildcardTopicCount``).

    >>> wc = WildcardTopicCount("g_c1", Whitelist("ev.*"), 2, True)
    >>> wc.pattern, wc.subscription
    ('white_list', {'ev.*': 2})
    >>> wc.consumer_thread_ids(["events", "logs", "evil"])
    {'events': ['g_c1-0', 'g_c1-1'], 'evil': ['g_c1-0', 'g_c1-1']}
    """

    __slots__ = ("consumer_id", "topic_filter", "num_streams", "exclude_internal_topics")

    def __init__(
        self, consumer_id: str, topic_filter: TopicFilter, num_streams: int, exclude_internal_topics: bool = True
    ) -> None:
        if not isinstance(topic_filter, TopicFilter):
            raise SubscriptionError("topic_filter", f"expected a Whitelist or Blacklist, not {topic_filter!r}")
        self.consumer_id = consumer_id
        self.topic_filter = topic_filter
        self.num_streams = _check_streams("num_streams", f"filter {topic_filter.regex!r}", num_streams)
        self.exclude_internal_topics = bool(exclude_internal_topics)

    @property
    def pattern(self) -> str:
        return self.topic_filter.pattern

    @property
    def subscription(self) -> Dict[str, int]:
        return {self.topic_filter.regex: self.num_streams}

    def topics(self, all_topics: Iterable[str]) -> List[str]:
        """The topics of ``all_topics`` this member consumes, sorted."""
        return sorted(
            {t for t in all_topics if self.topic_filter.is_topic_allowed(t, self.exclude_internal_topics)}
        )

    def consumer_thread_ids(self, all_topics: Iterable[str] = ()) -> Dict[str, List[str]]:
        threads = _thread_ids(self.consumer_id, self.num_streams)
        return {t: list(threads) for t in self.topics(all_topics)}

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, WildcardTopicCount)
            and other.consumer_id == self.consumer_id
            and other.topic_filter == self.topic_filter
            and other.num_streams == self.num_streams
            and other.exclude_internal_topics == self.exclude_internal_topics
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"WildcardTopicCount({self.consumer_id!r}, {self.topic_filter!r}, {self.num_streams}, "
            f"exclude_internal_topics={self.exclude_internal_topics})"
        )


def topic_count_from_registration(
    consumer_id: str, registration: "Registration", exclude_internal_topics: bool
) -> TopicCount:
    """Rebuild a member's :class:`TopicCount` from its decoded registration node.

    As Kafka's ``TopicCount.constructTopicCount``: a ``white_list``/``black_list``
    pattern with a non-empty subscription gives a :class:`WildcardTopicCount` of its
    (single) ``{regex: streams}`` entry, evaluated with the *evaluating* member's
    ``exclude_internal_topics``; anything else gives a :class:`StaticTopicCount`.
    The regex is read as Java reads it (see :class:`TopicFilter`). Raises
    :class:`SubscriptionError` if Java would reject the regex, and
    :class:`~zkconsumer.errors.UnsupportedPatternError` if it uses Java syntax
    with no Python equivalent: the caller must not compute an assignment without
    that member (it would differ from the one Kafka's members compute).

    >>> from zkconsumer.zookeeper.zkformat import Registration
    >>> topic_count_from_registration("g_c2", Registration({"ev.*": 1}, "white_list", "1", 1), True)
    WildcardTopicCount('g_c2', Whitelist('ev.*'), 1, exclude_internal_topics=True)
    """
    subscription = registration.subscription
    if registration.pattern in (PATTERN_WHITELIST, PATTERN_BLACKLIST) and subscription:
        regex, num_streams = next(iter(subscription.items()))
        filter_type = Whitelist if registration.pattern == PATTERN_WHITELIST else Blacklist
        return WildcardTopicCount(consumer_id, filter_type(regex), num_streams, exclude_internal_topics)
    return StaticTopicCount(consumer_id, subscription)


def consumers_per_topic(topic_counts: Iterable[TopicCount], all_topics: Iterable[str] = ()) -> Dict[str, List[str]]:
    """Topic -> every thread id subscribed to it across ``topic_counts``, sorted as Java strings.

    Kafka's ``ZkUtils.getConsumersPerTopic``; the ``consumers_for_topic`` input of
    the assignors.

    >>> consumers_per_topic([StaticTopicCount("c2", {"t": 1}), StaticTopicCount("c1", {"t": 2, "u": 1})])
    {'t': ['c1-0', 'c1-1', 'c2-0'], 'u': ['c1-0']}
    """
    topics = list(all_topics)
    result: Dict[str, List[str]] = {}
    for count in topic_counts:
        for topic, threads in count.consumer_thread_ids(topics).items():
            result.setdefault(topic, []).extend(threads)
    return {t: sorted(threads, key=java_string_key) for t, threads in sorted(result.items())}
