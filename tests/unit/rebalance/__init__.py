"""Unit tests of zkconsumer.rebalance."""
