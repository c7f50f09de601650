"""Unit tests of zkconsumer.testing."""
