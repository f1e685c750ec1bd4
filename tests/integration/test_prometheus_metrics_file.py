"""A ``--metrics-file`` that cannot be written is a usage error before any work (issue 37 item 4).

``os.access`` passes for root under /proc, where nothing can be created: the check creates a
temporary file beside the target, so the run stops with exit 2 before the local topic is even
created, and the same command without the bad path then copies everything."""

from __future__ import annotations

from pathlib import Path

import pytest

from partsync.demo import data
from tests.integration.sync_support import topic_partitions

pytestmark = pytest.mark.integration

UNWRITABLE = "/proc/partsync.prom"  # no file can be created there, not even by root


def test_an_unwritable_metrics_file_stops_the_run_before_anything_is_copied(
    cli, source_a, local_broker, local_proxy, topic, tmp_path: Path
) -> None:
    data.create_topic(source_a.bootstrap, topic, 2)
    for p in range(2):
        data.produce(source_a.bootstrap, topic, data.make_records(200, seed=p, partition=p))
    args = (
        "sync",
        "--topic",
        topic,
        "--sources",
        source_a.bootstrap,
        "--local",
        local_proxy.bootstrap,
        "--create-missing",
        "--json",
    )

    res = cli(*args, "--metrics-file", UNWRITABLE)

    assert res.code == 2, (res.code, res.stderr)
    err = res.json["error"]
    assert err["kind"] == "usage" and UNWRITABLE in err["message"], err
    assert "topics" not in res.json  # no report: nothing ran
    assert topic_partitions(local_broker.bootstrap, topic) is None  # not even created
    assert not list(Path("/proc").glob(".partsync.prom.*"))

    prom = tmp_path / "partsync.prom"
    again = cli(*args, "--metrics-file", str(prom))
    assert again.code == 0, again.stderr
    assert prom.is_file() and [p.name for p in tmp_path.iterdir()] == ["partsync.prom"]
    data.assert_partitions_identical(source_a.bootstrap, local_broker.bootstrap, topic, 2)
