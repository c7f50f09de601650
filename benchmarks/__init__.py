"""Benchmarks of zkconsumer beside Kafka's own consumer; not part of the shipped package."""
