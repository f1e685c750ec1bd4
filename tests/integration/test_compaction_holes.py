"""``sync --compaction-holes fill`` (issue 17): offsets a compacted source no longer holds are
given hole records at exactly those offsets, in a compacted local topic; every other offset
holds the source's record, and an independent consumer sees both.

On the PyPI test brokers the source holds, produced raw, what Kafka's log cleaner leaves: a
batch with records missing inside it (its last offset kept) and an empty batch (kept for a
producer's last sequence). Real compaction on Apache Kafka is in the real-Kafka tier below.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from partsync.demo.brokers import Broker
from partsync.demo.data import Rec, create_topic, produce
from partsync.wire.holes import HOLE_HEADER, HOLE_KEY
from tests.conftest import CliResult
from tests.integration.sync_support import (
    Clusters,
    by_partition,
    check_plan,
    consumed,
    ends,
    fetch_batches,
    produce_raw,
    raw_batch,
    raw_record,
    records,
    topic_configs,
)

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

Run = Callable[..., CliResult]
COMPACT = {"cleanup.policy": "compact"}


def _holey_source(
    clusters: Clusters,
    topic: str,
    *,
    tail: bool = True,
    name: str = "a",
    kept: tuple[int, ...] = (0, 2, 4),
) -> tuple[int, set[int]]:
    """Source a: 30 records, a batch of five with deltas 1 and 3 cleaned away (offsets 30..34),
    and (``tail``) an empty batch of four (35..38) and 30 records. Returns the end and the hole
    offsets. (Without the tail the log ends in the holey batch: Tansu answers no fetch that
    starts inside an empty batch, where Kafka returns the batch.)"""
    a = clusters.bootstrap(name)
    create_topic(a, topic, 1, COMPACT)
    produce(a, topic, records(30, seed=1, null_keys_every=0), partition=0, compression="lz4")
    holey = raw_batch([raw_record(d, b"k%d" % d, b"v%d" % d) for d in kept], 4)
    assert produce_raw(clusters[name], topic, 0, holey) == 30
    if not tail:
        assert ends(clusters[name], topic, 1) == {0: 35}
        return 35, {31, 33}
    assert produce_raw(clusters[name], topic, 0, raw_batch([], 3)) == 35
    produce(a, topic, records(30, seed=2, null_keys_every=0), partition=0, compression="zstd")
    assert ends(clusters[name], topic, 1) == {0: 69}
    return 69, {31, 33, 35, 36, 37, 38}


def _require_holes_stored(clusters: Clusters) -> None:
    if clusters.kind("a") not in ("tansu", "noida"):
        pytest.skip("only the log cleaner makes holes in Kafka (the real-Kafka test below)")


def _require_compacted_local(clusters: Clusters, topic: str) -> None:
    from confluent_kafka import KafkaException

    try:
        policy = topic_configs(clusters.bootstrap("local"), topic).get("cleanup.policy")
    except KafkaException as e:
        pytest.skip(f"{clusters.kind('local')} cannot report topic configs: {e}")
    if policy != "compact":
        pytest.skip(f"{clusters.kind('local')} reports cleanup.policy={policy!r}")


def _assert_filled(clusters: Clusters, topic: str, holes: set[int], key: bytes) -> None:
    """Every offset of the local partition holds the source's record, or at a hole a hole
    record: a tombstone under ``key`` with the marking header."""
    src = {r[0]: r for r in consumed(clusters.bootstrap("a"), topic, 0)}
    got = consumed(clusters.bootstrap("local"), topic, 0)
    assert [r[0] for r in got] == list(range(len(got)))
    for r in got:
        offset, _type, _ts, k, value, headers = r
        if offset in holes:
            assert offset not in src
            assert (k, value) == (key, None) and (HOLE_HEADER, None) in headers, r
        else:
            assert r == src[offset]


def _assert_diff_agrees(
    psync: Run,
    topic: str,
    clusters: str,
    record_holes: dict[str, int],
    batch_holes: dict[str, int],
) -> None:
    """``diff`` sees the hole records as differences unless told they fill compaction holes:
    then identical at both levels, with the hole records (record level) and the source's
    batches read as filled (batch level) counted."""
    plain = psync("diff", "--topic", topic, "--clusters", clusters, "--level", "record", "--json")
    assert plain.code == 3, plain.stdout + plain.stderr
    for level, want in (("record", record_holes), ("batch", batch_holes)):
        r = psync(
            "diff",
            "--topic",
            topic,
            "--clusters",
            clusters,
            "--level",
            level,
            "--json",
            "--compaction-holes",
            "fill",
        )
        assert r.code == 0, (level, r.stdout + r.stderr)
        p = r.json["topics"][0]["partitions"][0]
        assert p["status"] == "identical" and p["holes"] == want, (level, p)
    text = psync("diff", "--topic", topic, "--clusters", clusters, "--compaction-holes", "fill")
    assert "compared as a mirror with filled holes holds them" in text.stderr, text.stderr


def _assert_scan_predicts(
    psync: Run, topic: str, sources: str, *, first_hole: int, holes: int, reencoded: int
) -> None:
    """``plan --scan`` says where a sync that refuses holes stops (exit 3), and counts the
    holes a fill sync fills and the batches it re-encodes, before anything is written."""
    refused = psync("plan", "--topic", topic, "--sources", sources, "--scan", "--json")
    assert refused.code == 3, refused.stdout + refused.stderr
    scan = check_plan(refused.json)[(topic, 0)]["scan"]
    assert scan["stop"]["refused"] and scan["stop"]["offset"] == first_hole, scan
    assert (scan["end"], scan["holes"]) == (first_hole, 0), scan  # copied up to there
    text = psync("plan", "--topic", topic, "--sources", sources, "--scan")
    assert f"a sync refuses the partition at offset {first_hole}" in text.stderr, text.stderr
    filled = psync(
        "plan",
        "--topic",
        topic,
        "--sources",
        sources,
        "--scan",
        "--json",
        "--compaction-holes",
        "fill",
    )
    assert filled.code == 0, filled.stdout + filled.stderr
    scan = check_plan(filled.json)[(topic, 0)]["scan"]
    assert (scan["holes"], scan["batches_with_holes"], scan["stop"]) == (holes, reencoded, None)


def test_holes_inside_batches_and_empty_batches_are_filled(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    _require_holes_stored(clusters)
    end, holes = _holey_source(clusters, topic)
    create_topic(clusters.bootstrap("local"), topic, 1, COMPACT)
    _require_compacted_local(clusters, topic)
    _assert_scan_predicts(psync, topic, "a", first_hole=30, holes=len(holes), reencoded=2)

    r = psync("sync", "--topic", topic, "--sources", "a", "--json", "--compaction-holes", "fill")

    assert r.code == 0, r.stdout + r.stderr
    e: dict[str, Any] = by_partition(r.json, topic)[0]
    assert e["status"] == "synced" and e["local_end_after"] == end, e
    assert (e["holes_filled"], e["batches_reencoded"]) == (len(holes), 2), e
    _assert_filled(clusters, topic, holes, HOLE_KEY)
    _assert_diff_agrees(psync, topic, "a,local", {"local": len(holes)}, {"a": 2})
    # Run again: the local log's last batch is the source's, nothing to do.
    again = psync(
        "sync", "--topic", topic, "--sources", "a", "--json", "--compaction-holes", "fill"
    )
    assert again.code == 0 and by_partition(again.json, topic)[0]["status"] == "in-sync"


def test_a_copy_that_ended_with_a_filled_batch_continues(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """The local log ends with a re-encoded batch (hole records, not the source's bytes): the
    next run's check of the local boundary compares records, not bytes, and goes on. The hole
    key is the user's."""
    _require_holes_stored(clusters)
    end, holes = _holey_source(clusters, topic, tail=False)
    create_topic(clusters.bootstrap("local"), topic, 1, COMPACT)
    _require_compacted_local(clusters, topic)
    fill = ("--compaction-holes", "fill", "--hole-key", "gap")
    first = psync("sync", "--topic", topic, "--sources", "a", "--json", *fill)
    assert first.code == 0, first.stdout + first.stderr
    assert ends(clusters["local"], topic, 1) == {0: end}
    produce(clusters.bootstrap("a"), topic, records(5, seed=3, null_keys_every=0), partition=0)

    # Without filling, the two batches differ byte for byte: refused, saying why.
    plain = psync("sync", "--topic", topic, "--sources", "a", "--json")
    assert plain.code == 3, plain.stdout + plain.stderr
    reason = by_partition(plain.json, topic)[0]["reason"]
    assert "hole records" in reason and "--compaction-holes fill" in reason, reason
    assert ends(clusters["local"], topic, 1) == {0: end}

    second = psync("sync", "--topic", topic, "--sources", "a", "--json", *fill)
    assert second.code == 0, second.stdout + second.stderr
    assert by_partition(second.json, topic)[0]["local_end_after"] == end + 5
    _assert_filled(clusters, topic, holes, b"gap")


def test_two_sources_compacted_differently_serve_one_filled_copy(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Sources a and b hold the same log, but b's cleaner has removed one record fewer from
    the batch at 30..34. Chunks of 5 offsets alternate between them: a serves 30..34, and b's
    piece from 35 is checked against it, b's copy of that batch differing byte for byte but
    agreeing record by record where both hold one."""
    _require_holes_stored(clusters)
    if clusters.kind("b") not in ("tansu", "noida"):
        pytest.skip("only the log cleaner makes holes in Kafka")
    end, holes = _holey_source(clusters, topic)
    assert _holey_source(clusters, topic, name="b", kept=(0, 2, 3, 4))[0] == end
    create_topic(clusters.bootstrap("local"), topic, 1, COMPACT)
    _require_compacted_local(clusters, topic)

    r = psync(
        "sync",
        "--topic",
        topic,
        "--sources",
        "a,b",
        "--json",
        "--chunk-offsets",
        "5",
        "--compaction-holes",
        "fill",
    )

    assert r.code == 0, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "synced" and e["local_end_after"] == end, e
    assert set(e["bytes_by_source"]) == {"a", "b"}, e
    assert e["holes_filled"] == len(holes), e  # a's copy of 30..34
    _assert_filled(clusters, topic, holes, HOLE_KEY)
    # Without filling, the copy stops at the first hole.
    other = topic + "-plain"
    _holey_source(clusters, other)
    _holey_source(clusters, other, name="b", kept=(0, 2, 3, 4))
    create_topic(clusters.bootstrap("local"), other, 1, COMPACT)
    plain = psync("sync", "--topic", other, "--sources", "a,b", "--json", "--chunk-offsets", "5")
    assert plain.code == 3, plain.stdout + plain.stderr
    assert by_partition(plain.json, other)[0]["local_end_after"] == 30


def test_filling_needs_a_compacted_local_topic(clusters: Clusters, psync: Run, topic: str) -> None:
    _require_holes_stored(clusters)
    _end, _holes = _holey_source(clusters, topic)
    create_topic(clusters.bootstrap("local"), topic, 1)

    r = psync("sync", "--topic", topic, "--sources", "a", "--json", "--compaction-holes", "fill")

    assert r.code == 3, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "unsafe" and e["local_end_after"] == 30, e
    assert "needs a compacted local topic" in e["reason"] and "offset 30" in e["reason"], e
    assert ends(clusters["local"], topic, 1) == {0: 30}


@pytest.mark.kafka_only
def test_a_topic_kafka_compacted_is_mirrored_with_its_holes_filled(
    broker_factory: Callable[[str], Broker], tmp_path: Path, topic: str, cli: Run
) -> None:
    """Apache Kafka's own log cleaner makes the holes: records superseded by later ones with
    the same key are removed from closed segments (small segment.ms, any dirty ratio), in
    batches of several codecs. The mirror holds every record the source still has at its
    offset and a hole record everywhere else."""
    source, local = broker_factory("a"), broker_factory("local")
    create_topic(
        source.bootstrap,
        topic,
        1,
        {
            **COMPACT,
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "600000",
        },
    )
    # (keys, codec, idempotent): round 0 loses 15 records inside its batch; round 1 all of
    # its records, and Kafka keeps its batch empty (an idempotent producer's last batch);
    # round 2 all of its records, and its batch goes (a plain producer): a hole between
    # batches. Rounds 3 and 4 supersede them; round 5 rolls round 4's segment.
    rounds = [
        (range(20), "lz4", True),
        (range(40, 45), "zstd", True),
        (range(50, 55), "gzip", False),
        ([*range(10), *range(40, 45), *range(50, 55)], "snappy", True),
        (range(10, 15), "none", True),
        (range(60, 65), "lz4", True),
    ]
    for n, (keys, codec, idempotent) in enumerate(rounds):
        recs = [
            Rec(
                key=b"key-%d" % k,
                value=b"round %d key %d " % (n, k) * 8,
                timestamp_ms=1_700_000_000_000 + 1000 * n + k,
            )
            for k in keys
        ]
        produce(
            source.bootstrap, topic, recs, partition=0, compression=codec, idempotent=idempotent
        )
        time.sleep(0.3)  # the next append rolls the segment (segment.ms)
    end, removed = sum(len(r[0]) for r in rounds), 25
    held: set[int] = set()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # until the cleaner has removed the superseded
        held = {r[0] for r in consumed(source.bootstrap, topic, 0)}
        if len(held) == end - removed:
            break
        time.sleep(0.5)
    assert len(held) == end - removed, f"Kafka's cleaner left {len(held)} of {end} records"
    stored = [
        (b.base_offset, b.last_offset, b.record_count) for b in fetch_batches(source, topic, 0)
    ]
    # Each kind of hole, as Kafka's cleaner left it.
    assert (0, 19, 5) in stored and (20, 24, 0) in stored, stored
    assert not any(base <= 25 <= last for base, last, _n in stored), stored
    create_topic(local.bootstrap, topic, 1, COMPACT)  # default segments: not cleaned meanwhile
    config = tmp_path / "partsync.toml"
    config.write_text(
        f'local = "local"\n[clusters.a]\nbootstrap_servers = ["{source.bootstrap}"]'
        f'\n[clusters.local]\nbootstrap_servers = ["{local.bootstrap}"]\n'
    )
    _assert_scan_predicts(
        lambda *a: cli("--config", str(config), *a),
        topic,
        "a",
        first_hole=0,
        holes=removed,
        reencoded=2,
    )

    r = cli(
        "--config",
        str(config),
        "sync",
        "--topic",
        topic,
        "--sources",
        "a",
        "--json",
        "--compaction-holes",
        "fill",
    )

    assert r.code == 0, r.stdout + r.stderr
    e = r.json["topics"][0]["partitions"][0]
    assert e["status"] == "synced" and e["local_end_after"] == end, e
    assert (e["holes_filled"], e["batches_reencoded"]) == (removed, 2), e
    src = {r[0]: r for r in consumed(source.bootstrap, topic, 0)}
    got = consumed(local.bootstrap, topic, 0)
    assert [r[0] for r in got] == list(range(end))
    for rec in got:
        if rec[0] in src:
            assert rec == src[rec[0]]
        else:
            assert rec[3:5] == (HOLE_KEY, None) and (HOLE_HEADER, None) in rec[5], rec
    # The source's first batch and its empty one re-encoded, the removed one as a hole batch.
    _assert_diff_agrees(
        lambda *a: cli("--config", str(config), *a), topic, "a,local", {"local": removed}, {"a": 3}
    )


def test_check_says_whether_the_local_topic_can_take_hole_records(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    create_topic(clusters.bootstrap("a"), topic, 1, COMPACT)
    create_topic(clusters.bootstrap("local"), topic, 1)
    other = topic + "-compacted"
    create_topic(clusters.bootstrap("a"), other, 1, COMPACT)
    create_topic(clusters.bootstrap("local"), other, 1, COMPACT)
    _require_compacted_local(clusters, other)
    fill = ("--compaction-holes", "fill", "--hole-key", "gap", "--no-group", "--json")

    r = psync("check", "--topic", topic, "--sources", "a", *fill)

    assert r.code == 1, r.stdout + r.stderr
    found = {
        (f["subject"], f["need"]): f
        for c in r.json["clusters"]
        if c["cluster"] == "local"
        for f in c["findings"]
    }
    policy = found[(f"topic {topic}", "cleanup.policy")]
    assert policy["verdict"] == "missing" and "compacted local topic" in policy["detail"]
    ok = psync("check", "--topic", other, "--sources", "a", *fill)
    assert ok.code == 0, ok.stdout + ok.stderr
