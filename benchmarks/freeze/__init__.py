"""Whole-process freezes against idle members: which heartbeat keeps its session (``scripts/bench-freeze``).

Method. Three groups run side by side on one cluster, one per kind: zkconsumer with its default
heartbeat (``zookeeper.heartbeat=kafka``), zkconsumer with ``quiet``, and Kafka 0.9.0.1's own
Scala consumer (``ScaleMember``, on ``kafka.javaapi.consumer``). Each group has three member
processes on a topic with no messages, so nothing but the heartbeat keeps a session alive
(commits skip unchanged offsets), with ``zookeeper.session.timeout.ms`` = T = 6000. For every
freeze length, ``tries`` times: wait a random 0 to T/3 (a random phase of the ping cycle), then
SIGSTOP one member of each group at once, SIGCONT it after the freeze, wait 2 s and read the
``ephemeralOwner`` of its ``/consumers/<g>/ids/<id>`` node: a different session (or no node)
means the session was lost. After a loss the next try waits for the member to register again.
"""
