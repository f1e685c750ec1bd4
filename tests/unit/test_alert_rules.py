"""The shipped Prometheus rules and Grafana dashboard (deploy/): ``promtool check rules`` and
``promtool test rules`` pass, every dashboard query parses as PromQL, and every metric name they
use is one partsync exports (rendered from a live follower's and a cron run's collectors, so a
renamed metric fails here). promtool comes from Debian's ``prometheus`` package."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from partsync.plan.comparator import Bounds, plan_partition
from partsync.plan.results import PartitionResult, Status, SyncReport, TopicResult
from partsync.ui.metrics import LiveMetrics, render_metrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "partsync-rules.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "partsync-rules.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "partsync-dashboard.json"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian: apt-get install -y prometheus)"
)

_NAME = re.compile(r"\bpartsync_[a-z0-9_]+")


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def exported_names() -> set[str]:
    """Every sample name partsync exports: a follower with every series present (a group, an
    unsafe partition, lag in bytes and seconds) and a finished cron run."""
    live = LiveMetrics()
    live.watch_group(SimpleNamespace(group="g", generation=1, rebalances=1, joined=None))
    live.set_owned([("t", 0)])
    live.observe_plan(plan_partition("t", 0, Bounds(0, 10), {"a": Bounds(0, 10)}))
    live.source_batch("a", "t", 0, 10, 1000)
    live.source_high_watermark("a", "t", 0, 20)
    synced = PartitionResult(
        "t",
        0,
        Status.SYNCED,
        0,
        11,
        20,
        batches=1,
        bytes=100,
        bytes_by_source={"a": 100},
        batches_by_source={"a": 1},
    )
    live.observe(synced)
    live.observe(PartitionResult("t", 1, Status.UNSAFE, 0, 0, 5, reason="divergent"))
    live.observe(PartitionResult("t", 2, Status.HANDED_OVER, 0, 0, 5))
    run = render_metrics(SyncReport((TopicResult("t", (synced,)),), 1.0, None), 0)
    names = {
        s.name
        for text in (live.render(), run)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert "partsync_partition_lag_seconds" in names  # the example covers every series
    return names


def rule_exprs() -> list[str]:
    doc = yaml.safe_load(RULES.read_text())
    return [r["expr"] for g in doc["groups"] for r in g["rules"]]


def _targets(panel: dict[str, Any]) -> list[str]:
    return [t["expr"] for t in panel.get("targets", [])]


def dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [e for p in doc["panels"] for e in _targets(p)]
    exprs += [v["definition"] for v in doc["templating"]["list"] if v["type"] == "query"]
    return exprs


def test_the_rules_cover_what_operators_need() -> None:
    doc = yaml.safe_load(RULES.read_text())
    alerts = {r["alert"]: r for g in doc["groups"] for r in g["rules"]}
    assert {
        "PartsyncLagRecordsHigh",
        "PartsyncLagSecondsHigh",
        "PartsyncPartitionUnsafe",
        "PartsyncSourceTopicGone",
        "PartsyncNoSuccessfulRound",
        "PartsyncCronRunFailing",
    } <= set(alerts)
    for name, rule in alerts.items():
        assert rule["annotations"]["summary"] and rule["labels"]["severity"], name


def test_every_metric_the_rules_and_dashboard_use_is_exported() -> None:
    exported = exported_names()
    used = {n for e in rule_exprs() + dashboard_exprs() for n in _NAME.findall(e)}
    assert used, "no partsync metric found in the rules and dashboard"
    assert used <= exported, f"not exported by partsync: {sorted(used - exported)}"


@needs_promtool
def test_promtool_checks_and_tests_the_rules() -> None:
    check = _promtool("check", "rules", RULES.name, cwd=RULES.parent)
    assert check.returncode == 0, check.stdout + check.stderr
    tested = _promtool("test", "rules", RULE_TESTS.name, cwd=RULES.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr


@needs_promtool
def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    # promtool parses queries only inside rules: each one becomes a recording rule, with the
    # dashboard's variables replaced as Grafana would.
    exprs = [
        re.sub(r"label_values\((\w+), *\w+\)", r"\1", e).replace("$topic", ".*")
        for e in dashboard_exprs()
    ]
    rules = [{"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(exprs)]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    check = _promtool("check", "rules", path.name, cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
