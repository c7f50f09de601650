"""Burrow's lag evaluation rules (zkconsumer.monitoring.burrow), table-driven.

The first table holds the windows of Burrow's own evaluator test suite (its
"correctness proof" of the rules, core/internal/evaluator): commits as
(offset, timestamp ms, lag), the current lag, the time now (s) and the status
Burrow expects. The second table adds one case per rule in the module's numbering.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import pytest

from zkconsumer.monitoring.burrow import Commit, GroupStatus, PartitionStatus, PartitionWindow, evaluate_group, evaluate_partition

OK, WARN, STALL, STOP, REWIND = (PartitionStatus.OK, PartitionStatus.WARN, PartitionStatus.STALL,
                                 PartitionStatus.STOP, PartitionStatus.REWIND)


def window(*rows: Tuple[int, int, Optional[int]]) -> List[Commit]:
    return [Commit(offset, ts, lag) for offset, ts, lag in rows]


RISING = [(1000, 100000, 0), (2000, 200000, 50), (3000, 300000, 100), (4000, 400000, 150), (5000, 500000, 200)]
RISING_NONZERO = [(1000, 100000, 50), (2000, 200000, 100), (3000, 300000, 150), (4000, 400000, 200),
                  (5000, 500000, 250)]

BURROW_EVALUATOR_CASES = [
    # zero lag somewhere in the window: OK (rule 1)
    ("zero-lag-in-window", RISING, 200, 600, OK),
    # now - last (400 s) equals last - first (400 s): not stopped
    ("stop-boundary-is-not-stop", RISING, 200, 900, OK),
    # stopped by timestamps, but a zero lag in the window keeps it OK
    ("stopped-but-zero-lag-in-window", RISING, 200, 1000, OK),
    # lag never zero and no commit for longer than the window's span: STOP (rule 4)
    ("stopped", RISING_NONZERO, 250, 1000, STOP),
    # offset never moves, but a zero lag at the start: OK
    ("same-offset-with-zero-lag", [(1000, t, lag) for t, lag in
                                   zip(range(100000, 600000, 100000), (0, 50, 100, 150, 200))], 200, 600, OK),
    # offset never moves, lag grows: STALL (rule 2)
    ("stalled-lag-growing", [(1000, t, lag) for t, lag in
                             zip(range(100000, 600000, 100000), (100, 150, 200, 250, 300))], 300, 600, STALL),
    # offset never moves, lag constant: still STALL
    ("stalled-lag-fixed", [(1000, t, 100) for t in range(100000, 600000, 100000)], 100, 600, STALL),
    # an offset goes backwards: REWIND, although the lag decreases somewhere (rule 6)
    ("rewind", [(1000, 100000, 100), (2000, 200000, 150), (3000, 300000, 200), (2000, 400000, 1250),
                (4000, 500000, 300)], 300, 600, REWIND),
    # current lag 0: OK even though the timestamps say stopped (rule 4's exception)
    ("caught-up-now", RISING_NONZERO, 0, 1000, OK),
]


@pytest.mark.parametrize("name, rows, current_lag, now_s, expected", BURROW_EVALUATOR_CASES,
                         ids=[c[0] for c in BURROW_EVALUATOR_CASES])
def test_burrow_evaluator_examples(name: str, rows: Sequence[Tuple[int, int, int]], current_lag: int, now_s: int,
                                   expected: PartitionStatus) -> None:
    assert evaluate_partition(window(*rows), current_lag, now_s * 1000) is expected


RULE_CASES = [
    # rule 3: offsets move, lag never decreases: WARN (slow consumer)
    ("rule3-slow-consumer", [(10, 1000, 5), (20, 2000, 5), (30, 3000, 8), (40, 4000, 9)], 9, 4500, WARN),
    # rule 3 does not hold when the lag decreases once: the consumer caught up for a while (busy topic)
    ("rule3-lag-decreased-once", [(10, 1000, 5), (20, 2000, 9), (30, 3000, 4), (40, 4000, 9)], 9, 4500, OK),
    # rule 5: lag unknown (no broker offset yet) anywhere: OK
    ("rule5-unknown-lag-in-window", [(10, 1000, None), (10, 2000, 5)], 5, 2500, OK),
    ("rule5-unknown-current-lag", [(10, 1000, 5), (10, 2000, 5)], None, 2500, OK),
    # empty window: nothing to judge
    ("empty-window", [], 5, 2500, OK),
    # one commit, lag > 0, any time after it: STOP (the span is 0)
    ("single-old-commit", [(10, 1000, 5)], 7, 1001, STOP),
    # negative current lag (the broker offset fetched before the commit): treated as zero
    ("negative-current-lag", [(10, 1000, 5), (10, 2000, 5)], -3, 2500, OK),
]


@pytest.mark.parametrize("name, rows, current_lag, now_ms, expected", RULE_CASES, ids=[c[0] for c in RULE_CASES])
def test_rules(name: str, rows: Sequence[Tuple[int, int, Optional[int]]], current_lag: Optional[int], now_ms: int,
               expected: PartitionStatus) -> None:
    assert evaluate_partition(window(*rows), current_lag, now_ms) is expected


@pytest.mark.parametrize("statuses, expected", [
    ([], GroupStatus.NOTFOUND),
    ([OK, OK], GroupStatus.OK),
    ([OK, WARN], GroupStatus.WARN),
    ([WARN, STALL, OK], GroupStatus.ERR),
    ([STOP], GroupStatus.ERR),
    ([REWIND, WARN], GroupStatus.ERR),
])
def test_rule7_group_status_is_the_worst_partition(statuses: List[PartitionStatus], expected: GroupStatus) -> None:
    assert evaluate_group(statuses) is expected


def test_commit_of_stores_negative_lag_as_zero() -> None:
    assert Commit.of(10, 1, 8).lag == 0
    assert Commit.of(10, 1, 15).lag == 5
    assert Commit.of(10, 1, None).lag is None


def test_window_keeps_the_last_n_commits() -> None:
    w = PartitionWindow(3)
    for i in range(5):
        w.add(Commit(i, i, 1))
    assert [c.offset for c in w.commits] == [2, 3, 4]
    assert w.complete == 1.0
    assert PartitionWindow(4).complete == 0.0
    with pytest.raises(ValueError):
        PartitionWindow(0)
