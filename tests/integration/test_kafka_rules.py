"""Apache Kafka's behaviours that our brokers never show on demand, made to happen by the strict
proxy (``clusters.kafka``, tests/integration/kafka_semantics.py), and what partsync does then:
a rejected append, a high watermark below the log end, throttled fetches, a moved leader, a
batch removed by compaction, a source that no longer holds the local log's last offset.

Every test here runs on every broker mode (the proxy sits in front of real Kafka too), and the
autouse check of tests/integration/conftest.py fails any test in which partsync sent an append
behind an unanswered one or broke another of Kafka's append rules.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from partsync._kafka import Connection
from partsync.demo.data import assert_partitions_identical, create_topic, produce
from tests.conftest import CliResult
from tests.integration.kafka_proxy import StrictProxy, strict_proxy  # noqa: F401  (fixture)
from tests.integration.sync_support import (
    Clusters,
    assert_prefix_of,
    by_partition,
    delete_records,
    ends,
    fetch_batches,
    raw_batch,
    raw_record,
    records,
    write_config,
)

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

Run = Callable[..., CliResult]

NOT_ENOUGH_REPLICAS = 19
INVALID_RECORD = 87


def _sync(psync: Run, topic: str, *args: str, sources: str = "a") -> CliResult:
    return psync("sync", "--topic", topic, "--sources", sources, "--json", *args)


def _many_batches(bootstrap: str, topic: str, n: int, *, seed: int, partition: int = 0) -> None:
    """``n`` records in small batches (about 20 records each)."""
    produce(
        bootstrap,
        topic,
        records(n, seed=seed),
        partition=partition,
        batch_size=2048,
        compression="lz4",
    )


def _via(tmp_path: Path, clusters: Clusters, cli: Run, **proxies: StrictProxy) -> Run:
    """A CLI whose config reaches the named sources through the given proxies (and the local
    cluster, as always, through the session's proxy)."""
    addresses = {"local": clusters.proxy.bootstrap}
    addresses.update({name: p.bootstrap for name, p in proxies.items()})
    path = write_config(tmp_path / "partsync.toml", clusters.brokers, addresses=addresses)

    def run(*args: str, **kw: Any) -> CliResult:
        return cli("--config", str(path), *args, **kw)

    return run


def _batches_of(clusters: Clusters, name: str, topic: str) -> list[tuple[int, int]]:
    return [(b.base_offset, b.last_offset) for b in fetch_batches(clusters[name], topic, 0)]


# --------------------------------------------------------------------------------------------
# Rejected appends
# --------------------------------------------------------------------------------------------


def test_a_rejected_append_holds_back_the_next_batch(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Kafka rejects the fourth append (NOT_ENOUGH_REPLICAS, retriable) and answers late. With
    no producer state for the partition, a batch sent behind it would land at its offset: none
    is sent until the answer (the autouse check), and the partition is retried in the run."""
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 1)
    create_topic(local, topic, 1)
    _many_batches(a, topic, 600, seed=1)
    assert len(_batches_of(clusters, "a", topic)) >= 8
    clusters.kafka.reject_produce(topic, 0, NOT_ENOUGH_REPLICAS, skip=3, hold_s=0.5)

    r = _sync(psync, topic)

    assert r.code == 0, r.stdout + r.stderr
    assert clusters.kafka.injected[f"produce-error-{NOT_ENOUGH_REPLICAS}"] == 1
    assert by_partition(r.json, topic)[0]["status"] == "synced"
    assert_partitions_identical(a, local, topic, 1)


def test_a_batch_the_broker_refuses_stops_the_partition_before_it(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """INVALID_RECORD is not retriable: the partition is unsafe at the refused batch's offset,
    with everything before it copied and nothing after it."""
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 1)
    create_topic(local, topic, 1)
    _many_batches(a, topic, 400, seed=2)
    third = _batches_of(clusters, "a", topic)[2][0]
    clusters.kafka.reject_produce(topic, 0, INVALID_RECORD, skip=2)

    r = _sync(psync, topic)

    assert r.code == 3, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "unsafe" and e["local_end_after"] == third, e
    assert "INVALID_RECORD" in e["reason"] and f"offset {third}" in e["reason"], e["reason"]
    assert ends(clusters["local"], topic, 1) == {0: third}
    assert_prefix_of(a, local, topic, 0, third)


# --------------------------------------------------------------------------------------------
# A local high watermark below the log end
# --------------------------------------------------------------------------------------------


def _synced_then_behind(clusters: Clusters, psync: Run, topic: str, more: int) -> None:
    """Local and source a hold the same 100 offsets; then a gets ``more``."""
    a = clusters.bootstrap("a")
    create_topic(a, topic, 1)
    create_topic(clusters.bootstrap("local"), topic, 1)
    _many_batches(a, topic, 100, seed=3)
    assert _sync(psync, topic).code == 0
    _many_batches(a, topic, more, seed=4)


def test_a_local_high_watermark_below_the_log_end_is_waited_for(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """While the last 30 local offsets are not replicated (HW = LEO - 30) the next append would
    land at the log end, not at the high watermark: partsync waits until HW reaches LEO."""
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    _synced_then_behind(clusters, psync, topic, 200)
    clusters.kafka.lag_high_watermark(topic, 0, 30, seconds=2.0)

    r = _sync(psync, topic)

    assert r.code == 0, r.stdout + r.stderr
    assert clusters.kafka.injected["lagged-hw"] > 0
    assert_partitions_identical(a, local, topic, 1)


def test_a_local_high_watermark_that_stays_below_the_log_end_fails_retriably(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    _synced_then_behind(clusters, psync, topic, 100)
    clusters.kafka.lag_high_watermark(topic, 0, 30)

    r = _sync(psync, topic, "--replication-wait", "1", "--retries", "0")

    assert r.code == 1, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "error" and e["local_end_after"] == 100, e
    assert "high watermark 70 is below the log end 100" in e["reason"], e["reason"]
    assert ends(clusters["local"], topic, 1) == {0: 100}


# --------------------------------------------------------------------------------------------
# Throttling and moved leaders
# --------------------------------------------------------------------------------------------


def test_throttled_fetches_are_waited_out(
    clusters: Clusters,
    cli: Run,
    topic: str,
    tmp_path: Path,
    strict_proxy: Callable[..., StrictProxy],  # noqa: F811
) -> None:
    """A source over its quota answers fetches at once with no partitions and a throttle time
    (KIP-219): partsync waits it out and goes on, within one round."""
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 2)
    create_topic(local, topic, 2)
    for p in range(2):
        _many_batches(a, topic, 300, seed=10 + p, partition=p)
    source = strict_proxy(a)
    source.kafka.throttle_fetches(12, throttle_ms=150)

    r = _via(tmp_path, clusters, cli, a=source)(
        "sync", "--topic", topic, "--sources", "a", "--json", "--retries", "0"
    )

    assert r.code == 0, r.stdout + r.stderr
    assert source.kafka.injected["fetch-throttled"] == 12
    assert_partitions_identical(a, local, topic, 2)


def test_partitions_copied_at_once_share_one_fetch_connection_per_source_broker(
    clusters: Clusters,
    cli: Run,
    topic: str,
    tmp_path: Path,
    strict_proxy: Callable[..., StrictProxy],  # noqa: F811
) -> None:
    """Issue 15 goal 2: the partitions being copied fetch through one lane per source broker
    (many partitions per Fetch request), not a connection each."""
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 16)
    create_topic(local, topic, 16)
    for p in range(16):
        _many_batches(a, topic, 100, seed=20 + p, partition=p)
    source = strict_proxy(a)

    r = _via(tmp_path, clusters, cli, a=source)(
        "sync", "--topic", topic, "--sources", "a", "--json", "--parallelism", "16"
    )

    assert r.code == 0, r.stdout + r.stderr
    # Bootstrap and metadata, the leader's shared connection (bounds), one fetch lane.
    assert source.connections_made <= 4, source.connections_made
    assert sum(source.fetch_partitions) >= 16
    assert_partitions_identical(a, local, topic, 16)


def test_partitions_look_up_their_fencing_coordinators_together(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Issue 15 goal 2: each partition fences under a transactional id of its own, and the
    coordinators of all of them are looked up in one FindCoordinator (KIP-699 takes many keys),
    not one request per partition; every partition is still fenced (one InitProducerId each)."""
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    # Kafka creates its transaction log on the first lookup and answers COORDINATOR_NOT_AVAILABLE
    # meanwhile; the lookup then asks again, and the count below would include those retries. A
    # sync before makes sure the log exists, so the count is the lookups of this sync alone.
    warm = topic + "-warm"
    for b in (a, local):
        create_topic(b, warm, 1)
    produce(a, warm, records(1, seed=39), partition=0)
    assert psync("sync", "--topic", warm, "--sources", "a", "--no-group").code == 0
    create_topic(a, topic, 16)
    create_topic(local, topic, 16)
    for p in range(16):
        produce(a, topic, records(3, seed=40 + p), partition=p)
    proxy = clusters.proxy
    find0, init0 = proxy.requests["FindCoordinator"], proxy.requests["InitProducerId"]

    r = psync(
        "sync", "--topic", topic, "--sources", "a", "--json", "--no-group", "--parallelism", "4"
    )

    assert r.code == 0, r.stdout + r.stderr
    assert proxy.requests["FindCoordinator"] - find0 <= 2, dict(proxy.requests)
    assert proxy.requests["InitProducerId"] - init0 >= 16, dict(proxy.requests)
    assert_partitions_identical(a, local, topic, 16)


def test_not_leader_answers_are_retried_after_a_metadata_refresh(
    clusters: Clusters,
    cli: Run,
    topic: str,
    tmp_path: Path,
    strict_proxy: Callable[..., StrictProxy],  # noqa: F811
) -> None:
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 1)
    create_topic(local, topic, 1)
    _many_batches(a, topic, 300, seed=12)
    source = strict_proxy(a)
    psync = _via(tmp_path, clusters, cli, a=source)
    # The local leader "moves" on the second append; the source's on its first copy fetch.
    clusters.kafka.not_leader(topic, 0, "produce")
    clusters.kafka.reject_produce(topic, 0, 6, skip=1, hold_s=0.0)
    source.kafka.not_leader(topic, 0, "fetch")
    metadata_before = clusters.proxy.requests["Metadata"]

    r = psync("sync", "--topic", topic, "--sources", "a", "--json")

    assert r.code == 0, r.stdout + r.stderr
    assert clusters.kafka.injected["produce-error-6"] == 2
    assert source.kafka.injected["fetch-not-leader"] == 1
    assert clusters.proxy.requests["Metadata"] > metadata_before + 1
    assert_partitions_identical(a, local, topic, 1)


# --------------------------------------------------------------------------------------------
# What the sources no longer hold
# --------------------------------------------------------------------------------------------


def test_compaction_removed_the_batch_the_local_log_ends_with(
    clusters: Clusters,
    cli: Run,
    topic: str,
    tmp_path: Path,
    strict_proxy: Callable[..., StrictProxy],  # noqa: F811
) -> None:
    """The source's log cleaner removed the batch holding the local log's last offset: the
    histories cannot be compared there, which no retry changes (unsafe, not an error)."""
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 1)
    create_topic(local, topic, 1)
    _many_batches(a, topic, 200, seed=13)
    source = strict_proxy(a)
    psync = _via(tmp_path, clusters, cli, a=source)
    assert psync("sync", "--topic", topic, "--sources", "a").code == 0
    end = ends(clusters["local"], topic, 1)[0]
    _many_batches(a, topic, 100, seed=14)
    base, _last = next(b for b in _batches_of(clusters, "a", topic) if b[1] == end - 1)
    source.kafka.hide_offsets(topic, 0, base, end)

    r = psync("sync", "--topic", topic, "--sources", "a", "--json")

    assert r.code == 3, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "unsafe" and e["local_end_after"] == end, e
    assert f"no batch holds offset {end - 1}" in e["reason"], e["reason"]
    assert "compaction" in e["reason"] and "cluster a" in e["reason"], e["reason"]
    assert source.kafka.injected["hidden-batch"] > 0
    assert ends(clusters["local"], topic, 1) == {0: end}


def test_a_copy_that_no_source_can_check_says_so(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Retention moved the only source's log start up to the local log end: the copy goes on
    from there, and the result says that the local history was not compared."""
    if clusters.kind("b") == "tansu":
        pytest.skip("Tansu has no DeleteRecords to move the log start")
    b, local = clusters.bootstrap("b"), clusters.bootstrap("local")
    create_topic(b, topic, 1)
    create_topic(local, topic, 1)
    produce(b, topic, records(100, seed=15), partition=0)
    assert _sync(psync, topic, sources="b").code == 0
    delete_records(b, topic, 0, 100)
    produce(b, topic, records(50, seed=16), partition=0)

    r = _sync(psync, topic, sources="b")

    assert r.code == 0, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "synced" and e["local_end_after"] == 150, e
    assert any("no source still holds offset 99" in n for n in e["notes"]), e
    text = _sync(psync, topic, sources="b")
    assert text.code == 0 and by_partition(text.json, topic)[0]["notes"] == []


# --------------------------------------------------------------------------------------------
# The proxy refuses what Kafka refuses
# --------------------------------------------------------------------------------------------


def _produce_through(proxy: StrictProxy, topic: str, batch: bytes) -> int:
    host, port = proxy.bootstrap.rsplit(":", 1)
    with Connection(host, int(port), cluster="proxy") as conn:
        conn.send_produce(topic, {0: batch}, acks=-1)
        return conn.receive_produce()[0].error_code


@pytest.mark.parametrize(
    ("case", "code"),
    [("log-append-time", 32), ("old-magic", 87), ("too-old", 32), ("too-new", 32)],
)
def test_the_proxy_refuses_what_kafka_refuses_without_appending_it(
    clusters: Clusters, topic: str, case: str, code: int
) -> None:
    local = clusters.bootstrap("local")
    create_topic(local, topic, 1)
    clusters.kafka.timestamp_limits(topic, before_max_ms=86_400_000, after_max_ms=3_600_000)
    now = 1_000 * int(__import__("time").time())
    recs = [raw_record(d, b"k%d" % d, b"v%d" % d) for d in range(3)]
    batch = {
        "log-append-time": lambda: raw_batch(recs, 2, attributes=0x08, base_timestamp=now),
        "old-magic": lambda: _with_magic(raw_batch(recs, 2, base_timestamp=now), 1),
        "too-old": lambda: raw_batch(recs, 2, base_timestamp=now - 2 * 86_400_000),
        "too-new": lambda: raw_batch(recs, 2, base_timestamp=now + 2 * 3_600_000),
    }[case]()

    assert _produce_through(clusters.proxy, topic, batch) == code
    assert ends(clusters["local"], topic, 1) == {0: 0}
    assert _produce_through(clusters.proxy, topic, raw_batch(recs, 2, base_timestamp=now)) == 0
    assert ends(clusters["local"], topic, 1) == {0: 3}
    clusters.proxy.violations.clear()  # the old magic is also a checker finding, as it should


def _with_magic(batch: bytes, magic: int) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">b", out, 16, magic)
    return bytes(out)


# --------------------------------------------------------------------------------------------
# Fencing that outlives transactional.id.expiration.ms
# --------------------------------------------------------------------------------------------


def test_renewing_a_fencing_identity_keeps_the_owner_and_refuses_a_stale_one(
    clusters: Clusters, topic: str
) -> None:
    """KIP-360: a renewal names the identity it holds; the coordinator bumps that identity's
    epoch, or refuses when another writer has initialised the transactional id since."""
    from partsync.copy.producer import open_producer, renew_producer
    from partsync.errors import FencedError
    from partsync.io.cluster import Cluster
    from tests.integration.sync_support import _ref

    create_topic(clusters.bootstrap("local"), topic, 1)
    with Cluster(_ref(clusters.bootstrap("local")), timeout=30) as local:
        first = open_producer(local, topic, 0)
        renewed = renew_producer(local, topic, 0, first)
        assert renewed.producer_id == first.producer_id
        assert renewed.epoch == first.epoch + 1
        newer = open_producer(local, topic, 0)  # another writer takes the partition over
        assert newer.epoch > renewed.epoch
        if not clusters.kind("local").startswith("kafka"):
            return  # noida and Tansu do not check the identity a renewal names; Kafka does
        with pytest.raises(FencedError, match="another writer initialised it since"):
            renew_producer(local, topic, 0, renewed)


def test_a_follow_session_renews_its_fencing_identity(
    clusters: Clusters, topic: str, tmp_path: Path
) -> None:
    """A follower that owns a partition for longer than --fencing-renew appends under new
    epochs of the same producer id, between rounds, and the copy stays identical."""
    import os
    import signal
    import subprocess
    import sys
    import time

    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 1)
    create_topic(local, topic, 1)
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
        "--follow",
        "--no-group",
        "--follow-wait-ms",
        "100",
        "--fencing-renew",
        "1",
    ]
    env = {k: v for k, v in os.environ.items() if k != "PARTSYNC_CONFIG"}
    log = (tmp_path / "follower.log").open("w")
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, env=env)
    try:
        total = 0
        for wave in range(4):
            _many_batches(a, topic, 50, seed=20 + wave)
            total += 50
            deadline = time.monotonic() + 60
            while ends(clusters["local"], topic, 1)[0] < total:
                assert proc.poll() is None, (tmp_path / "follower.log").read_text()
                assert time.monotonic() < deadline, "the follower did not catch up"
                time.sleep(0.1)
            time.sleep(1.2)  # older than --fencing-renew before the next wave
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
        log.close()
    assert code == 0, (tmp_path / "follower.log").read_text()
    ours = [b for b in clusters.proxy.produced if b.topic == topic]
    assert len({b.producer_id for b in ours}) == 1, {
        (b.producer_id, b.producer_epoch) for b in ours
    }
    assert len({b.producer_epoch for b in ours}) >= 3, sorted({b.producer_epoch for b in ours})
    assert_partitions_identical(a, local, topic, 1)
