"""Rebalance benchmarks (``scripts/bench-rebalance``): join latency (:mod:`.join`) and groups of
8 to 32 members through five events (:mod:`.scale`), zkconsumer beside Kafka's own consumer."""
