"""What a member decides in a rebalance, as pure functions of plain data (no I/O).

:class:`~zkconsumer.rebalance.rebalancer.Rebalancer` (and the :class:`~zkconsumer.rebalance.ownership.Ownership` it builds)
does the talking: reading members, topics and owner nodes, claiming, releasing, committing,
waiting. Every *decision* it makes between those steps is one of the functions here, fed
what was read and what the member holds, and answering what to do next:

* when to act on an event (:func:`quiet_wait`), whether to drop a view made stale by a new
  event (:func:`supersede`), whether the assignment asks for anything at all
  (:func:`next_step`);
* which partitions stop being delivered (:func:`moving`), which owner nodes are released
  (:func:`leaving`), which are kept without a write (:func:`retained`), which moved between
  our own streams resume where they were (:func:`carried`);
* how long a conflicting claim is waited on (:func:`claim_deadline`), when an attempt counts
  as giving up (:func:`gives_up`) and how long to back off (:func:`jittered_backoff`).

The same functions run in production (under kazoo and real threads) and in the
deterministic simulator (``tests/sim``), which drives the real rebalancer.

May import: the standard library's ``typing`` and ``enum``, and :mod:`zkconsumer.structs`
(standard library only itself), nothing else. No kazoo, no
sockets, no threads, no clock, no randomness of its own (a draw in ``[0, 1)`` is passed
in): every answer is a function of the arguments. ``tests/unit/rebalance/test_decisions.py`` checks the imports.
"""

from __future__ import annotations

from enum import Enum
from typing import AbstractSet, Iterable, List, Mapping, Optional, Set, Tuple

from ..structs import TopicPartition


def quiet_wait(last_event_at: Optional[float], now: float, calm_s: float, quiet_s: float,
               first_quiet_s: float) -> Optional[float]:
    """How long to wait for a burst of events to end before acting (``None``: act at once).

    The first assignment waits ``first_quiet_s``; an event less than ``calm_s``
    after the previous one is part of a burst and waits ``quiet_s``; the first
    event after a calm is acted on at once.

    >>> quiet_wait(None, 5.0, 1.0, 0.25, 0.1), quiet_wait(4.5, 5.0, 1.0, 0.25, 0.1), quiet_wait(1.0, 5.0, 1.0, 0.25, 0.1)
    (0.1, 0.25, None)
    """
    if last_event_at is None:
        return first_quiet_s
    return quiet_s if now - last_event_at < calm_s else None


def supersede(stale: bool, early_supersedes: int, max_early: int, mine: Mapping[TopicPartition, str],
              owned: Mapping[TopicPartition, str]) -> bool:
    """Drop this attempt's view (a new event arrived while it was read) instead of acting on it?

    Only when acting would change something, and not more than ``max_early`` times in a
    row (a group that never calms down still gets an assignment).
    """
    return stale and early_supersedes < max_early and dict(mine) != dict(owned)


class Step(Enum):
    """What an attempt does once it knows its share (:func:`next_step`)."""

    NOTHING = "nothing"  # the share is what we own, fetch and hold nodes for
    CONFIRM = "confirm"  # the same, but our member node had vanished: confirm the owner nodes first
    MOVE = "move"  # pause what moves, release, claim, install


def next_step(mine: Mapping[TopicPartition, str], owned: Mapping[TopicPartition, str], fetching: bool,
              nodes: AbstractSet[TopicPartition], confirm_owners: bool) -> Step:
    if dict(mine) == dict(owned) and fetching and set(nodes) == set(mine):
        return Step.CONFIRM if confirm_owners else Step.NOTHING
    return Step.MOVE


def moving(delivered: Iterable[TopicPartition], mine: Mapping[TopicPartition, str],
           owned: Mapping[TopicPartition, str]) -> List[TopicPartition]:
    """The delivered partitions to stop: no longer ours, or going to another of our streams."""
    return [tp for tp in delivered if mine.get(tp) is None or mine.get(tp) != owned.get(tp)]


def carried(revoked: Mapping[TopicPartition, int], mine: Mapping[TopicPartition, str],
            owned: Mapping[TopicPartition, str]) -> List[Tuple[TopicPartition, int]]:
    """Of the stopped partitions (with their consumed offsets), those staying ours (another of our
    streams) whose position is known: they resume where they were, not from the committed offset."""
    return [(tp, offset) for tp, offset in revoked.items() if tp in mine and tp in owned and offset >= 0]


def leaving(nodes: AbstractSet[TopicPartition], mine: Mapping[TopicPartition, str]) -> List[TopicPartition]:
    """Owner nodes this session holds that the new share does not keep: released, in order."""
    return sorted(set(nodes) - set(mine))


def retained(mine: Mapping[TopicPartition, str], delivered: AbstractSet[TopicPartition],
             owned: Mapping[TopicPartition, str]) -> Set[TopicPartition]:
    """Partitions delivered now by the very thread the share gives them to: kept as they are."""
    return {tp for tp in mine if tp in delivered and owned.get(tp) == mine[tp]}


def claim_deadline(now: float, backoff_s: float, max_retries: int) -> float:
    """Until when a claim that meets a peer's node waits for it (what Kafka's consumer spends on
    ``rebalance.max.retries`` failed attempts before giving up)."""
    return now + backoff_s * max_retries


def gives_up(done: bool, failures_before: int, max_retries: int) -> bool:
    """Does this attempt's outcome make ``rebalance.max.retries`` failures in a row?"""
    return not done and failures_before + 1 >= max_retries


def jittered_backoff(backoff_s: float, failures: int, max_retries: int, draw: float, floor_s: float = 0.0) -> float:
    """``backoff_s`` ± 50% (``draw`` in ``[0, 1)``), growing up to 4× once the retries ran out, and
    never below ``floor_s``: the floor applies after the jitter, so no wait is shorter than it.

    >>> jittered_backoff(2.0, 1, 4, 0.5), jittered_backoff(2.0, 6, 4, 0.5), jittered_backoff(2.0, 9, 4, 0.0)
    (2.0, 8.0, 4.0)
    >>> jittered_backoff(0.1, 1, 4, 0.0, floor_s=0.1)
    0.1
    """
    factor = min(4.0, 2.0 ** max(0, failures - max_retries))
    return max(floor_s, backoff_s * factor * (0.5 + draw))
