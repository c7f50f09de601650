"""ProofChain (zookeeper/proofs.py): a proof counts once a later one, sent a gap after its answer, is
answered; and a healthy idle member's lease, proving itself at its own cadence, never lapses."""

from __future__ import annotations

from typing import List

import pytest

from zkconsumer.zookeeper.lease import SessionLease
from zkconsumer.zookeeper.proofs import CONFIRM_GAP, ProofChain


def test_a_proof_counts_only_once_a_later_one_sent_a_gap_after_its_answer_is_answered() -> None:
    chain = ProofChain()
    assert not chain.note(10.0, 10.1, 1.8) and chain.counted is None and chain.last_sent == 10.0
    assert not chain.note(11.8, 11.9, 1.8) and chain.counted is None  # sent 1.7 s after 10.1
    assert chain.note(11.95, 12.0, 1.8) and chain.counted == 10.0
    assert chain.note(13.8, 13.9, 1.8) and chain.counted == 11.8  # the latest one old enough counts
    assert chain.last_sent == 13.8


def test_many_proofs_in_a_gap_keep_a_bounded_list_and_count_late_never_early() -> None:
    chain = ProofChain()
    for i in range(10_000):  # a busy member: a commit every millisecond
        chain.note(i / 1000, i / 1000 + 0.0005, 1.8)
    assert len(chain._waiting) <= 16
    assert chain.counted is not None and 9.999 - 1.8 - 0.2 <= chain.counted <= 9.999 - 1.8


class SlowClient:
    """A sync answered ``rtt`` seconds after it was sent."""

    def __init__(self, now: List[float], rtt: float) -> None:
        self.now, self.rtt = now, rtt

    def sync(self, path: str) -> None:
        self.now[0] += self.rtt


@pytest.mark.parametrize("rtt", [0.001, 0.3, 0.9], ids=["fast", "slow", "very-slow"])
def test_an_idle_members_own_proofs_keep_its_lease_valid_without_a_lapse(rtt: float) -> None:
    """Without a heartbeat the lease syncs every 0.27 T; with round trips up to 0.15 T it never lapses."""
    now = [0.0]
    lease = SessionLease(SlowClient(now, rtt), "/p", 6.0, clock=lambda: now[0])  # type: ignore[arg-type]
    assert lease.overdue_after == pytest.approx(0.27 * 6.0)
    while now[0] < 120.0:
        wait = lease._round()
        assert wait > 0
        end = now[0] + wait
        while now[0] < end:
            assert lease.valid(), f"lapsed at {now[0]:.3f}"
            now[0] = min(end, now[0] + 0.05)
    assert CONFIRM_GAP * 6.0 == pytest.approx(1.8)
