"""Source topics change under a mirror: a source topic that gained partitions grows the local
topic (CreatePartitions) before the new partitions are copied; a source topic deleted and
created again (its offsets restarted) is refused, and nothing of it is appended to the old
copy. Follow mode's checks of the same are in test_follow.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from partsync.demo.data import assert_partitions_identical, create_topic, produce
from tests.conftest import CliResult
from tests.integration.sync_support import (
    Clusters,
    add_partitions,
    bounds,
    by_partition,
    check_plan,
    records,
    recreate_topic,
    topic_partitions,
)

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

Run = Callable[..., CliResult]


def _fill(bootstrap: str, topic: str, partitions: range, n: int, seed: int) -> None:
    for p in partitions:
        produce(
            bootstrap,
            topic,
            records(n, seed=seed + p),
            partition=p,
            batch_size=2048,
            compression=("lz4", "zstd", "gzip", "none")[p % 4],
        )


def test_sources_that_gained_partitions_grow_the_local_topic(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    if "tansu" in (clusters.kind("b"), clusters.kind("local")):
        pytest.skip("Tansu has no CreatePartitions")
    b, local = clusters.bootstrap("b"), clusters.bootstrap("local")
    create_topic(b, topic, 2)
    create_topic(local, topic, 2)
    _fill(b, topic, range(2), 300, seed=10)
    assert psync("sync", "--topic", topic, "--sources", "b", "--json").code == 0
    add_partitions(b, topic, 4)
    _fill(b, topic, range(4), 200, seed=20)

    plan = psync("plan", "--topic", topic, "--sources", "b", "--json")
    assert plan.code == 0, plan.stdout + plan.stderr
    assert plan.json["topics"][0]["grow"] == {"from": 2, "to": 4}
    assert sorted(p for _t, p in check_plan(plan.json)) == [0, 1, 2, 3]
    refused = psync("sync", "--topic", topic, "--sources", "b", "--no-add-partitions", "--json")
    assert refused.code == 3, refused.stdout + refused.stderr
    assert "partition counts differ" in refused.stdout and "--no-add-partitions" in refused.stdout
    assert topic_partitions(local, topic) == 2  # nothing written
    assert bounds(clusters["local"], topic, 2)[0].end == 300

    r = psync("sync", "--topic", topic, "--sources", "b", "--json")

    assert r.code == 0, r.stdout + r.stderr
    assert topic_partitions(local, topic) == 4
    assert {p: e["status"] for p, e in by_partition(r.json, topic).items()} == {
        p: "synced" for p in range(4)
    }
    assert any("grew from 2 to 4" in w for w in r.json["topics"][0]["warnings"]), r.json
    assert_partitions_identical(b, local, topic, 4)
    again = psync("sync", "--topic", topic, "--sources", "b", "--json")
    assert again.code == 0
    assert {e["status"] for e in by_partition(again.json, topic).values()} == {"in-sync"}


def test_a_local_topic_with_more_partitions_than_its_sources_is_refused(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    create_topic(clusters.bootstrap("b"), topic, 2)
    create_topic(clusters.bootstrap("local"), topic, 3)
    r = psync("sync", "--topic", topic, "--sources", "b", "--json")
    assert r.code == 3, r.stdout + r.stderr
    assert "cannot shrink" in r.stdout


@pytest.mark.parametrize("again", ["shorter", "longer"])
def test_a_source_topic_deleted_and_created_again_is_refused(
    clusters: Clusters, psync: Run, topic: str, again: str
) -> None:
    """The copy of the old topic stays as it is: the new topic's records are never appended to
    it, whether the new topic is still shorter than the copy or already longer."""
    b, local = clusters.bootstrap("b"), clusters.bootstrap("local")
    create_topic(b, topic, 1)
    create_topic(local, topic, 1)
    _fill(b, topic, range(1), 400, seed=30)
    assert psync("sync", "--topic", topic, "--sources", "b", "--json").code == 0
    recreate_topic(b, topic, 1)
    _fill(b, topic, range(1), 100 if again == "shorter" else 900, seed=40)

    r = psync("sync", "--topic", topic, "--sources", "b", "--json")

    assert r.code == 3, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "unsafe" and "deleted and created again" in e["reason"], e
    assert bounds(clusters["local"], topic, 1)[0].end == 400  # the old copy, untouched
