"""Unit tests of the benchmarks' code (benchmarks/: reports, the rebalance scale model, the cluster helpers)."""
