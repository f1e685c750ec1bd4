"""The benchmark keeps running: ``scripts/bench.py --smoke`` end to end on tiny data.

No timing assertions (the numbers are meaningless at this size and on shared machines): only
that every contender ran, produced numbers, and that the shallow copies are offset-identical.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CONTENDERS = {"partsync", "ideal", "confluent-mirror", "kafka-python-mirror"}
NUMERIC = (
    "wall_s",
    "mb_per_s",
    "cpu_s",
    "cpu_s_per_gb",
    "peak_rss_mb",
    "dest_broker_cpu_s",
    "source_broker_cpu_s",
)


def test_bench_smoke_runs_every_contender(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    md = tmp_path / "bench.md"
    proc = subprocess.run(  # noqa: PLW1510 (the exit code is asserted below)
        [
            sys.executable,
            str(ROOT / "scripts" / "bench.py"),
            "--smoke",
            "--json",
            str(out),
            "--markdown",
            str(md),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())

    main = [r for r in doc["rows"] if r["experiment"] == "main"]
    assert {r["contender"] for r in main} == CONTENDERS
    assert {r["codec"] for r in main} == {"none", "lz4", "zstd"}
    for r in doc["rows"]:
        assert r["code"] == 0, r
        for key in NUMERIC:
            assert isinstance(r[key], (int, float)) and math.isfinite(r[key]), (key, r)
        if r["experiment"] != "startup":
            assert r["source_bytes"] > 0 and r["complete"], r
            assert r["mb_per_s"] > 0 and r["cpu_s"] > 0 and r["peak_rss_mb"] > 0, r
    # The shallow copies keep every batch; the deep mirrors are reported, not judged.
    for r in doc["rows"]:
        if r["contender"] in ("partsync", "ideal") and r["experiment"] != "startup":
            assert r["offsets_identical"] and r["batches_identical"], r

    assert set(doc["ratios"]) == {"bench-none", "bench-lz4", "bench-zstd"}
    for entry in doc["ratios"].values():
        assert isinstance(entry["partsync_over_ideal_mb_s"], float)
        assert isinstance(entry["confluent-mirror_over_partsync_cpu_per_gb"], float)
    assert {r["variant"] for r in doc["rows"] if r["experiment"] == "partitions"} == {"p=1", "p=4"}
    assert len([r for r in doc["rows"] if r["experiment"] == "inflight"]) == 2
    assert [r["variant"] for r in doc["rows"] if r["experiment"] == "memory"] == ["budget=64MiB"]
    noop = doc["noop"]
    assert noop["noop_code"] == 0 and noop["noop_statuses"] == {"in-sync": noop["partitions"]}
    assert doc["digest"]["status"] in ("ran", "pending")
    assert doc["machine"]["cores"] >= 1
    assert "| partsync |" in md.read_text()
