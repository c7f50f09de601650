"""Unit tests of zkconsumer.fetch."""
