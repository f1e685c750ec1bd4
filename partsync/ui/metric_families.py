"""The pieces every partsync metric is built from, shared by the finished run's textfile
(``ui.run_metrics``) and the follower's live endpoint (``ui.live_metrics``), so both expose the
same names and labels: a family built whole from its samples, the label sets, and the byte-lag
estimate.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

from partsync.plan.results import PartitionResult

__all__ = [
    "LAST_SUCCESS",
    "TP",
    "TPS",
    "Samples",
    "bytes_per_offset",
    "counter",
    "gauge",
]

# Read back from the previous textfile (``read_last_success``), so its name is spelt once.
LAST_SUCCESS = "partsync_last_success_timestamp_seconds"
TP = ("topic", "partition")  # the labels of a per-partition series
TPS = ("topic", "partition", "source")

Samples = Iterable[tuple[Sequence[str], float]]


def gauge(name: str, help_text: str, labels: Sequence[str], samples: Samples) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=labels)
    for values, value in samples:
        family.add_metric(values, value)
    return family


def counter(
    name: str, help_text: str, labels: Sequence[str], samples: Samples
) -> CounterMetricFamily:
    """``name`` without ``_total``: prometheus_client appends it to the family's sample names."""
    family = CounterMetricFamily(name, help_text, labels=labels)
    for values, value in samples:
        family.add_metric(values, value)
    return family


def bytes_per_offset(p: PartitionResult) -> float:
    copied = p.local_end_after - p.local_end_before
    return p.bytes / copied if copied > 0 and p.bytes else 0.0
