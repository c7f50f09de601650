"""ZooKeeper group membership: Kafka 0.8's ``ZKRebalancerListener``, and what drives it.

===========================  ===================================================================
module                       holds
===========================  ===================================================================
``zookeeper_membership.py``  registration, the session lease, the watches and the rebalancer,
                             started and stopped in order (``group.membership=zookeeper``)
``rebalancer.py``            :class:`Rebalancer`: the rebalance loop on its own thread
``ownership.py``             :class:`Ownership`: what this member owns and the steps of an attempt
                             that touch owner nodes and fetchers: release, claim, relabel, install
``decisions.py``             every decision of an attempt, as pure functions of plain data
===========================  ===================================================================

May import: errors, config, structs, assignors, threads, zookeeper, fetch, offsets, consumer.
"""
