"""Committing offsets: one place for everything a commit passes through.

=================  ===================================================================
module             holds
=================  ===================================================================
``committer.py``   :class:`OffsetCommitter` (what was handed out, what is committed) and
                   :class:`AutoCommitter` (``auto.commit.enable``)
``storage.py``     offsets in Kafka, or in Kafka and ZooKeeper (``dual.commit.enabled``),
                   fenced by ownership or generation (the ZooKeeper store is
                   ``zookeeper/offset_storage.py``)
``channel.py``     :class:`CoordinatorChannel`: the connection to the group's offsets
                   coordinator broker, found again when it moves
=================  ===================================================================

May import: errors, structs, commits, threads, kerberos, wire, fetch.
"""
