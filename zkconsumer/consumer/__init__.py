"""What every member has, whoever keeps its group membership, and what the application touches.

=======================  ===================================================================
module                   holds
=======================  ===================================================================
``base_connector.py``    :class:`ConsumerConnectorBase`: the ZooKeeper session, the streams,
                         commits retried through outages, metrics, the bounded shutdown
                         (``zkconsumer/connector.py``, the composition root, picks its membership)
``membership.py``        what the application sees of membership: the rebalance listener,
                         :class:`RebalanceState`, :class:`RebalanceStatus`; the fetcher
                         control a membership drives; :class:`ConnectorParts`, the parts of a
                         connector a membership is built from
``switching.py``         the membership that moves itself between ZooKeeper and the coordinator
``offset_stores.py``     the offset storage a configuration asks for
``stream.py``            :class:`KafkaStream` and :class:`MessageAndMetadata`: iterating a queue
``acks.py``              ``commit.processed.only``: the acked (processed) offsets of each partition
``arrow.py``             Arrow record batches of a stream (``KafkaStream.batches()``)
``topic_count.py``       subscriptions: static topic counts, whitelists and blacklists, and
                         their registration JSON
=======================  ===================================================================

Who decides which member consumes what lives above this package: :mod:`zkconsumer.rebalance`
(ZooKeeper membership) and :mod:`zkconsumer.coordinator` (the brokers' group coordinator).

May import: errors, config, structs, commits, assignors, java_regex, threads, security, kerberos, wire, zookeeper,
fetch, offsets, metrics.
"""
