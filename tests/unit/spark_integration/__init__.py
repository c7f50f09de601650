"""Unit tests of spark_integration."""
