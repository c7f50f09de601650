"""Unit tests of zkconsumer.zookeeper."""
