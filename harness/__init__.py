"""The harness that tests and benchmarks share (not shipped): real clusters and their faults.

``harness.cluster``: ``ProjectCluster`` (a ``LocalCluster`` with Kafka's own tools as referees),
ZooKeeper ensembles, TCP proxies that cut connections, TLS material, a Kerberos KDC;
``harness.modern_client``: a modern Kafka client (kafka-python, confluent-kafka) as a group member
in a child process; ``harness.postgres``: a throw-away PostgreSQL; ``harness.assignment``: Kafka's assignment
algorithms restated as the oracle that zkconsumer's assignors are checked against; ``harness.ports``: an
address where nothing listens, held so that nothing else can take it.
"""
