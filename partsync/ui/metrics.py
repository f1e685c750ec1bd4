"""Prometheus metrics, through ``prometheus_client``: a textfile per cron run, or a live endpoint in
follow mode.

Both are custom collectors over partsync's own data (a finished ``SyncReport``, or ``LiveMetrics``
updated by the workers), each in a ``CollectorRegistry`` of its own: nothing is registered in
prometheus_client's global default registry, so several runs or servers in one process never clash.
``prometheus_client`` renders every value in full (``repr`` precision): timestamps keep their
fraction of a second and byte counters their last digit.

``write_textfile(path, report, exit_code)`` writes with ``prometheus_client.write_to_textfile``,
which is atomic (temp file in the same directory, then rename), so node_exporter's textfile
collector never reads half a file. The last successful sync time of each partition survives runs
that fail: it is carried over from the previous file.

``LiveMetrics`` is what a long-running process updates as it goes (counters since start, lag as
last seen) and ``serve_metrics`` serves it at ``/metrics``, with ``/healthz`` and ``/readyz``
decided by ``ui.health`` from the facts ``LiveMetrics`` gathers.

Lag in seconds (follow mode) is measured with the batches the sources' long poll sees (``io.tail``
reports the newest data batch of each answer, at the mirror's end): the source's newest data
timestamp is the max timestamp of the newest batch the poll saw, the mirror's is the max
timestamp of the newest such batch that the local log end has since passed. 0 while the
partition is caught up as last seen; unknown (no sample) while it is behind and the poll has not
seen a batch beyond the mirror's end, or no batch the poll saw was copied yet (after a start).

Lag in bytes is an estimate: Kafka exposes no byte position, so it is the lag in offsets times
the partition's mean batch bytes per offset, as measured on what was copied.

Each job in a module of its own: ``ui.metric_families`` (what every family is built from),
``ui.run_metrics`` (a finished run), ``ui.live_state`` (what the workers update),
``ui.live_metrics`` (its families), ``ui.metrics_server`` (the HTTP endpoint); this module offers
them under the names callers use.
"""

from __future__ import annotations

from partsync.ui.health import Health
from partsync.ui.live_metrics import LiveMetrics
from partsync.ui.live_state import GroupState
from partsync.ui.metrics_server import MetricsServer, serve_metrics
from partsync.ui.run_metrics import read_last_success, render_metrics, write_textfile

__all__ = [
    "GroupState",
    "Health",
    "LiveMetrics",
    "MetricsServer",
    "read_last_success",
    "render_metrics",
    "serve_metrics",
    "write_textfile",
]
