"""Committing offsets: one place for everything a commit passes through.

=================  ===================================================================
module             holds
=================  ===================================================================
``committer.py``   :class:`OffsetCommitter` (what was handed out, what is committed) and
                   :class:`AutoCommitter` (``auto.commit.enable``)
``storage.py``     where offsets go (``offsets.storage``): ZooKeeper, Kafka, or both
                   (``dual.commit.enabled``), fenced by ownership or generation
``channel.py``     :class:`CoordinatorChannel`: the connection to the group's offsets
                   coordinator broker, found again when it moves
=================  ===================================================================

May import: errors, config, structs, threads, kerberos, wire, zookeeper, fetch.
"""
