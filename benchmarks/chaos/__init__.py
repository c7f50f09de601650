"""The chaos test: a consumer group under member and broker failures, with exact accounting.

One *side* of a run (:class:`ChaosRun`) starts a dedicated :class:`~harness.cluster.ProjectCluster`
(3 brokers, a topic with replication 3), a group of member processes, an
``acks=all`` producer, a ZooKeeper offset monitor and an ownership monitor, then
plays one schedule (:func:`schedule`), as fractions of ``duration_s`` after the
producer starts. Every member reaches ZooKeeper through its own
:class:`~harness.cluster.proxy.ZooKeeperProxy` in this process (its
``zookeeper.connect`` is the proxy's address), so one member alone can be cut
off from ZooKeeper, and its session (seen in the proxied handshake) expired.

Schedules (``ChaosSettings.schedule``; ``scripts/chaos --schedule NAME``):

``default`` (member and broker faults)

====== ================================================================
 10 %   ``kill -9`` a member
 25 %   add a member
 40 %   ``SIGSTOP`` a member for the session timeout + 4 s, then ``SIGCONT``
 65 %   ``SIGKILL`` the broker leading a partition (chosen by the seed)
 85 %   restart that broker
100 %   stop the producer; settle; stop the members; drain; account
====== ================================================================

``zk`` (ZooKeeper faults)

====== ================================================================
  8 %   expire a member's ZooKeeper session (a second client joins the
        session seen through the member's proxy and closes it)
 15 %   partition a member from ZooKeeper (its proxy blackholes) for the
        session timeout + 4 s, then heal
 45 %   ``SIGSTOP`` ZooKeeper for ``zk_pause_s`` (15 s), then ``SIGCONT``
 75 %   ``kill -9`` ZooKeeper; ``zk_down_s`` (10 s) later start it again on
        the same port and data directory
100 %   as above
====== ================================================================

``zk-outage`` (item 10 of "Correct under faults": an application that treats
any commit exception as fatal; members run with ``commit_fatal``, see
:mod:`benchmarks.chaos.member`; 12 partitions by default)

====== ================================================================
 10 %   ``SIGSTOP`` ZooKeeper for ``zk_pause_s`` (15 s), then ``SIGCONT``
 55 %   ``kill -9`` ZooKeeper, start it again ``zk_down_s`` (10 s) later
100 %   as above
====== ================================================================

Kafka's ConsoleConsumer has no commit-fatal mode: its members always
auto-commit every ``commit_interval_ms`` (the ``commits`` row says which).

The *same* schedule (same seed, so the same victims by index) runs with
zkconsumer members (:mod:`benchmarks.chaos.member`) and with Kafka's own
Scala consumer (``kafka.tools.ConsoleConsumer``) as members; :func:`run_chaos`
runs both and :func:`format_table` prints them side by side.

Method and definitions
----------------------

*Values.* The producer sends ``chaos-<10-digit sequence>`` (no key), so every
message is self-describing: members record values, and losses and duplicates
are counted by value on both sides (Kafka's ConsoleConsumer prints values only).

*Acknowledged*: values whose produce future succeeded (``acks=all``, replication
3 on 3 brokers, ``min.insync.replicas`` 1, Kafka's default).
``unclean.leader.election.enable=false`` so that a broker kill cannot truncate
acknowledged data: losses are then the consumer's alone. A full scan of the log
at the end checks this (``missing_from_log``: acknowledged values absent from
the log; always reported, and always part of ``lost``).

*Recorded*: a member records a value when its line is in the member's output
file (zkconsumer members flush each line; the JVM's ``System.out`` flushes on
every write). Partial last lines (a ``kill -9`` mid-line) are ignored.

*Final drain*: after the producer stops, the group is given ``settle_timeout_s``
to commit the log end offset of every partition, then every member is stopped
with SIGTERM (a clean shutdown commits its offsets), and a drain reads, with an
independent client (kafka-python, no group), every partition from the group's
**committed offset** (in ZooKeeper) to the log end, recording what it reads.
The drain cannot hide a loss: a message is lost exactly when the group's
committed offset moved past it without any member recording it, and the drain
only reads at and above the committed offsets, so it can only make such a
message reappear if a committed offset went back below it, which the offset
monitor counts as a *regression*. What the drain reads is reported
(``drained``): messages the members left unconsumed, which a healthy group
should not do (each one also means the settle phase failed: ``stalled``).

*Lost* = acknowledged − recorded by any member or the drain.

*Duplicate %* = (total recordings − distinct values recorded) / distinct values
× 100. It includes values the producer itself wrote twice (a retry of a send
whose acknowledgement was lost with a broker); ``consumer_duplicate_pct``
subtracts those: Σ max(0, recordings(v) − copies of v in the log) / distinct.

*Committed-offset regressions*: the :class:`OffsetMonitor` reads
``/consumers/<g>/offsets/<topic>/<p>`` every 100 ms and also through a data watch
per partition (each change notification re-reads the node), orders what it
sees by the node's version, and counts every observed decrease.

*Failed members*: a member process is failed if, not being the one the schedule
``kill -9``'d, it

1. exited before the final stop (a crash or a self-exit), or
2. was alive at the end of the settle phase but not registered in
   ``/consumers/<g>/ids``, or owned (``/consumers/<g>/owners``) a partition whose
   committed offset was still below the log end: it stopped consuming while the
   group still had data, or
3. at the final stop did not exit within ``stop_grace_s`` of SIGTERM, or exited
   with a status other than a clean one (0; 143 for a JVM killed by SIGTERM
   after its shutdown hooks).

The paused member is included: after SIGCONT it must recover.
*Stalled partitions*: partitions whose committed offset was below the log end at
the end of the settle phase, owned or not (an unowned one fails the group
without failing any one member).

*Max stall*: the longest time any partition had acknowledged messages beyond its
committed offset without that offset advancing (commits happen every
``auto.commit.interval.ms``, so ~1 s is the floor); a measure of availability.

*Longest ownerless partition*: the :class:`OwnershipMonitor` reads
``/consumers/<g>/ids`` and ``/consumers/<g>/owners/<topic>`` every 100 ms from
the producer's start to the end of the settle phase; the figure is the longest
continuous interval any partition had no owner node while the group had live
members (a member process alive and not ``kill -9``'d by the schedule). A
sample that cannot be read (ZooKeeper down) changes nothing: an interval open
before an outage continues through it.

*Settled again*: the group is *complete* in a sample when every partition's
owner node names a consumer registered in ``/consumers/<g>/ids``. The figure is
the time from the end of the schedule's last fault to the start of the final
run of complete samples, which must last to the end of the settle phase
(0 if the group was complete throughout); "no" if the group was not complete
at the end.

Example::

    from benchmarks.chaos.report import format_table
    from benchmarks.chaos.run import run_chaos
    from benchmarks.chaos.settings import ChaosSettings
    results = run_chaos(ChaosSettings(duration_s=60), kinds=("zkconsumer", "kafka"))
    print(format_table(results))

Modules: :mod:`~benchmarks.chaos.settings` (schedules, settings),
:mod:`~benchmarks.chaos.members` (member processes, the producer),
:mod:`~benchmarks.chaos.monitors` (offsets, ownership, logs), :mod:`~benchmarks.chaos.run`
(one side, both sides), :mod:`~benchmarks.chaos.report` (tally, verdict, table),
:mod:`~benchmarks.chaos.member` (the member process); ``python -m benchmarks.chaos``
is ``scripts/chaos``.
"""
