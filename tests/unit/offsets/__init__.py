"""Unit tests of zkconsumer.offsets."""
