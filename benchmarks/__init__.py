"""Benchmarks of zkconsumer against Kafka's own consumer and other Python clients.

``benchmarks.throughput`` (driven by ``scripts/bench``) measures consume throughput;
``benchmarks.report`` holds its pure helpers (``/proc/stat`` steal, medians, tables).
"""
