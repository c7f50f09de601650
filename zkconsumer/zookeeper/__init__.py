"""ZooKeeper: the group's paths and JSON, membership, watches, the session lease, bounded calls.

May import: errors, structs, commits, threads, kerberos.
"""
