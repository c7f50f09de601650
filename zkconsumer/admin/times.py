"""Positions by time: parse ``--to-datetime`` / ``--by-duration`` and look offsets up by time.

The lookup is the brokers' offsets-before-time answer (OffsetRequest v0 with a timestamp
and ``max_num_offsets`` 1). A 0.8/0.9 broker keeps no per-message time: it lists each
log segment's base offset with the segment file's last-modified time, adds the log end
offset with the current time when the active segment is not empty, and returns the
offset of the newest entry whose time is at or before the one asked, nothing when
there is none. So a position by time is a **log-segment boundary**:

* the first offset of the newest segment last written at or before the time, so
  messages written before the time (the rest of that segment) are read again;
* the log start when every segment was last written after the time
  (:data:`~.log_offsets.NONE_BEFORE`, resolved by :func:`offsets_for_time`);
* the log end when the time is the broker's "now" or later.

The finer the segments (topic config ``segment.ms`` / ``segment.bytes``), the finer the
positions; a topic with one segment resolves every past time to its log start.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Dict, Optional, Sequence, Tuple

from ..structs import TopicPartition
from ..wire.protocol import EARLIEST_TIME
from .log_offsets import NONE_BEFORE, TimeOffsets

__all__ = ["parse_datetime", "parse_duration", "format_time", "offsets_for_time", "SEGMENT_NOTE"]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?"
                       r"(Z|z|[+-]\d{2}:?\d{2})?")

#: One line said with every position by time (CLI output, plans).
SEGMENT_NOTE = ("Positions by time are log-segment boundaries (0.9 brokers keep no message times): each "
                "partition moves to the first offset of its newest segment last written at or before the time "
                "(the log start if none was, the log end if the time is now or later), so messages written "
                "shortly before the time may be read again.")


def parse_datetime(text: str, local_zone: Optional[_dt.tzinfo] = None) -> int:
    """Milliseconds since the epoch of an ISO-8601 date-time, ``ValueError`` otherwise.

    ``2026-11-28T10:00:00``, with optional fraction (``.123``) and zone (``Z``, ``+01:00``);
    a time without a zone is local time (``local_zone``, default the machine's), as in
    Kafka's ``kafka-consumer-groups --to-datetime``.

    >>> parse_datetime("1970-01-01T00:00:01.5Z")
    1500
    >>> parse_datetime("2026-11-28T10:00:00+01:00") == parse_datetime("2026-11-28T09:00:00Z")
    True
    """
    match = _DATETIME.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"invalid date-time {text!r}: expected YYYY-MM-DDTHH:MM:SS[.sss][Z|+HH:MM]")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    zone_info: Optional[_dt.tzinfo] = None
    if zone is not None and zone in "Zz":
        zone_info = _dt.timezone.utc
    elif zone is not None:
        sign = -1 if zone[0] == "-" else 1
        hours, minutes = int(zone[1:3]), int(zone[-2:])
        try:
            zone_info = _dt.timezone(sign * _dt.timedelta(hours=hours, minutes=minutes))
        except ValueError as exc:
            raise ValueError(f"invalid date-time {text!r}: zone {zone}: {exc}") from None
    try:  # fields, not fromisoformat: Python 3.9 and 3.10 accept neither +0100 nor a 1-digit fraction
        moment = _dt.datetime(int(year), int(month), int(day), int(hour), int(minute), int(second or 0),
                              int((fraction or "").ljust(6, "0")), tzinfo=zone_info)
    except ValueError as exc:
        raise ValueError(f"invalid date-time {text!r}: {exc}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=local_zone) if local_zone is not None else moment.astimezone()
    return (moment - _EPOCH) // _dt.timedelta(milliseconds=1)


_ISO = re.compile(r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d{1,3})?)S)?)?")
_SHORT = re.compile(r"(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m(?!s))?(?:(?P<s>\d+)s)?(?:(?P<ms>\d+)ms)?")


def parse_duration(text: str) -> int:
    """Milliseconds of a duration: ISO-8601 ``PnDTnHnMnS`` (as Kafka's ``--by-duration``, e.g.
    ``PT1H``, ``P1DT12H``, ``PT0.5S``) or short ``1h30m``, ``2d``, ``45s``, ``500ms``; ``ValueError``
    for anything else, and for zero.

    >>> parse_duration("PT1H30M"), parse_duration("1h30m"), parse_duration("PT0.25S")
    (5400000, 5400000, 250)
    """
    t = text.strip()
    iso = _ISO.fullmatch(t.upper())
    short = _SHORT.fullmatch(t.lower())
    match = iso if iso and t.upper() not in ("P", "PT") and not t.upper().endswith("T") else short
    if not match or not any(match.groupdict().values()):
        raise ValueError(f"invalid duration {text!r}: expected ISO-8601 PnDTnHnMnS (e.g. PT1H) or e.g. 1h30m")
    parts = match.groupdict()
    ms = (int(parts["d"] or 0) * 86400 + int(parts["h"] or 0) * 3600 + int(parts["m"] or 0) * 60) * 1000
    ms += round(float(parts["s"] or 0) * 1000) + int(parts.get("ms") or 0)
    if ms <= 0:
        raise ValueError(f"invalid duration {text!r}: must be longer than zero")
    return ms


def format_time(ms: int) -> str:
    """ISO-8601 in UTC with milliseconds. ``format_time(1500)`` → ``'1970-01-01T00:00:01.500Z'``."""
    moment = _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def offsets_for_time(log_offsets: TimeOffsets, partitions: Sequence[TopicPartition], timestamp_ms: int
                     ) -> Tuple[Dict[TopicPartition, int], Dict[TopicPartition, str]]:
    """The offset of each partition at ``timestamp_ms`` (ms since the epoch), resolved to a
    log-segment boundary as the module docstring says: ``(offsets, problems)``, a reason for
    each partition that could not be looked up. A partition with no segment written at or before
    the time gets its log start (a second, earliest lookup).

    With a running connector: ``offsets_for_time(BrokerOffsets(connector.zk_client), tps, ms)``.
    """
    if timestamp_ms < 0:
        raise ValueError(f"timestamp_ms must be >= 0, got {timestamp_ms}")
    found, problems = log_offsets.fetch(list(partitions), timestamp_ms, empty=NONE_BEFORE)
    before = [tp for tp, offset in found.items() if offset == NONE_BEFORE]
    if before:
        starts, start_problems = log_offsets.fetch(before, EARLIEST_TIME)
        problems.update(start_problems)
        for tp in before:
            del found[tp]
            if tp in starts:
                found[tp] = starts[tp]
    return found, problems
