"""Retrying a commit through an outage: what ``commit_offsets()``, auto-commit and shutdown share.

Kafka's consumer blocks a commit until ZooKeeper is back; zkconsumer retries a retriable
failure for a bounded time instead (``offsets.commit.timeout.ms``, or what is left of the
shutdown bound), with a jittered backoff from 0.1 s doubling to 1 s, and then raises the last
error. What one attempt commits is the membership's business (its ``commit()``); the policy is
here.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Callable

from ..errors import ConsumerShutdownError, RebalanceInProgressError, ZkConsumerError

__all__ = ["commit_retrying"]

log = logging.getLogger(__name__)

#: The first pause between attempts and the longest, in seconds (before jitter).
FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 1.0


def commit_retrying(
    attempt: Callable[[], None],
    budget_s: float,
    *,
    closing: threading.Event,
    record: Callable[[bool], None],
    name: str,
    during_shutdown: bool = False,
) -> None:
    """Call ``attempt`` until it returns, retrying retriable errors for up to ``budget_s``.

    Each call of ``attempt`` is recorded (``record(True)`` if it returned, ``record(False)`` if it
    raised). A non-retriable :class:`~zkconsumer.errors.ZkConsumerError` is raised at once, and so
    is :class:`~zkconsumer.errors.RebalanceInProgressError`: once the rebalance ends, a refused
    generation's partitions may belong to another member, and a later attempt would silently leave
    what was handed out uncommitted; the caller decides. The last retriable error is raised when the
    budget runs out. Outside shutdown, ``closing`` being set ends the wait with
    :class:`~zkconsumer.errors.ConsumerShutdownError`; during shutdown (the final commit) the
    pauses are plain sleeps within the budget.
    """
    deadline = time.monotonic() + budget_s
    delay = FIRST_BACKOFF_S
    while True:
        try:
            try:
                attempt()
            except BaseException:
                record(False)
                raise
            record(True)
            return
        except ZkConsumerError as exc:
            remaining = deadline - time.monotonic()
            if not exc.retriable or remaining <= 0 or isinstance(exc, RebalanceInProgressError):
                raise
            if closing.is_set() and not during_shutdown:
                raise ConsumerShutdownError("shutdown() while commit_offsets() was retrying") from exc
            log.info("%s: offset commit failed (%s); retrying for up to %.1fs more", name, exc, remaining)
            pause = min(remaining, delay * (0.5 + random.random()))
            delay = min(MAX_BACKOFF_S, delay * 2)
            if during_shutdown:
                time.sleep(pause)
            elif closing.wait(pause):
                raise ConsumerShutdownError("shutdown() while commit_offsets() was retrying") from exc
