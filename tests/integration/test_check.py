"""`partsync check` through the real CLI against every broker mode: it reports what a sync needs
from each cluster, finds what would make sync fail or refuse, and writes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from partsync.demo.data import create_topic, produce
from tests.conftest import CliResult
from tests.integration.sync_support import Clusters, ends, records, topic_partitions

pytestmark = [pytest.mark.integration, pytest.mark.kafka]


def _findings(doc: Any, cluster: str) -> dict[tuple[str, str], dict[str, Any]]:
    (c,) = [c for c in doc["clusters"] if c["cluster"] == cluster]
    return {(f["subject"], f["need"]): f for f in c["findings"]}


def test_a_ready_run_is_ok_and_check_writes_nothing(
    clusters: Clusters, psync: Callable[..., CliResult], topic: str
) -> None:
    a, b, local = (clusters.bootstrap(n) for n in ("a", "b", "local"))
    for where in (a, b, local):
        create_topic(where, topic, 2)
    produce(a, topic, records(7, seed=3), partition=0)
    before = ends(local, topic, 2)

    r = psync("check", "--topic", topic, "--sources", "a,b", "--json")
    assert r.code == 0, r.stdout + r.stderr
    doc = r.json
    assert doc["ok"] is True and doc["problems"] == 0 and doc["exit_code"] == 0
    assert [(c["cluster"], c["role"], c["reachable"]) for c in doc["clusters"]] == [
        ("a", "source", True),
        ("b", "source", True),
        ("local", "local", True),
    ]
    assert all(c["broker_version"] and c["brokers"] >= 1 for c in doc["clusters"])

    # Apache Kafka reports authorized operations (every one, without an authorizer); our
    # PyPI brokers do not, which is unknown, not a problem.
    def rights(name: str) -> str:
        return "ok" if clusters.kind(name) == "kafka" else "unknown"

    src = _findings(doc, "a")
    assert src[(f"topic {topic}", "exists")]["detail"] == "2 partitions"
    assert src[(f"topic {topic}", "READ")]["verdict"] == rights("a")
    loc = _findings(doc, "local")
    plan = loc[(f"topic {topic}", "plan")]
    assert plan["verdict"] == "ok" and "1 of 2 partitions behind, 7 offsets" in plan["detail"]
    assert loc[(f"topic {topic}", "WRITE")]["verdict"] == rights("local")
    assert loc[(f"topic {topic}", "DESCRIBE_CONFIGS")]["verdict"] == rights("local")
    # The run's fencing and group, found without taking a producer id or joining.
    assert loc[(f"transactional id partsync:{topic}:0", "coordinator")]["verdict"] == "ok"
    assert loc[(f"group partsync.{topic}", "coordinator")]["verdict"] == "ok"
    # Whether a replay can leave a transaction open for the next run (KIP-664: Kafka 3.0+ and
    # noida offer it, Tansu does not).
    resumable = loc[("cluster", "DescribeTransactions, DescribeProducers, ListTransactions")]
    wanted = "warning" if clusters.kind("local") == "tansu" else "ok"
    assert resumable["verdict"] == wanted, resumable
    # The test Kafka runs with auto.create.topics.enable=false (the other brokers may not say).
    auto = loc[("cluster", "auto.create.topics.enable")]
    if clusters.kind("local") == "kafka":
        assert (auto["verdict"], auto["detail"].split(":")[0]) == ("ok", "false"), auto
    assert ends(local, topic, 2) == before == {0: 0, 1: 0}

    r = psync("check", "--topic", topic, "--clusters", "a,local", "--no-group", "--no-fencing")
    assert r.code == 0, r.stdout + r.stderr
    assert "ok: every cluster has what the run needs" in r.stderr
    for word in ("connection", "source", "local", f"topic {topic}", "plan"):
        assert word in r.stdout
    assert f"group partsync.{topic}" not in r.stdout
    assert "transactional id" not in r.stdout
    assert ends(local, topic, 2) == {0: 0, 1: 0}


def test_a_warning_is_rendered_in_the_human_table(
    clusters: Clusters, psync: Callable[..., CliResult], topic: str
) -> None:
    """A finding that is only a warning (the topic missing on one of two sources) shows as
    one in the table (it crashed the human output with a KeyError, exit 1)."""
    create_topic(clusters.bootstrap("a"), topic, 1)
    create_topic(clusters.bootstrap("local"), topic, 1)

    r = psync("check", "--topic", topic, "--sources", "a,b", "--no-group")

    assert r.code == 0, r.stdout + r.stderr
    row = next(line for line in r.stdout.splitlines() if "not on this source" in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[:2] == ["b", "source"] and cells[4] == "warning", r.stdout
    assert "ok: every cluster has what the run needs" in r.stderr


def test_what_sync_would_fail_on_is_missing_and_exit_1(
    clusters: Clusters, psync: Callable[..., CliResult], topic: str
) -> None:
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 1)
    produce(a, topic, records(3, seed=5), partition=0)
    # No local topic: sync would fail without --create-missing.
    r = psync("check", "--topic", topic, "--sources", "a", "--json")
    assert r.code == 1, r.stdout + r.stderr
    plan = _findings(r.json, "local")[(f"topic {topic}", "plan")]
    assert plan["verdict"] == "missing" and "--create-missing" in plan["detail"]
    # With --create-missing the run would create it: the right to is what is checked (Kafka
    # reports CREATE on the cluster; our PyPI brokers report no rights: unknown).
    r = psync("check", "--topic", topic, "--sources", "a", "--create-missing", "--json")
    assert r.code == 0, r.stdout + r.stderr
    create = _findings(r.json, "local")[(f"topic {topic}", "CREATE")]
    assert create["verdict"] == ("ok" if clusters.kind("local") == "kafka" else "unknown"), create
    plan = _findings(r.json, "local")[(f"topic {topic}", "plan")]
    assert plan["detail"].startswith("to be created with 1 partitions")
    assert topic_partitions(local, topic) is None  # check created nothing
    # A topic missing on one source of two: planned without it, so a warning, not a problem.
    r = psync("check", "--topic", topic, "--sources", "a,b", "--create-missing", "--json")
    assert r.code == 0, r.stdout + r.stderr
    assert _findings(r.json, "b")[(f"topic {topic}", "exists")]["verdict"] == "warning"

    # A topic on no source, and a source that cannot be reached: named, exit 1.
    r = psync("check", "--topic", f"{topic}-nowhere", "--sources", "a,127.0.0.1:1", "--json")
    assert r.code == 1, r.stdout + r.stderr
    by_name = {c["cluster"]: c for c in r.json["clusters"]}
    assert by_name["127.0.0.1:1"]["reachable"] is False
    assert "127.0.0.1:1" in by_name["127.0.0.1:1"]["error"]
    missing = _findings(r.json, "a")[(f"topic {topic}-nowhere", "exists")]
    assert missing["verdict"] == "missing"
    r = psync("check", "--topic", f"{topic}-nowhere", "--sources", "a,127.0.0.1:1")
    assert r.code == 1
    assert "not ready: unreachable: 127.0.0.1:1" in r.stderr


def test_check_usage_errors(psync: Callable[..., CliResult], topic: str) -> None:
    r = psync("check", "--topic", topic)
    assert r.code == 2 and "give --sources (or --clusters)" in r.stderr
    r = psync("check", "--topic", topic, "--clusters", "local")
    assert r.code == 2 and "--clusters names only the local cluster" in r.stderr
    r = psync("check", "--topic", topic, "--sources", "a", "--group", "g", "--no-group")
    assert r.code == 2
