"""Range and RoundRobin must equal Kafka's assignment byte for byte.

Expected values marked "JVM" were produced once, while developing, by Kafka
0.9.0.1's own ``RangeAssignor``/``RoundRobinAssignor`` (kafka_2.11-0.9.0.1.jar,
driven through ``AssignmentContext`` with an in-memory ``ZkUtils``) and by Java 17's
``String.hashCode``; they are baked in so these tests need no JVM.
"""

from __future__ import annotations

import random
from typing import Dict, List, Tuple

import pytest

from zkconsumer.assignors import (
    ASSIGNORS,
    AssignmentError,
    assign_range,
    assign_roundrobin,
    get_assignor,
    java_string_hash,
    java_string_key,
    owned_by,
    split_thread_id,
)
from zkconsumer.errors import ConfigurationError, ZkConsumerError

# --------------------------------------------------------------------------- java_string_hash

# JVM: Java 17 String.hashCode() of each string.
JAVA_HASHES = [
    ("", 0),
    ("hello", 99162322),
    ("[events,0]", -670581339),
    ("polygenelubricants", -2147483648),  # Integer.MIN_VALUE
    ("Aa", 2112),
    ("BB", 2112),
    ("[Aa,0]", -1626752098),
    ("[BB,0]", -1626752098),
    ("\U0001F600", 1772899),  # one code point, two UTF-16 units (0xD83D, 0xDE00)
    ("\u00e9", 233),
    ("\ufffd", 65533),
    ("topic-\U0001F600-x", 819757164),
    ("[t,2147483647]", 385498110),
    ("a" * 100, -323643840),
    ("g1_host-1700000000000-ab12cd34-0", -645940934),
    ("[__consumer_offsets,49]", 1079922750),
]


@pytest.mark.parametrize("s,expected", JAVA_HASHES)
def test_java_string_hash_matches_the_jvm(s: str, expected: int) -> None:
    assert java_string_hash(s) == expected


def test_java_string_hash_is_signed_32_bit() -> None:
    rng = random.Random(7)
    for _ in range(200):
        s = "".join(chr(rng.randrange(32, 0x2FFFF)) for _ in range(rng.randrange(0, 40)))
        s = s.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")
        h = java_string_hash(s)
        assert -(2**31) <= h < 2**31


def test_java_string_hash_by_hand() -> None:
    # h = 31*h + c: "ab" = 31*97 + 98
    assert java_string_hash("ab") == 31 * 97 + 98


def test_java_string_key_orders_by_utf16_code_units() -> None:
    assert sorted(["c-2", "c-10", "c-1"], key=java_string_key) == ["c-1", "c-10", "c-2"]
    # Python's code point order puts U+FFFD before U+1F600; Java's UTF-16 order the reverse.
    assert sorted(["\ufffd", "\U0001F600"]) == ["\ufffd", "\U0001F600"]
    assert sorted(["\ufffd", "\U0001F600"], key=java_string_key) == ["\U0001F600", "\ufffd"]


# --------------------------------------------------------------------------- helpers


def by_thread(assignment: Dict[Tuple[str, int], str]) -> Dict[str, List[Tuple[str, int]]]:
    result: Dict[str, List[Tuple[str, int]]] = {}
    for tp, thread in sorted(assignment.items()):
        result.setdefault(thread, []).append(tp)
    return result


def threads(consumer: str, n: int) -> List[str]:
    return [f"{consumer}-{i}" for i in range(n)]


# --------------------------------------------------------------------------- Range


def test_range_worked_example_seven_partitions() -> None:
    a = assign_range({"t": ["c2-0", "c1-1", "c1-0"]}, {"t": [6, 5, 4, 3, 2, 1, 0]})
    assert by_thread(a) == {
        "c1-0": [("t", 0), ("t", 1), ("t", 2)],
        "c1-1": [("t", 3), ("t", 4)],
        "c2-0": [("t", 5), ("t", 6)],
    }


def test_range_sorts_thread_ids_as_strings() -> None:
    # JVM: consumer "c" with 11 streams over 12 partitions; "c-10" sorts before "c-2".
    a = assign_range({"t": threads("c", 11)}, {"t": list(range(12))})
    assert a == {
        ("t", 0): "c-0", ("t", 1): "c-0", ("t", 2): "c-1", ("t", 3): "c-10", ("t", 4): "c-2",
        ("t", 5): "c-3", ("t", 6): "c-4", ("t", 7): "c-5", ("t", 8): "c-6", ("t", 9): "c-7",
        ("t", 10): "c-8", ("t", 11): "c-9",
    }


def test_range_sorts_partitions_as_integers() -> None:
    a = assign_range({"t": ["c-0", "c-1"]}, {"t": [10, 9, 2, 1]})
    assert by_thread(a) == {"c-0": [("t", 1), ("t", 2)], "c-1": [("t", 9), ("t", 10)]}


def test_range_per_topic_with_uneven_subscriptions() -> None:
    # JVM: a = {x: 2, y: 1}, b = {x: 1}; x has 5 partitions, y 3.
    consumers = {"x": threads("a", 2) + threads("b", 1), "y": threads("a", 1)}
    a = assign_range(consumers, {"x": range(5), "y": range(3)})
    assert a == {
        ("x", 0): "a-0", ("x", 1): "a-0", ("x", 2): "a-1", ("x", 3): "a-1", ("x", 4): "b-0",
        ("y", 0): "a-0", ("y", 1): "a-0", ("y", 2): "a-0",
    }


def test_range_more_threads_than_partitions_leaves_threads_idle() -> None:
    a = assign_range({"t": threads("c", 5)}, {"t": [0, 1]})
    assert a == {("t", 0): "c-0", ("t", 1): "c-1"}


def test_range_topics_without_partitions_or_consumers_get_nothing() -> None:
    a = assign_range({"t": ["c-0"], "u": ["c-0"], "w": []}, {"t": [], "v": [0], "w": [0]})
    assert a == {}


def test_range_formula_matches_design_for_many_shapes() -> None:
    for n_threads in range(1, 9):
        for n_parts in range(0, 20):
            ts = threads("c", n_threads)
            a = assign_range({"t": ts}, {"t": list(range(n_parts))})
            cs = sorted(ts)
            n, x = divmod(n_parts, n_threads)
            expected = {}
            for i, thread in enumerate(cs):
                start = n * i + min(i, x)
                for p in range(start, start + n + (1 if i < x else 0)):
                    expected[("t", p)] = thread
            assert a == expected


def test_range_is_independent_of_input_order() -> None:
    rng = random.Random(3)
    ts = threads("a", 3) + threads("b", 2)
    ps = list(range(13))
    expected = assign_range({"t": ts}, {"t": ps})
    for _ in range(20):
        rng.shuffle(ts)
        rng.shuffle(ps)
        assert assign_range({"t": list(ts)}, {"t": list(ps)}) == expected


# --------------------------------------------------------------------------- RoundRobin


def test_roundrobin_two_topics_matches_kafka() -> None:
    # JVM: c1 and c2 each {a: 2, b: 2}; a has partitions 0-2, b has 0.
    consumers = {"a": threads("c1", 2) + threads("c2", 2), "b": threads("c2", 2) + threads("c1", 2)}
    a = assign_roundrobin(consumers, {"a": [0, 1, 2], "b": [0]})
    assert a == {("a", 0): "c1-0", ("a", 1): "c1-1", ("a", 2): "c2-0", ("b", 0): "c2-1"}


def test_roundrobin_interleaves_topics_by_hash_as_kafka() -> None:
    # JVM: c1 {events: 1, logs: 1}, c2 {events: 2, logs: 2}; events 0-11, logs 0-5.
    ts = threads("c1", 1) + threads("c2", 2)
    a = assign_roundrobin({"events": ts, "logs": ts}, {"events": range(12), "logs": range(6)})
    assert a == {
        ("events", 0): "c1-0", ("events", 1): "c2-0", ("events", 2): "c2-1", ("events", 3): "c1-0",
        ("events", 4): "c2-0", ("events", 5): "c2-1", ("events", 6): "c1-0", ("events", 7): "c2-0",
        ("events", 8): "c2-1", ("events", 9): "c1-0", ("events", 10): "c2-0", ("events", 11): "c2-1",
        ("logs", 0): "c2-0", ("logs", 1): "c2-1", ("logs", 2): "c1-0", ("logs", 3): "c2-0",
        ("logs", 4): "c2-1", ("logs", 5): "c1-0",
    }


def test_roundrobin_order_computed_independently() -> None:
    ts = ["c-0", "c-1", "c-10", "c-2"]  # sorted as strings already
    partitions = {"alpha": [0, 1, 2, 3, 4], "beta": [0, 1, 2]}
    pairs = [(t, p) for t in partitions for p in partitions[t]]
    pairs.sort(key=lambda tp: java_string_hash("[%s,%d]" % tp))
    expected = {tp: ts[i % len(ts)] for i, tp in enumerate(pairs)}
    consumers = {"alpha": list(reversed(ts)), "beta": ts}
    assert assign_roundrobin(consumers, partitions) == expected


def test_roundrobin_ties_keep_partition_order_within_a_topic_and_sort_topics_by_name() -> None:
    # "[Aa,p]" and "[BB,p]" hash equal for every p: the sort is stable; topics enter by name.
    hashes = {java_string_hash(f"[{t},{p}]") for t in ("Aa", "BB") for p in (0, 1)}
    assert len(hashes) == 2
    a = assign_roundrobin({"BB": threads("c", 4), "Aa": threads("c", 4)}, {"BB": [1, 0], "Aa": [0, 1]})
    assert a == {("Aa", 0): "c-0", ("BB", 0): "c-1", ("Aa", 1): "c-2", ("BB", 1): "c-3"}


def test_roundrobin_requires_identical_subscriptions() -> None:
    with pytest.raises(AssignmentError) as info:
        assign_roundrobin({"a": ["c1-0"], "b": ["c2-0"]}, {"a": [0], "b": [0]})
    message = str(info.value)
    assert "Round-robin assignment is allowed only if all consumers in the group subscribe to the same topics" in message
    assert "Topic b" in message and "c2-0" in message and "topic a" in message
    assert isinstance(info.value, ZkConsumerError)
    assert info.value.retriable is False


def test_roundrobin_requires_identical_stream_counts() -> None:
    with pytest.raises(AssignmentError, match="stream counts"):
        assign_roundrobin({"a": ["c1-0", "c2-0"], "b": ["c1-0", "c2-0", "c2-1"]}, {"a": [0], "b": [0]})


def test_roundrobin_empty_and_idle_cases() -> None:
    assert assign_roundrobin({}, {"a": [0]}) == {}
    assert assign_roundrobin({"a": ["c-0", "c-1", "c-2"]}, {"a": [0]}) == {("a", 0): "c-0"}
    assert assign_roundrobin({"a": ["c-0"]}, {}) == {}


def test_roundrobin_balances_within_one() -> None:
    rng = random.Random(11)
    for _ in range(30):
        ts = threads("x", rng.randint(1, 4)) + threads("y", rng.randint(1, 4))
        parts = {f"t{i}": list(range(rng.randint(0, 9))) for i in range(rng.randint(1, 4))}
        a = assign_roundrobin({t: ts for t in parts}, parts)
        counts = [sum(1 for th in a.values() if th == t) for t in ts]
        assert max(counts) - min(counts) <= 1
        assert len(a) == sum(len(p) for p in parts.values())


# --------------------------------------------------------------------------- registry and ownership


def test_assignor_registry() -> None:
    assert ASSIGNORS == {"range": assign_range, "roundrobin": assign_roundrobin}
    assert get_assignor("range") is assign_range
    assert get_assignor(" RoundRobin ") is assign_roundrobin
    with pytest.raises(ConfigurationError) as info:
        get_assignor("sticky")
    assert info.value.property == "partition.assignment.strategy"
    assert "'sticky'" in str(info.value)


def test_owned_by_does_not_confuse_prefixed_consumer_ids() -> None:
    assignment = {
        ("t", 0): "g_a-0",
        ("t", 1): "g_a-1-0",
        ("t", 2): "g_a-10",
        ("t", 3): "g_a-1-1",
        ("t", 4): "g_ab-0",
        ("t", 5): "g_a-x",
    }
    assert owned_by(assignment, "g_a") == {("t", 0): "g_a-0", ("t", 2): "g_a-10"}
    assert owned_by(assignment, "g_a-1") == {("t", 1): "g_a-1-0", ("t", 3): "g_a-1-1"}
    assert owned_by(assignment, "g_ab") == {("t", 4): "g_ab-0"}
    assert owned_by(assignment, "g") == {}


def test_split_thread_id() -> None:
    assert split_thread_id("g_host-1700000000000-ab12cd34-3") == ("g_host-1700000000000-ab12cd34", 3)
    for bad in ("nodash", "c-", "-1", "c-x", "c-1a"):
        with pytest.raises(ValueError):
            split_thread_id(bad)
