"""Kafka's assignment, written again from its definition for the checker (not zkconsumer's code).

* Range, per topic: threads sorted as strings, partitions as integers; ``n = |P| // |C|``,
  ``x = |P| % |C|``; thread ``i`` takes ``P[n*i + min(i, x) : ... + n + (1 if i < x else 0)]``.
* RoundRobin: all ``(topic, partition)`` sorted by Java's ``String.hashCode`` of
  ``"[topic,partition]"`` (stable on ties, from the topic-then-partition order), element ``i``
  to sorted thread ``i % |T|``.
"""

from __future__ import annotations

import json
import re
from typing import Dict, List, Mapping, Optional, Sequence

from zkconsumer.structs import TopicPartition


def java_hash(s: str) -> int:
    """Java's ``String.hashCode`` (signed 32 bits over UTF-16 units)."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def threads_per_topic(registrations: Mapping[str, bytes], topics: Sequence[str]) -> Dict[str, List[str]]:
    """topic -> sorted thread ids, from the raw registration nodes under ``ids``."""
    out: Dict[str, List[str]] = {}
    for consumer_id, raw in sorted(registrations.items()):
        reg = json.loads(raw)
        for key, n in reg["subscription"].items():
            if reg["pattern"] == "static":
                matched = [key] if key in topics else []
            else:
                matched = [t for t in topics if re.fullmatch(key, t)]
            for topic in matched:
                out.setdefault(topic, []).extend(f"{consumer_id}-{i}" for i in range(int(n)))
    return {t: sorted(ids) for t, ids in out.items()}


def expected(strategy: str, registrations: Mapping[str, bytes], partitions: Mapping[str, int]
             ) -> Optional[Dict[TopicPartition, str]]:
    """The whole group's assignment; ``None`` when RoundRobin's precondition does not hold."""
    threads = threads_per_topic(registrations, sorted(partitions))
    result: Dict[TopicPartition, str] = {}
    if strategy == "range":
        for topic, ids in threads.items():
            parts = list(range(partitions[topic]))
            n, x = divmod(len(parts), len(ids))
            for i, thread in enumerate(ids):
                start = n * i + min(i, x)
                for p in parts[start:start + n + (1 if i < x else 0)]:
                    result[(topic, p)] = thread
        return result
    sets = {tuple(ids) for ids in threads.values()}
    if len(sets) > 1:
        return None
    if not sets:
        return result
    ids = sorted(next(iter(sets)))
    tps = sorted(((t, p) for t in threads for p in range(partitions[t])))
    tps.sort(key=lambda tp: java_hash(f"[{tp[0]},{tp[1]}]"))
    for i, tp in enumerate(tps):
        result[tp] = ids[i % len(ids)]
    return result
