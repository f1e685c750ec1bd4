"""Mirroring a topic whose head retention deleted: an empty local partition is brought to the
sources' log start (filler records, then DeleteRecords), and every record from there on is the
source's, at the source's offset.

The source's log start is moved with DeleteRecords (noida and Apache Kafka have it; Tansu does
not), once at a batch boundary and once inside a batch, whose records below the log start the
copy must not leave readable either.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from partsync.demo.brokers import Broker
from partsync.demo.data import (
    UNLIMITED_RETENTION,
    assert_partitions_identical,
    create_topic,
    produce,
)
from tests.conftest import CliResult
from tests.integration.sync_support import (
    Clusters,
    bounds,
    by_partition,
    check_plan,
    delete_records,
    fetch_batches,
    records,
    write_config,
)

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

Run = Callable[..., CliResult]


def _source_with_log_start(clusters: Clusters, topic: str, n: int, *, mid_batch: bool) -> int:
    """Source b holds ``n`` records in batches of about 20, with its log start moved to a batch
    boundary or into a batch; returns the log start."""
    b = clusters["b"]
    if b.kind == "tansu":
        pytest.skip("source b is Tansu, which has no DeleteRecords to move its log start")
    create_topic(b.bootstrap, topic, 2)
    for p in range(2):
        produce(
            b.bootstrap,
            topic,
            records(n, seed=p),
            partition=p,
            batch_size=2048,
            compression=("lz4", "zstd")[p],
        )
    batches = fetch_batches(b, topic, 0)
    middle = batches[len(batches) // 2]
    start = middle.base_offset + (middle.record_count // 2 if mid_batch else 0)
    assert not mid_batch or middle.base_offset < start <= middle.last_offset
    for p in range(2):
        delete_records(b.bootstrap, topic, p, start)
    return start


@pytest.mark.parametrize("where", ["at-a-batch-boundary", "inside-a-batch"])
def test_an_empty_local_partition_starts_at_the_sources_log_start(
    clusters: Clusters, psync: Run, topic: str, where: str
) -> None:
    start = _source_with_log_start(clusters, topic, 1500, mid_batch=where == "inside-a-batch")
    b, local = clusters.bootstrap("b"), clusters.bootstrap("local")
    create_topic(local, topic, 2)
    plan = check_plan(psync("plan", "--topic", topic, "--sources", "b", "--json").json)
    assert plan[(topic, 0)]["bootstrap"] == {"fill_from": 0, "log_start": start}

    r = psync("sync", "--topic", topic, "--sources", "b", "--json")

    assert r.code == 0, r.stdout + r.stderr
    for e in by_partition(r.json, topic).values():
        assert e["status"] == "synced", e
        assert any("filler records" in n for n in e["notes"]), e
    got = bounds(clusters["local"], topic, 2)
    want = bounds(clusters["b"], topic, 2)
    for p in range(2):
        # Kafka serves the batch holding its log start (the local log then starts exactly
        # there); noida serves nothing of a batch its log start cuts, so the local log starts
        # at the first batch it serves (and the result says so).
        served = fetch_batches(clusters["b"], topic, p, start)[0].base_offset
        assert got[p].log_start == max(start, served), (p, got, want, served)
        assert got[p].end == want[p].end
    assert_partitions_identical(b, local, topic, 2)  # every record from the log start on
    again = psync("sync", "--topic", topic, "--sources", "b", "--json")
    assert again.code == 0 and {e["status"] for e in by_partition(again.json, topic).values()} == {
        "in-sync"
    }


def test_a_start_whose_delete_answer_is_lost_says_it_appended_fillers(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """The connection is cut right after the DeleteRecords that removes the fillers (the
    broker deleted them; partsync never hears so): the round fails, the next one goes on from
    the sources' log start, and the result still says fillers were appended."""
    b, local = clusters["b"], clusters.bootstrap("local")
    if b.kind == "tansu":
        pytest.skip("source b is Tansu, which has no DeleteRecords")
    create_topic(b.bootstrap, topic, 1)
    create_topic(local, topic, 1)
    produce(b.bootstrap, topic, records(200, seed=5), partition=0)
    produce(b.bootstrap, topic, records(100, seed=6), partition=0)  # batches from offset 200
    start = 200
    delete_records(b.bootstrap, topic, 0, start)
    # The first DeleteRecords is the no-op probe before any filler is written; the second
    # removes the fillers.
    clusters.kafka.cut_after_delete_records(skip=1, limit=1)

    r = psync("sync", "--topic", topic, "--sources", "b", "--no-group", "--json")

    assert r.code == 0, r.stdout + r.stderr
    assert clusters.kafka.injected["cut-after-delete_records"] == 1
    [e] = by_partition(r.json, topic).values()
    assert e["status"] == "synced" and e["local_end_before"] == 0, e
    assert any(f"filler records at offsets 0..{start} were appended" in n for n in e["notes"]), e
    got = bounds(clusters["local"], topic, 1)[0]
    assert (got.log_start, got.end) == (start, 300), got
    assert_partitions_identical(b.bootstrap, local, topic, 1)


def _source_started_at_300(clusters: Clusters, topic: str) -> tuple[Broker, str]:
    """Source b with 310 records whose log start is 300, a batch boundary; and the local
    bootstrap, with the topic created empty."""
    b, local = clusters["b"], clusters.bootstrap("local")
    if b.kind == "tansu":
        pytest.skip("source b is Tansu, which has no DeleteRecords")
    create_topic(b.bootstrap, topic, 1)
    create_topic(local, topic, 1)
    produce(b.bootstrap, topic, records(300, seed=3), partition=0)
    produce(b.bootstrap, topic, records(10, seed=4), partition=0)
    delete_records(b.bootstrap, topic, 0, 300)
    return b, local


def test_a_start_killed_while_filling_goes_on(clusters: Clusters, psync: Run, topic: str) -> None:
    """SIGKILL while the fillers are being appended: the next run sees a local log that ends in
    fillers, fills on, and the mirror still starts exactly at the source's log start."""
    b, local = _source_started_at_300(clusters, topic)
    end = bounds(b, topic, 1)[0].end
    start = 300
    # 100 filler batches of 3 records: a kill lands among them.
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
        "b",
        "--no-group",
        "--json",
        "--filler-records",
        "3",
    ]
    env = {k: v for k, v in os.environ.items() if k != "PARTSYNC_CONFIG"}
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 60
    while bounds(clusters["local"], topic, 1)[0].end < 30:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    filled = bounds(clusters["local"], topic, 1)[0]
    assert 0 < filled.end < start, filled  # killed among the fillers

    r = psync("sync", "--topic", topic, "--sources", "b", "--json")

    assert r.code == 0, r.stdout + r.stderr
    assert bounds(clusters["local"], topic, 1)[0].log_start == start
    assert bounds(clusters["local"], topic, 1)[0].end == end
    assert_partitions_identical(b.bootstrap, local, topic, 1)


def test_fillers_are_deleted_as_they_go(clusters: Clusters, psync: Run, topic: str) -> None:
    """Fillers held about 0.8 bytes per offset until the fill ended (a log start of 10^11:
    ~80 GB per replica for hours). Every 32 filler batches the local log start is moved up to
    the last one, so the broker frees their segments at its next retention check: 100 batches
    of 3 records take 3 DeleteRecords before the final one."""
    b, local = _source_started_at_300(clusters, topic)
    assert fetch_batches(b, topic, 0, 300)[0].base_offset == 300  # fillers up to it
    deletes = clusters.proxy.requests["DeleteRecords"]

    r = psync("sync", "--topic", topic, "--sources", "b", "--json", "--filler-records", "3")

    assert r.code == 0, r.stdout + r.stderr
    # The check that the local cluster can delete, 3 as the fill goes, the last one.
    assert clusters.proxy.requests["DeleteRecords"] - deletes == 1 + 3 + 1
    assert bounds(clusters["local"], topic, 1)[0] == bounds(b, topic, 1)[0]
    assert_partitions_identical(b.bootstrap, local, topic, 1)


def test_a_start_killed_while_copying_goes_on(clusters: Clusters, psync: Run, topic: str) -> None:
    """SIGKILL while the records after the fill are being copied (the copy throttled so the kill
    lands in it): the local log already starts exactly at the source's log start, inside the
    first copied batch, and the next run finishes an identical copy."""
    b, local = clusters["b"], clusters.bootstrap("local")
    start = _source_with_log_start(clusters, topic, 3000, mid_batch=True)
    create_topic(local, topic, 2)
    end = bounds(b, topic, 2)[0].end
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
        "b",
        "--no-group",
        "--partitions",
        "0",
        "--max-bytes-per-sec",
        "40000",
    ]
    env = {k: v for k, v in os.environ.items() if k != "PARTSYNC_CONFIG"}
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 60
    while bounds(clusters["local"], topic, 1)[0].end < start + 200:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    killed = bounds(clusters["local"], topic, 1)[0]
    assert start < killed.end < end, killed  # killed while copying
    served = fetch_batches(b, topic, 0, start)[0].base_offset
    assert killed.log_start == max(start, served), (killed, start, served)

    r = psync("sync", "--topic", topic, "--sources", "b", "--json")

    assert r.code == 0, r.stdout + r.stderr
    got = bounds(clusters["local"], topic, 2)
    assert [g.log_start for g in got.values()] == [max(start, served)] * 2, got
    assert_partitions_identical(b.bootstrap, local, topic, 2)


def test_the_local_log_start_follows_the_sources_into_the_first_batch(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """A mirror start stopped between its first copied batch and moving the local log start
    into it, as the source's log start moved inside the local log's first batch after a sync:
    the next run moves the local log start there."""
    b, local = clusters["b"], clusters.bootstrap("local")
    if b.kind == "tansu":
        pytest.skip("source b is Tansu, which has no DeleteRecords")
    create_topic(b.bootstrap, topic, 1)
    create_topic(local, topic, 1)
    produce(b.bootstrap, topic, records(100, seed=1), partition=0, batch_size=2048)
    assert psync("sync", "--topic", topic, "--sources", "b").code == 0
    first = fetch_batches(b, topic, 0)[0]
    start = first.base_offset + first.record_count // 2
    delete_records(b.bootstrap, topic, 0, start)
    produce(b.bootstrap, topic, records(10, seed=2), partition=0)

    r = psync("sync", "--topic", topic, "--sources", "b", "--json")

    assert r.code == 0, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert any(f"log start moved from 0 to {start}" in n for n in e["notes"]), e
    assert bounds(clusters["local"], topic, 1)[0].log_start == start
    assert_partitions_identical(b.bootstrap, local, topic, 1)


@pytest.mark.kafka_only
@pytest.mark.kafka_versions  # the filler stamp the local topic accepts: Kafka 3.9 and 4
def test_time_lookups_on_a_mirror_started_at_the_log_start_answer_as_the_sources(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Kafka answers ListOffsets(timestamp) from the first segment whose largest timestamp is
    at or after the time asked (UnifiedLog.fetchOffsetByTimestamp). Fillers stamped with the
    time of the run made the mirror's first segment (fillers, then the first copied records)
    capture every earlier time, and answer nothing where its records are all older: a source
    with 10-day-old records over 1 MiB segments answered 3300, 3500, 4500, 5990, the mirror
    None for all four. Fillers are now stamped as old as the topic accepts."""
    from partsync._kafka import Connection

    b = clusters["b"]
    segments = {**UNLIMITED_RETENTION, "segment.bytes": str(1 << 20)}
    create_topic(b.bootstrap, topic, 1, segments)
    create_topic(clusters.bootstrap("local"), topic, 1, segments)
    base = int(time.time() * 1000) - 10 * 86_400_000
    produce(
        b.bootstrap,
        topic,
        records(6000, seed=1, base_timestamp_ms=base, value_size=600),
        partition=0,
        batch_size=16384,
    )
    delete_records(b.bootstrap, topic, 0, 2000)

    r = psync("sync", "--topic", topic, "--sources", "b", "--json")

    assert r.code == 0, r.stdout + r.stderr
    assert any("filler records" in n for n in by_partition(r.json, topic)[0]["notes"])
    # Times whose answer lies past the source's first segments, which its log start cut (they
    # go at the next retention check, and answer nothing for earlier times until then).
    times = [base + k for k in (2500, 3300, 3500, 4500, 5990, 7000)]

    def lookups(broker: Broker) -> list[int]:
        with Connection(broker.host, broker.port, cluster=broker.kind) as conn:
            out = []
            for t in times:
                code, offset = conn.list_offsets(topic, [0], t)[0]
                assert code == 0, (t, code)
                out.append(offset)
            return out

    want = lookups(b)
    assert want == [2500, 3300, 3500, 4500, 5990, -1], want
    assert lookups(clusters["local"]) == want


def test_a_local_cluster_without_delete_records_is_refused_before_writing(
    clusters: Clusters,
    cli: Run,
    topic: str,
    tmp_path: Path,
    broker_mode: str,
    broker_factory: Callable[[str], Broker],
) -> None:
    """Tansu has no DeleteRecords: the start is refused before a filler is written."""
    if broker_mode != "mixed":
        pytest.skip("the mixed mode has Tansu brokers to play a local cluster")
    start = _source_with_log_start(clusters, topic, 400, mid_batch=False)
    tansu = broker_factory("tansu")
    create_topic(tansu.bootstrap, topic, 2)
    cfg = write_config(tmp_path / "p.toml", {"b": clusters["b"], "local": tansu})

    r = cli("--config", str(cfg), "sync", "--topic", topic, "--sources", "b", "--json")

    assert r.code == 3, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "unsafe" and e["local_end_after"] == 0, e
    assert "DeleteRecords" in e["reason"] and f"offset {start}" in e["reason"], e["reason"]
    assert bounds(tansu, topic, 2)[0].end == 0


def test_a_retention_gap_is_refused_unless_skipping_it_is_asked_for(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """The local partition fell behind the source's retention (local end 100, source log start
    200): refused by default; --on-retention-gap skip starts again at the log start, and says
    which offsets were skipped and which local records went with them."""
    b = clusters["b"]
    if b.kind == "tansu":
        pytest.skip("source b is Tansu, which has no DeleteRecords")
    local = clusters.bootstrap("local")
    create_topic(b.bootstrap, topic, 1)
    create_topic(local, topic, 1)
    produce(b.bootstrap, topic, records(100, seed=5), partition=0)
    assert psync("sync", "--topic", topic, "--sources", "b").code == 0
    produce(b.bootstrap, topic, records(200, seed=6), partition=0, batch_size=2048)
    delete_records(b.bootstrap, topic, 0, 200)
    refused = psync("sync", "--topic", topic, "--sources", "b", "--json")
    assert refused.code == 3 and bounds(clusters["local"], topic, 1)[0].end == 100

    r = psync("sync", "--topic", topic, "--sources", "b", "--json", "--on-retention-gap", "skip")

    assert r.code == 0, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "synced" and e["local_end_after"] == 300, e
    assert any(
        "retention gap skipped: offsets 100..200" in n and "0..100 were deleted" in n
        for n in e["notes"]
    ), e["notes"]
    got = bounds(clusters["local"], topic, 1)[0]
    served = fetch_batches(b, topic, 0, 200)[0].base_offset
    assert got.log_start == max(200, served) and got.end == 300, got
    assert_partitions_identical(b.bootstrap, local, topic, 1)
