"""Prometheus metrics of sync runs (textfile) and of follow mode (live endpoint), no brokers.

The exposition text is prometheus_client's: labels come sorted by name and values as floats
(``4.0``), so most checks compare parsed samples rather than text."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from partsync.plan.results import PartitionResult, Status, SyncReport, TopicResult
from partsync.ui.metrics import (
    LiveMetrics,
    read_last_success,
    render_metrics,
    serve_metrics,
    write_textfile,
)

Labels = frozenset[tuple[str, str]]


def report(*parts: PartitionResult, stopped: str | None = None) -> SyncReport:
    return SyncReport((TopicResult("orders", parts),), 1.5, stopped)


def samples(text: str) -> dict[tuple[str, Labels], float]:
    """Every sample of an exposition, by (sample name, labels)."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def lb(partition: int | None = None, topic: str = "orders", **more: str) -> Labels:
    labels = {"topic": topic, **more}
    if partition is not None:
        labels["partition"] = str(partition)
    return frozenset(labels.items())


NONE: Labels = frozenset()

SYNCED = PartitionResult(
    "orders",
    0,
    Status.SYNCED,
    10,
    110,
    110,
    batches=4,
    bytes=4096,
    bytes_by_source={"dc2": 1000, "dc3": 3096},
)
UNSAFE = PartitionResult("orders", 1, Status.UNSAFE, 50, 50, 90, reason="divergent")
FAILED = PartitionResult("orders", 0, Status.ERROR, 110, 110, 200, reason="unreachable")
BIG = PartitionResult(
    "orders",
    0,
    Status.SYNCED,
    0,
    1_000_000,
    1_000_000,
    batches=123_457,
    bytes=123_456_789,
    bytes_by_source={"dc2": 123_456_789},
    batches_by_source={"dc2": 123_457},
)


def test_metrics_cover_lag_bytes_by_source_verified_appends_and_status() -> None:
    text = render_metrics(report(SYNCED, UNSAFE), 3, now=1000.0)
    m = samples(text)
    assert m[("partsync_partition_lag_records", lb(0))] == 0
    assert m[("partsync_partition_lag_records", lb(1))] == 40
    assert m[("partsync_copied_bytes", lb(0, source="dc3"))] == 3096
    assert m[("partsync_appends_verified", lb(0))] == 4
    assert m[("partsync_partition_status", lb(1, status="unsafe"))] == 1
    assert m[("partsync_unsafe_refusals", lb())] == 1
    assert m[("partsync_last_success_timestamp_seconds", lb(0))] == 1000
    # The unsafe partition never succeeded: no last-success sample for it.
    assert ("partsync_last_success_timestamp_seconds", lb(1)) not in m
    assert m[("partsync_run_exit_code", NONE)] == 3
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
    write_textfile(path, report(FAILED), 1)
    assert read_last_success(path) == first
    assert samples(path.read_text())[("partsync_run_exit_code", NONE)] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["partsync.prom"]  # no temp files left


def test_last_success_timestamp_is_exact_and_round_trips(tmp_path: Path) -> None:
    # Six significant digits would make this 1.76387e+09, i.e. 123 s off (up to 5000 s).
    path = tmp_path / "partsync.prom"
    path.write_text(render_metrics(report(SYNCED), 0, now=1763870123.456))
    assert read_last_success(path) == {("orders", 0): 1763870123.456}
    write_textfile(path, report(FAILED), 1)  # carried over unchanged, digit for digit
    assert read_last_success(path) == {("orders", 0): 1763870123.456}
    before = time.time()
    write_textfile(path, report(SYNCED), 0)  # a new success: stamped with the current time
    after = time.time()
    assert before <= read_last_success(path)[("orders", 0)] <= after
    run_ts = samples(path.read_text())[("partsync_run_timestamp_seconds", NONE)]
    assert before - 0.001 <= run_ts <= after + 0.001


def test_last_success_is_read_from_older_and_damaged_files(tmp_path: Path) -> None:
    path = tmp_path / "partsync.prom"
    assert read_last_success(path) == {}  # no file yet
    # Written by an older partsync (labels unsorted, %g values), with a damaged line after it.
    path.write_text(
        'partsync_last_success_timestamp_seconds{topic="a\\"b",partition="3"} 1.5e+09\n'
        "partsync_run_exit_code{ 0\n"
    )
    assert read_last_success(path) == {('a"b', 3): 1.5e9}


def test_copied_bytes_are_exact_integers() -> None:
    # Six significant digits would make this 1.23457e+08.
    m = samples(render_metrics(report(BIG), 0, now=1.0))
    assert m[("partsync_copied_bytes", lb(0, source="dc2"))] == 123_456_789
    assert m[("partsync_copied_batches", lb(0, source="dc2"))] == 123_457
    assert m[("partsync_partition_local_end_offset", lb(0))] == 1_000_000
    live = LiveMetrics()
    live.observe(BIG)
    live.observe(BIG)
    m = samples(live.render())
    assert m[("partsync_copied_bytes_total", lb(0, source="dc2"))] == 246_913_578


def test_label_values_are_escaped() -> None:
    odd = PartitionResult('we"ird\\topic', 0, Status.IN_SYNC, 1, 1, 1)
    text = render_metrics(SyncReport((TopicResult(odd.topic, (odd,)),)), 0, now=5.0)
    assert 'topic="we\\"ird\\\\topic"' in text
    assert samples(text)[("partsync_appends_verified", lb(0, topic='we"ird\\topic'))] == 0


def test_bytes_lag_is_estimated_from_the_bytes_per_offset_copied() -> None:
    # 40 offsets copied for 4000 bytes (100 B/offset); 60 offsets still missing.
    behind = PartitionResult(
        "orders",
        2,
        Status.ERROR,
        0,
        40,
        100,
        batches=2,
        bytes=4000,
        bytes_by_source={"dc2": 4000},
        batches_by_source={"dc2": 2},
        reason="deadline",
    )
    m = samples(render_metrics(report(behind, UNSAFE), 4, now=1.0))
    assert m[("partsync_partition_lag_bytes", lb(2))] == 6000
    assert m[("partsync_copied_batches", lb(2, source="dc2"))] == 2
    # Nothing copied, nothing to estimate from: no sample rather than a made-up one.
    assert ("partsync_partition_lag_bytes", lb(1)) not in m


def _live() -> LiveMetrics:
    from partsync.plan.comparator import Bounds, plan_partition

    m = LiveMetrics()
    m.set_owned([("orders", 0)])
    m.observe_plan(plan_partition("orders", 0, Bounds(0, 10), {"dc2": Bounds(0, 110)}))
    m.observe(SYNCED)  # 10 -> 110, 4 batches, 4096 bytes
    m.observe(
        PartitionResult(
            "orders",
            0,
            Status.SYNCED,
            110,
            130,
            130,
            batches=1,
            bytes=500,
            bytes_by_source={"dc2": 500},
            batches_by_source={"dc2": 1},
        )
    )
    m.source_high_watermark("dc2", "orders", 0, 150)  # the tail saw more arrive
    return m


def test_live_metrics_count_up_across_rounds_and_lag_follows_the_sources() -> None:
    text = _live().render()
    m = samples(text)
    assert m[("partsync_appends_verified_total", lb(0))] == 5
    assert m[("partsync_copied_bytes_total", lb(0, source="dc2"))] == 1500
    assert m[("partsync_copied_batches_total", lb(0, source="dc2"))] == 1
    assert m[("partsync_partition_lag_records", lb(0))] == 20
    assert m[("partsync_partition_owned", lb(0))] == 1
    assert m[("partsync_partition_status", lb(0, status="synced"))] == 1
    assert "# TYPE partsync_copied_bytes_total counter" in text
    lag_bytes = [l for l in text.splitlines() if l.startswith("partsync_partition_lag_bytes{")]
    assert len(lag_bytes) == 1 and float(lag_bytes[0].split()[-1]) > 0
    # No group watched: no group series.
    assert not any(name.startswith("partsync_group_") for name, _ in m)


def test_live_endpoint_serves_the_counters_over_http() -> None:
    live = _live()
    live.observe(BIG)
    member = SimpleNamespace(group="g1", generation=3, rebalances=2)
    live.watch_group(member)
    server = serve_metrics(live, 0, "127.0.0.1")  # port 0: any free port
    port = server.server_address[1]
    assert port > 0
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            m = samples(r.read().decode())
        assert m[("partsync_copied_bytes_total", lb(0, source="dc2"))] == 1500 + 123_456_789
        assert m[("partsync_copied_batches_total", lb(0, source="dc2"))] == 1 + 123_457
        assert m[("partsync_appends_verified_total", lb(0))] == 5 + 123_457
        assert m[("partsync_group_generation", frozenset({("group", "g1")}))] == 3
        assert m[("partsync_group_rebalances_total", frozenset({("group", "g1")}))] == 2
        member.generation = 4  # read at each scrape
        with urllib.request.urlopen(url, timeout=5) as r:
            m = samples(r.read().decode())
        assert m[("partsync_group_generation", frozenset({("group", "g1")}))] == 4
    finally:
        server.shutdown()
    with pytest.raises(OSError):  # stopped, and the port is closed
        urllib.request.urlopen(url, timeout=5).close()
    # Nothing went to prometheus_client's global registry.
    assert b"partsync_" not in generate_latest(REGISTRY)


def test_live_metrics_carry_each_topics_state_and_lag() -> None:
    m = samples(_live().render())
    topic = frozenset({("topic", "orders")})
    states = {
        dict(labels)["state"]: v
        for (name, labels), v in m.items()
        if name == "partsync_topic_state"
    }
    # Caught up at its last round, but the tail saw the source move on: mirroring.
    assert states == {
        "caught-up": 0,
        "mirroring": 1,
        "paused": 0,
        "failed": 0,
        "source-gone": 0,
        "promoted": 0,
    }
    assert m[("partsync_topic_lag_records", topic)] == 20
    # The follower's status is in its metrics; config drift only in `partsync status`'s.
    assert not any(name == "partsync_topic_config_drift" for name, _ in m)
