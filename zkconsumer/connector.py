"""``ZookeeperConsumerConnector``: the documented entry point; picks how the group is coordinated.

``ZookeeperConsumerConnector(config)`` builds a group member. It sits above
both connector implementations and chooses between them by
``group.membership``:

* ``zookeeper`` (the default): a :class:`ZookeeperConsumerConnector` proper, the
  ZooKeeper membership of Kafka 0.8's high-level consumer
  (:class:`~zkconsumer.rebalance.zookeeper_membership.ZooKeeperMembershipConnector`);
* ``kafka``: a :class:`~zkconsumer.coordinator.kafka_membership.CoordinatorConsumerConnector`,
  with the same API, whose membership is kept by the brokers' group
  coordinator instead of ZooKeeper (see ``docs/MIGRATION.md``). It is
  registered as a virtual subclass, so ``isinstance(c, ZookeeperConsumerConnector)``
  holds for both.

What both share (ZooKeeper session, streams, commits retried through outages,
metrics, bounded shutdown) is :class:`~zkconsumer.consumer.connector.ConsumerConnectorBase`.
Offsets go where ``offsets.storage`` says (:mod:`.offset_storage`).

Example::

    with ZookeeperConsumerConnector({"zookeeper.connect": "127.0.0.1:2181",
                                     "group.id": "g1"}) as connector:
        stream = connector.create_message_streams({"events": 1})["events"][0]
        for m in stream:
            handle(m.message)

May import: errors, config, structs, consumer, rebalance, coordinator, and what they may import.
"""

from __future__ import annotations

from typing import Any, Mapping, Union, cast

from .config import ConsumerConfig
from .coordinator.kafka_membership import CoordinatorConsumerConnector
from .rebalance.zookeeper_membership import ZooKeeperMembershipConnector

__all__ = ["ZookeeperConsumerConnector"]


class ZookeeperConsumerConnector(ZooKeeperMembershipConnector):
    """A member of a consumer group (Kafka 0.8's high-level consumer API).

    Construction connects to ZooKeeper (raising
    :class:`~zkconsumer.errors.ZooKeeperUnavailableError` naming
    ``zookeeper.connect`` if it cannot within ``zookeeper.connection.timeout.ms``).
    :meth:`create_message_streams` (or :meth:`create_message_streams_by_filter`)
    registers the member, runs the first rebalance and returns the streams; it
    may be called once per connector, as in Kafka. :meth:`shutdown` is
    idempotent and joins every thread the connector started.

    ``metrics_port=P`` serves the member's Prometheus metrics on ``http://0.0.0.0:P/metrics``
    (0: any free port, read ``connector.prometheus.port``); ``metrics_registry=R`` registers them
    on an application's own ``prometheus_client`` registry instead (or as well);
    ``metrics_pushgateway="host:port"`` pushes them to a Prometheus Pushgateway every 10 s and at
    shutdown. Names: ``docs/MONITORING.md``.

    With ``group.membership=kafka`` the constructor returns a
    :class:`~zkconsumer.coordinator.kafka_membership.CoordinatorConsumerConnector`
    (still an instance of this class for ``isinstance``), so application code
    does not change.
    """

    def __new__(
        cls, config: Union[ConsumerConfig, Mapping[str, Any]], *args: Any, **kwargs: Any
    ) -> "ZookeeperConsumerConnector":
        if cls is ZookeeperConsumerConnector:
            parsed = config if isinstance(config, ConsumerConfig) else ConsumerConfig(config)
            if parsed.group_membership == "kafka":
                # Not an instance of cls by type, so Python does not call __init__ again on it.
                return cast("ZookeeperConsumerConnector", CoordinatorConsumerConnector(parsed, *args, **kwargs))
        return super().__new__(cls)


ZookeeperConsumerConnector.register(CoordinatorConsumerConnector)
