"""The offset storage a member's configuration asks for, wired to its ZooKeeper group client.

The one place that joins the Kafka storages (:mod:`zkconsumer.offsets.storage`, which know
nothing of ZooKeeper) with the ZooKeeper one and the group's ZooKeeper reads (brokers, owner
nodes): used by the connector and by the Spark paths.
"""

from __future__ import annotations

from typing import Optional

from ..commits import OffsetStorage
from ..config import ConsumerConfig
from ..offsets.channel import CoordinatorChannel, connection_factory
from ..offsets.storage import DualOffsetStorage, KafkaOffsetStorage
from ..zookeeper.group import GroupClient
from ..zookeeper.offset_storage import ZooKeeperOffsetStorage

__all__ = ["make_offset_storage"]


def make_offset_storage(config: ConsumerConfig, group: GroupClient, *,
                        owner_fenced: Optional[bool] = None) -> OffsetStorage:
    """The storage ``config`` asks for.

    ``offsets.storage=zookeeper``: :class:`~zkconsumer.zookeeper.offset_storage.ZooKeeperOffsetStorage`.
    ``offsets.storage=kafka``: :class:`~zkconsumer.offsets.storage.KafkaOffsetStorage`, wrapped in
    :class:`~zkconsumer.offsets.storage.DualOffsetStorage` when ``dual.commit.enabled``. Under
    ``group.membership=zookeeper`` every write is fenced by ZooKeeper ownership;
    under ``group.membership=kafka`` by the coordinator's generation.

    ``owner_fenced`` overrides that choice for a writer that is no member
    (Spark's driver): ``True`` fences by the ZooKeeper owner nodes the entries
    name, ``False`` writes as is (Kafka: OffsetCommit v1 under generation -1,
    which the coordinator still refuses while it manages the group).
    """
    if config.offsets_storage == "zookeeper":
        return ZooKeeperOffsetStorage(group, fenced=owner_fenced is not False)

    zookeeper_membership = config.group_membership == "zookeeper" if owner_fenced is None else owner_fenced

    channel = CoordinatorChannel(
        config.group_id,
        brokers=lambda: group.brokers(config.security_protocol),
        connect=connection_factory(config, config.offsets_channel_socket_timeout_ms),
        name="offsets",
    )
    kafka = KafkaOffsetStorage(
        channel, config.group_id,
        max_retries=config.offsets_commit_max_retries,
        backoff_ms=config.offsets_channel_backoff_ms,
        # checked for unmanaged generations only: ZooKeeper membership, also after a switch; not for a
        # writer that holds no owner nodes (owner_fenced=False: Spark's driver)
        owns=group.owns if owner_fenced is not False else None,
        session=(lambda: group.session_id) if owner_fenced is not False else None,
    )
    if not config.dual_commit_enabled:
        return kafka
    return DualOffsetStorage(kafka, ZooKeeperOffsetStorage(group, fenced=zookeeper_membership))
