"""argparse types of the offset commands' targets (``offsets reset`` and ``offsets seek``)."""

from __future__ import annotations

import argparse
import time
from typing import List

from .. import admin

__all__ = ["TIME_HELP", "reset_target", "datetime_target", "duration_target", "partition_list"]


def reset_target(text: str) -> admin.ResetTarget:
    """argparse type for ``--to``."""
    try:
        return admin.parse_reset_target(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: The CLI's words for :data:`zkconsumer.admin.times.SEGMENT_NOTE`.
TIME_HELP = ("0.9 brokers resolve a time to a log-segment boundary, the first offset of the newest segment last "
             "written at or before the time (the log start if none, the log end if the time is now or later), so "
             "messages written shortly before the time may be read again")


def datetime_target(text: str) -> admin.ResetTarget:
    """argparse type for ``--to-datetime``: a ``time`` target."""
    try:
        return admin.ResetTarget("time", admin.parse_datetime(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def duration_target(text: str) -> admin.ResetTarget:
    """argparse type for ``--by-duration``: a ``time`` target, the duration before now."""
    try:
        return admin.ResetTarget("time", max(0, int(time.time() * 1000) - admin.parse_duration(text)))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def partition_list(text: str) -> List[int]:
    """argparse type: ``0,2,5`` → ``[0, 2, 5]``."""
    try:
        values = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated partition numbers, got {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated partition numbers >= 0, got {text!r}")
    return values
