"""End-to-end latency: how long a message waits between its producer's send and the application's hands.

``scripts/bench-latency`` drives :mod:`benchmarks.latency.run`; ``docs/latency.md`` gives the
method, the settings per consumer and the results. A producer on this machine stamps each
100 B message with its wall-clock send time (microseconds since the epoch, the first 8 bytes,
big-endian) and keeps a steady rate over the topic's partitions; every consumer reads the same
stream in the same run and records, per message, its delivery time minus the stamp.
"""
