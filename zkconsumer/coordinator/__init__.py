"""Group membership through the broker's group coordinator (``group.membership=kafka``).

Kafka 0.9 moved consumer-group membership from ZooKeeper to a coordinator
broker: members find it (GroupCoordinator), join (JoinGroup), the elected
leader computes the assignment on the client and hands it out (SyncGroup), and
every member heartbeats within its session timeout. This package is that
backend for zkconsumer, behind the same ``ZookeeperConsumerConnector`` API:

=======================  ==============================================================
module                   owns
=======================  ==============================================================
``assignment.py``        member metadata and assignments as bytes; the leader's plan (pure)
``join_sync.py``         ``JoinSyncLoop``: the join/sync/heartbeat state machine and its threads
``delivery.py``          what an assignment means locally: fetchers, queues, positions
``kafka_membership.py``  ``CoordinatorMembership``: the wiring, the connector's membership
=======================  ==============================================================

The coordinator itself is found through :mod:`zkconsumer.offsets.channel` (shared with
offset storage in Kafka). Nothing is imported here: importing one module of the package loads no other.

May import: errors, structs, commits, assignors, threads, wire, zookeeper, fetch, offsets, consumer
(not :mod:`zkconsumer.rebalance`: the two memberships know nothing of each other).
"""
