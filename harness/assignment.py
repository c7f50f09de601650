"""Kafka's partition assignments, written again from their definitions: the referee of tests and benchmarks.

Independent of zkconsumer (it imports nothing of it), so a test or a benchmark that compares
zkconsumer's owner nodes with these answers compares two implementations, not one with itself.
The benchmarks (``rebalance/``) and the integration and unit tests import it from here (nothing
here imports the tests). The simulator's checker (``tests/sim/expected.py``) is the one other
copy: it runs from ``tests/`` (``scripts/simulate``), where the repository root and so this
package are not importable, and it also follows the registrations' wildcard subscriptions.

* Range, per topic: threads in Java ``String`` order, partitions as integers; ``n = |P| // |C|``,
  ``x = |P| % |C|``; thread ``i`` takes ``P[n*i + min(i, x) : ... + n + (1 if i < x else 0)]``.
* RoundRobin: partitions sorted by Java's ``String.hashCode`` of ``"[topic,partition]"``,
  element ``i`` to sorted thread ``i % |T|``.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Sequence, Tuple


def java_sorted(ids: Iterable[str]) -> List[str]:
    """Thread ids in Java String order (UTF-16 code units; ASCII ids sort as in Python)."""
    return sorted(ids, key=lambda s: s.encode("utf-16-be"))


def java_hash(s: str) -> int:
    """Java's ``String.hashCode`` (signed 32 bits over UTF-16 units)."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def expected_range(thread_ids: Sequence[str], partitions: int) -> Dict[int, str]:
    """Kafka's Range assignment of one topic's ``partitions`` over ``thread_ids`` (``{}`` without threads)."""
    threads = java_sorted(thread_ids)
    if not threads:
        return {}
    per, extra = divmod(partitions, len(threads))
    result: Dict[int, str] = {}
    for i, thread in enumerate(threads):
        start = per * i + min(i, extra)
        for p in range(start, start + per + (1 if i < extra else 0)):
            result[p] = thread
    return result


def expected_range_of_topics(threads_by_topic: Mapping[str, Sequence[str]],
                             partitions: Mapping[str, int]) -> Dict[Tuple[str, int], str]:
    """Range over each topic of ``partitions`` with its subscribed thread ids: ``{(topic, partition): thread}``."""
    return {(topic, p): thread for topic, count in partitions.items()
            for p, thread in expected_range(threads_by_topic.get(topic, ()), count).items()}


def expected_roundrobin(thread_ids: Sequence[str], topic: str, partitions: int) -> Dict[int, str]:
    """Kafka's RoundRobin assignment of one topic's ``partitions`` over ``thread_ids``."""
    threads = java_sorted(thread_ids)
    ordered = sorted(range(partitions), key=lambda p: java_hash(f"[{topic},{p}]"))
    return {p: threads[i % len(threads)] for i, p in enumerate(ordered)}


# --------------------------------------------------------------------------- Kafka 0.9's consumer protocol
# The broker-managed group's assignors (org.apache.kafka.clients.consumer.RangeAssignor and
# RoundRobinAssignor at 0.9.0.1) assign partitions to *members* (their member ids), from the
# topics each member's subscription lists.


def expected_member_range(subscriptions: Mapping[str, Sequence[str]],
                          partitions: Mapping[str, int]) -> Dict[str, List[Tuple[str, int]]]:
    """RangeAssignor: per topic, the members subscribed to it in Java String order; each takes
    ``n // m`` consecutive partitions and the first ``n % m`` one more. Member -> sorted partitions."""
    out: Dict[str, List[Tuple[str, int]]] = {m: [] for m in subscriptions}
    for topic, n in partitions.items():
        members = java_sorted(m for m, topics in subscriptions.items() if topic in topics)
        for i, m in enumerate(members):
            start = n // len(members) * i + min(i, n % len(members))
            out[m] += [(topic, p) for p in range(start, start + n // len(members) + (i < n % len(members)))]
    return {m: sorted(ps) for m, ps in out.items()}


def expected_member_roundrobin(subscriptions: Mapping[str, Sequence[str]],
                               partitions: Mapping[str, int]) -> Dict[str, List[Tuple[str, int]]]:
    """RoundRobinAssignor: every subscribed topic's partitions (topics in Java String order), over
    the members in Java String order as a circle, a member not subscribed to the topic skipped."""
    out: Dict[str, List[Tuple[str, int]]] = {m: [] for m in subscriptions}
    members = java_sorted(subscriptions)
    topics = java_sorted({t for ts in subscriptions.values() for t in ts if t in partitions})
    i = 0
    for topic in topics:
        for p in range(partitions[topic]):
            while topic not in subscriptions[members[i]]:
                i = (i + 1) % len(members)
            out[members[i]].append((topic, p))
            i = (i + 1) % len(members)
    return out
