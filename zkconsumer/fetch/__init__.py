"""Fetching: the fetcher manager, its per-broker threads, the leader finder, and the per-partition queues."""
