"""Unit tests of zkconsumer.coordinator."""
