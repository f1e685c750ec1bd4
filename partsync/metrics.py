"""Prometheus text-format metrics: a textfile per cron run, or a live endpoint in follow mode.

``write_textfile(path, report, exit_code)`` writes atomically (temp file in the same directory,
then rename), so node_exporter's textfile collector never reads half a file. The last successful
sync time of each partition survives runs that fail: it is carried over from the previous file.

``LiveMetrics`` is what a long-running process updates as it goes (counters since start, lag as
last seen) and ``serve_metrics`` serves it at ``/metrics``.

Lag in bytes is an estimate: Kafka exposes no byte position, so it is the lag in offsets times
the partition's mean batch bytes per offset, as measured on what was copied.
"""

from __future__ import annotations

import http.server
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from partsync.plan import PartitionPlan
from partsync.result import PartitionResult, Status, SyncReport

__all__ = ["LiveMetrics", "read_last_success", "render_metrics", "serve_metrics", "write_textfile"]

_LAST_SUCCESS = "partsync_last_success_timestamp_seconds"
_LINE = re.compile(
    r'^' + _LAST_SUCCESS + r'\{topic="(?P<topic>(?:[^"\\]|\\.)*)",partition="(?P<p>\d+)"\} (?P<v>[0-9.eE+-]+)$'
)


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _unesc(value: str) -> str:
    return value.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def read_last_success(path: Path) -> dict[tuple[str, int], float]:
    out: dict[tuple[str, int], float] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return out
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            out[(_unesc(m.group("topic")), int(m.group("p")))] = float(m.group("v"))
    return out


def _family(name: str, kind: str, help_text: str, samples: Iterable[tuple[dict[str, str], float]]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        body = ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items())
        lines.append(f"{name}{{{body}}} {value:g}" if body else f"{name} {value:g}")
    return lines


def render_metrics(
    report: SyncReport,
    exit_code: int,
    *,
    now: float | None = None,
    previous_success: dict[tuple[str, int], float] | None = None,
) -> str:
    now = time.time() if now is None else now
    parts = [p for p in report.all_partitions() if p.partition >= 0]
    last = dict(previous_success or {})
    for p in parts:
        if p.status in (Status.IN_SYNC, Status.SYNCED):
            last[(p.topic, p.partition)] = now

    def lp(p: object) -> dict[str, str]:
        return {"topic": p.topic, "partition": str(p.partition)}  # type: ignore[attr-defined]

    lines: list[str] = []
    lines += _family(
        "partsync_partition_lag_records", "gauge",
        "Offsets the local partition is behind the furthest source (as planned), after the run.",
        ((lp(p), max(0, p.target_end - p.local_end_after)) for p in parts),
    )
    lines += _family(
        "partsync_partition_lag_bytes", "gauge",
        "Estimated bytes behind the furthest source: lag in offsets times the mean batch bytes "
        "per offset copied in this run (only partitions that copied something).",
        ((lp(p), round(max(0, p.target_end - p.local_end_after) * _bytes_per_offset(p)))
         for p in parts if _bytes_per_offset(p)),
    )
    lines += _family(
        "partsync_partition_local_end_offset", "gauge", "Local log end offset after the run.",
        ((lp(p), p.local_end_after) for p in parts),
    )
    lines += _family(
        "partsync_copied_bytes", "gauge", "Batch bytes copied in this run, by source cluster.",
        (({**lp(p), "source": s}, n) for p in parts for s, n in sorted(p.bytes_by_source.items())),
    )
    lines += _family(
        "partsync_copied_batches", "gauge", "Batches copied in this run, by source cluster.",
        (({**lp(p), "source": s}, n) for p in parts for s, n in sorted(p.batches_by_source.items())),
    )
    lines += _family(
        "partsync_appends_verified", "gauge",
        "Batches appended in this run whose base offset was verified equal to the source's.",
        ((lp(p), p.batches) for p in parts),
    )
    lines += _family(
        "partsync_partition_status", "gauge",
        "1 for the partition's status in this run (in-sync, synced, unsafe, error).",
        (({**lp(p), "status": p.status.value}, 1) for p in parts),
    )
    lines += _family(
        "partsync_unsafe_refusals", "gauge", "Partitions refused as unsafe in this run, by topic.",
        (({"topic": t.topic}, sum(1 for p in t.partitions if p.status is Status.UNSAFE))
         for t in report.topics),
    )
    lines += _family(
        _LAST_SUCCESS, "gauge", "Unix time of the last run that left the partition in sync.",
        (({"topic": t, "partition": str(p)}, v) for (t, p), v in sorted(last.items())),
    )
    lines += _family("partsync_run_duration_seconds", "gauge", "Duration of the last run.",
                     [({}, round(report.seconds, 3))])
    lines += _family("partsync_run_exit_code", "gauge", "Exit code of the last run.",
                     [({}, exit_code)])
    lines += _family("partsync_run_timestamp_seconds", "gauge", "Unix time the last run ended.",
                     [({}, round(now, 3))])
    return "\n".join(lines) + "\n"


def _bytes_per_offset(p: PartitionResult) -> float:
    copied = p.local_end_after - p.local_end_before
    return p.bytes / copied if copied > 0 and p.bytes else 0.0


class LiveMetrics:
    """Metrics of a long-running process (follow mode), updated by its workers."""

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
        self.member: Any = None  # the GroupMember, for generation / rebalances

    def observe_plan(self, plan: PartitionPlan) -> None:
        with self._lock:
            key = (plan.topic, plan.partition)
            self.local_end[key] = plan.local.end
            ends = self.source_end.setdefault(key, {})
            for name, b in plan.sources.items():
                ends[name] = b.end

    def source_high_watermark(self, source: str, topic: str, partition: int, hw: int) -> None:
        with self._lock:
            self.source_end.setdefault((topic, partition), {})[source] = hw

    def set_owned(self, parts: Iterable[tuple[str, int]]) -> None:
        with self._lock:
            self.owned = set(parts)

    def observe(self, r: PartitionResult) -> None:
        key = (r.topic, r.partition)
        with self._lock:
            self.local_end[key] = r.local_end_after
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
        with self._lock:
            keys = sorted(set(self.local_end) | self.owned)

            def lp(k: tuple[str, int]) -> dict[str, str]:
                return {"topic": k[0], "partition": str(k[1])}

            lag = {k: max(0, max(self.source_end.get(k, {}).values(), default=0) - self.local_end.get(k, 0))
                   for k in keys if k in self.local_end}
            lines: list[str] = []
            lines += _family("partsync_partition_lag_records", "gauge",
                             "Offsets the local partition is behind the furthest source, as last seen.",
                             ((lp(k), v) for k, v in sorted(lag.items())))
            lines += _family("partsync_partition_lag_bytes", "gauge",
                             "Estimated bytes behind the furthest source (lag in offsets times the "
                             "mean batch bytes per offset copied).",
                             ((lp(k), round(v * self.bytes_per_offset[k])) for k, v in sorted(lag.items())
                              if k in self.bytes_per_offset))
            lines += _family("partsync_partition_local_end_offset", "gauge", "Local log end offset.",
                             ((lp(k), v) for k, v in sorted(self.local_end.items())))
            lines += _family("partsync_partition_owned", "gauge",
                             "1 while this process owns (writes) the partition.",
                             ((lp(k), 1 if k in self.owned else 0) for k in keys))
            lines += _family("partsync_copied_bytes_total", "counter",
                             "Batch bytes copied by this process, by source cluster.",
                             (({**lp((t, p)), "source": s}, n)
                              for (t, p, s), n in sorted(self.copied_bytes.items())))
            lines += _family("partsync_copied_batches_total", "counter",
                             "Batches copied by this process, by source cluster.",
                             (({**lp((t, p)), "source": s}, n)
                              for (t, p, s), n in sorted(self.copied_batches.items())))
            lines += _family("partsync_appends_verified_total", "counter",
                             "Appends whose base offset was verified equal to the source's.",
                             ((lp(k), v) for k, v in sorted(self.appends_verified.items())))
            lines += _family("partsync_unsafe_refusals_total", "counter",
                             "Copy rounds refused as unsafe, by topic.",
                             (({"topic": t}, v) for t, v in sorted(self.unsafe.items())))
            lines += _family("partsync_handovers_total", "counter",
                             "Times this process stopped writing a partition because another "
                             "writer took it over (rebalance or producer-epoch fencing).",
                             ((lp(k), v) for k, v in sorted(self.handed_over.items())))
            lines += _family("partsync_partition_status", "gauge",
                             "1 for the partition's status after its last round.",
                             (({**lp(k), "status": v}, 1) for k, v in sorted(self.status.items())))
            lines += _family(_LAST_SUCCESS, "gauge",
                             "Unix time the partition was last seen in sync.",
                             ((lp(k), round(v, 3)) for k, v in sorted(self.last_success.items())))
            m = self.member
            if m is not None:
                lines += _family("partsync_group_generation", "gauge",
                                 "Generation of the local group this process is a member of.",
                                 [({"group": m.group}, m.generation)])
                lines += _family("partsync_group_rebalances_total", "counter",
                                 "Assignments this process received from the local group.",
                                 [({"group": m.group}, m.rebalances)])
            lines += _family("partsync_process_start_time_seconds", "gauge",
                             "Unix time this partsync process started.", [({}, round(self.started, 3))])
        return "\n".join(lines) + "\n"


def serve_metrics(metrics: LiveMetrics, port: int, host: str = "0.0.0.0") -> http.server.ThreadingHTTPServer:
    """Serve ``metrics`` at http://host:port/metrics from a daemon thread; ``shutdown()`` stops."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            body = metrics.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # scrapes are not news
            pass

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server


def write_textfile(path: str | os.PathLike[str], report: SyncReport, exit_code: int) -> None:
    target = Path(path)
    text = render_metrics(report, exit_code, previous_success=read_last_success(target))
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
