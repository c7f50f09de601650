"""``ZookeeperConsumerConnector``: the documented entry point, a group member.

``ZookeeperConsumerConnector(config)`` builds a group member: the connector of
:mod:`zkconsumer.consumer.base_connector` with its membership chosen by ``group.membership``:

* ``zookeeper`` (the default): the ZooKeeper membership of Kafka 0.8's high-level consumer
  (:class:`~zkconsumer.rebalance.zookeeper_membership.ZooKeeperMembership`);
* ``kafka``: membership kept by the brokers' group coordinator
  (:class:`~zkconsumer.coordinator.kafka_membership.CoordinatorMembership`), with the same API
  (see the documentation's *Migration from Kafka's consumer* page).

Either way it is the same class; ``connector.membership.kind`` says which membership runs. A
member follows the group's migration node (``zkconsumer groups migrate``) from one to the other
without stopping (:class:`~zkconsumer.consumer.switching.SwitchingMembership`).
Offsets go where ``offsets.storage`` says (:mod:`zkconsumer.offsets.storage`).

Example::

    with ZookeeperConsumerConnector({"zookeeper.connect": "127.0.0.1:2181",
                                     "group.id": "g1"}) as connector:
        stream = connector.create_message_streams({"events": 1})["events"][0]
        for m in stream:
            handle(m.message)

May import: consumer, rebalance, coordinator, and what they may import.
"""

from __future__ import annotations

from .consumer.base_connector import ConsumerConnectorBase
from .consumer.membership import ConnectorParts, Membership
from .consumer.switching import SwitchingMembership, registration_refused
from .coordinator.kafka_membership import CoordinatorMembership, coordinator_members
from .rebalance.zookeeper_membership import ZooKeeperMembership

__all__ = ["ZookeeperConsumerConnector"]


class ZookeeperConsumerConnector(ConsumerConnectorBase):
    """A member of a consumer group (Kafka 0.8's high-level consumer API).

    ``ZookeeperConsumerConnector(config, *, rebalance_listener=None, metrics_interval_s=None,
    metrics_port=None, metrics_registry=None, metrics_pushgateway=None)``: ``config`` is a
    :class:`~zkconsumer.config.ConsumerConfig` or a mapping of Kafka's consumer properties.

    Construction connects to ZooKeeper (raising
    :class:`~zkconsumer.errors.ZooKeeperUnavailableError` naming
    ``zookeeper.connect`` if it cannot within ``zookeeper.connection.timeout.ms``).
    If construction raises, nothing is left running (the ZooKeeper session is closed).
    :meth:`create_message_streams` (or :meth:`create_message_streams_by_filter`)
    registers the member, runs the first rebalance and returns the streams; it
    may be called once per connector, as in Kafka. :meth:`shutdown` is
    idempotent and joins every thread the connector started.

    ``metrics_port=P`` serves the member's Prometheus metrics on ``http://0.0.0.0:P/metrics``
    (0: any free port, read ``connector.prometheus.port``); ``metrics_registry=R`` registers them
    on an application's own ``prometheus_client`` registry instead (or as well);
    ``metrics_pushgateway="host:port"`` pushes them to a Prometheus Pushgateway every 10 s and at
    shutdown. Names: the documentation's *Monitoring* page.

    With ``group.membership=kafka`` the brokers' group coordinator keeps the membership
    instead of ZooKeeper; application code does not change.
    """

    def _make_membership(self, member: ConnectorParts) -> Membership:
        def make(kind: str) -> Membership:
            if kind == "kafka":
                return CoordinatorMembership(member)
            return ZooKeeperMembership(member, may_register=lambda: registration_refused(
                member, lambda: coordinator_members(member)))

        return SwitchingMembership(member, make, lambda: coordinator_members(member))
