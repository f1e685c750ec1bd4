"""Resume after ``kill -9``: the local log end is the checkpoint.

A sync subprocess is SIGKILLed while it is copying (no handler runs, appends may be in flight);
running sync again must continue from wherever each partition's local log ended and leave every
partition identical to the source. The data is thousands of single-record batches per partition
copied one partition at a time (--parallelism 1), so a copy runs about a second, each partition
over a hundred milliseconds, and the kill reliably lands inside a partition.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from partsync.demo.data import assert_partitions_identical, create_topic, produce
from tests.conftest import CliResult
from tests.integration.sync_support import Clusters, by_partition, ends, fetch_batches, records

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

Run = Callable[..., CliResult]

# Resuming from the local log end is what is tested here, so no group: noida's coordinator
# never drops a member that was killed while leading its group (the rejoin keeps naming the dead
# member leader). Group takeover after kill -9 is tested in test_follow.py on a Tansu local.
NO_GROUP = ("--no-group",)

PARTITIONS = 6
BATCHES_PER_PARTITION = 1500
ATTEMPTS = 3


def _source_topic(clusters: Clusters, topic: str) -> dict[int, int]:
    a = clusters.bootstrap("a")
    create_topic(a, topic, PARTITIONS)
    create_topic(clusters.bootstrap("local"), topic, PARTITIONS)
    recs = [
        r
        for p in range(PARTITIONS)
        for r in records(BATCHES_PER_PARTITION, seed=p, partition=p, value_size=200)
    ]
    # batch.size 1 and no linger: librdkafka sends every record as a batch of its own.
    produce(a, topic, recs, compression="lz4", batch_size=1, linger_ms=0)
    target = ends(clusters["a"], topic, PARTITIONS)
    assert target == dict.fromkeys(range(PARTITIONS), BATCHES_PER_PARTITION)
    return target


def _kill_mid_copy(clusters: Clusters, topic: str, target: dict[int, int]) -> dict[int, int]:
    """Start a sync, SIGKILL it once a third of the records are copied; return the local ends
    once in-flight appends have settled."""
    argv = [
        sys.executable,
        "-m",
        "partsync",
        "--config",
        str(clusters.config),
        "sync",
        "--topic",
        topic,
        "--sources",
        "a",
        "--parallelism",
        "1",
        "--max-in-flight-bytes",
        str(1 << 16),
        "--chunk-offsets",
        "500",
        *NO_GROUP,
    ]
    total = sum(target.values())
    env = {k: v for k, v in os.environ.items() if k != "PARTSYNC_CONFIG"}
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env) as proc:
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None:
                # Past a third: some partitions done, one under way, the rest untouched.
                copied = sum(ends(clusters["local"], topic, PARTITIONS).values())
                if total // 3 < copied < total:
                    break
                time.sleep(0.01)
        finally:
            proc.send_signal(signal.SIGKILL)
            _, err = proc.communicate(timeout=30)
        assert proc.returncode in (-signal.SIGKILL, 0), err
    # A killed writer's last requests may still be applied: wait until the ends stand still.
    last = ends(clusters["local"], topic, PARTITIONS)
    for _ in range(30):
        time.sleep(0.3)
        now = ends(clusters["local"], topic, PARTITIONS)
        if now == last:
            return now
        last = now
    raise AssertionError(f"the local ends still move after the writer was killed: {last}")


def test_resume_after_kill_9(clusters: Clusters, psync: Run, topic: str) -> None:
    for attempt in range(ATTEMPTS):
        name = f"{topic}-{attempt}"
        target = _source_topic(clusters, name)
        after_kill = _kill_mid_copy(clusters, name, target)
        if any(0 < after_kill[p] < target[p] for p in target):
            break
    else:
        pytest.skip(
            f"no kill landed inside a partition's copy in {ATTEMPTS} attempts "
            f"(last local ends {after_kill} of {target})"
        )
    assert all(0 <= after_kill[p] <= target[p] for p in target)

    r = psync("sync", "--topic", name, "--sources", "a", "--json", *NO_GROUP)

    assert r.code == 0, r.stderr
    res = by_partition(r.json, name)
    for p, e in res.items():
        assert e["local_end_before"] == after_kill[p], (p, e, after_kill)
        assert e["local_end_after"] == e["target_end"] == target[p]
        # Only what was missing was copied: the source's batches from the killed run's end on.
        rest = [b for b in fetch_batches(clusters["a"], name, p) if b.base_offset >= after_kill[p]]
        assert e["batches"] == len(rest), (p, e)
        assert e["status"] == ("in-sync" if after_kill[p] == target[p] else "synced")
    assert (
        assert_partitions_identical(
            clusters.bootstrap("a"), clusters.bootstrap("local"), name, PARTITIONS
        )
        == PARTITIONS * BATCHES_PER_PARTITION
    )
    again = psync("sync", "--topic", name, "--sources", "a", "--json", *NO_GROUP)
    assert again.code == 0 and {e["status"] for e in by_partition(again.json, name).values()} == {
        "in-sync"
    }
