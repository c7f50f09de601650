"""TopicFilter normalisation and matching, TopicCount expansion, as Kafka's TopicCount/TopicFilter."""

from __future__ import annotations

from typing import List

import pytest

from zkconsumer.consumer.topic_count import (
    INTERNAL_TOPICS,
    Blacklist,
    StaticTopicCount,
    SubscriptionError,
    TopicFilter,
    Whitelist,
    WildcardTopicCount,
    consumers_per_topic,
    normalize_topic_regex,
    topic_count_from_registration,
)
from zkconsumer.errors import ConfigurationError, UnsupportedPatternError, ZkConsumerError
from zkconsumer.java_regex.parser import RE_HAS_ATOMIC
from zkconsumer.zookeeper.zkformat import Registration, decode_registration, encode_registration

# --------------------------------------------------------------------------- normalisation


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("ev.*", "ev.*"),
        ("  ev.* \n", "ev.*"),
        ("a,b,c", "a|b|c"),
        ("a, b ,c", "a|b|c"),
        ('"ev.*"', "ev.*"),
        ("'ev.*'", "ev.*"),
        ("\"'ev.*'\"", "ev.*"),
        ('  " a , b " ', "a|b"),
        ("\x01ev\x1f", "ev"),  # Java trim drops every char <= U+0020
        ("a\tb", "a\tb"),  # only spaces are removed inside
        ("a\"b'c", "a\"b'c"),  # quotes inside are kept
    ],
)
def test_normalisation_matches_kafka(raw: str, expected: str) -> None:
    assert normalize_topic_regex(raw) == expected
    assert Whitelist(raw).regex == expected
    assert Blacklist(raw).regex == expected


def test_filter_attributes() -> None:
    w = Whitelist(" a, b ")
    assert w.pattern == "white_list" and w.regex == "a|b" and w.raw_regex == " a, b " and str(w) == "a|b"
    b = Blacklist("x")
    assert b.pattern == "black_list" and repr(b) == "Blacklist('x')"
    assert isinstance(w, TopicFilter) and isinstance(b, TopicFilter)


def test_filter_equality() -> None:
    assert Whitelist("a,b") == Whitelist("a|b")
    assert Whitelist("a") != Blacklist("a")
    assert len({Whitelist("a"), Whitelist(" a "), Blacklist("a")}) == 2


def test_invalid_regex_is_a_clear_configuration_error() -> None:
    with pytest.raises(SubscriptionError) as info:
        Whitelist("ev[.*")
    assert isinstance(info.value, ConfigurationError) and isinstance(info.value, ZkConsumerError)
    assert info.value.property == "Whitelist"
    assert "ev[.* is an invalid regex" in str(info.value)
    with pytest.raises(SubscriptionError, match=r"\(\+ is an invalid regex"):
        Blacklist("(+")
    with pytest.raises(SubscriptionError, match="invalid regex"):
        Whitelist("ev{,2}")  # Java: "Illegal repetition" (Python would read {0,2})
    with pytest.raises(SubscriptionError, match="must be a string"):
        Whitelist(None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- matching


def test_whitelist_uses_full_match() -> None:
    w = Whitelist("ev.*")
    assert w.is_topic_allowed("events", True)
    assert not w.is_topic_allowed("xevents", True)  # re.search would match
    assert not Whitelist("ev").is_topic_allowed("events", True)  # re.match would match
    assert Whitelist("a|b").is_topic_allowed("b", True)
    assert not Whitelist("a|b").is_topic_allowed("ab", True)


def test_blacklist_is_the_complement() -> None:
    b = Blacklist("test.*,tmp")
    assert b.is_topic_allowed("events", True)
    assert not b.is_topic_allowed("test1", True)
    assert not b.is_topic_allowed("tmp", True)
    assert b.is_topic_allowed("tmp2", True)


def test_internal_topics() -> None:
    assert INTERNAL_TOPICS == frozenset({"__consumer_offsets"})
    assert not Whitelist(".*").is_topic_allowed("__consumer_offsets", True)
    assert Whitelist(".*").is_topic_allowed("__consumer_offsets", False)
    assert not Blacklist("x").is_topic_allowed("__consumer_offsets", True)
    assert Blacklist("x").is_topic_allowed("__consumer_offsets", False)
    assert not Blacklist("__.*").is_topic_allowed("__consumer_offsets", False)


# --------------------------------------------------------------------------- static counts


def test_static_topic_count() -> None:
    tc = StaticTopicCount("g_c1", {"events": 3, "logs": 1})
    assert tc.pattern == "static"
    assert tc.subscription == {"events": 3, "logs": 1}
    assert tc.consumer_thread_ids() == {"events": ["g_c1-0", "g_c1-1", "g_c1-2"], "logs": ["g_c1-0"]}
    # Topics are used whether or not they exist.
    assert tc.consumer_thread_ids(["other"]) == tc.consumer_thread_ids()


def test_static_thread_ids_sort_as_strings() -> None:
    ids = StaticTopicCount("c", {"t": 12}).consumer_thread_ids()["t"]
    assert ids[:4] == ["c-0", "c-1", "c-10", "c-11"]
    assert ids[4] == "c-2" and len(ids) == 12


def test_static_subscription_is_a_copy() -> None:
    tc = StaticTopicCount("c", {"t": 1})
    tc.subscription["t"] = 5
    assert tc.subscription == {"t": 1}


@pytest.mark.parametrize(
    "topic_map,fragment",
    [
        ({"t": 0}, "must be >= 1"),
        ({"t": -2}, "must be >= 1"),
        ({"t": "2"}, "must be an integer >= 1"),
        ({"t": True}, "must be an integer >= 1"),
        ({"t": 1.0}, "must be an integer >= 1"),
        ({"": 1}, "non-empty string"),
        ({"a/b": 1}, "not a valid topic name"),
        ({"..": 1}, "not a valid topic name"),
    ],
)
def test_static_validation(topic_map: dict, fragment: str) -> None:
    with pytest.raises(SubscriptionError) as info:
        StaticTopicCount("c", topic_map)
    assert info.value.property == "topic_count_map"
    assert fragment in str(info.value)


def test_static_rejects_non_mapping() -> None:
    with pytest.raises(SubscriptionError, match="mapping"):
        StaticTopicCount("c", [("t", 1)])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- wildcard counts


def test_wildcard_topic_count() -> None:
    wc = WildcardTopicCount("g_c1", Whitelist("ev.*,logs"), 2, True)
    assert wc.pattern == "white_list"
    assert wc.subscription == {"ev.*|logs": 2}
    topics = ["events", "logs", "logs2", "evil", "__consumer_offsets", "x"]
    assert wc.topics(topics) == ["events", "evil", "logs"]
    assert wc.consumer_thread_ids(topics) == {
        "events": ["g_c1-0", "g_c1-1"],
        "evil": ["g_c1-0", "g_c1-1"],
        "logs": ["g_c1-0", "g_c1-1"],
    }
    assert wc.consumer_thread_ids() == {}


def test_wildcard_blacklist_and_internal_topics() -> None:
    topics = ["a", "b", "__consumer_offsets"]
    assert list(WildcardTopicCount("c", Blacklist("a"), 1, True).consumer_thread_ids(topics)) == ["b"]
    assert list(WildcardTopicCount("c", Blacklist("a"), 1, False).consumer_thread_ids(topics)) == [
        "__consumer_offsets",
        "b",
    ]


def test_wildcard_validation() -> None:
    with pytest.raises(SubscriptionError) as info:
        WildcardTopicCount("c", Whitelist("x"), 0, True)
    assert info.value.property == "num_streams" and ">= 1" in str(info.value)
    with pytest.raises(SubscriptionError, match="Whitelist or Blacklist"):
        WildcardTopicCount("c", "x.*", 1, True)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- from registrations


def test_from_static_registration() -> None:
    reg = decode_registration("/p", encode_registration({"t": 2}, "static", 1))
    assert topic_count_from_registration("c2", reg, True) == StaticTopicCount("c2", {"t": 2})


def test_from_wildcard_registrations() -> None:
    reg = decode_registration("/p", encode_registration({"ev.*": 3}, "white_list", 1))
    tc = topic_count_from_registration("c2", reg, False)
    assert tc == WildcardTopicCount("c2", Whitelist("ev.*"), 3, False)
    reg = decode_registration("/p", encode_registration({"a\\d/x": 1}, "black_list", 1))
    tc = topic_count_from_registration("c3", reg, True)
    assert tc == WildcardTopicCount("c3", Blacklist("a\\d/x"), 1, True)
    assert tc.subscription == {"a\\d/x": 1}


def test_registration_round_trip_through_topic_count() -> None:
    for original in (
        StaticTopicCount("c", {"a": 1, "b": 4}),
        WildcardTopicCount("c", Whitelist("x.*|y"), 2, True),
        WildcardTopicCount("c", Blacklist("z"), 1, True),
    ):
        data = encode_registration(original.subscription, original.pattern, 123)
        rebuilt = topic_count_from_registration("c", decode_registration("/p", data), True)
        assert rebuilt == original


def test_empty_wildcard_subscription_is_static_like_kafka() -> None:
    tc = topic_count_from_registration("c", Registration({}, "white_list", None, 1), True)
    assert tc == StaticTopicCount("c", {})
    assert tc.consumer_thread_ids(["a"]) == {}


def test_bad_regex_from_another_member_raises_subscription_error() -> None:
    with pytest.raises(SubscriptionError):
        topic_count_from_registration("c", Registration({"[": 1}, "white_list", None, 1), True)


def test_consumers_per_topic() -> None:
    counts = [
        StaticTopicCount("c2", {"t": 1}),
        StaticTopicCount("c1", {"t": 11, "u": 1}),
        WildcardTopicCount("c3", Whitelist("u|v"), 1, True),
    ]
    result = consumers_per_topic(counts, ["t", "u", "v", "w"])
    assert result["t"] == ["c1-0", "c1-1", "c1-10", "c1-2", "c1-3", "c1-4", "c1-5", "c1-6", "c1-7", "c1-8", "c1-9", "c2-0"]
    assert result["u"] == ["c1-0", "c3-0"]
    assert result["v"] == ["c3-0"]
    assert "w" not in result


# --------------------------------------------------------------------------- item 5: Java regexes


# Issue "Correct under faults", item 5: a wildcard using Java-only syntax is read as Java reads it
# (before, Whitelist refused it and the rebalancer ignored a Kafka member registered with it).
@pytest.mark.parametrize(
    "regex, allowed",
    [
        ("\\p{Lower}+", ["events", "logs", "x"]),
        ("\\Qlogs.\\E\\p{Digit}++", ["logs.1"]),
        ("[a-z&&[^l]]++", ["events", "x"]),
        ("ev(?i)ENTS|LOGS(?-i)x?+", ["evENTS", "events", "logs"]),  # (?i) reaches past the |
        ("[a-z]+\\.\\p{Alnum}{3}+", ["metrics.cpu"]),  # no {n,m}: Kafka turns its comma into |
    ],
)
def test_item5_registration_with_java_only_regex_is_read_as_java(regex: str, allowed: List[str]) -> None:
    topics = ["events", "EVENTS", "evENTS", "Events", "logs", "logs.1", "metrics.cpu", "metrics.memory", "x"]
    if not RE_HAS_ATOMIC and regex != "\\p{Lower}+":  # the others are possessive: not in re before 3.11
        with pytest.raises(UnsupportedPatternError, match="need Python 3.11"):
            topic_count_from_registration("g_k1", Registration({regex: 2}, "white_list", "1", 1), True)
        return
    count = topic_count_from_registration("g_k1", Registration({regex: 2}, "white_list", "1", 1), True)
    assert isinstance(count, WildcardTopicCount)
    assert sorted(count.consumer_thread_ids(topics)) == sorted(allowed)
    assert Whitelist(regex).regex == regex


@pytest.mark.parametrize("regex", ["\\p{InGreek}+", "\\p{IsLatin}+", "ev\\X", "[^a[b]]+"])
def test_item5_untranslatable_registration_raises_unsupported(regex: str) -> None:
    registration = Registration({regex: 1}, "white_list", "1", 1)
    with pytest.raises(UnsupportedPatternError) as info:
        topic_count_from_registration("g_k1", registration, True)
    assert info.value.pattern == regex
    with pytest.raises(UnsupportedPatternError, match="Blacklist cannot be evaluated as Java would"):
        Blacklist(regex)


def test_item5_own_whitelist_with_untranslatable_regex_fails_at_construction() -> None:
    with pytest.raises(UnsupportedPatternError) as info:
        Whitelist(" \\p{InGreek}+ , logs ")
    assert info.value.pattern == "\\p{InGreek}+|logs"
    assert "Whitelist cannot be evaluated as Java would" in str(info.value) and "block" in str(info.value)
