"""Unit tests of zkconsumer.admin."""
