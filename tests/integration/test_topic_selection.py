"""--topic-pattern and --exclude through the real CLI: resolved against the sources' topics,
listed by `plan`, copied by `sync`; nothing matched is an error naming the sources."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from partsync.demo.data import assert_partitions_identical, create_topic, produce
from tests.conftest import CliResult
from tests.integration.sync_support import Clusters, ends, records, topic_partitions

pytestmark = [pytest.mark.integration, pytest.mark.kafka]


def test_patterns_and_exclusions_select_the_sources_topics(
    clusters: Clusters, psync: Callable[..., CliResult], topic: str
) -> None:
    a, b, local = (clusters.bootstrap(n) for n in ("a", "b", "local"))
    # x1 on source a only, x2 on source b only, dlq and y on a: a pattern sees every source.
    for name, where in (
        (f"{topic}.x1", a),
        (f"{topic}.x2", b),
        (f"{topic}.x1.dlq", a),
        (f"{topic}.y", a),
    ):
        create_topic(where, name, 1)
        produce(where, name, records(5, seed=1), partition=0)
    pattern = f"{topic}\\.x.*"
    r = psync(
        "plan",
        "--topic-pattern",
        pattern,
        "--exclude",
        r".*\.dlq",
        "--sources",
        "a,b",
        "--create-missing",
    )
    assert r.code == 0, r.stdout + r.stderr
    assert f"topics: {topic}.x1, {topic}.x2 (selected by" in r.stderr
    r = psync(
        "plan",
        "--topic-pattern",
        pattern,
        "--exclude",
        r".*\.dlq",
        "--sources",
        "a,b",
        "--create-missing",
        "--json",
    )
    assert [t["topic"] for t in r.json["topics"]] == [f"{topic}.x1", f"{topic}.x2"]

    r = psync(
        "sync",
        "--topic-pattern",
        pattern,
        "--exclude",
        r".*\.dlq",
        "--sources",
        "a,b",
        "--create-missing",
        "--json",
    )
    assert r.code == 0, r.stdout + r.stderr
    assert sorted(t["topic"] for t in r.json["topics"]) == [f"{topic}.x1", f"{topic}.x2"]
    assert_partitions_identical(a, local, f"{topic}.x1", 1)
    assert_partitions_identical(b, local, f"{topic}.x2", 1)
    # Neither the excluded topic nor the unmatched one was created locally.
    assert topic_partitions(local, f"{topic}.y") is None
    assert topic_partitions(local, f"{topic}.x1.dlq") is None
    assert ends(local, f"{topic}.x1", 1) == {0: 5}


def test_a_pattern_that_matches_nothing_is_an_error_naming_the_sources(
    psync: Callable[..., CliResult], topic: str
) -> None:
    r = psync("plan", "--topic-pattern", f"{topic}-none.*", "--sources", "a,b")
    assert r.code == 1, r.stdout + r.stderr
    assert f"no topic on a, b matches --topic-pattern '{topic}-none.*'" in r.stderr
    r = psync("sync", "--topic-pattern", "[x", "--sources", "a", "--json")
    assert r.code == 2 and "--topic-pattern '[x' is not a regular expression" in r.stdout
    r = psync("sync", "--sources", "a")
    assert r.code == 2 and "give --topic or --topic-pattern" in r.stderr
