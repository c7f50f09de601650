"""Operations on consumer groups stored in ZooKeeper: what the ``zkconsumer`` CLI runs.

Each operation takes a started :class:`~kazoo.client.KazooClient` and, where log
offsets are needed, a :class:`LogOffsets` source (normally :class:`BrokerOffsets`,
which asks each partition's leader). They read and write exactly the nodes
Kafka's own tools do (the layout in :mod:`zkconsumer.zookeeper.zkformat`), so results agree with
``kafka.tools.ConsumerOffsetChecker``, ``ExportZkOffsets`` and ``ImportZkOffsets``:

=====================  ==================================================================
operation              Kafka counterpart / behaviour
=====================  ==================================================================
:func:`list_groups`    ``kafka-consumer-groups --list``: children of ``/consumers``
:func:`describe_group` ``ConsumerOffsetChecker``: offset, log end, lag, owner per partition
:func:`export_offsets` ``ExportZkOffsets``: ``/consumers/<g>/offsets/<t>/<p>:<offset>`` lines
:func:`import_offsets` ``ImportZkOffsets``: write each line's offset to its path, all at once
:func:`plan_reset`     (later Kafka's ``--reset-offsets``, also ``--to-datetime``/``--by-duration``):
                       compute, clamp, never write
:func:`apply_reset`    write a plan, all at once, refusing while the group has live members
:func:`delete_group`   ``kafka-consumer-groups --delete``: refused while members are live
=====================  ==================================================================

Writes refuse to run while the group has *live members* (children of
``/consumers/<g>/ids``): a live member would overwrite offsets at its next
commit, and deleting its nodes would corrupt its state. The check and the write
are not atomic (ZooKeeper cannot make a multi-op depend on a node's children),
so a member joining in between is not detected; the window is milliseconds.

Imports and resets write all their offsets in one ZooKeeper multi-operation, each
node as read when planned, or none (:mod:`.atomic`): interrupted, killed or
refused, they leave every offset as it was.

User errors raise subclasses of :class:`AdminError` (a ``ZkConsumerError``) with
a one-line message; malformed offset nodes raise
:class:`~zkconsumer.errors.MalformedZnodeError` naming the node.

Submodules (everything public is re-exported here; import from ``zkconsumer.admin``):

=====================  ==================================================================
submodule              contents
=====================  ==================================================================
:mod:`.errors`         :class:`AdminError` and its subclasses
:mod:`.log_offsets`    :class:`LogOffsets`, :class:`TimeOffsets` (protocols), :class:`BrokerOffsets`
:mod:`.reads`         ZooKeeper reading helpers of the operations; :func:`list_groups`,
                       :func:`live_members`, :data:`Progress`
:mod:`.describe`       :class:`MemberInfo`, :class:`PartitionRow`, :class:`GroupDescription`,
                       :func:`describe_group`
:mod:`.offsets_file`   :class:`OffsetEntry`, :func:`export_offsets`, :func:`format_export`,
                       :func:`parse_export`, :func:`import_offsets`
:mod:`.reset`          :class:`ResetTarget`, :func:`parse_reset_target`, :func:`compute_reset`,
                       :class:`ResetRow`, :class:`ResetPlan`, :func:`plan_reset`,
                       :func:`apply_reset`
:mod:`.times`          positions by time: :func:`parse_datetime`, :func:`parse_duration`,
                       :func:`offsets_for_time` (log-segment boundaries on 0.9 brokers)
:mod:`.seek`           a live group-wide seek (not re-exported): :func:`~.seek.start_seek`,
                       :func:`~.seek.wait_for_seek`, :func:`~.seek.finish_seek`, :func:`~.seek.cancel_seek`
:mod:`.atomic`         :func:`~.atomic.write_offsets`: many offset nodes in one multi-operation,
                       all or nothing, and what an interrupted one did
:mod:`.delete`         :func:`delete_group`
:mod:`.stores`         where offsets are read: ZooKeeper, Kafka (:class:`CoordinatorOffsets`), both;
                       :class:`StoredOffset`, :class:`GroupOffsets`, :func:`read_group_offsets`
:mod:`.copy`           :func:`plan_copy`, :func:`apply_copy`: a group's offsets from one store to
                       the other (ZooKeeper in one multi, Kafka in one OffsetCommit)
:mod:`.stored_io`      export, import and reset on Kafka or both stores (``--offsets-storage``)
=====================  ==================================================================

May import: errors, structs, wire, zookeeper, consumer, offsets, kerberos.
"""

from __future__ import annotations

from ..structs import TopicPartition
from .delete import delete_group
from .describe import GroupDescription, MemberInfo, PartitionRow, describe_group
from .errors import AdminError, GroupActiveError, OffsetFileError, UnknownGroupError, UnknownTopicError
from .log_offsets import NONE_BEFORE, BrokerOffsets, LogOffsets, TimeOffsets
from .offsets_file import OffsetEntry, export_offsets, format_export, import_offsets, parse_export
from .reads import ADMIN_CLIENT_ID, Progress, list_groups, live_members
from .reset import ResetPlan, ResetRow, ResetTarget, apply_reset, compute_reset, parse_reset_target, plan_reset
from .times import SEGMENT_NOTE, format_time, offsets_for_time, parse_datetime, parse_duration

__all__ = [
    "AdminError", "UnknownGroupError", "UnknownTopicError", "GroupActiveError", "OffsetFileError",
    "LogOffsets", "TimeOffsets", "BrokerOffsets", "MemberInfo", "PartitionRow", "GroupDescription",
    "OffsetEntry", "ResetTarget", "ResetRow", "ResetPlan", "Progress", "TopicPartition", "ADMIN_CLIENT_ID",
    "list_groups", "live_members", "describe_group", "export_offsets", "format_export",
    "parse_export", "import_offsets", "parse_reset_target", "compute_reset", "plan_reset",
    "apply_reset", "delete_group", "NONE_BEFORE", "SEGMENT_NOTE", "format_time", "offsets_for_time",
    "parse_datetime", "parse_duration",
]
