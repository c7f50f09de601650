"""``fetch_walked`` for the fakes of a broker connection that implement only ``fetch``.

A fetcher sends its requests through ``BrokerConnection.fetch_walked``; a fake that answers ``fetch``
(a list of ``FetchPartition``, a ``FetchResponse``) gets it with ``fetch_walked = walked_via_fetch``:
the same partitions asked for, the answer walked by ``walk_partitions``, the reference of the C walk.
"""

from __future__ import annotations

from typing import Any, Optional

from zkconsumer.wire.fetch_walk import FetchWalk, Requested, WalkedFetchRequest, walk_partitions


def walked_via_fetch(conn: Any, requested: Requested, max_wait_ms: int, min_bytes: int, max_bytes: int,
                     timeout_ms: Optional[int] = None) -> FetchWalk:
    """``conn.fetch`` of ``requested``'s partitions, walked as ``BrokerConnection.fetch_walked`` walks a response."""
    partitions = WalkedFetchRequest(max_wait_ms, min_bytes, max_bytes, requested).partitions()
    return walk_partitions(conn.fetch(partitions, max_wait_ms, min_bytes, timeout_ms).partitions, requested)
