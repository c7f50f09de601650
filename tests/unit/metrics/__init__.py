"""Unit tests of zkconsumer.metrics."""
