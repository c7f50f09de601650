"""Errors of the admin operations.

User errors raise subclasses of :class:`AdminError` (a ``ZkConsumerError``) with
a one-line message; malformed offset nodes raise
:class:`~zkconsumer.errors.MalformedZnodeError` naming the node.
"""

from __future__ import annotations

from typing import Sequence

from ..errors import ZkConsumerError

__all__ = ["AdminError", "UnknownGroupError", "UnknownTopicError", "GroupActiveError", "OffsetFileError"]


class AdminError(ZkConsumerError):
    """An admin operation cannot be done as asked; the message says why, in one line."""


class UnknownGroupError(AdminError):
    """``/consumers/<group>`` does not exist."""

    def __init__(self, group: str) -> None:
        self.group = group
        super().__init__(f"consumer group {group!r} does not exist (no /consumers/{group} in ZooKeeper)")


class UnknownTopicError(AdminError):
    """The topic is not under ``/brokers/topics``."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        super().__init__(f"topic {topic!r} does not exist (no /brokers/topics/{topic} in ZooKeeper)")


class GroupActiveError(AdminError):
    """The group has live members, so the requested write is refused."""

    def __init__(self, group: str, members: Sequence[str], action: str) -> None:
        self.group, self.members = group, list(members)
        shown = ", ".join(self.members[:3]) + (", ..." if len(self.members) > 3 else "")
        super().__init__(
            f"refusing to {action}: group {group!r} has {len(self.members)} live member(s) ({shown}); "
            "stop its consumers first"
        )


class OffsetFileError(AdminError):
    """A line of an offsets file is not ``/consumers/<g>/offsets/<t>/<p>:<offset>``."""

    def __init__(self, source: str, line_number: int, line: str, problem: str) -> None:
        self.line_number = line_number
        super().__init__(f"{source}:{line_number}: {problem}: {line!r}")
