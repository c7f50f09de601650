"""Unit tests of the top-level modules of zkconsumer, one file each (test_config.py for config.py...)."""
