"""The ZooKeeper retries' jitter: tenacity's full-jitter backoff, drawn from the session's own generator."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import tenacity

from zkconsumer.zookeeper.group_session import _JitteredBackoff


def test_the_jitter_is_tenacitys_random_exponential_drawn_from_the_given_generator(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ours = _JitteredBackoff(random.Random(7), multiplier_s=0.05, max_s=1.0)
    theirs = tenacity.wait_random_exponential(multiplier=0.05, max=1.0)
    monkeypatch.setattr(tenacity.wait, "random", random.Random(7))  # tenacity's draws, from a generator of its own
    for attempt in (1, 2, 3, 4, 5, 6, 9, 70, 1000):
        retry_state = SimpleNamespace(attempt_number=attempt)
        assert ours(retry_state) == theirs(retry_state)  # type: ignore[arg-type]


def test_the_jitter_stays_within_the_widening_window() -> None:
    backoff = _JitteredBackoff(random.Random(1), multiplier_s=0.05, max_s=1.0)
    for n in range(1, 12):
        assert 0.0 <= backoff(SimpleNamespace(attempt_number=n)) <= min(1.0, 0.05 * 2 ** (n - 1))  # type: ignore[arg-type]
