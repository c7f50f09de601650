"""Unit tests of zkconsumer.java_regex."""
