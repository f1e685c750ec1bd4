"""Cron-mode behaviour of one-shot sync: --deadline and --metrics-file, against real brokers
(partsync writes through the session's strict proxy)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from partsync.demo import data

pytestmark = pytest.mark.integration


def _fill(bootstrap: str, topic: str, partitions: int, n: int) -> None:
    data.create_topic(bootstrap, topic, partitions)
    for p in range(partitions):
        data.produce(bootstrap, topic, data.make_records(n, seed=p, partition=p), compression="lz4")


def test_deadline_stops_cleanly_with_exit_4_and_a_rerun_finishes(
    cli, source_a, local_broker, local_proxy, topic
) -> None:
    # About 1 MB throttled to 100 kB/s needs ~10 s; the deadline stops it after 1.5 s, however
    # fast the machine is (the throttle wait is interrupted by the stop).
    _fill(source_a.bootstrap, topic, 3, 3000)
    res = cli(
        "sync",
        "--topic",
        topic,
        "--sources",
        source_a.bootstrap,
        "--local",
        local_proxy.bootstrap,
        "--create-missing",
        "--max-bytes-per-sec",
        "100000",
        "--deadline",
        "1.5",
        "--json",
    )
    assert res.code == 4, (res.code, res.stderr)
    doc = res.json
    assert doc["stopped"] == "deadline"
    parts = doc["topics"][0]["partitions"]
    # Stopped partitions say so (not "error": the deadline is no failure of theirs), with the
    # offset they reached.
    stopped = [p for p in parts if p["status"] == "stopped"]
    assert stopped and all(p["status"] in ("synced", "stopped") for p in parts), parts
    for p in stopped:
        assert p["reason"].startswith("the deadline stopped the run: "), p
        assert f"offset {p['local_end_after']}" in p["reason"] or "not reached" in p["reason"], p
    # Whatever was written is a verified prefix: the rerun completes and everything is identical.
    again = cli(
        "sync",
        "--topic",
        topic,
        "--sources",
        source_a.bootstrap,
        "--local",
        local_proxy.bootstrap,
        "--json",
    )
    assert again.code == 0, again.stderr
    data.assert_partitions_identical(source_a.bootstrap, local_broker.bootstrap, topic, 3)


def test_metrics_file_written_atomically_with_per_partition_series(
    cli, source_a, local_broker, local_proxy, topic, tmp_path: Path
) -> None:
    _fill(source_a.bootstrap, topic, 2, 300)
    prom = tmp_path / "partsync.prom"
    res = cli(
        "sync",
        "--topic",
        topic,
        "--sources",
        source_a.bootstrap,
        "--local",
        local_proxy.bootstrap,
        "--create-missing",
        "--json",
        "--metrics-file",
        str(prom),
    )
    assert res.code == 0, res.stderr
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(prom.read_text())
        for s in family.samples
    }
    for p in res.json["topics"][0]["partitions"]:
        labels = (("partition", str(p["partition"])), ("topic", topic))
        assert samples[("partsync_appends_verified", labels)] == p["batches"]
        assert samples[("partsync_partition_lag_records", labels)] == 0
        assert samples[("partsync_last_success_timestamp_seconds", labels)] > 1.7e9
        src = tuple(sorted((*labels, ("source", source_a.bootstrap))))
        assert samples[("partsync_copied_bytes", src)] == p["bytes"]
    assert samples[("partsync_run_exit_code", ())] == 0
    assert sorted(x.name for x in tmp_path.iterdir()) == ["partsync.prom"]


def test_throttle_caps_the_rate_by_the_limiters_accounting(
    source_a, local_broker, local_proxy, topic
) -> None:
    from partsync.config import Config
    from partsync.copy.options import CopyOptions
    from partsync.copy.throttle import limiter_for
    from partsync.io.pool import ClusterPool
    from partsync.run.planner import SyncRequest
    from partsync.run.sync import run_sync

    _fill(source_a.bootstrap, topic, 3, 3000)
    rate = 150_000 + (hash(topic) % 1000)  # a rate no other test uses: a fresh limiter
    cfg = Config(clusters={})
    req = SyncRequest(
        (topic,),
        (cfg.resolve(source_a.bootstrap),),
        cfg.resolve(local_proxy.bootstrap),
        create_missing=True,
        options=CopyOptions(max_bytes_per_sec=rate),
    )
    with ClusterPool() as pool:
        report = run_sync(req, pool)
    assert report.exit_status == 0
    copied = sum(p.bytes for p in report.all_partitions())
    lim = limiter_for("run", rate)
    assert lim is not None
    # Every fetched byte went through the bucket, and the grants were spread over enough time for
    # the rate to hold beyond the one-second burst (the limiter's accounting, not machine speed).
    assert lim.granted >= copied > 2 * rate
    assert lim.first_at is not None and lim.waited > 0
    # The bound is tight (equal when the bucket never filled up again); its side is computed from
    # monotonic-clock floats near 1e5 s, whose rounding times the rate is ~1e-6 bytes per grant:
    # allow one byte, far below what a limiter that lets a single batch through early would add.
    assert lim.granted <= lim.burst + rate * (lim.released_until - lim.first_at) + 1.0
    data.assert_partitions_identical(source_a.bootstrap, local_broker.bootstrap, topic, 3)
