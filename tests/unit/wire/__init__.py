"""Unit tests of zkconsumer.wire."""
