"""Observability: Prometheus metrics of a connector, and a Burrow-style lag exporter.

=====================  ==================================================================
module                 contents
=====================  ==================================================================
:mod:`.burrow`         Burrow's lag evaluation rules, pure (:func:`evaluate_partition`,
                       :func:`evaluate_group`, :class:`PartitionWindow`)
:mod:`.lag`            :class:`LagMonitor`: windows of committed offsets per partition
:mod:`.exporter`       :class:`LagExporter` (polls every group), :class:`LagCollector`
:mod:`.prometheus`     :func:`instrument_connector`: a connector's metrics, collected at scrape
:mod:`.http`           :class:`MetricsServer`: a registry served over HTTP, joinable
:mod:`.push`           :class:`Pusher`: a registry pushed to a Pushgateway
=====================  ==================================================================

Metric names and the Grafana dashboard: the documentation's *Monitoring* page.

May import: errors, structs, threads, admin.
"""

from __future__ import annotations

from .burrow import DEFAULT_WINDOW, Commit, GroupStatus, PartitionStatus, PartitionWindow, evaluate_group, evaluate_partition

__all__ = ["DEFAULT_WINDOW", "Commit", "GroupStatus", "PartitionStatus", "PartitionWindow", "evaluate_group",
           "evaluate_partition"]
