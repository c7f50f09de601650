"""Fetching: the fetcher manager, its per-broker threads, the leader finder, and the hand-off queues.

======================  ===================================================================
module                  holds
======================  ===================================================================
``manager.py``          :class:`FetcherManager`: which broker fetches which partition
``leader_finder.py``    the thread that finds leaders for partitions that have none
``fetcher_thread.py``   one thread per broker: fetch, decode, queue
``partition_state.py``  a fetcher's view of one partition, and how many are not simply fetchable
``rounds.py``           a round's rules: its broker wait, when a fetcher goes wide, and whose
                        turn it is (the fetcher thread's, or a waiting consumer's)
``handoff.py``          :class:`ChunkQueue` (one per stream) and :class:`PartitionTopicInfo`:
                        the hand-off between fetcher threads and stream iterators
``placement.py``        placing a partition's position per ``auto.offset.reset``
``fetch_stats.py``      per-broker fetch counters
======================  ===================================================================

May import: errors, structs, assignors, threads, kerberos, wire.
"""
