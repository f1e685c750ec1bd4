"""The metrics of one finished run (cron mode), as Prometheus text (``render_metrics``) or as a
node_exporter textfile written atomically (``write_textfile``), carrying each partition's last
successful sync time over from the previous file (``read_last_success``).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import write_to_textfile
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

from partsync.plan.results import PartitionResult, Status, SyncReport
from partsync.ui.metric_families import LAST_SUCCESS, TP, TPS, bytes_per_offset, gauge

__all__ = ["read_last_success", "render_metrics", "write_textfile"]


def _text(collector: Collector) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()


def read_last_success(path: Path) -> dict[tuple[str, int], float]:
    """Each partition's last-success timestamp in a textfile written before (empty if there is
    none or it cannot be read). A damaged file gives what still parses of that family."""
    out: dict[tuple[str, int], float] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return out
    families: list[Metric] = []
    try:
        families += text_string_to_metric_families(text)
    except ValueError:  # not valid exposition text as a whole: salvage our samples line by line
        families = []
        for line in text.splitlines():
            if line.startswith(LAST_SUCCESS):
                try:
                    families += text_string_to_metric_families(line + "\n")
                except ValueError:
                    pass
    for family in families:
        for s in family.samples:
            if s.name != LAST_SUCCESS or not math.isfinite(s.value):
                continue
            topic, partition = s.labels.get("topic"), s.labels.get("partition")
            if topic is not None and partition and partition.isascii() and partition.isdigit():
                out[(topic, int(partition))] = float(s.value)
    return out


class _RunCollector(Collector):
    """The metrics of one finished run (``render_metrics``, ``write_textfile``)."""

    def __init__(
        self,
        report: SyncReport,
        exit_code: int,
        now: float,
        previous_success: dict[tuple[str, int], float] | None,
    ) -> None:
        self.report = report
        self.exit_code = exit_code
        self.now = now
        self.previous_success = dict(previous_success or {})

    def collect(self) -> Iterator[Metric]:
        report, now = self.report, self.now
        parts = [p for p in report.all_partitions() if p.partition >= 0]
        last = dict(self.previous_success)
        for p in parts:
            if p.status in (Status.IN_SYNC, Status.SYNCED):
                last[(p.topic, p.partition)] = now

        def lp(p: PartitionResult) -> tuple[str, str]:
            return (p.topic, str(p.partition))

        def lag(p: PartitionResult) -> int:
            return max(0, p.target_end - p.local_end_after)

        yield gauge(
            "partsync_partition_lag_records",
            "Offsets the local partition is behind the furthest source (as planned), after the run.",
            TP,
            ((lp(p), lag(p)) for p in parts),
        )
        yield gauge(
            "partsync_partition_lag_bytes",
            "Estimated bytes behind the furthest source: lag in offsets times the mean batch bytes "
            "per offset copied in this run (only partitions that copied something).",
            TP,
            ((lp(p), round(lag(p) * bytes_per_offset(p))) for p in parts if bytes_per_offset(p)),
        )
        yield gauge(
            "partsync_partition_local_end_offset",
            "Local log end offset after the run.",
            TP,
            ((lp(p), p.local_end_after) for p in parts),
        )
        yield gauge(
            "partsync_copied_bytes",
            "Batch bytes copied in this run, by source cluster.",
            TPS,
            (((*lp(p), s), n) for p in parts for s, n in sorted(p.bytes_by_source.items())),
        )
        yield gauge(
            "partsync_copied_batches",
            "Batches copied in this run, by source cluster.",
            TPS,
            (((*lp(p), s), n) for p in parts for s, n in sorted(p.batches_by_source.items())),
        )
        yield gauge(
            "partsync_appends_verified",
            "Batches appended in this run whose base offset was verified equal to the source's.",
            TP,
            ((lp(p), p.batches) for p in parts),
        )
        yield gauge(
            "partsync_partition_status",
            "1 for the partition's status in this run (in-sync, synced, behind, unsafe, error, "
            "handed-over, stopped, source-gone).",
            ("topic", "partition", "status"),
            (((*lp(p), p.status.value), 1) for p in parts),
        )
        yield gauge(
            "partsync_unsafe_refusals",
            "Partitions refused as unsafe in this run, by topic.",
            ("topic",),
            (
                ((t.topic,), sum(1 for p in t.partitions if p.status is Status.UNSAFE))
                for t in report.topics
            ),
        )
        yield gauge(
            LAST_SUCCESS,
            "Unix time of the last run that left the partition in sync.",
            TP,
            (((t, str(p)), v) for (t, p), v in sorted(last.items())),
        )
        yield gauge(
            "partsync_run_duration_seconds",
            "Duration of the last run.",
            (),
            [((), round(report.seconds, 3))],
        )
        yield gauge(
            "partsync_run_exit_code", "Exit code of the last run.", (), [((), self.exit_code)]
        )
        yield gauge(
            "partsync_run_timestamp_seconds",
            "Unix time the last run ended.",
            (),
            [((), round(now, 3))],
        )


def render_metrics(
    report: SyncReport,
    exit_code: int,
    *,
    now: float | None = None,
    previous_success: dict[tuple[str, int], float] | None = None,
) -> str:
    """The Prometheus text exposition of a finished run."""
    now = time.time() if now is None else now
    return _text(_RunCollector(report, exit_code, now, previous_success))


def write_textfile(path: str | os.PathLike[str], report: SyncReport, exit_code: int) -> None:
    """Write the run's metrics to ``path`` atomically, carrying over each partition's last-success
    time from the file already there."""
    target = Path(path)
    registry = CollectorRegistry(auto_describe=False)
    previous = read_last_success(target)
    registry.register(_RunCollector(report, exit_code, time.time(), previous))
    write_to_textfile(os.fspath(target), registry)
