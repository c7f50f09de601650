"""Unit tests of zkconsumer.monitoring."""
