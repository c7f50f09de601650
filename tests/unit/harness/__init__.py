"""Unit tests of the shared test and benchmark harness (harness/)."""
