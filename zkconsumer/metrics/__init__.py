"""The member's own metrics, and their exporters.

=================  ===================================================================
module             holds
=================  ===================================================================
``consumer.py``    :class:`ConsumerMetrics`: counters and rates of one member, the
                   rebalance pause timer, the periodic reporter
``prometheus.py``  :func:`instrument_connector`: a connector's metrics, collected at scrape
``http.py``        :class:`MetricsServer`: a registry served over HTTP
``push.py``        :class:`Pusher`: a registry pushed to a Pushgateway
=================  ===================================================================

A connector is handed in duck-typed, so nothing here knows the consumer's classes.
Watching groups from outside (lag, Burrow's rules) is :mod:`zkconsumer.monitoring`.

May import: errors, structs, threads.
"""
