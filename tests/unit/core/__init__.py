"""Unit tests of the top-level modules of zkconsumer (config, assignors, security, connector...)."""
