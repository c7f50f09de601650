"""The value types every part of the consumer shares: one definition each.

* :data:`TopicPartition`: ``(topic, partition)``, the key of everything a member owns,
  fetches and commits (Kafka's ``TopicAndPartition``).
* :data:`INVALID_OFFSET`: the offset of a partition nothing was committed for yet
  (Kafka's ``PartitionTopicInfo.InvalidOffset``).

May import: the standard library only.
"""

from __future__ import annotations

from typing import Tuple

__all__ = ["INVALID_OFFSET", "TopicPartition"]

#: ``(topic, partition)``.
TopicPartition = Tuple[str, int]

#: No offset committed (Kafka's ``InvalidOffset``): the partition starts at ``auto.offset.reset``.
INVALID_OFFSET = -1
