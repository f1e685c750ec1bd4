"""Prometheus textfile rendering for sync runs (pure)."""

from __future__ import annotations

from pathlib import Path

from partsync.metrics import read_last_success, render_metrics, write_textfile
from partsync.result import PartitionResult, Status, SyncReport, TopicResult


def report(*parts: PartitionResult, stopped: str | None = None) -> SyncReport:
    return SyncReport((TopicResult("orders", parts),), 1.5, stopped)


SYNCED = PartitionResult("orders", 0, Status.SYNCED, 10, 110, 110, batches=4, bytes=4096,
                         bytes_by_source={"dc2": 1000, "dc3": 3096})
UNSAFE = PartitionResult("orders", 1, Status.UNSAFE, 50, 50, 90, reason="divergent")


def test_metrics_cover_lag_bytes_by_source_verified_appends_and_status() -> None:
    text = render_metrics(report(SYNCED, UNSAFE), 3, now=1000.0)
    assert 'partsync_partition_lag_records{topic="orders",partition="0"} 0' in text
    assert 'partsync_partition_lag_records{topic="orders",partition="1"} 40' in text
    assert 'partsync_copied_bytes{topic="orders",partition="0",source="dc3"} 3096' in text
    assert 'partsync_appends_verified{topic="orders",partition="0"} 4' in text
    assert 'partsync_partition_status{topic="orders",partition="1",status="unsafe"} 1' in text
    assert 'partsync_unsafe_refusals{topic="orders"} 1' in text
    assert 'partsync_last_success_timestamp_seconds{topic="orders",partition="0"} 1000' in text
    # The unsafe partition never succeeded: no last-success sample for it.
    assert 'partsync_last_success_timestamp_seconds{topic="orders",partition="1"}' not in text
    assert "partsync_run_exit_code 3" in text
    # Every sample line belongs to a declared family.
    families = {l.split()[2] for l in text.splitlines() if l.startswith("# TYPE")}
    for line in text.splitlines():
        if not line.startswith("#"):
            assert line.split("{")[0].split(" ")[0] in families, line


def test_last_success_survives_a_failed_run(tmp_path: Path) -> None:
    path = tmp_path / "partsync.prom"
    write_textfile(path, report(SYNCED), 0)
    first = read_last_success(path)
    assert set(first) == {("orders", 0)}
    failed = PartitionResult("orders", 0, Status.ERROR, 110, 110, 200, reason="unreachable")
    write_textfile(path, report(failed), 1)
    assert read_last_success(path) == first
    assert "partsync_run_exit_code 1" in path.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["partsync.prom"]  # no temp files left


def test_label_values_are_escaped() -> None:
    odd = PartitionResult('we"ird\\topic', 0, Status.IN_SYNC, 1, 1, 1)
    text = render_metrics(SyncReport((TopicResult(odd.topic, (odd,)),)), 0, now=5.0)
    assert 'topic="we\\"ird\\\\topic"' in text


def test_bytes_lag_is_estimated_from_the_bytes_per_offset_copied() -> None:
    # 40 offsets copied for 4000 bytes (100 B/offset); 60 offsets still missing.
    behind = PartitionResult("orders", 2, Status.ERROR, 0, 40, 100, batches=2, bytes=4000,
                             bytes_by_source={"dc2": 4000}, batches_by_source={"dc2": 2},
                             reason="deadline")
    text = render_metrics(report(behind, UNSAFE), 4, now=1.0)
    assert 'partsync_partition_lag_bytes{topic="orders",partition="2"} 6000' in text
    assert 'partsync_copied_batches{topic="orders",partition="2",source="dc2"} 2' in text
    # Nothing copied, nothing to estimate from: no sample rather than a made-up one.
    assert 'partsync_partition_lag_bytes{topic="orders",partition="1"}' not in text


def test_live_metrics_count_up_across_rounds_and_lag_follows_the_sources() -> None:
    from partsync.metrics import LiveMetrics
    from partsync.plan import Bounds, plan_partition

    m = LiveMetrics()
    m.set_owned([("orders", 0)])
    m.observe_plan(plan_partition("orders", 0, Bounds(0, 10), {"dc2": Bounds(0, 110)}))
    m.observe(SYNCED)  # 10 -> 110, 4 batches, 4096 bytes
    m.observe(PartitionResult("orders", 0, Status.SYNCED, 110, 130, 130, batches=1, bytes=500,
                              bytes_by_source={"dc2": 500}, batches_by_source={"dc2": 1}))
    m.source_high_watermark("dc2", "orders", 0, 150)  # the tail saw more arrive
    text = m.render()
    assert 'partsync_appends_verified_total{topic="orders",partition="0"} 5' in text
    assert 'partsync_copied_bytes_total{topic="orders",partition="0",source="dc2"} 1500' in text
    assert 'partsync_copied_batches_total{topic="orders",partition="0",source="dc2"} 1' in text
    assert 'partsync_partition_lag_records{topic="orders",partition="0"} 20' in text
    assert 'partsync_partition_owned{topic="orders",partition="0"} 1' in text
    assert 'partsync_partition_status{topic="orders",partition="0",status="synced"} 1' in text
    assert "# TYPE partsync_copied_bytes_total counter" in text
    lag_bytes = [l for l in text.splitlines() if l.startswith("partsync_partition_lag_bytes{")]
    assert len(lag_bytes) == 1 and float(lag_bytes[0].split()[-1]) > 0
