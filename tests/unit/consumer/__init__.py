"""Unit tests of zkconsumer.consumer."""
