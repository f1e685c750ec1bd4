"""``partsync status`` on Apache Kafka: a link's topics caught up, mirroring or paused behind,
gone from the sources, with lag in records and seconds (transaction markers, stamped with the
coordinator's clock, skipped) and config drift; through the strict proxy."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from partsync.demo.data import Rec, create_topic, produce
from tests.conftest import CliResult
from tests.integration.sync_support import Clusters, produce_transactional, set_topic_configs

pytestmark = [pytest.mark.integration, pytest.mark.kafka_only, pytest.mark.kafka_versions]

Run = Callable[..., CliResult]


def _recs(n: int, first_ms: int) -> list[Rec]:
    return [Rec(f"k{i}".encode(), f"v{i}".encode(), (), first_ms + i, None) for i in range(n)]


def _topics(r: CliResult) -> dict[str, dict[str, object]]:
    return {t["topic"]: t for t in r.json["topics"]}


def test_status_shows_each_topic_state_lag_and_drift(
    clusters: Clusters, psync: Run, topic: str, tmp_path: Path
) -> None:
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    base_ms = int(time.time() * 1000) - 600_000  # ten minutes ago: well within retention
    create_topic(a, topic, 2)
    produce(a, topic, _recs(10, base_ms), partition=0)
    produce(a, topic, _recs(5, base_ms), partition=1)
    base = ("--topic", topic, "--sources", "a")
    assert psync("sync", *base, "--create-missing").code == 0  # the mirror's own configs too

    r = psync("status", *base, "--json")
    assert r.code == 0, r.stdout + r.stderr
    t = _topics(r)[topic]
    assert (t["state"], t["lag_records"], t["lag_seconds"], t["config_drift"]) == (
        "caught-up",
        0,
        0.0,
        [],
    )

    # Partition 0 goes on: plain records a minute later, then a transaction two minutes later
    # whose commit marker the coordinator stamps with its own (much later) clock.
    produce(a, topic, _recs(5, base_ms + 60_000), partition=0)
    produce_transactional(a, topic, 0, _recs(3, base_ms + 120_000))
    set_topic_configs(a, topic, {"retention.ms": "987654321"})

    prom = tmp_path / "status.prom"
    r = psync("status", *base, "--json", "--metrics-file", str(prom))
    assert r.code == 4, r.stdout + r.stderr  # behind, and the job's group has no member
    t = _topics(r)[topic]
    assert t["state"] == "paused" and t["config_drift"] == ["retention.ms"], t
    p0, p1 = t["partitions"]
    assert p0["condition"] == "behind" and p0["lag_records"] == 5 + 3 + 1  # the marker too
    # The newest data (BASE + 120 s + 2 ms) minus the mirror's newest (BASE + 9 ms).
    assert p0["lag_seconds"] == pytest.approx(120.002 - 0.009)
    assert (p1["lag_records"], p1["lag_seconds"]) == (0, 0.0)
    assert t["lag_seconds"] == p0["lag_seconds"] and t["lag_records"] == 9
    m = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(prom.read_text())
        for s in f.samples
    }
    assert m[("partsync_topic_state", (("state", "paused"), ("topic", topic)))] == 1
    assert m[("partsync_topic_state", (("state", "mirroring"), ("topic", topic)))] == 0
    assert m[("partsync_topic_lag_records", (("topic", topic),))] == 9
    assert m[("partsync_topic_lag_seconds", (("topic", topic),))] == p0["lag_seconds"]
    assert m[("partsync_topic_config_drift", (("topic", topic),))] == 1

    r = psync("status", *base, "--no-group")
    assert r.code == 0, r.stdout + r.stderr
    assert "mirroring" in r.stdout and "retention.ms" in r.stdout and "119.993" in r.stdout, (
        r.stdout
    )

    # A mirror whose source topic is gone (here: never was) and that the pattern selects.
    gone = f"{topic}-gone"
    create_topic(local, gone, 1)
    r = psync("status", "--topic-pattern", f"{topic}.*", "--sources", "a", "--no-group", "--json")
    assert r.code == 5, r.stdout + r.stderr
    states = {name: t["state"] for name, t in _topics(r).items()}
    assert states == {topic: "mirroring", gone: "source-gone"}, states

    assert psync("sync", *base, "--sync-configs").code == 0
    r = psync("status", *base, "--json")
    assert r.code == 0, r.stdout + r.stderr
    t = _topics(r)[topic]
    assert (t["state"], t["lag_records"], t["config_drift"]) == ("caught-up", 0, [])
