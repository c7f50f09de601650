"""Unit tests of zkconsumer.cli."""
