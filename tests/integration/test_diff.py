"""``partsync diff`` against real brokers (the session's Tansu and noida processes).

Identical clusters are made with partsync itself (a sync copies batches shallowly); divergences
and different batch layouts are planted with hand-built batches (tests/unit/diffkit.py) put on a
cluster one Produce per batch, so every offset and batch boundary is known.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from partsync._kafka import Connection
from partsync.config import ClusterRef
from partsync.demo.brokers import Broker, free_port
from partsync.demo.data import COMPRESSIONS, create_topic, make_records, produce
from partsync.errors import ExitStatus
from partsync.io.pool import ClusterPool
from partsync.plan.diff_model import DiffOptions, DiffReport, DiffRequest, DiffStatus, Level
from partsync.run.diff import diff_partition, diff_topics
from partsync.run.planner import SyncRequest
from partsync.run.sync import run_sync
from tests.conftest import CliResult
from tests.unit import diffkit

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

LEVELS = [Level.BATCH, Level.RECORD]


# -- helpers -----------------------------------------------------------------------------------


def ref(name: str, broker: Broker | int) -> ClusterRef:
    port = broker if isinstance(broker, int) else broker.port
    return ClusterRef(name=name, bootstrap_servers=(("127.0.0.1", port),))


@pytest.fixture
def dcs(source_a: Broker, source_b: Broker, local_broker: Broker) -> dict[str, Broker]:
    """Three clusters of mixed kinds (by default Tansu, noida, noida)."""
    return {"dc1": source_a, "dc2": source_b, "dc3": local_broker}


def refs(dcs: dict[str, Broker], names: Sequence[str] | None = None) -> tuple[ClusterRef, ...]:
    return tuple(ref(n, dcs[n]) for n in (names or list(dcs)))


def create_everywhere(brokers: Sequence[Broker], topic: str, partitions: int = 1) -> None:
    for b in brokers:
        create_topic(b.bootstrap, topic, partitions)


def copy(topic: str, src: ClusterRef, dst: ClusterRef) -> None:
    """partsync sync: the way identical clusters are made."""
    with ClusterPool() as pool:
        report = run_sync(SyncRequest(topics=(topic,), sources=(src,), local=dst), pool)
    assert report.exit_status is ExitStatus.OK, report.to_dict()


def put_batches(broker: Broker, topic: str, batches: Sequence[bytes], partition: int = 0) -> None:
    """Append hand-built batches, one Produce request each (Kafka's one-batch-per-request rule)."""
    with Connection(broker.host, broker.port, cluster=broker.bootstrap) as conn:
        for raw in batches:
            conn.send_produce(topic, {partition: raw})
            got = conn.receive_produce()[partition]
            assert got.error_code == 0, got


def batches_of(recs: Sequence[diffkit.R], sizes: Sequence[int], codec: str = "none") -> list[bytes]:
    """Client batches (base offset 0) holding ``recs`` in batches of the given sizes."""
    out, pos = [], 0
    for size in sizes:
        if pos >= len(recs):
            break
        out.append(diffkit.make_batch(recs[pos : pos + size], codec=codec))
        pos += size
    assert pos >= len(recs)
    return out


def run(
    topic: str,
    clusters: Sequence[ClusterRef],
    level: Level = Level.BATCH,
    chunk_offsets: int = 10_000,
    partitions: frozenset[int] | None = None,
) -> DiffReport:
    req = DiffRequest(
        (topic,), tuple(clusters), partitions, DiffOptions(level=level, chunk_offsets=chunk_offsets)
    )
    with ClusterPool() as pool:
        return diff_topics(req, pool)


def only(report: DiffReport) -> dict[str, object]:
    (t,) = report.to_dict()["topics"]
    (p,) = t["partitions"]
    return dict(p)


# -- identical and lagging ---------------------------------------------------------------------


@pytest.mark.parametrize("codec", COMPRESSIONS)
def test_partsync_copies_are_identical_at_both_levels(
    dcs: dict[str, Broker], topic: str, codec: str
) -> None:
    create_everywhere(list(dcs.values()), topic, 2)
    produce(dcs["dc1"].bootstrap, topic, make_records(400, seed=1), compression=codec, partition=0)
    produce(dcs["dc1"].bootstrap, topic, make_records(150, seed=2), compression=codec, partition=1)
    r = refs(dcs)
    copy(topic, r[0], r[1])
    copy(topic, r[0], r[2])
    for level in LEVELS:
        report = run(topic, r, level, chunk_offsets=64)
        assert report.exit_status is ExitStatus.OK
        doc = report.to_dict()["topics"][0]
        assert doc["status"] == "identical"
        p0, p1 = doc["partitions"]
        assert p0["common_range"] == [0, 400] and p1["common_range"] == [0, 150]
        for p, hw in ((p0, 400), (p1, 150)):
            assert p["status"] == "identical" and p["first_divergent_offset"] is None
            assert p["disagreeing"] == [] and p["lag"] == {"dc1": 0, "dc2": 0, "dc3": 0}
            assert p["clusters"] == {n: {"log_start": 0, "high_watermark": hw} for n in dcs}
            assert all(n > 0 for n in p["bytes_read"].values())
        if level is Level.RECORD:
            assert p0["chunks_compared"] == 7  # 400 offsets in chunks of 64
        else:
            assert p0["chunks_compared"] >= 1  # one chunk per chunk holding a batch start


def test_lagging_clusters(dcs: dict[str, Broker], topic: str) -> None:
    create_everywhere(list(dcs.values()), topic)
    r = refs(dcs)
    produce(dcs["dc1"].bootstrap, topic, make_records(100, seed=1), partition=0)
    copy(topic, r[0], r[1])
    produce(dcs["dc1"].bootstrap, topic, make_records(30, seed=2), partition=0)
    copy(topic, r[0], r[2])
    produce(dcs["dc1"].bootstrap, topic, make_records(5, seed=3), partition=0)
    for level in LEVELS:
        report = run(topic, r, level)
        p = only(report)
        assert report.exit_status is ExitStatus.OK  # lag alone is fine
        assert p["status"] == "lagging"
        assert p["common_range"] == [0, 100]
        assert p["lag"] == {"dc1": 0, "dc2": 35, "dc3": 5}
        assert p["first_divergent_offset"] is None
        assert "dc2 by 35" in str(p["reason"])


def test_empty_and_disjoint_ranges_are_lag(dcs: dict[str, Broker], topic: str) -> None:
    create_everywhere([dcs["dc1"], dcs["dc2"]], topic)
    report = run(topic, refs(dcs, ["dc1", "dc2"]))
    assert only(report)["status"] == "identical" and only(report)["common_range"] == [0, 0]
    put_batches(dcs["dc2"], topic, batches_of(diffkit.records(4), [4]))
    p = only(run(topic, refs(dcs, ["dc1", "dc2"])))
    assert p["status"] == "lagging" and p["lag"] == {"dc1": 4, "dc2": 0}


# -- divergence ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", COMPRESSIONS)
def test_divergence_after_a_shared_prefix_is_found_exactly(
    dcs: dict[str, Broker], topic: str, codec: str
) -> None:
    create_everywhere(list(dcs.values()), topic)
    r = refs(dcs)
    put_batches(dcs["dc1"], topic, batches_of(diffkit.records(200, seed=1), [50] * 4, codec))
    copy(topic, r[0], r[1])
    copy(topic, r[0], r[2])
    good = diffkit.records(60, seed=2, start=200)
    bad = diffkit.records(60, seed=3, start=200)  # every value differs from offset 200 on
    put_batches(dcs["dc1"], topic, batches_of(good, [20] * 3, codec))
    put_batches(dcs["dc3"], topic, batches_of(good, [20] * 3, codec))
    put_batches(dcs["dc2"], topic, batches_of(bad, [20] * 3, codec))
    for level in LEVELS:
        report = run(topic, r, level, chunk_offsets=32)
        p = only(report)
        assert report.exit_status is ExitStatus.UNSAFE, (level, p)
        assert p["status"] == "divergent"
        assert p["first_divergent_offset"] == 200, (level, p["reason"])
        assert p["disagreeing"] == ["dc2"]  # the majority (dc1, dc3) agrees
        assert p["common_range"] == [0, 260]
        assert "value" in str(p["reason"]), p["reason"]


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_divergence_inside_a_batch_is_pinpointed(
    dcs: dict[str, Broker], topic: str, codec: str
) -> None:
    """Same batch boundaries, one record different: batch level opens the batch."""
    create_everywhere([dcs["dc1"], dcs["dc2"]], topic)
    recs = diffkit.records(100, seed=1)
    changed = list(recs)
    changed[67] = diffkit.R(recs[67].key, recs[67].value, (("seq", b"tampered"),), recs[67].ts)
    put_batches(dcs["dc1"], topic, batches_of(recs, [25] * 4, codec))
    put_batches(dcs["dc2"], topic, batches_of(changed, [25] * 4, codec))
    two = refs(dcs, ["dc1", "dc2"])
    for level in LEVELS:
        p = only(run(topic, two, level, chunk_offsets=10))
        assert p["status"] == "divergent" and p["first_divergent_offset"] == 67, (level, p)
        assert p["disagreeing"] == ["dc2"]  # two clusters: the one differing from the first listed
        assert "headers" in str(p["reason"])
    # Listing dc2 first makes it the reference.
    p = only(run(topic, tuple(reversed(two))))
    assert p["disagreeing"] == ["dc1"] and p["first_divergent_offset"] == 67


def test_same_records_in_different_batch_boundaries(dcs: dict[str, Broker], topic: str) -> None:
    create_everywhere([dcs["dc1"], dcs["dc2"]], topic)
    recs = diffkit.records(90, seed=4)
    put_batches(dcs["dc1"], topic, batches_of(recs, [10] * 9, "gzip"))
    put_batches(dcs["dc2"], topic, batches_of(recs, [10, 10, 7, 13, 50], "lz4"))
    two = refs(dcs, ["dc1", "dc2"])
    rec = run(topic, two, Level.RECORD, chunk_offsets=16)
    assert rec.exit_status is ExitStatus.OK and only(rec)["status"] == "identical"
    bat = run(topic, two, Level.BATCH, chunk_offsets=16)
    p = only(bat)
    assert bat.exit_status is ExitStatus.UNSAFE and p["status"] == "divergent"
    # The first two batches are equal but for their codec, the third has other boundaries.
    assert p["first_divergent_offset"] == 0
    assert "same records" in str(p["reason"]) and "codec gzip vs lz4" in str(p["reason"])


def test_boundaries_differing_are_explained(dcs: dict[str, Broker], topic: str) -> None:
    create_everywhere([dcs["dc1"], dcs["dc2"]], topic)
    recs = diffkit.records(40, seed=5)
    put_batches(dcs["dc1"], topic, batches_of(recs, [20, 20]))
    put_batches(dcs["dc2"], topic, batches_of(recs, [20, 5, 15]))
    p = only(run(topic, refs(dcs, ["dc1", "dc2"])))
    assert p["status"] == "divergent" and p["first_divergent_offset"] == 20
    assert "batch boundaries differ at offset 20" in str(p["reason"])
    assert "dc1 holds 20..39" in str(p["reason"]) and "dc2 holds 20..24" in str(p["reason"])
    assert "--level record" in str(p["reason"])


def test_divergence_deep_in_a_long_log(dcs: dict[str, Broker], topic: str) -> None:
    """Many chunks confirmed equal, then the divergent one; a small fetch size forces many
    fetches (and noida, which ignores it, sends everything at once)."""
    create_everywhere([dcs["dc1"], dcs["dc2"]], topic)
    recs = diffkit.records(3000, seed=6)
    changed = list(recs)
    changed[2345] = diffkit.R(b"other", recs[2345].value, recs[2345].headers, recs[2345].ts)
    put_batches(dcs["dc1"], topic, batches_of(recs, [100] * 30, "lz4"))
    put_batches(dcs["dc2"], topic, batches_of(changed, [100] * 30, "lz4"))
    two = refs(dcs, ["dc1", "dc2"])
    for level in LEVELS:
        opts = DiffOptions(level=level, chunk_offsets=250, fetch_bytes=4096)
        p = diff_partition(two, topic, 0, opts)
        assert p.status is DiffStatus.DIVERGENT and p.first_divergent_offset == 2345, p
        assert p.chunks == 9  # chunks 0..8 confirmed equal, chunk 9 opened
        assert "key" in str(p.reason)
    # Only a range that excludes it: identical (an engine may split a partition like this).
    p = diff_partition(two, topic, 0, DiffOptions(within=(0, 2300)))
    assert p.status is DiffStatus.IDENTICAL and p.common_range == (0, 3000)


# -- topic-level findings and failures --------------------------------------------------------


def test_partition_count_mismatch(dcs: dict[str, Broker], topic: str) -> None:
    create_topic(dcs["dc1"].bootstrap, topic, 2)
    create_topic(dcs["dc2"].bootstrap, topic, 3)
    report = run(topic, refs(dcs, ["dc1", "dc2"]))
    assert report.exit_status is ExitStatus.UNSAFE
    t = report.to_dict()["topics"][0]
    assert t["status"] == "divergent"
    assert "partition counts differ (dc1: 2, dc2: 3)" in t["reason"]
    assert t["partition_counts"] == {"dc1": 2, "dc2": 3}
    by_p = {p["partition"]: p for p in t["partitions"]}
    assert by_p[0]["status"] == by_p[1]["status"] == "identical"
    assert by_p[2]["status"] == "divergent" and by_p[2]["disagreeing"] == ["dc1"]
    assert "does not exist on dc1" in by_p[2]["reason"]


def test_topic_missing_on_one_cluster(dcs: dict[str, Broker], topic: str) -> None:
    create_topic(dcs["dc1"].bootstrap, topic, 1)
    report = run(topic, refs(dcs, ["dc1", "dc2"]))
    assert report.exit_status is ExitStatus.UNSAFE
    t = report.to_dict()["topics"][0]
    assert t["status"] == "divergent" and f"topic {topic} does not exist on dc2" in t["reason"]


def test_unreachable_cluster(dcs: dict[str, Broker], topic: str) -> None:
    create_topic(dcs["dc1"].bootstrap, topic, 2)
    dead = ref("dc9", free_port())
    report = run(topic, (ref("dc1", dcs["dc1"]), dead))
    assert report.exit_status is ExitStatus.FAILURE
    t = report.to_dict()["topics"][0]
    assert t["status"] == "error" and "cluster dc9 unreachable" in t["reason"]
    assert [p["status"] for p in t["partitions"]] == ["error", "error"]
    assert all(p["unreachable"] == ["dc9"] for p in t["partitions"])
    assert t["partitions"][0]["clusters"]["dc9"] == {"log_start": None, "high_watermark": None}


# -- the command line -------------------------------------------------------------------------


@pytest.fixture
def diff_cli(
    dcs: dict[str, Broker], tmp_path: Path, cli: Callable[..., CliResult]
) -> Callable[..., CliResult]:
    """``partsync --config FILE diff ARGS`` with the clusters named dc1, dc2, dc3 and a dead dc9."""
    lines = []
    for name, b in dcs.items():
        lines += [f"[clusters.{name}]", f'bootstrap_servers = ["{b.bootstrap}"]', ""]
    lines += ["[clusters.dc9]", f'bootstrap_servers = ["127.0.0.1:{free_port()}"]', ""]
    config = tmp_path / "partsync.toml"
    config.write_text("\n".join(lines))

    def run_cli(*args: str) -> CliResult:
        return cli("--config", str(config), "diff", *args)

    return run_cli


def test_cli_exit_codes_json_table_and_html(
    dcs: dict[str, Broker], topic: str, tmp_path: Path, diff_cli: Callable[..., CliResult]
) -> None:
    create_everywhere(list(dcs.values()), topic, 2)
    produce(
        dcs["dc1"].bootstrap, topic, make_records(50, seed=1), compression="snappy", partition=0
    )
    r = refs(dcs)
    copy(topic, r[0], r[1])
    copy(topic, r[0], r[2])

    ok = diff_cli("--topic", topic, "--clusters", "dc1,dc2,dc3", "--json")
    assert ok.code == 0, ok.stderr
    doc = ok.json
    assert doc["topics"][0]["topic"] == topic
    assert [p["status"] for p in doc["topics"][0]["partitions"]] == ["identical", "identical"]

    put_batches(dcs["dc1"], topic, batches_of(diffkit.records(10, seed=1), [10]), partition=1)
    put_batches(dcs["dc2"], topic, batches_of(diffkit.records(10, seed=2), [10]), partition=1)
    put_batches(dcs["dc3"], topic, batches_of(diffkit.records(10, seed=1), [10]), partition=1)
    html = tmp_path / "report.html"
    bad = diff_cli(
        "--topic",
        topic,
        "--clusters",
        "dc1,dc2,dc3",
        "--level",
        "record",
        "--chunk-offsets",
        "4",
        "--html",
        str(html),
    )
    assert bad.code == 3, bad.stderr
    assert "divergent" in bad.stdout and "identical" in bad.stdout
    assert "1 identical, 1 divergent" in bad.stderr
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "diverges at 0" in page and "dc2" in page
    assert "http://" not in page.replace("http://www.w3.org", "") and "<script" not in page

    jdoc = json.loads(
        diff_cli("--topic", topic, "--clusters", "dc1,dc2", "--json", "--partitions", "1").stdout
    )
    (p1,) = jdoc["topics"][0]["partitions"]
    assert (
        p1["partition"] == 1 and p1["first_divergent_offset"] == 0 and p1["disagreeing"] == ["dc2"]
    )


def test_cli_unreachable_and_usage_errors(
    dcs: dict[str, Broker], topic: str, diff_cli: Callable[..., CliResult]
) -> None:
    create_topic(dcs["dc1"].bootstrap, topic, 1)
    down = diff_cli("--topic", topic, "--clusters", "dc1,dc9")
    assert down.code == 1
    assert "unreachable" in down.stdout and "dc9" in down.stderr
    assert diff_cli("--topic", topic, "--clusters", "dc1").code == 2
    assert diff_cli("--topic", topic, "--clusters", "dc1,nope").code == 2
    assert diff_cli("--topic", topic, "--clusters", "dc1,dc2", "--partitions", "5").code == 2
    assert diff_cli("--topic", topic, "--clusters", "dc1,dc2", "--level", "deep").code == 2
