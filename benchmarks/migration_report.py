"""The migration benchmark's figures from what the members delivered (pure arithmetic, no cluster).

A delivery is ``(time, member, partition, offset)``: ``time`` in seconds (one monotonic clock),
``member`` a name unique within the run. :func:`figures` judges one phase's window:

* ``longest_undelivered_s``: the longest time any partition went without a delivery, counting
  from the window's start and up to its end (a partition never delivered again counts to the end);
* ``duplicates``: deliveries of a (partition, offset) already delivered within the window;
* ``overlap``: partitions delivered by two members at once. Judged as the integration tests judge
  it: in delivery order, a partition whose offset goes back (a delivery at or below the previous
  one) on a member whose run came just before the previous member's run, that is, two members
  alternating on one partition (A, B, A going back). A hand-over that repeats what the last owner
  delivered after its last commit is a duplicate, not an overlap: the new owner starts a run of
  its own and the old one never delivers that partition again.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Collection, Dict, Iterable, List, Mapping, Set, Tuple

Delivery = Tuple[float, str, int, int]


def longest_gap(deliveries: Iterable[Delivery], start: float, end: float, partitions: int) -> Tuple[float, int]:
    """The longest time, within ``[start, end]``, that one of ``partitions`` (0..n-1) went undelivered,
    and that partition (-1 if none): gaps between consecutive deliveries, from ``start`` to the first,
    and from the last to ``end``."""
    last: Dict[int, float] = {}
    gap, worst = 0.0, -1
    for t, _, p, _ in sorted(d for d in deliveries if start <= d[0] <= end):
        if t - last.get(p, start) > gap:
            gap, worst = t - last.get(p, start), p
        last[p] = t
    for p in range(partitions):
        if end - last.get(p, start) > gap:
            gap, worst = end - last.get(p, start), p
    return gap, worst


def duplicates(deliveries: Iterable[Delivery]) -> int:
    """Deliveries of a (partition, offset) delivered before, by any member."""
    seen: Set[Tuple[int, int]] = set()
    count = 0
    for _, _, p, o in deliveries:
        count += (p, o) in seen
        seen.add((p, o))
    return count


def overlaps(deliveries: Iterable[Delivery]) -> List[str]:
    """Every step back on a partition by the member whose run came before the previous run (see
    the module docstring), in words; empty when no partition was delivered by two members at once."""
    runs: Dict[int, List[str]] = {}  # per partition: who delivered each run, in order
    last: Dict[int, Tuple[int, str]] = {}
    found: List[str] = []
    for t, member, p, o in sorted(deliveries):
        who = runs.setdefault(p, [])
        if p in last and o <= last[p][0] and len(who) >= 2 and who[-1] != member and who[-2] == member:
            found.append(f"partition {p}: offset {o} by {member} at {t:.3f} after {last[p][0]} by {last[p][1]}")
        if not who or who[-1] != member:
            who.append(member)
        last[p] = (o, member)
    return found


def figures(deliveries: Collection[Delivery], start: float, end: float, partitions: int) -> Dict[str, Any]:
    """One phase's figures over the deliveries within ``[start, end]`` (see the module docstring);
    ``overlap`` counts partitions, ``overlap_examples`` shows up to 5 of the steps back, ``delivered_by``
    each member's deliveries (who actually consumed in the window)."""
    window = sorted(d for d in deliveries if start <= d[0] <= end)
    gap, worst = longest_gap(window, start, end, partitions)
    steps = overlaps(window)
    return {"longest_undelivered_s": round(gap, 3), "partition": worst, "duplicates": duplicates(window),
            "overlap": len({s.split(":")[0] for s in steps}), "overlap_examples": steps[:5],
            "delivered_by": dict(sorted(Counter(member for _, member, _, _ in window).items()))}


def lost(acked: Collection[bytes], delivered: Iterable[bytes]) -> int:
    """Acknowledged values never delivered."""
    return len(set(acked) - set(delivered))


def resolve(values: Iterable[Tuple[float, str, bytes]], where: Mapping[bytes, Tuple[int, int]]) -> List[Delivery]:
    """Deliveries known by value only (a child process prints values) placed by the producer's
    acknowledgements (value -> partition, offset); values never acknowledged are left out."""
    return [(t, member, *where[v]) for t, member, v in values if v in where]


def table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """The Markdown table of every phase's figures."""
    lines = ["| procedure | longest time a partition went undelivered | duplicates | overlap | lost | step took |",
             "|---|---|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['longest_undelivered_s']:.2f} s (partition {r['partition']}) | "
                     f"{r['duplicates']} | {r['overlap']} | {r['lost']} | {r['command_s']:.1f} s |")
    return "\n".join(lines)
