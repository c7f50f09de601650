"""Errors raised by :mod:`zkconsumer.testing` (all are :class:`ZkConsumerError`).

None of them is retriable: each means the test environment itself is broken
(a missing program, a distribution that cannot be obtained, a JVM that did not
come up) and retrying without fixing that fails the same way.
"""

from __future__ import annotations

from zkconsumer.errors import ZkConsumerError


class LocalClusterError(ZkConsumerError):
    """Base of every error of the local test cluster and its helpers."""


class MissingDependencyError(LocalClusterError):
    """A program the local cluster needs (``java``, ``npm``) is not installed.

    The message says how to install it on Debian/Ubuntu.
    """


class KafkaDistributionError(LocalClusterError):
    """The Kafka distribution could not be downloaded, verified or unpacked."""


class ClusterStartError(LocalClusterError):
    """A ZooKeeper or Kafka JVM did not start, or not in time.

    The message ends with the tail of that JVM's log file.
    """


class ClusterTimeoutError(LocalClusterError, TimeoutError):
    """The cluster did not reach an awaited state (leaders elected, broker gone...) in time."""
