"""GroupClient.claim_many's one-by-one fallback stops between claims once its caller is stopping."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, List, Optional, Sequence, Tuple

import pytest
from kazoo.exceptions import ConnectionLoss

from zkconsumer.errors import OperationCancelledError
from zkconsumer.zookeeper.group import GroupClient


def _client(claimed: List[Tuple[str, int]], stop_after: int) -> Tuple[GroupClient, List[bool]]:
    """A GroupClient whose pipelined creates all come back without a clean answer (a connection
    loss), so every claim goes to the one-by-one fallback; ``claim`` records its partition and
    the caller "stops" after ``stop_after`` of them."""
    raw = SimpleNamespace(handler=SimpleNamespace(timeout_exception=TimeoutError), client_id=(1, b""),
                          create_async=lambda *args, **kwargs: None)  # never called: pipelined is replaced
    group = GroupClient(raw, "g", "g_me", retry_timeout_s=1.0)  # type: ignore[arg-type]
    stopping = [False]

    def pipelined(what: str, calls: Sequence[Tuple[str, Any]]) -> List[Any]:
        return [ConnectionLoss() for _ in calls]

    def claim(topic: str, partition: int, thread_id: str, watch: Any = None) -> Optional[str]:
        claimed.append((topic, partition))
        if len(claimed) >= stop_after:
            stopping[0] = True
        return None

    group.session.ensure_parents = lambda paths: None  # type: ignore[method-assign]
    group.session.pipelined = pipelined  # type: ignore[method-assign]
    group.owner_nodes.claim = claim  # type: ignore[method-assign]
    return group, stopping


def test_claim_many_stops_between_one_by_one_claims_once_cancelled() -> None:
    claimed: List[Tuple[str, int]] = []
    group, stopping = _client(claimed, stop_after=2)
    claims = [("t", p, "g_me-0", None) for p in range(5)]
    with pytest.raises(OperationCancelledError):
        group.claim_many(claims, cancelled=lambda: stopping[0])
    assert claimed == [("t", 0), ("t", 1)]  # the claim under way ended; none started after


def test_claim_many_without_cancel_claims_every_one() -> None:
    claimed: List[Tuple[str, int]] = []
    group, _ = _client(claimed, stop_after=2)
    assert group.claim_many([("t", p, "g_me-0", None) for p in range(5)]) == [None] * 5
    assert claimed == [("t", p) for p in range(5)]
