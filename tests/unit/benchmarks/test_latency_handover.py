"""The rebalance latency benchmark's hand-over figures, on synthetic traces (pure arithmetic)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.latency.rebalance import event_figures, handover

MS = 1000


def deliveries(partition: int, member: int, times_ms: range) -> np.ndarray:
    """First deliveries of one partition by one member: partition, stamp, delivered, member (µs)."""
    t = np.array(list(times_ms), dtype=np.int64) * MS
    return np.column_stack([np.full(len(t), partition), t - 2 * MS, t, np.full(len(t), member)])


def test_a_consumer_that_keeps_the_stayed_partitions_flowing_has_a_ratio_near_one() -> None:
    # partition 0 stays with member 0 throughout; partition 1 moves from member 1 to member 2,
    # not delivered from 10,000 to 10,500 ms.
    rows = np.concatenate([deliveries(0, 0, range(0, 20_000, 10)),
                           deliveries(1, 1, range(0, 10_000, 10)), deliveries(1, 2, range(10_500, 20_000, 10))])
    h = handover(rows, at=10_000 * MS, half=10_000 * MS)
    assert h["handover_ms"] == pytest.approx(510.0)  # 9,990 -> 10,500
    assert h["stayed_rate_ratio"] == pytest.approx(1.0, abs=0.05)
    assert h["stayed_max_gap_in_handover_ms"] == pytest.approx(10.0)


def test_a_consumer_that_stops_every_partition_has_a_ratio_of_zero() -> None:
    rows = np.concatenate([deliveries(0, 0, range(0, 10_000, 10)), deliveries(0, 0, range(10_600, 20_000, 10)),
                           deliveries(1, 1, range(0, 10_000, 10)), deliveries(1, 2, range(10_500, 20_000, 10))])
    h = handover(rows, at=10_000 * MS, half=10_000 * MS)
    assert h["stayed_rate_ratio"] == 0.0
    assert h["stayed_max_gap_in_handover_ms"] == pytest.approx(510.0)  # the whole hand-over


def test_without_a_moved_or_a_stayed_partition_there_is_no_handover() -> None:
    rows = deliveries(0, 0, range(0, 20_000, 10))
    assert handover(rows, at=10_000 * MS, half=10_000 * MS)["handover_ms"] is None
    assert event_figures(rows, 10_000 * MS, 10_000 * MS)["stayed"] == 1
