"""Prometheus text-format metrics for a sync run (node_exporter textfile-collector style).

``write_textfile(path, report, exit_code)`` writes atomically (temp file in the same directory,
then rename), so the collector never reads half a file. The last successful sync time of each
partition survives runs that fail: it is carried over from the previous file.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from partsync.result import Status, SyncReport

__all__ = ["render_metrics", "write_textfile", "read_last_success"]

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
        "partsync_partition_local_end_offset", "gauge", "Local log end offset after the run.",
        ((lp(p), p.local_end_after) for p in parts),
    )
    lines += _family(
        "partsync_copied_bytes", "gauge", "Batch bytes copied in this run, by source cluster.",
        (({**lp(p), "source": s}, n) for p in parts for s, n in sorted(p.bytes_by_source.items())),
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
