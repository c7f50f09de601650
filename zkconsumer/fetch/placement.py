"""Placing a partition's fetch position per ``auto.offset.reset`` (Kafka's ``handleOffsetOutOfRange``).

A partition with no committed offset (a negative position) or whose position the broker reports
out of range moves to the log's earliest (``smallest``) or latest (``largest``) offset, looked up
from its leader. Contract of :func:`place_offset`: the position moves only if it is still the one
the caller saw, and only to an offset the leader gave; it is left as it was when the lookup fails
or does not come back within the time a consumer's round has left.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from ..errors import BrokerError
from ..wire.connection import BrokerConnection
from ..wire.protocol import EARLIEST_TIME, LATEST_TIME
from .handoff import PartitionTopicInfo

__all__ = ["place_offset"]

log = logging.getLogger(__name__)


def place_offset(conn: BrokerConnection, info: PartitionTopicInfo, fetch_offset: int, config: Any, name: str,
                 timeout_ms: Optional[int] = None, quiet: bool = False) -> Optional[bool]:
    """Move ``info`` from ``fetch_offset`` (negative: none yet; else out of range) per ``auto.offset.reset``.

    ``True``: placed, or the position moved meanwhile (nothing to do); ``False``: the lookup failed
    (the partition's leader must be looked up again); ``None``: ``timeout_ms`` (a consumer's
    deadline, see ``rounds.round_bounds``) passed first, try again in a later round. ``quiet``: a
    failure is not logged (the fetcher is stopping). The caller holds the partition's lock.
    """
    if info.fetched_offset != fetch_offset:
        return True
    smallest = config.auto_offset_reset == "smallest"
    try:
        offset = conn.list_offsets(info.topic, info.partition, EARLIEST_TIME if smallest else LATEST_TIME,
                                   timeout_ms=timeout_ms)
    except BrokerError as exc:
        if timeout_ms is not None and getattr(exc, "timed_out", False):
            return None
        if not quiet:
            log.warning("%s: %s-%d: could not look up the %s offset: %s", name, info.topic, info.partition,
                        "earliest" if smallest else "latest", exc)
        return False
    if fetch_offset >= 0:
        log.warning("%s: %s-%d: offset %d is out of range; reset to %d (auto.offset.reset=%s)", name,
                    info.topic, info.partition, fetch_offset, offset, config.auto_offset_reset)
    else:
        log.info("%s: %s-%d: no committed offset; starting at %d (auto.offset.reset=%s)", name,
                 info.topic, info.partition, offset, config.auto_offset_reset)
    info.reset_offsets(offset)
    return True
