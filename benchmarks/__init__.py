"""Benchmarks and long-running fault drills of zkconsumer, driven by scripts/ (not part of the shipped package)."""
