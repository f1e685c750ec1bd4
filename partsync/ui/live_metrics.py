"""The metrics of a long-running process (follow mode): ``LiveMetrics`` is the ``LiveState`` its
workers update, and the collector of its own registry, which ``ui.metrics_server`` serves at
``/metrics``. Counters count since the process started; lag is as last seen.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from partsync.ui.live_state import LiveState
from partsync.ui.metric_families import LAST_SUCCESS, TP, TPS, counter, gauge
from partsync.ui.topic_metrics import live_topics, topic_families

__all__ = ["LiveMetrics"]


class LiveMetrics(LiveState, Collector):
    """Metrics of a long-running process (follow mode), updated by its workers.

    It is the collector of its own ``registry``, which ``serve_metrics`` serves."""

    def __init__(self) -> None:
        super().__init__()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def render(self) -> str:
        """The Prometheus text exposition, as ``/metrics`` serves it."""
        return generate_latest(self.registry).decode()

    def collect(self) -> list[Metric]:
        """A consistent snapshot: built whole under the lock the workers update under."""
        with self._lock:
            return list(self._families())

    def _families(self) -> Iterator[Metric]:
        keys = sorted(set(self.local_end) | self.owned)

        def lp(k: tuple[str, int]) -> tuple[str, str]:
            return (k[0], str(k[1]))

        lag = {
            k: max(
                0, max(self.source_end.get(k, {}).values(), default=0) - self.local_end.get(k, 0)
            )
            for k in keys
            if k in self.local_end
        }
        yield gauge(
            "partsync_partition_lag_records",
            "Offsets the local partition is behind the furthest source, as last seen.",
            TP,
            ((lp(k), v) for k, v in sorted(lag.items())),
        )
        yield gauge(
            "partsync_partition_lag_bytes",
            "Estimated bytes behind the furthest source (lag in offsets times the "
            "mean batch bytes per offset copied).",
            TP,
            (
                (lp(k), round(v * self.bytes_per_offset[k]))
                for k, v in sorted(lag.items())
                if k in self.bytes_per_offset
            ),
        )
        yield gauge(
            "partsync_partition_lag_seconds",
            "Source's newest data timestamp minus the mirror's, in seconds, as the sources' long "
            "poll saw them: max timestamp of the newest batch the poll saw beyond the mirror's "
            "end, minus that of the newest such batch since copied. 0 while caught up as last "
            "seen; no sample while behind without both (no batch seen yet, or none copied yet "
            "since start).",
            TP,
            ((lp(k), v) for k in sorted(lag) if (v := self._lag_seconds(k, lag[k])) is not None),
        )
        yield gauge(
            "partsync_partition_local_end_offset",
            "Local log end offset.",
            TP,
            ((lp(k), v) for k, v in sorted(self.local_end.items())),
        )
        yield gauge(
            "partsync_partition_owned",
            "1 while this process owns (writes) the partition.",
            TP,
            ((lp(k), 1 if k in self.owned else 0) for k in keys),
        )
        yield counter(
            "partsync_copied_bytes",
            "Batch bytes copied by this process, by source cluster.",
            TPS,
            (((t, str(p), s), n) for (t, p, s), n in sorted(self.copied_bytes.items())),
        )
        yield counter(
            "partsync_copied_batches",
            "Batches copied by this process, by source cluster.",
            TPS,
            (((t, str(p), s), n) for (t, p, s), n in sorted(self.copied_batches.items())),
        )
        yield counter(
            "partsync_appends_verified",
            "Appends whose base offset was verified equal to the source's.",
            TP,
            ((lp(k), v) for k, v in sorted(self.appends_verified.items())),
        )
        yield counter(
            "partsync_unsafe_refusals",
            "Copy rounds refused as unsafe, by topic.",
            ("topic",),
            (((t,), v) for t, v in sorted(self.unsafe.items())),
        )
        yield counter(
            "partsync_handovers",
            "Times this process stopped writing a partition because another "
            "writer took it over (rebalance or producer-epoch fencing).",
            TP,
            ((lp(k), v) for k, v in sorted(self.handed_over.items())),
        )
        yield gauge(
            "partsync_partition_status",
            "1 for the partition's status after its last round.",
            ("topic", "partition", "status"),
            (((*lp(k), v), 1) for k, v in sorted(self.status.items())),
        )
        yield from topic_families(
            live_topics(self.status, lag, {k: self._lag_seconds(k, v) for k, v in lag.items()}),
            drift=False,
        )
        yield gauge(
            LAST_SUCCESS,
            "Unix time the partition was last seen in sync.",
            TP,
            ((lp(k), round(v, 3)) for k, v in sorted(self.last_success.items())),
        )
        m = self._member
        if m is not None:
            yield gauge(
                "partsync_group_generation",
                "Generation of the local group this process is a member of.",
                ("group",),
                [((m.group,), m.generation)],
            )
            yield counter(
                "partsync_group_rebalances",
                "Assignments this process received from the local group.",
                ("group",),
                [((m.group,), m.rebalances)],
            )
        yield gauge(
            "partsync_process_start_time_seconds",
            "Unix time this partsync process started.",
            (),
            [((), round(self.started, 3))],
        )

    def _lag_seconds(self, key: tuple[str, int], lag_records: int) -> float | None:
        if lag_records == 0:
            return 0.0
        seen, mirror = self.seen.get(key), self.mirror_timestamp.get(key)
        if seen is None or mirror is None or seen[0] < self.local_end.get(key, 0):
            return None  # nothing seen beyond the mirror's end, or nothing seen copied yet
        return max(0, seen[1] - mirror) / 1000
