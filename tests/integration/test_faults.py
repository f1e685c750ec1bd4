"""Faults injected from outside, against real broker processes: a fault costs seconds, never an
offset, and the exit code tells the truth.

- connections cut right after a Produce was forwarded (the append's fate unknown), over and
  over, during a multi-partition sync with several codecs (the strict proxy's
  ``cut_after_produce``, seeded);
- the local broker, or a source broker, killed with SIGKILL mid-sync and restarted on its data;
- the partsync process killed with SIGKILL at seeded random points, several times in a row.

Every scenario ends with an independent consumer's record-by-record comparison, and the strict
proxy's check that no Produce broke Kafka's client rules. A run that stalls fails the test by
its timeout (a bound that catches a stall, not a performance assertion).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from partsync.demo.data import assert_partitions_identical, create_topic, make_records, produce
from tests.conftest import CliResult
from tests.integration.sync_support import Clusters, by_partition

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.faults]

Run = Callable[..., CliResult]

CODECS = ("lz4", "zstd", "gzip", "snappy")
# A run after a fault must end within this (a stall takes a produce timeout, 30 s or more).
STALL_BOUND_S = 60


def _fill(bootstrap: str, topic: str, partitions: int, n: int, *, seed: int = 0) -> None:
    for p in range(partitions):
        recs = make_records(n, seed=seed * 100 + p, partition=p, value_size=180)
        produce(bootstrap, topic, recs, compression=CODECS[p % len(CODECS)], batch_size=8192)


def test_cut_connections_after_produce_converge_in_one_run(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """About 6% of Produce requests have both connections cut right after being forwarded:
    each cut fails the pending appends of that connection at once, and the partitions go on
    from the real local log end in the same run."""
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 4)
    create_topic(local, topic, 4)
    _fill(a, topic, 4, 2500)
    clusters.kafka.cut_after_produce(0.06, seed=1306)

    r = psync("sync", "--topic", topic, "--sources", "a", "--json", timeout=STALL_BOUND_S)

    cuts = clusters.kafka.injected["cut-after-produce"]
    assert cuts >= 3, f"only {cuts} cuts: the scenario did not happen"
    assert r.code == 0, f"{cuts} cuts\n{r.stdout}\n{r.stderr}"
    assert {e["status"] for e in by_partition(r.json, topic).values()} == {"synced"}, r.stdout
    assert_partitions_identical(a, local, topic, 4)
