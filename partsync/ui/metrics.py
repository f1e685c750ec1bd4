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
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import write_to_textfile
from prometheus_client.exposition import generate_latest, make_wsgi_app
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

from partsync.plan.comparator import PartitionPlan
from partsync.plan.results import PartitionResult, Status, SyncReport
from partsync.ui.health import Health, HealthFacts, decide

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

_LAST_SUCCESS = "partsync_last_success_timestamp_seconds"
_ENDED = (Status.UNSAFE.value, Status.HANDED_OVER.value)  # a follower's worker stops for good
_TP = ("topic", "partition")  # the labels of a per-partition series
_TPS = ("topic", "partition", "source")

Samples = Iterable[tuple[Sequence[str], float]]


def _gauge(name: str, help_text: str, labels: Sequence[str], samples: Samples) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=labels)
    for values, value in samples:
        family.add_metric(values, value)
    return family


def _counter(
    name: str, help_text: str, labels: Sequence[str], samples: Samples
) -> CounterMetricFamily:
    """``name`` without ``_total``: prometheus_client appends it to the family's sample names."""
    family = CounterMetricFamily(name, help_text, labels=labels)
    for values, value in samples:
        family.add_metric(values, value)
    return family


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
            if line.startswith(_LAST_SUCCESS):
                try:
                    families += text_string_to_metric_families(line + "\n")
                except ValueError:
                    pass
    for family in families:
        for s in family.samples:
            if s.name != _LAST_SUCCESS or not math.isfinite(s.value):
                continue
            topic, partition = s.labels.get("topic"), s.labels.get("partition")
            if topic is not None and partition and partition.isascii() and partition.isdigit():
                out[(topic, int(partition))] = float(s.value)
    return out


def _bytes_per_offset(p: PartitionResult) -> float:
    copied = p.local_end_after - p.local_end_before
    return p.bytes / copied if copied > 0 and p.bytes else 0.0


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

        yield _gauge(
            "partsync_partition_lag_records",
            "Offsets the local partition is behind the furthest source (as planned), after the run.",
            _TP,
            ((lp(p), lag(p)) for p in parts),
        )
        yield _gauge(
            "partsync_partition_lag_bytes",
            "Estimated bytes behind the furthest source: lag in offsets times the mean batch bytes "
            "per offset copied in this run (only partitions that copied something).",
            _TP,
            ((lp(p), round(lag(p) * _bytes_per_offset(p))) for p in parts if _bytes_per_offset(p)),
        )
        yield _gauge(
            "partsync_partition_local_end_offset",
            "Local log end offset after the run.",
            _TP,
            ((lp(p), p.local_end_after) for p in parts),
        )
        yield _gauge(
            "partsync_copied_bytes",
            "Batch bytes copied in this run, by source cluster.",
            _TPS,
            (((*lp(p), s), n) for p in parts for s, n in sorted(p.bytes_by_source.items())),
        )
        yield _gauge(
            "partsync_copied_batches",
            "Batches copied in this run, by source cluster.",
            _TPS,
            (((*lp(p), s), n) for p in parts for s, n in sorted(p.batches_by_source.items())),
        )
        yield _gauge(
            "partsync_appends_verified",
            "Batches appended in this run whose base offset was verified equal to the source's.",
            _TP,
            ((lp(p), p.batches) for p in parts),
        )
        yield _gauge(
            "partsync_partition_status",
            "1 for the partition's status in this run (in-sync, synced, behind, unsafe, error, "
            "handed-over, stopped).",
            ("topic", "partition", "status"),
            (((*lp(p), p.status.value), 1) for p in parts),
        )
        yield _gauge(
            "partsync_unsafe_refusals",
            "Partitions refused as unsafe in this run, by topic.",
            ("topic",),
            (
                ((t.topic,), sum(1 for p in t.partitions if p.status is Status.UNSAFE))
                for t in report.topics
            ),
        )
        yield _gauge(
            _LAST_SUCCESS,
            "Unix time of the last run that left the partition in sync.",
            _TP,
            (((t, str(p)), v) for (t, p), v in sorted(last.items())),
        )
        yield _gauge(
            "partsync_run_duration_seconds",
            "Duration of the last run.",
            (),
            [((), round(report.seconds, 3))],
        )
        yield _gauge(
            "partsync_run_exit_code", "Exit code of the last run.", (), [((), self.exit_code)]
        )
        yield _gauge(
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


class GroupState(Protocol):
    """What the live metrics read of a group member (``partsync.io.group.GroupMember``)."""

    @property
    def group(self) -> str: ...

    @property
    def generation(self) -> int: ...

    @property
    def rebalances(self) -> int: ...

    @property
    def joined(self) -> threading.Event: ...


class LiveMetrics(Collector):
    """Metrics of a long-running process (follow mode), updated by its workers.

    It is the collector of its own ``registry``, which ``serve_metrics`` serves."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = time.time()
        self.local_end: dict[tuple[str, int], int] = {}
        self.source_end: dict[tuple[str, int], dict[str, int]] = {}
        self.bytes_per_offset: dict[tuple[str, int], float] = {}
        self.copied_bytes: dict[tuple[str, int, str], int] = {}
        self.copied_batches: dict[tuple[str, int, str], int] = {}
        self.appends_verified: dict[tuple[str, int], int] = {}
        self.unsafe: dict[str, int] = {}
        self.handed_over: dict[tuple[str, int], int] = {}
        self.status: dict[tuple[str, int], str] = {}
        self.last_success: dict[tuple[str, int], float] = {}
        self.owned: set[tuple[str, int]] = set()
        self._member: GroupState | None = None  # for generation / rebalances
        # Lag in seconds: the newest data batch the sources' long poll saw, as (last offset,
        # max timestamp ms), and the max timestamp of the newest one the mirror's end passed.
        self.seen: dict[tuple[str, int], tuple[int, int]] = {}
        self.mirror_timestamp: dict[tuple[str, int], int] = {}
        # Health (monotonic clock): the runner's tick, the latest progress, the first assignment.
        self._mono_started = time.monotonic()
        self._last_tick: float | None = None
        self._last_progress: float | None = None
        self._assigned = False
        self._was_ready = False
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def watch_group(self, member: GroupState) -> None:
        """Report the generation and rebalances of the group ``member`` (as they change)."""
        with self._lock:
            self._member = member

    def observe_plan(self, plan: PartitionPlan) -> None:
        with self._lock:
            key = (plan.topic, plan.partition)
            self.local_end[key] = plan.local.end
            ends = self.source_end.setdefault(key, {})
            for name, b in plan.sources.items():
                ends[name] = b.end
            self._copied_seen(key)
            self._last_progress = time.monotonic()

    def source_high_watermark(self, source: str, topic: str, partition: int, hw: int) -> None:
        """A source's long poll answered (an idle one too: progress for liveness)."""
        with self._lock:
            self.source_end.setdefault((topic, partition), {})[source] = hw
            self._last_progress = time.monotonic()

    def source_batch(
        self, source: str, topic: str, partition: int, last_offset: int, max_timestamp: int
    ) -> None:
        """The newest data batch a source's long poll saw (beyond the mirror's end then)."""
        key = (topic, partition)
        with self._lock:
            old = self.seen.get(key)
            if old is None or last_offset > old[0]:
                self.seen[key] = (last_offset, max_timestamp)
            self._copied_seen(key)

    def _copied_seen(self, key: tuple[str, int]) -> None:
        """The batch the poll saw is on the mirror once the local end passed it (under the lock)."""
        seen, end = self.seen.get(key), self.local_end.get(key)
        if seen is not None and end is not None and end > seen[0]:
            self.mirror_timestamp[key] = max(seen[1], self.mirror_timestamp.get(key, seen[1]))

    def set_owned(self, parts: Iterable[tuple[str, int]]) -> None:
        with self._lock:
            self.owned = set(parts)
            self._assigned = True
            self._last_progress = time.monotonic()

    def heartbeat(self, last_progress: float) -> None:
        """The runner's control loop ticks, with its latest verified append (monotonic)."""
        with self._lock:
            self._last_tick = time.monotonic()
            self._last_progress = max(self._last_progress or last_progress, last_progress)

    def health(self, now: float | None = None) -> Health:
        """Live and ready now (``ui.health``); readiness latches once answered."""
        with self._lock:
            m = self._member
            facts = HealthFacts(
                now=time.monotonic() if now is None else now,
                started=self._mono_started,
                in_group=m is not None,
                joined=m is not None and m.joined.is_set(),
                assigned=self._assigned,
                unplanned=len(self.owned - self.local_end.keys()),
                # A partition refused as unsafe or handed over is owned but no longer worked
                # on: it makes no progress, and restarting the process would not change that.
                owned=sum(1 for k in self.owned if self.status.get(k) not in _ENDED),
                last_tick=self._last_tick,
                last_progress=self._last_progress,
                was_ready=self._was_ready,
            )
            verdict = decide(facts)
            self._was_ready = self._was_ready or verdict.ready
        return verdict

    def observe(self, r: PartitionResult) -> None:
        key = (r.topic, r.partition)
        with self._lock:
            self._last_progress = time.monotonic()
            self.local_end[key] = r.local_end_after
            self._copied_seen(key)
            self.status[key] = r.status.value
            for s, n in r.bytes_by_source.items():
                self.copied_bytes[(*key, s)] = self.copied_bytes.get((*key, s), 0) + n
            for s, n in r.batches_by_source.items():
                self.copied_batches[(*key, s)] = self.copied_batches.get((*key, s), 0) + n
            self.appends_verified[key] = self.appends_verified.get(key, 0) + r.batches
            if r.status is Status.UNSAFE:
                self.unsafe[r.topic] = self.unsafe.get(r.topic, 0) + 1
            if r.status is Status.HANDED_OVER:
                self.handed_over[key] = self.handed_over.get(key, 0) + 1
            if r.status in (Status.IN_SYNC, Status.SYNCED):
                self.last_success[key] = time.time()
            bpo = _bytes_per_offset(r)
            if bpo:
                old = self.bytes_per_offset.get(key)
                self.bytes_per_offset[key] = bpo if old is None else 0.8 * old + 0.2 * bpo

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
        yield _gauge(
            "partsync_partition_lag_records",
            "Offsets the local partition is behind the furthest source, as last seen.",
            _TP,
            ((lp(k), v) for k, v in sorted(lag.items())),
        )
        yield _gauge(
            "partsync_partition_lag_bytes",
            "Estimated bytes behind the furthest source (lag in offsets times the "
            "mean batch bytes per offset copied).",
            _TP,
            (
                (lp(k), round(v * self.bytes_per_offset[k]))
                for k, v in sorted(lag.items())
                if k in self.bytes_per_offset
            ),
        )
        yield _gauge(
            "partsync_partition_lag_seconds",
            "Source's newest data timestamp minus the mirror's, in seconds, as the sources' long "
            "poll saw them: max timestamp of the newest batch the poll saw beyond the mirror's "
            "end, minus that of the newest such batch since copied. 0 while caught up as last "
            "seen; no sample while behind without both (no batch seen yet, or none copied yet "
            "since start).",
            _TP,
            ((lp(k), v) for k in sorted(lag) if (v := self._lag_seconds(k, lag[k])) is not None),
        )
        yield _gauge(
            "partsync_partition_local_end_offset",
            "Local log end offset.",
            _TP,
            ((lp(k), v) for k, v in sorted(self.local_end.items())),
        )
        yield _gauge(
            "partsync_partition_owned",
            "1 while this process owns (writes) the partition.",
            _TP,
            ((lp(k), 1 if k in self.owned else 0) for k in keys),
        )
        yield _counter(
            "partsync_copied_bytes",
            "Batch bytes copied by this process, by source cluster.",
            _TPS,
            (((t, str(p), s), n) for (t, p, s), n in sorted(self.copied_bytes.items())),
        )
        yield _counter(
            "partsync_copied_batches",
            "Batches copied by this process, by source cluster.",
            _TPS,
            (((t, str(p), s), n) for (t, p, s), n in sorted(self.copied_batches.items())),
        )
        yield _counter(
            "partsync_appends_verified",
            "Appends whose base offset was verified equal to the source's.",
            _TP,
            ((lp(k), v) for k, v in sorted(self.appends_verified.items())),
        )
        yield _counter(
            "partsync_unsafe_refusals",
            "Copy rounds refused as unsafe, by topic.",
            ("topic",),
            (((t,), v) for t, v in sorted(self.unsafe.items())),
        )
        yield _counter(
            "partsync_handovers",
            "Times this process stopped writing a partition because another "
            "writer took it over (rebalance or producer-epoch fencing).",
            _TP,
            ((lp(k), v) for k, v in sorted(self.handed_over.items())),
        )
        yield _gauge(
            "partsync_partition_status",
            "1 for the partition's status after its last round.",
            ("topic", "partition", "status"),
            (((*lp(k), v), 1) for k, v in sorted(self.status.items())),
        )
        yield _gauge(
            _LAST_SUCCESS,
            "Unix time the partition was last seen in sync.",
            _TP,
            ((lp(k), round(v, 3)) for k, v in sorted(self.last_success.items())),
        )
        m = self._member
        if m is not None:
            yield _gauge(
                "partsync_group_generation",
                "Generation of the local group this process is a member of.",
                ("group",),
                [((m.group,), m.generation)],
            )
            yield _counter(
                "partsync_group_rebalances",
                "Assignments this process received from the local group.",
                ("group",),
                [((m.group,), m.rebalances)],
            )
        yield _gauge(
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


class MetricsServer:
    """The HTTP server ``serve_metrics`` started: ``server_address`` is where it listens (the
    bound port even if port 0 was asked for), ``shutdown()`` stops it and closes its socket."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def server_address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]  # IPv6 addresses have 4 fields
        return (str(host), int(port))

    def shutdown(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow scraper never holds up shutdown


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # no line per scrape on stderr


_Start = Callable[[str, list[tuple[str, str]]], Any]


def _app(metrics: LiveMetrics) -> Callable[[dict[str, Any], _Start], list[bytes]]:
    """``/metrics`` (prometheus_client's app), ``/healthz`` and ``/readyz`` (200 "ok", or 503
    with the reason), as plain text."""
    prom = make_wsgi_app(metrics.registry)

    def app(environ: dict[str, Any], start: _Start) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        if path not in ("/healthz", "/readyz"):
            return prom(environ, start)  # type: ignore[no-any-return]
        h = metrics.health()
        ok, reason = (h.live, h.live_reason) if path == "/healthz" else (h.ready, h.ready_reason)
        body = (reason + "\n").encode()
        start(
            "200 OK" if ok else "503 Service Unavailable",
            [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))],
        )
        return [body]

    return app


def serve_metrics(metrics: LiveMetrics, port: int, host: str = "0.0.0.0") -> MetricsServer:
    """Serve ``metrics`` at http://host:port/metrics, and ``/healthz`` and ``/readyz``, from a
    daemon thread; ``shutdown()`` stops."""
    cls = _Server6 if ":" in host else _Server
    server = make_server(host, port, _app(metrics), cls, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, name="metrics-server", daemon=True)
    thread.start()
    return MetricsServer(server, thread)
