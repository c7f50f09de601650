"""zkconsumer: Kafka 0.8's ZooKeeper-backed high-level consumer, for Python and PySpark.

Members of a consumer group register under ``/consumers/<group>/ids`` exactly as
Kafka's own ``ZookeeperConsumerConnector`` does, so a group may mix zkconsumer
members with Kafka's Scala consumer, and Kafka's tools read what zkconsumer
writes. The documentation's *Architecture* page shows how the modules fit together.

May import: errors, config, consumer, connector (the public names it publishes).
"""

from .config import ConsumerConfig
from .connector import ZookeeperConsumerConnector
from .consumer.membership import ConsumerRebalanceListener, RebalanceState, RebalanceStatus
from .consumer.stream import KafkaStream, MessageAndMetadata
from .consumer.topic_count import Blacklist, TopicFilter, Whitelist
from .errors import (
    BackgroundThreadError,
    BrokerError,
    BrokerUnavailableError,
    ConfigurationError,
    ConsumerIdInUseError,
    ConsumerRebalanceFailedError,
    ConsumerShutdownError,
    ConsumerTimeoutError,
    ConsumerTimeoutException,
    CorruptMessageError,
    MalformedZnodeError,
    MessageSizeTooLargeError,
    OffsetStorageError,
    RebalanceInProgressError,
    UnknownAckError,
    UnsupportedPatternError,
    ZkConsumerError,
    ZooKeeperAccessError,
    ZooKeeperSessionExpiredError,
    ZooKeeperUnavailableError,
)

__version__ = "0.1.0"

__all__ = [
    "BackgroundThreadError",
    "Blacklist",
    "BrokerError",
    "BrokerUnavailableError",
    "ConfigurationError",
    "ConsumerConfig",
    "ConsumerIdInUseError",
    "ConsumerRebalanceFailedError",
    "ConsumerRebalanceListener",
    "ConsumerShutdownError",
    "ConsumerTimeoutError",
    "ConsumerTimeoutException",
    "CorruptMessageError",
    "KafkaStream",
    "MalformedZnodeError",
    "MessageAndMetadata",
    "MessageSizeTooLargeError",
    "OffsetStorageError",
    "RebalanceInProgressError",
    "RebalanceState",
    "RebalanceStatus",
    "TopicFilter",
    "UnknownAckError",
    "UnsupportedPatternError",
    "Whitelist",
    "ZkConsumerError",
    "ZookeeperConsumerConnector",
    "ZooKeeperAccessError",
    "ZooKeeperSessionExpiredError",
    "ZooKeeperUnavailableError",
]
