"""Kafka 0.8's partition assignors as pure functions of plain data.

Every member of a group evaluates the *whole* group's assignment from the same
inputs (the members' registrations and the topics' partition lists read from
ZooKeeper) and then claims only its own share, so every member, including Kafka's
own Scala consumer in a mixed group, must compute exactly the same mapping. The
functions here reproduce ``kafka.consumer.RangeAssignor`` and
``kafka.consumer.RoundRobinAssignor`` (Kafka 0.8.2.2 / 0.9.0.1):

* thread ids (``"<consumerId>-<index>"``) sort as Java strings, i.e. by UTF-16
  code units: ``"c-10" < "c-2"`` (see :func:`java_string_key`);
* partitions sort as integers;
* RoundRobin orders all partitions by Java's ``String.hashCode`` of
  ``"[<topic>,<partition>]"`` (see :func:`java_string_hash`).

Inputs (what :mod:`zkconsumer.rebalance.rebalancer` gathers):

``consumers_for_topic``
    topic -> thread ids of every member subscribed to it (any order; they are
    sorted here; duplicates are ignored).
``partitions_for_topic``
    topic -> partition ids of that topic (any order; sorted here).

Output: ``{(topic, partition): thread_id}`` for the whole group. Topics absent from
either mapping, or with no threads or no partitions, get nothing; threads beyond
the number of partitions stay idle. Use :func:`owned_by` to pick one member's share.

May import: errors, structs.
"""

from __future__ import annotations

import re
from typing import Callable, Dict, Iterable, List, Mapping, Sequence, Tuple

from .errors import ConfigurationError, ZkConsumerError
from .structs import TopicPartition

__all__ = [
    "ASSIGNORS",
    "Assignment",
    "AssignmentError",
    "Assignor",
    "assign_range",
    "assign_roundrobin",
    "get_assignor",
    "is_thread_of",
    "java_string_hash",
    "java_string_key",
    "owned_by",
    "split_thread_id",
]

#: ``(topic, partition)``, Kafka's ``TopicAndPartition``.
#: The whole group's assignment: partition -> owning thread id.
Assignment = Dict[TopicPartition, str]
#: The signature shared by :func:`assign_range` and :func:`assign_roundrobin`.
Assignor = Callable[[Mapping[str, Sequence[str]], Mapping[str, Sequence[int]]], Assignment]


class AssignmentError(ZkConsumerError):
    """The group's subscriptions do not allow the configured assignment strategy.

    Raised by :func:`assign_roundrobin` when members subscribe to different topics
    or with different stream counts per topic (Kafka raises
    ``IllegalArgumentException`` from ``require`` there). Not retriable: the
    members' subscriptions (or ``partition.assignment.strategy``) must change.
    """


# --------------------------------------------------------------------------- Java strings


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode()``: ``h = 31*h + c`` over UTF-16 code units, signed 32-bit.

    Characters outside the Basic Multilingual Plane count as their two surrogate
    code units, exactly as in Java.

    >>> java_string_hash("")
    0
    >>> java_string_hash("hello")
    99162322
    >>> java_string_hash("[events,0]")   # wraps around past 2**31 - 1 to a negative value
    -670581339
    """
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def java_string_key(s: str) -> bytes:
    """A sort key that orders strings as Java's ``String.compareTo`` does.

    Java compares UTF-16 code units; Python compares code points. They differ only
    when a character above U+FFFF meets one in U+E000..U+FFFF, but the members of
    a mixed group must agree, so thread ids are always sorted with this key.
    Byte-wise comparison of UTF-16-BE equals code-unit comparison.

    >>> sorted(["c-2", "c-10"], key=java_string_key)
    ['c-10', 'c-2']
    >>> sorted(["\\U0001F600", "\\uFFFD"], key=java_string_key)  # surrogate 0xD83D < 0xFFFD
    ['😀', '�']
    """
    return s.encode("utf-16-be", "surrogatepass")


# --------------------------------------------------------------------------- helpers


def _sorted_threads(threads: Iterable[str]) -> List[str]:
    return sorted(set(threads), key=java_string_key)


def _sorted_partitions(partitions: Iterable[int]) -> List[int]:
    return sorted(set(int(p) for p in partitions))


def _subscribed_topics(
    consumers_for_topic: Mapping[str, Sequence[str]], partitions_for_topic: Mapping[str, Sequence[int]]
) -> List[str]:
    """Topics that have at least one thread and appear in ``partitions_for_topic``, sorted."""
    return sorted(
        (t for t, threads in consumers_for_topic.items() if threads and t in partitions_for_topic),
        key=java_string_key,
    )


# --------------------------------------------------------------------------- Range


def assign_range(
    consumers_for_topic: Mapping[str, Sequence[str]],
    partitions_for_topic: Mapping[str, Sequence[int]],
) -> Assignment:
    """Kafka's Range assignment, topic by topic.

    For each topic: ``C`` = its thread ids sorted as strings, ``P`` = its
    partitions sorted as integers, ``n = len(P) // len(C)``, ``x = len(P) % len(C)``.
    Thread ``C[i]`` takes ``P[n*i + min(i, x)]`` and the following
    ``n + (1 if i < x else 0) - 1`` partitions: a contiguous range, the first ``x``
    threads one partition more than the others.

    Worked example: 7 partitions, threads ``["c2-0", "c1-1", "c1-0"]``. Sorted
    ``C = [c1-0, c1-1, c2-0]``, ``n = 2``, ``x = 1``: ``c1-0`` takes 3 partitions from
    index 0, ``c1-1`` takes 2 from index 3, ``c2-0`` takes 2 from index 5.

    >>> a = assign_range({"t": ["c2-0", "c1-1", "c1-0"]}, {"t": range(7)})
    >>> [a[("t", p)] for p in range(7)]
    ['c1-0', 'c1-0', 'c1-0', 'c1-1', 'c1-1', 'c2-0', 'c2-0']

    With more threads than partitions, the last threads get nothing:

    >>> assign_range({"t": ["c-0", "c-1", "c-10", "c-2"]}, {"t": [0, 1]})
    {('t', 0): 'c-0', ('t', 1): 'c-1'}
    """
    assignment: Assignment = {}
    for topic in _subscribed_topics(consumers_for_topic, partitions_for_topic):
        threads = _sorted_threads(consumers_for_topic[topic])
        partitions = _sorted_partitions(partitions_for_topic[topic])
        per_thread, extra = divmod(len(partitions), len(threads))
        for i, thread_id in enumerate(threads):
            start = per_thread * i + min(i, extra)
            count = per_thread + (1 if i < extra else 0)
            for partition in partitions[start : start + count]:
                assignment[(topic, partition)] = thread_id
    return assignment


# --------------------------------------------------------------------------- RoundRobin


def assign_roundrobin(
    consumers_for_topic: Mapping[str, Sequence[str]],
    partitions_for_topic: Mapping[str, Sequence[int]],
) -> Assignment:
    """Kafka's RoundRobin assignment over all subscribed partitions at once.

    Requires every topic to have the same *set* of thread ids (every member
    subscribes to the same topics with the same stream count); otherwise raises
    :class:`AssignmentError`. Then all ``(topic, partition)`` pairs are sorted by
    ``java_string_hash(f"[{topic},{partition}]")`` (ascending, signed) and dealt
    one by one to the thread ids sorted as strings, cycling.

    Equal hashes keep their relative input order (Kafka's sort is stable). Within
    a topic partitions enter in ascending order, as in Kafka. Across topics Kafka's
    input order is a Scala ``HashMap`` iteration order, which is neither specified
    nor the same between Kafka members; here topics enter sorted by name, so ties
    between *different topics* (two names of equal length and equal
    ``String.hashCode``, e.g. ``"Aa"``/``"BB"``, or a chance collision) are broken
    deterministically but not necessarily as a given Kafka member would.

    Worked example: topics ``a`` (partitions 0, 1) and ``b`` (partition 0), threads
    ``c-0`` and ``c-1``. Hashes: ``[a,0]`` = 86974003, ``[a,1]`` = 86974034,
    ``[b,0]`` = 87003794. Sorted: ``[a,0]``, ``[a,1]``, ``[b,0]``; dealt to
    ``c-0``, ``c-1``, ``c-0``.

    >>> assign_roundrobin({"a": ["c-0", "c-1"], "b": ["c-1", "c-0"]}, {"a": [0, 1], "b": [0]})
    {('a', 0): 'c-0', ('a', 1): 'c-1', ('b', 0): 'c-0'}
    """
    topics = [t for t, threads in consumers_for_topic.items() if threads]
    if not topics:
        return {}
    head_topic = topics[0]
    head_threads = frozenset(consumers_for_topic[head_topic])
    for topic in topics[1:]:
        threads = frozenset(consumers_for_topic[topic])
        if threads != head_threads:
            raise AssignmentError(
                "Round-robin assignment is allowed only if all consumers in the group subscribe to the "
                "same topics, AND if the stream counts across topics are identical for a given consumer "
                f"instance. Topic {topic} has the following available consumer streams: "
                f"{_sorted_threads(threads)}; topic {head_topic} has the following available consumer "
                f"streams: {_sorted_threads(head_threads)}"
            )
    ordered_threads = _sorted_threads(head_threads)

    pairs: List[TopicPartition] = []
    for topic in _subscribed_topics(consumers_for_topic, partitions_for_topic):
        pairs.extend((topic, p) for p in _sorted_partitions(partitions_for_topic[topic]))
    pairs.sort(key=lambda tp: java_string_hash(f"[{tp[0]},{tp[1]}]"))  # stable, as Kafka's sortWith

    return {tp: ordered_threads[i % len(ordered_threads)] for i, tp in enumerate(pairs)}


# --------------------------------------------------------------------------- registry


#: ``partition.assignment.strategy`` value -> assignor.
ASSIGNORS: Mapping[str, Assignor] = {"range": assign_range, "roundrobin": assign_roundrobin}


def get_assignor(name: str) -> Assignor:
    """The assignor for a ``partition.assignment.strategy`` value (case-insensitive).

    Unknown names raise :class:`zkconsumer.errors.ConfigurationError` (Kafka itself
    silently falls back to Range; its config validation rejects them earlier).

    >>> get_assignor("RoundRobin") is assign_roundrobin
    True
    """
    try:
        return ASSIGNORS[name.strip().lower()]
    except (KeyError, AttributeError):
        raise ConfigurationError(
            "partition.assignment.strategy",
            f"invalid value {name!r}: valid values are {', '.join(sorted(ASSIGNORS))}",
        ) from None


_THREAD_INDEX = re.compile(r"[0-9]+")


def split_thread_id(thread_id: str) -> Tuple[str, int]:
    """``"<consumerId>-<index>"`` -> ``(consumerId, index)``; ValueError if not of that form.

    The index is the part after the *last* ``-``, so consumer ids that contain
    ``-`` (every generated one does) split correctly.

    >>> split_thread_id("g_host-1700000000000-1a2b3c4d-10")
    ('g_host-1700000000000-1a2b3c4d', 10)
    """
    consumer_id, sep, index = thread_id.rpartition("-")
    if not sep or not consumer_id or not _THREAD_INDEX.fullmatch(index):
        raise ValueError(f"not a consumer thread id: {thread_id!r}")
    return consumer_id, int(index)


def owned_by(assignment: Mapping[TopicPartition, str], consumer_id: str) -> Assignment:
    """The part of ``assignment`` whose threads belong to ``consumer_id``.

    A thread belongs to ``consumer_id`` when it is ``consumer_id + "-" + digits``.
    Matching the whole suffix matters: consumer ``g_a`` must not pick up the threads
    of consumer ``g_a-1`` (``"g_a-1-0"`` starts with ``"g_a-"`` but its suffix
    ``"1-0"`` is not an integer).

    >>> a = {("t", 0): "g_a-0", ("t", 1): "g_a-1-0", ("t", 2): "g_a-10"}
    >>> owned_by(a, "g_a")
    {('t', 0): 'g_a-0', ('t', 2): 'g_a-10'}
    >>> owned_by(a, "g_a-1")
    {('t', 1): 'g_a-1-0'}
    """
    return {tp: thread for tp, thread in assignment.items() if is_thread_of(thread, consumer_id)}


def is_thread_of(thread_id: str, consumer_id: str) -> bool:
    """True when ``thread_id`` is one of ``consumer_id``'s threads: ``consumer_id + "-" + digits``.

    >>> is_thread_of("g_a-10", "g_a"), is_thread_of("g_a-1-0", "g_a"), is_thread_of("g_a-1-0", "g_a-1")
    (True, False, True)
    """
    prefix = consumer_id + "-"
    return thread_id.startswith(prefix) and _THREAD_INDEX.fullmatch(thread_id[len(prefix) :]) is not None
