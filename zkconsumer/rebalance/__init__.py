"""ZooKeeper group membership: Kafka 0.8's ``ZKRebalancerListener``, and what drives it.

===========================  ===================================================================
module                       holds
===========================  ===================================================================
``zookeeper_membership.py``  registration, the session lease, the watches and the rebalancer,
                             started and stopped in order (``group.membership=zookeeper``)
``rebalancer.py``            :class:`Rebalancer`: the rebalance loop on its own thread
``ownership.py``             :class:`Ownership`: what this member owns, and the driver that carries
                             out the machine's effects on owner nodes, fetchers, offsets, listener
``machine.py``               the steps of one attempt as a sans-I/O state machine (generators
                             that yield effects and are sent results; no I/O, never blocks)
``effects.py``               the effects the machine yields and the plain data sent back
``decisions.py``             every decision of an attempt, as pure functions of plain data
===========================  ===================================================================

``machine.py``, ``effects.py`` and ``decisions.py`` import nothing but the standard library's
``typing``, ``enum`` and ``dataclasses``, ``structs`` and ``errors`` and each other (tests in
``tests/unit/rebalance`` check it): the same decision code runs under kazoo and real threads in
production and under the deterministic simulator in ``tests/sim``.

May import: errors, structs, assignors, threads, zookeeper, fetch, offsets, consumer.
"""
