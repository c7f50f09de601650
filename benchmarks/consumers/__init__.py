"""Consumer subprocess scripts of the throughput benchmark (one JSON line on stdout each)."""
