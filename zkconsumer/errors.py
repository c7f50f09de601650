"""One error hierarchy for zkconsumer, rooted at :class:`ZkConsumerError`.

Every error carries a ``retriable`` flag (as kafka-python's errors do): ``True``
means the same operation may succeed if tried again later (a broker moved, a
ZooKeeper node was still held by a departing member), ``False`` means retrying
without changing something (configuration, data, code) will fail the same way.

May import: nothing of zkconsumer.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple


class ZkConsumerError(Exception):
    """Base of every error raised by zkconsumer.

    Every zkconsumer error pickles and unpickles to an equal one (same type, message and
    attributes), whatever its constructor takes, so it crosses process boundaries
    (``multiprocessing``, ``concurrent.futures`` process pools) as itself.
    """

    retriable: bool = False

    def __reduce__(self) -> Any:
        return _rebuild, (type(self), self.args, dict(self.__dict__))


def _rebuild(cls: "type[ZkConsumerError]", args: Tuple[Any, ...], state: Dict[str, Any]) -> "ZkConsumerError":
    """An unpickled zkconsumer error: built without its constructor, from its args and attributes."""
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class ConfigurationError(ZkConsumerError, ValueError):
    """A consumer property is unknown, has an invalid value, or contradicts another.

    ``property`` names the offending property (Kafka's dotted name).
    """

    def __init__(self, prop: str, message: str) -> None:
        self.property = prop
        #: The message without the property's name.
        self.detail = message
        super().__init__(f"{prop}: {message}")


class ConsumerTimeoutError(ZkConsumerError):
    """No message arrived within ``consumer.timeout.ms``.

    Like Kafka's ``ConsumerTimeoutException``, the stream stays usable: iterate it
    again to keep consuming.
    """

    retriable = True


#: Kafka's name for the same condition, for code ported from Scala/Java.
ConsumerTimeoutException = ConsumerTimeoutError


class ConsumerShutdownError(ZkConsumerError):
    """The connector was shut down; the requested operation cannot run."""


class OperationCancelledError(ZkConsumerError):
    """A multi-step operation (a rebalance attempt, the one-by-one claims of ``claim_many``) was
    ended between two of its steps because its caller is stopping; what it already did stays done."""


class MalformedZnodeError(ZkConsumerError):
    """A ZooKeeper node holds data that is not in the expected format.

    ``path`` is the node; other clients (or humans) sometimes write such nodes.
    """

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(f"malformed znode {path}: {message}")


class UnsupportedPatternError(ZkConsumerError):
    """A wildcard subscription uses Java regular-expression syntax with no Python equivalent.

    ``pattern`` is the Java regex. Raised where the pattern is first read (a
    member's own ``Whitelist``/``Blacklist``, or another member's registration
    read during a rebalance): the member refuses to compute an assignment it
    would have to guess, rather than assign differently from Kafka's members.
    """

    def __init__(self, pattern: str, message: str) -> None:
        self.pattern = pattern
        super().__init__(f"unsupported Java regular expression {pattern!r}: {message}")


class ZooKeeperUnavailableError(ZkConsumerError):
    """ZooKeeper could not be reached (or the session was lost) in time."""

    retriable = True


class ZooKeeperSessionExpiredError(ZooKeeperUnavailableError):
    """The ZooKeeper session expired under the operation: every ephemeral node of it is gone.

    Retriable: the client opens a new session by itself. Whoever held owner
    nodes under the old session holds nothing any more.
    """


#: The two logins a ZooKeeper ACL can name, as a member configures them: a digest user
#: (``digest:<user>:...``) and a Kerberos principal (``sasl:<principal>``).
ACCESS_HINT = ("zookeeper.auth=USER:PASSWORD for a digest user, or zookeeper.sasl.enabled=true "
               "with sasl.kerberos.principal and sasl.kerberos.keytab (or a kinit ticket cache) for a Kerberos principal")


class ZooKeeperAccessError(ZkConsumerError):
    """ZooKeeper refused an operation on ``path`` for lack of permission (NoAuth, or authentication failed).

    Not retriable: the node's ACL, or the session's login (:data:`ACCESS_HINT`), must change first.
    """

    def __init__(self, path: str, operation: str, detail: str = "") -> None:
        self.path = path
        self.operation = operation
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"ZooKeeper denied {operation} of {path}{extra}: check the node's ACL and the login it needs: {ACCESS_HINT}"
        )


class ConsumerIdInUseError(ZkConsumerError):
    """Another live ZooKeeper session has registered this member's consumer id.

    Two processes given the same explicit ``consumer.id`` would otherwise take
    each other's member and owner nodes. ``consumer_id`` is the member id
    (``<group>_<consumer.id>``), ``session_id`` the ZooKeeper session holding it.
    Not retriable while that process runs: give each process its own ``consumer.id``.
    """

    def __init__(self, consumer_id: str, path: str, session_id: int, waited_s: float) -> None:
        self.consumer_id = consumer_id
        self.path = path
        self.session_id = session_id
        super().__init__(
            f"consumer id {consumer_id} is in use: {path} is held by another live ZooKeeper session "
            f"0x{session_id:x} (still there after waiting {waited_s:.1f}s for it to expire); give each "
            f"process its own consumer.id"
        )


class BackgroundThreadError(ZkConsumerError):
    """A background thread of the connector (rebalancer, fetcher, ...) failed unexpectedly.

    The original exception is ``__cause__`` (and ``cause``). Not retriable: the
    connector stops handing out messages; shut it down and create a new one.
    """

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause
        super().__init__(f"a background thread failed: {type(cause).__name__}: {cause}")
        self.__cause__ = cause


class ConsumerRebalanceFailedError(ZkConsumerError):
    """A rebalance attempt could not claim every assigned partition.

    Retriable: the rebalancer keeps trying (with jittered backoff) and reports
    the state rather than leaving partitions silently ownerless.
    """

    retriable = True


class BrokerError(ZkConsumerError):
    """A Kafka broker answered with an error code, or could not be reached.

    ``error_code`` is Kafka's numeric code when the broker sent one.
    """

    error_code: Optional[int] = None


class BrokerUnavailableError(BrokerError):
    """A broker could not be connected to or the connection broke.

    ``timed_out``: the broker sent nothing for as long as the request allowed (the
    connection's ``socket.timeout.ms``, or the shorter bound the request was given).
    """

    retriable = True
    timed_out = False


class MessageSizeTooLargeError(ZkConsumerError):
    """A message at ``topic``/``partition``/``offset`` exceeds ``fetch.message.max.bytes``."""

    def __init__(self, topic: str, partition: int, offset: int, fetch_size: int) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset
        super().__init__(
            f"found a message larger than the maximum fetch size ({fetch_size} bytes) "
            f"on topic {topic} partition {partition} at offset {offset}; increase "
            f"fetch.message.max.bytes, or decrease the broker's message.max.bytes"
        )


class CorruptMessageError(ZkConsumerError):
    """A message failed its CRC check or could not be decoded."""

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset
        super().__init__(f"corrupt message on topic {topic} partition {partition} at offset {offset}: {reason}")


class OffsetStorageError(ZkConsumerError):
    """Offsets could not be read or committed (after the configured retries).

    ``fenced`` lists partitions (topic, partition) found owned by someone else during the same
    commit (they were not written either); ``retriable`` tells whether trying
    again later may succeed.
    """

    def __init__(self, message: str, *, retriable: bool, fenced: Sequence[Tuple[str, int]] = ()) -> None:
        super().__init__(message)
        self.retriable = retriable
        self.fenced = list(fenced)


class RebalanceInProgressError(ZkConsumerError):
    """The group is rebalancing, so the requested operation (a commit) was not carried out.

    Raised by ``commit_offsets()`` of a broker-managed group
    (``group.membership=kafka``) when the partitions it would commit were
    revoked and the next assignment is not installed yet, or when the
    coordinator refused the commit because the group moved to a new generation.
    ``partitions`` lists what was not committed. Retriable: once the rebalance
    is over, ``commit_offsets()`` commits whatever this member still owns (a
    partition kept across the rebalance continues from the position already
    handed out); messages of partitions that moved to another member are
    delivered again there, from the last committed offset.
    """

    retriable = True

    def __init__(self, message: str, partitions: Sequence[Tuple[str, int]] = ()) -> None:
        super().__init__(message)
        self.partitions = sorted(partitions)


class UnknownAckError(ZkConsumerError, ValueError):
    """``ack()`` named a message this member never handed out (``commit.processed.only``).

    An offset at or beyond what the member has delivered of the partition, one
    the log does not hold (a gap), or a partition this member never delivered.
    Nothing was recorded; it is a bug in the caller (acking a message of another
    connector, or a made-up offset), so it is not retriable.
    """

    def __init__(self, topic: str, partition: int, offset: int, why: str) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset
        super().__init__(f"ack of {topic}-{partition} at offset {offset}: {why}; nothing was recorded")
