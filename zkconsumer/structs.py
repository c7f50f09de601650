"""The value types every part of the consumer shares: one definition each.

* :data:`TopicPartition`: ``(topic, partition)``, the key of everything a member owns,
  fetches and commits (Kafka's ``TopicAndPartition``).
* :data:`INVALID_OFFSET`: the offset of a partition nothing was committed for yet
  (Kafka's ``PartitionTopicInfo.InvalidOffset``).
* :class:`Broker`: a live broker's id and the endpoint to connect to (read from
  ``/brokers/ids/<id>`` by ``zookeeper.zkformat.decode_broker``, or from a metadata response).

May import: the standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

__all__ = ["INVALID_OFFSET", "Broker", "TopicPartition"]

#: ``(topic, partition)``.
TopicPartition = Tuple[str, int]

#: No offset committed (Kafka's ``InvalidOffset``): the partition starts at ``auto.offset.reset``.
INVALID_OFFSET = -1


@dataclass(frozen=True)
class Broker:
    """A live broker: its id and the host/port of the endpoint we connect to."""

    id: int
    host: str
    port: int
