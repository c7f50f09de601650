"""Broker error codes (Kafka's ``ErrorMapping``) as :class:`~zkconsumer.errors.BrokerError` subclasses.

:func:`error_for_code` turns a non-zero code into an exception carrying
``error_code``, Kafka's ``error_name`` and ``retriable`` (whether the same
request may succeed later); ``topic``/``partition`` name the partition a
per-partition code was reported for. Re-exported by :mod:`zkconsumer.wire.protocol`.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

from ..errors import BrokerError

__all__ = [
    "ERROR_NAMES", "KafkaProtocolError", "UnknownServerError", "OffsetOutOfRangeError", "InvalidMessageError",
    "UnknownTopicOrPartitionError", "InvalidFetchSizeError", "LeaderNotAvailableError",
    "NotLeaderForPartitionError", "RequestTimedOutError", "BrokerNotAvailableError",
    "ReplicaNotAvailableError", "BrokerMessageTooLargeError", "error_for_code", "raise_for_code",
    "ProtocolDecodeError",
]

#: Kafka's ErrorMapping / ``Errors`` names by code, for messages and logs.
ERROR_NAMES: Dict[int, str] = {
    -1: "UNKNOWN", 0: "NONE", 1: "OFFSET_OUT_OF_RANGE", 2: "CORRUPT_MESSAGE",
    3: "UNKNOWN_TOPIC_OR_PARTITION", 4: "INVALID_FETCH_SIZE", 5: "LEADER_NOT_AVAILABLE",
    6: "NOT_LEADER_FOR_PARTITION", 7: "REQUEST_TIMED_OUT", 8: "BROKER_NOT_AVAILABLE",
    9: "REPLICA_NOT_AVAILABLE", 10: "MESSAGE_TOO_LARGE", 11: "STALE_CONTROLLER_EPOCH",
    12: "OFFSET_METADATA_TOO_LARGE", 13: "STALE_LEADER_EPOCH", 14: "OFFSETS_LOAD_IN_PROGRESS",
    15: "CONSUMER_COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR_FOR_CONSUMER",
    17: "INVALID_TOPIC_EXCEPTION", 18: "RECORD_LIST_TOO_LARGE", 19: "NOT_ENOUGH_REPLICAS",
    20: "NOT_ENOUGH_REPLICAS_AFTER_APPEND", 21: "INVALID_REQUIRED_ACKS", 22: "ILLEGAL_GENERATION",
    23: "INCONSISTENT_GROUP_PROTOCOL", 24: "INVALID_GROUP_ID", 25: "UNKNOWN_MEMBER_ID",
    26: "INVALID_SESSION_TIMEOUT", 27: "REBALANCE_IN_PROGRESS", 28: "INVALID_COMMIT_OFFSET_SIZE",
    29: "TOPIC_AUTHORIZATION_FAILED", 30: "GROUP_AUTHORIZATION_FAILED",
    31: "CLUSTER_AUTHORIZATION_FAILED",
}

#: Codes after which the same request may succeed later (a leader moved, a
#: replica caught up, a coordinator finished loading). Matches Kafka's
#: ``RetriableException`` subclasses.
_RETRIABLE_CODES = frozenset({3, 5, 6, 7, 8, 9, 14, 15, 16, 19, 20, 27})


class KafkaProtocolError(BrokerError):
    """A broker answered a request with a non-zero error code.

    ``error_code`` is the code, ``error_name`` Kafka's name for it, ``retriable``
    whether the same request may succeed later. ``topic``/``partition`` name the
    partition the code was reported for, when it was per partition.
    """

    error_code: Optional[int] = -1
    error_name: str = "UNKNOWN"

    def __init__(self, detail: str = "", topic: Optional[str] = None, partition: Optional[int] = None) -> None:
        self.topic = topic
        self.partition = partition
        where = "" if topic is None else f" for {topic}" + ("" if partition is None else f"-{partition}")
        text = f"{self.error_name} (error code {self.error_code}){where}"
        super().__init__(f"{text}: {detail}" if detail else text)


class UnknownServerError(KafkaProtocolError):
    """UNKNOWN (-1), or a code this module does not know; ``error_code`` is the actual code."""

    def __init__(self, detail: str = "", topic: Optional[str] = None, partition: Optional[int] = None,
                 code: int = -1) -> None:
        self.error_code = code
        self.error_name = ERROR_NAMES.get(code, "UNKNOWN")
        super().__init__(detail, topic, partition)


class OffsetOutOfRangeError(KafkaProtocolError):
    """OFFSET_OUT_OF_RANGE (1): the fetch offset is before the log start or after its end."""

    error_code, error_name = 1, "OFFSET_OUT_OF_RANGE"


class InvalidMessageError(KafkaProtocolError):
    """CORRUPT_MESSAGE (2): the broker found a message failing its CRC (Kafka's InvalidMessageException)."""

    error_code, error_name = 2, "CORRUPT_MESSAGE"


class UnknownTopicOrPartitionError(KafkaProtocolError):
    """UNKNOWN_TOPIC_OR_PARTITION (3): this broker does not host the partition (yet)."""

    error_code, error_name, retriable = 3, "UNKNOWN_TOPIC_OR_PARTITION", True


class InvalidFetchSizeError(KafkaProtocolError):
    """INVALID_FETCH_SIZE (4)."""

    error_code, error_name = 4, "INVALID_FETCH_SIZE"


class LeaderNotAvailableError(KafkaProtocolError):
    """LEADER_NOT_AVAILABLE (5): an election is in progress."""

    error_code, error_name, retriable = 5, "LEADER_NOT_AVAILABLE", True


class NotLeaderForPartitionError(KafkaProtocolError):
    """NOT_LEADER_FOR_PARTITION (6): the leader moved to another broker."""

    error_code, error_name, retriable = 6, "NOT_LEADER_FOR_PARTITION", True


class RequestTimedOutError(KafkaProtocolError):
    """REQUEST_TIMED_OUT (7)."""

    error_code, error_name, retriable = 7, "REQUEST_TIMED_OUT", True


class BrokerNotAvailableError(KafkaProtocolError):
    """BROKER_NOT_AVAILABLE (8)."""

    error_code, error_name, retriable = 8, "BROKER_NOT_AVAILABLE", True


class ReplicaNotAvailableError(KafkaProtocolError):
    """REPLICA_NOT_AVAILABLE (9): in metadata, some non-leader replica is down (harmless to consumers)."""

    error_code, error_name, retriable = 9, "REPLICA_NOT_AVAILABLE", True


class BrokerMessageTooLargeError(KafkaProtocolError):
    """MESSAGE_TOO_LARGE (10), as the broker reports it (a produce-side error).

    Not to be confused with :class:`zkconsumer.errors.MessageSizeTooLargeError`,
    which the consumer raises when a message exceeds ``fetch.message.max.bytes``.
    """

    error_code, error_name = 10, "MESSAGE_TOO_LARGE"


_ERROR_CLASSES: Dict[int, Type[KafkaProtocolError]] = {
    cls.error_code: cls
    for cls in (OffsetOutOfRangeError, InvalidMessageError, UnknownTopicOrPartitionError,
                InvalidFetchSizeError, LeaderNotAvailableError, NotLeaderForPartitionError,
                RequestTimedOutError, BrokerNotAvailableError, ReplicaNotAvailableError,
                BrokerMessageTooLargeError)
}


def _generic_error_class(code: int) -> Type[KafkaProtocolError]:
    """A KafkaProtocolError subclass for a code without a dedicated class above."""
    name = ERROR_NAMES.get(code, f"UNKNOWN_{code}")
    return type(
        "".join(part.capitalize() for part in name.lower().split("_")) + "Error",
        (KafkaProtocolError,),
        {"error_code": code, "error_name": name, "retriable": code in _RETRIABLE_CODES,
         "__doc__": f"{name} ({code}).", "__module__": __name__},
    )


for _code in ERROR_NAMES:
    if _code > 0 and _code not in _ERROR_CLASSES:
        _ERROR_CLASSES[_code] = _generic_error_class(_code)
del _code


def error_for_code(code: int, detail: str = "", topic: Optional[str] = None,
                   partition: Optional[int] = None) -> KafkaProtocolError:
    """The exception for a non-zero broker error ``code``.

    Codes without a class (newer brokers, or ``-1``) give :class:`UnknownServerError`
    with ``error_code`` set to the actual code; ``retriable`` is then ``False``.

    >>> e = error_for_code(6, topic="t", partition=0)
    >>> type(e).__name__, e.error_code, e.retriable
    ('NotLeaderForPartitionError', 6, True)
    """
    if code == 0:
        raise ValueError("error code 0 means no error")
    cls = _ERROR_CLASSES.get(code)
    if cls is None:
        return UnknownServerError(detail, topic, partition, code=code)
    return cls(detail, topic, partition)


def raise_for_code(code: int, detail: str = "", topic: Optional[str] = None,
                   partition: Optional[int] = None) -> None:
    """Raise :func:`error_for_code` unless ``code`` is 0."""
    if code:
        raise error_for_code(code, detail, topic, partition)


class ProtocolDecodeError(BrokerError):
    """A response could not be parsed (truncated, or not the expected layout)."""
