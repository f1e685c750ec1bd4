"""Every refusal of the core sync: exit 3, status ``unsafe`` with a reason that says where, and
nothing written to the refused partition (its records and end are as before).

Cases a well-behaved client cannot produce (compaction holes, a control batch at the next offset)
are built as raw batches and appended to a source; both test brokers accept them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from partsync._kafka import Connection
from partsync.demo.data import assert_partitions_identical, create_topic, produce
from partsync.plan.topic_rules import UNLIMITED_MS
from tests.conftest import CliResult
from tests.integration.sync_support import (
    CONTROL_ATTRIBUTES,
    Clusters,
    append_copies,
    assert_prefix_of,
    by_partition,
    check_plan,
    consumed,
    delete_records,
    ends,
    fetch_batches,
    produce_raw,
    produce_transactional,
    raw_batch,
    raw_record,
    records,
    topic_configs,
    topic_partitions,
    try_produce_raw,
)

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

Run = Callable[..., CliResult]


def _sync(psync: Run, topic: str, sources: str = "a", *args: str) -> CliResult:
    return psync("sync", "--topic", topic, "--sources", sources, "--json", *args)


def _snapshot(clusters: Clusters, topic: str, partitions: int) -> dict[int, list[Any]]:
    return {p: consumed(clusters.bootstrap("local"), topic, p) for p in range(partitions)}


def _refused(r: CliResult, topic: str, partition: int, end: int, *named: str) -> dict[str, Any]:
    """Exit 3, the partition unsafe at ``end`` with nothing copied, the reason saying where (a
    cluster, the topic and partition, an offset; docs/cli.md) and naming each of ``named``."""
    assert r.code == 3, f"exit {r.code}\n{r.stdout}\n{r.stderr}"
    e = by_partition(r.json, topic)[partition]
    assert e["status"] == "unsafe", e
    assert e["local_end_before"] == e["local_end_after"] == end, e
    assert e["batches"] == e["bytes"] == 0 and e["bytes_by_source"] == {}, e
    assert re.search(r"\bcluster \S+", e["reason"]), f"no cluster named: {e['reason']}"
    assert f"topic {topic} partition {partition}" in e["reason"], e["reason"]
    assert re.search(r"\boffset \d+", e["reason"]), f"no offset named: {e['reason']}"
    for word in named:
        assert re.search(rf"(?<![\w.]){re.escape(word)}(?![\w])", e["reason"]), (
            f"reason does not name {word!r}: {e['reason']}"
        )
    return e


def _require(clusters: Clusters, name: str, *kinds: str, why: str) -> None:
    if clusters.kind(name) not in kinds:
        pytest.skip(f"cluster {name} is {clusters.kind(name)}: {why}")


def _require_config(clusters: Clusters, topic: str, key: str, value: str) -> None:
    """partsync can only honour a local topic config the broker reports (DescribeConfigs)."""
    from confluent_kafka import KafkaException

    try:
        reported = topic_configs(clusters.bootstrap("local"), topic).get(key)
    except KafkaException as e:  # a broker that drops the connection on DescribeConfigs
        pytest.skip(f"{clusters.kind('local')} cannot report topic configs: {e}")
    if reported != value:
        pytest.skip(f"{clusters.kind('local')} reports {key}={reported!r}, not {value!r}")


# --------------------------------------------------------------------------------------------
# Whole-topic refusals
# --------------------------------------------------------------------------------------------


def test_partition_count_differs_from_local(clusters: Clusters, psync: Run, topic: str) -> None:
    create_topic(clusters.bootstrap("a"), topic, 2)
    create_topic(clusters.bootstrap("local"), topic, 3)
    produce(clusters.bootstrap("a"), topic, records(100, seed=1), partition=0)

    r = _sync(psync, topic)

    assert r.code == 3, r.stderr
    [entry] = by_partition(r.json, topic).values()  # one entry: the whole topic is refused
    assert entry["partition"] == -1 and entry["status"] == "unsafe"
    assert "partition counts differ" in entry["reason"]
    assert "local local has 3" in entry["reason"] and "sources have 2" in entry["reason"]
    assert ends(clusters["local"], topic, 3) == {0: 0, 1: 0, 2: 0}
    plan = psync("plan", "--topic", topic, "--sources", "a", "--json")
    assert plan.code == 3 and "partition counts differ" in plan.json["topics"][0]["refused"]


def test_a_whole_topic_row_shows_no_ends_and_its_warnings_come_first(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """A topic failed as a whole (on no source) is one row without local end or target (it
    showed 0 and 0 while the local topic held data), and the warning that explains it comes
    before the error line (it came after)."""
    create_topic(clusters.bootstrap("local"), topic, 1)
    produce(clusters.bootstrap("local"), topic, records(30, seed=1), partition=0)

    r = psync("sync", "--topic", topic, "--sources", "a")

    assert r.code == 1, r.stdout + r.stderr
    [row] = [line for line in r.stdout.splitlines() if "error" in line]
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[1:5] == ["*", "error", "-", "-"], r.stdout
    said = r.stderr.splitlines()
    warned = next(i for i, line in enumerate(said) if line.startswith("warning:"))
    failed = next(i for i, line in enumerate(said) if line.startswith("error:"))
    assert warned < failed and "does not exist on source a" in said[warned], r.stderr


def test_partition_count_differs_between_sources(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    create_topic(clusters.bootstrap("a"), topic, 2)
    create_topic(clusters.bootstrap("b"), topic, 3)
    create_topic(clusters.bootstrap("local"), topic, 2)
    produce(clusters.bootstrap("a"), topic, records(100, seed=1), partition=0)

    r = _sync(psync, topic, "a,b")

    assert r.code == 3, r.stderr
    [entry] = by_partition(r.json, topic).values()
    assert entry["partition"] == -1 and entry["status"] == "unsafe"
    assert "a: 2" in entry["reason"] and "b: 3" in entry["reason"], entry
    assert ends(clusters["local"], topic, 2) == {0: 0, 1: 0}


def test_local_topic_that_recompresses(clusters: Clusters, psync: Run, topic: str) -> None:
    """compression.type=gzip locally: lz4 batches would be recompressed (refused), gzip batches
    are stored as they are (copied)."""
    local = clusters.bootstrap("local")
    create_topic(clusters.bootstrap("a"), topic, 2)
    create_topic(local, topic, 2, {"compression.type": "gzip"})
    _require_config(clusters, topic, "compression.type", "gzip")
    produce(clusters.bootstrap("a"), topic, records(300, seed=1), compression="lz4", partition=0)
    produce(clusters.bootstrap("a"), topic, records(300, seed=2), compression="gzip", partition=1)

    r = _sync(psync, topic)

    e = _refused(r, topic, 0, 0, "compression.type=gzip", "lz4", "offset 0", "partition 0")
    assert "recompress" in e["reason"]
    assert by_partition(r.json, topic)[1]["status"] == "synced"
    assert ends(clusters["local"], topic, 2)[0] == 0
    assert_partitions_identical(clusters.bootstrap("a"), local, topic, [1])


def test_local_topic_with_log_append_time(clusters: Clusters, psync: Run, topic: str) -> None:
    local = clusters.bootstrap("local")
    create_topic(clusters.bootstrap("a"), topic, 2)
    create_topic(local, topic, 2, {"message.timestamp.type": "LogAppendTime"})
    _require_config(clusters, topic, "message.timestamp.type", "LogAppendTime")
    for p in range(2):
        produce(clusters.bootstrap("a"), topic, records(100, seed=p), partition=p)

    r = _sync(psync, topic)

    for p in range(2):
        _refused(
            r, topic, p, 0, "message.timestamp.type=LogAppendTime", "cluster local", "offset 0"
        )
    assert ends(clusters["local"], topic, 2) == {0: 0, 1: 0}


_DAY_MS = 86_400_000


def _now_ms() -> int:
    return int(time.time() * 1000)


def test_records_older_than_the_local_topics_before_max_ms(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Kafka rejects a batch older than message.timestamp.before.max.ms (INVALID_TIMESTAMP,
    which no retry fixes): the copy stops before it, with the limit and the offset named."""
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 1)
    create_topic(local, topic, 1, {"message.timestamp.before.max.ms": str(_DAY_MS)})
    _require_config(clusters, topic, "message.timestamp.before.max.ms", str(_DAY_MS))
    produce(a, topic, records(60, seed=1, base_timestamp_ms=_now_ms()), partition=0)
    old = _now_ms() - 30 * _DAY_MS
    produce(a, topic, records(40, seed=2, base_timestamp_ms=old), partition=0)

    _stop_then_refuse(
        clusters, psync, topic, "a", 60, "message.timestamp.before.max.ms=86400000", "offset 60"
    )


def test_records_from_the_future_beyond_the_local_topics_after_max_ms(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Kafka 4.0's default message.timestamp.after.max.ms is one hour: a source whose producers'
    clocks ran two hours ahead is refused before anything is written."""
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 1, {"message.timestamp.after.max.ms": str(UNLIMITED_MS)})
    create_topic(local, topic, 1, {"message.timestamp.after.max.ms": str(3_600_000)})
    _require_config(clusters, topic, "message.timestamp.after.max.ms", "3600000")
    ahead = _now_ms() + 2 * 3_600_000
    produce(a, topic, records(50, seed=1, base_timestamp_ms=ahead), partition=0)

    _refused(_sync(psync, topic), topic, 0, 0, "message.timestamp.after.max.ms=3600000")
    assert ends(clusters["local"], topic, 1) == {0: 0}


def test_keyless_records_for_a_compacted_local_topic(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Kafka rejects a record without a key on a compacted topic (INVALID_RECORD): refused
    before the batch is sent, naming the record's offset."""
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 1)
    create_topic(local, topic, 1, {"cleanup.policy": "compact"})
    _require_config(clusters, topic, "cleanup.policy", "compact")
    produce(a, topic, records(40, seed=1, null_keys_every=0), partition=0, compression="zstd")
    produce(a, topic, records(20, seed=2, null_keys_every=5), partition=0, compression="zstd")

    _stop_then_refuse(clusters, psync, topic, "a", 40, "offset 44", "without a key")


# --------------------------------------------------------------------------------------------
# Where the local log stands
# --------------------------------------------------------------------------------------------


def test_local_end_beyond_every_source(clusters: Clusters, psync: Run, topic: str) -> None:
    create_topic(clusters.bootstrap("a"), topic, 2)
    create_topic(clusters.bootstrap("b"), topic, 2)
    create_topic(clusters.bootstrap("local"), topic, 2)
    for p in range(2):
        produce(clusters.bootstrap("a"), topic, records(100, seed=p), partition=p)
    produce(clusters.bootstrap("b"), topic, records(120, seed=7), partition=0)
    produce(clusters.bootstrap("local"), topic, records(150, seed=9), partition=0)
    before = _snapshot(clusters, topic, 1)

    r = _sync(psync, topic, "a,b")

    _refused(r, topic, 0, 150, "cluster local", "offset 150", "120")
    assert by_partition(r.json, topic)[1]["status"] == "synced"  # the others are still synced
    assert _snapshot(clusters, topic, 1) == before
    assert_partitions_identical(clusters.bootstrap("a"), clusters.bootstrap("local"), topic, [1])


def test_divergent_local_history(clusters: Clusters, psync: Run, topic: str) -> None:
    create_topic(clusters.bootstrap("a"), topic, 1)
    create_topic(clusters.bootstrap("local"), topic, 1)
    produce(clusters.bootstrap("a"), topic, records(300, seed=1), partition=0)
    produce(clusters.bootstrap("local"), topic, records(50, seed=2), partition=0)
    before = _snapshot(clusters, topic, 1)

    r = _sync(psync, topic)

    e = _refused(r, topic, 0, 50, "cluster a", f"topic {topic} partition 0", "offset 49")
    assert "divergent" in e["reason"]
    assert _snapshot(clusters, topic, 1) == before


def test_a_foreign_write_with_equal_ends_is_refused_not_reported_in_sync(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Someone else's record took the offset the source's next record has: the ends agree, the
    histories do not. A run compares the last batches of every partition whose ends agree (all
    of them in one Fetch per leader) and refuses that one, naming where; the others are in
    sync."""
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 3)
    create_topic(local, topic, 3)
    for p in range(3):
        produce(a, topic, records(20, seed=p), partition=p)
    assert _sync(psync, topic).code == 0
    produce(local, topic, records(1, seed=40), partition=1)  # foreign, at offset 20
    produce(a, topic, records(1, seed=41), partition=1)  # the source's own offset 20
    before = _snapshot(clusters, topic, 3)

    r = _sync(psync, topic)

    e = _refused(r, topic, 1, 21, "cluster local", "offset 20")
    assert "divergent history: the local batch 20..20 differs from a's batch 20..20" in e["reason"]
    assert [by_partition(r.json, topic)[p]["status"] for p in (0, 2)] == ["in-sync", "in-sync"]
    assert _snapshot(clusters, topic, 3) == before


def test_source_log_start_beyond_local_end(clusters: Clusters, psync: Run, topic: str) -> None:
    """The local partition fell behind the source's retention: offsets in between are gone."""
    _require(clusters, "b", "noida", "kafka", why="DeleteRecords is needed to move the log start")
    b, local = clusters.bootstrap("b"), clusters.bootstrap("local")
    create_topic(b, topic, 1)
    create_topic(local, topic, 1)
    produce(b, topic, records(100, seed=1), partition=0)
    assert _sync(psync, topic, "b").code == 0
    produce(b, topic, records(200, seed=2), partition=0)
    delete_records(b, topic, 0, 200)
    before = _snapshot(clusters, topic, 1)

    r = _sync(psync, topic, "b")

    e = _refused(r, topic, 0, 100, "offset 100", "100..200", "b holds 200..300")
    assert "no source holds" in e["reason"]
    assert _snapshot(clusters, topic, 1) == before
    plan = check_plan(psync("plan", "--topic", topic, "--sources", "b", "--json").json)
    assert plan[(topic, 0)]["condition"] == "unsafe"


def test_source_log_start_beyond_local_end_served_by_another_source(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """b deleted the start of its log, a still has it: a serves that range, both the rest."""
    _require(clusters, "b", "noida", "kafka", why="DeleteRecords is needed to move the log start")
    a, b, local = (clusters.bootstrap(n) for n in ("a", "b", "local"))
    for bootstrap in (a, b, local):
        create_topic(bootstrap, topic, 1)
    produce(a, topic, records(600, seed=1), partition=0, batch_size=4096)
    assert psync("sync", "--topic", topic, "--sources", "a", "--local", "b").code == 0
    delete_records(b, topic, 0, 250)

    plan = check_plan(
        psync("plan", "--topic", topic, "--sources", "b,a", "--json", "--chunk-offsets", "100").json
    )[(topic, 0)]
    assert plan["sources"]["b"]["log_start"] == 250
    assert all(x["source"] == "a" for x in plan["ranges"] if x["start"] < 250)
    r = _sync(psync, topic, "b,a", "--chunk-offsets", "100")

    assert r.code == 0, r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "synced" and set(e["bytes_by_source"]) == {"a", "b"}, e
    assert_partitions_identical(a, local, topic, 1)


def test_source_log_start_beyond_local_end_with_no_other_holder(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Two sources, but neither holds the offsets just above the local end."""
    _require(clusters, "b", "noida", "kafka", why="DeleteRecords is needed to move the log start")
    a, b, local = (clusters.bootstrap(n) for n in ("a", "b", "local"))
    create_topic(a, topic, 1)
    create_topic(b, topic, 1)
    create_topic(local, topic, 1)
    produce(b, topic, records(300, seed=1), partition=0)
    delete_records(b, topic, 0, 120)
    produce(a, topic, records(80, seed=1), partition=0)  # a holds only 0..80: too short

    r = _sync(psync, topic, "a,b")

    e = _refused(r, topic, 0, 0, "80..120", "a holds 0..80", "b holds 120..300")
    assert "no source holds" in e["reason"], e
    assert ends(clusters["local"], topic, 1) == {0: 0}


# --------------------------------------------------------------------------------------------
# Batches no client append can reproduce
# --------------------------------------------------------------------------------------------


def _stop_then_refuse(
    clusters: Clusters,
    psync: Run,
    topic: str,
    source: str,
    at: int,
    *named: str,
    args: tuple[str, ...] = (),
) -> None:
    """The first sync copies up to ``at`` and stops there; a second one writes nothing."""
    r = _sync(psync, topic, source, *args)
    e = by_partition(r.json, topic)[0]
    assert r.code == 3, r.stderr
    assert e["status"] == "unsafe" and e["local_end_after"] == at, r.stdout
    assert_prefix_of(clusters.bootstrap(source), clusters.bootstrap("local"), topic, 0, at)
    before = _snapshot(clusters, topic, 1)

    again = _refused(_sync(psync, topic, source, *args), topic, 0, at, *named)

    assert again["reason"]
    assert _snapshot(clusters, topic, 1) == before


def test_batch_with_compaction_holes(clusters: Clusters, psync: Run, topic: str) -> None:
    # A client cannot produce a holey batch to Apache Kafka (INVALID_RECORD, see
    # test_real_kafka_refuses_what_the_checker_reports); Kafka's own holes come from the log
    # cleaner. The test brokers store what the cleaner would leave.
    _require(clusters, "a", "tansu", "noida", why="only the log cleaner makes holes in Kafka")
    a = clusters.bootstrap("a")
    create_topic(a, topic, 1)
    create_topic(clusters.bootstrap("local"), topic, 1)
    produce(a, topic, records(40, seed=1), partition=0)
    # Three records at offset deltas 0, 2, 4: what the log cleaner leaves of a five-record batch.
    holey = raw_batch([raw_record(d, b"k%d" % d, b"v%d" % d) for d in (0, 2, 4)], 4)
    assert produce_raw(clusters["a"], topic, 0, holey) == 40
    produce(a, topic, records(40, seed=2), partition=0)
    assert ends(clusters["a"], topic, 1) == {0: 85}

    _stop_then_refuse(clusters, psync, topic, "a", 40, "cluster a", "offset 40", "40..44")


def test_control_batch_at_the_next_offset(clusters: Clusters, psync: Run, topic: str) -> None:
    """A transaction marker with no transactional batch before it (as after a copy that ended
    at the marker) must not be appended: a client cannot write markers."""
    a = clusters.bootstrap("a")
    create_topic(a, topic, 1)
    create_topic(clusters.bootstrap("local"), topic, 1)
    produce(a, topic, records(30, seed=1), partition=0)
    commit_marker = raw_record(0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")
    res = try_produce_raw(
        clusters["a"],
        topic,
        0,
        raw_batch(
            [commit_marker], 0, attributes=CONTROL_ATTRIBUTES, producer_id=4242, producer_epoch=0
        ),
    )
    # Kafka refuses a client's control batch; of the test brokers only Tansu stores one.
    if res.error_code or not any(b.is_control for b in fetch_batches(clusters["a"], topic, 0)):
        pytest.skip(f"{clusters.kind('a')} does not store a control batch from a client ({res})")
    produce(a, topic, records(30, seed=2), partition=0)

    # Replayed (the default), the marker would be the local coordinator's, at offset 30.
    _stop_then_refuse(
        clusters,
        psync,
        topic,
        "a",
        30,
        "cluster a",
        "offset 30",
        "control batch",
        args=("--transactions", "refuse"),
    )


@pytest.mark.parametrize("source", ["a", "b"])
def test_transactional_batch(clusters: Clusters, psync: Run, topic: str, source: str) -> None:
    """Committed transaction on the source, with --transactions refuse: the copy stops before
    its first batch (replayed by default: test_transactions.py)."""
    bootstrap = clusters.bootstrap(source)
    create_topic(bootstrap, topic, 1)
    create_topic(clusters.bootstrap("local"), topic, 1)
    produce(bootstrap, topic, records(50, seed=1), partition=0)
    produce_transactional(bootstrap, topic, 0, records(5, seed=2))
    produce(bootstrap, topic, records(50, seed=3), partition=0)
    kinds = [
        (b.base_offset, b.is_transactional, b.is_control)
        for b in fetch_batches(clusters[source], topic, 0)
    ]
    assert (50, True, False) in kinds and (55, True, True) in kinds, kinds

    _stop_then_refuse(
        clusters,
        psync,
        topic,
        source,
        50,
        f"cluster {source}",
        "offset 50",
        "transactional batch 50..54",
        args=("--transactions", "refuse"),
    )


# --------------------------------------------------------------------------------------------
# Sources that disagree
# --------------------------------------------------------------------------------------------


def test_sources_with_different_histories(clusters: Clusters, psync: Run, topic: str) -> None:
    a, b, local = (clusters.bootstrap(n) for n in ("a", "b", "local"))
    for bootstrap in (a, b, local):
        create_topic(bootstrap, topic, 1)
    produce(a, topic, records(300, seed=1), partition=0)
    produce(b, topic, records(300, seed=2), partition=0)

    r = _sync(psync, topic, "a,b", "--chunk-offsets", "50")

    e = _refused(r, topic, 0, 0, "offset 299")
    assert "disagree" in e["reason"] and "a" in e["reason"] and "b" in e["reason"]
    assert ends(clusters["local"], topic, 1) == {0: 0}


def test_sources_that_disagree_leave_no_topic_created_behind(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """--create-missing creates the local topic only when a partition can be copied into it:
    sources that disagree on every partition are refused before anything is created (the topic
    was created, then every partition refused)."""
    a, b = clusters.bootstrap("a"), clusters.bootstrap("b")
    for bootstrap in (a, b):
        create_topic(bootstrap, topic, 2)
    for p in range(2):
        produce(a, topic, records(30, seed=1 + p), partition=p)
        produce(b, topic, records(30, seed=5 + p), partition=p)

    r = _sync(psync, topic, "a,b", "--create-missing", "--chunk-offsets", "10")

    assert r.code == 3, r.stdout + r.stderr
    for p, e in by_partition(r.json, topic).items():
        assert e["status"] == "unsafe" and "disagree" in e["reason"], (p, e)
    [t] = r.json["topics"]
    assert any("was not created" in w for w in t["warnings"]), t["warnings"]
    assert topic_partitions(clusters.bootstrap("local"), topic) is None, "the topic was created"


def test_sources_that_diverge_after_a_common_prefix(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    a, b, local = (clusters.bootstrap(n) for n in ("a", "b", "local"))
    for bootstrap in (a, b, local):
        create_topic(bootstrap, topic, 1)
    produce(a, topic, records(200, seed=1), partition=0)
    assert psync("sync", "--topic", topic, "--sources", "a", "--local", "b").code == 0
    produce(a, topic, records(100, seed=2), partition=0)
    produce(b, topic, records(150, seed=3), partition=0)

    r = _sync(psync, topic, "a,b", "--chunk-offsets", "50")

    e = _refused(r, topic, 0, 0, "offset 299")
    assert "disagree" in e["reason"]
    assert ends(clusters["local"], topic, 1) == {0: 0}


def test_sources_that_disagree_in_the_middle_are_never_mixed(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """a = H + X + S and b = H + Y + S: they agree at their ends and on H but not on X/Y. Chunks
    alternate between them, so a copy that did not check each source against what it already
    appended would splice Y into X (or the reverse)."""
    a, b, local = (clusters.bootstrap(n) for n in ("a", "b", "local"))
    for bootstrap in (a, b, local):
        create_topic(bootstrap, topic, 1)
    produce(a, topic, records(100, seed=1), partition=0, batch_size=2048)  # H
    assert psync("sync", "--topic", topic, "--sources", "a", "--local", "b").code == 0
    produce(a, topic, records(100, seed=2, value_size=300), partition=0, batch_size=1)  # X
    produce(b, topic, records(100, seed=3, value_size=300), partition=0, batch_size=1)  # Y
    produce(a, topic, records(100, seed=4), partition=0, batch_size=2048)  # S
    assert append_copies(clusters["a"], clusters["b"], topic, 0, 200) == 300  # S on b
    assert ends(clusters["a"], topic, 1) == ends(clusters["b"], topic, 1) == {0: 300}

    r = _sync(psync, topic, "a,b", "--chunk-offsets", "20")

    assert r.code == 3, r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "unsafe" and "disagree" in e["reason"], e
    end = ends(clusters["local"], topic, 1)[0]
    assert e["local_end_after"] == end < 300
    got = consumed(local, topic, 0)
    prefixes = {
        n: [x for x in consumed(clusters.bootstrap(n), topic, 0) if x[0] < end] for n in ("a", "b")
    }
    assert got in prefixes.values(), "the local log mixes the two sources"
    assert end < 200, "copied past the range where the sources disagree"


def test_sources_that_disagree_on_a_batch_that_covers_a_whole_piece_are_never_mixed(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """The copy cuts chunks into byte-sized pieces (issue 15). a and b hold the same records
    except batch B, 700 tiny records at offsets 1000..1699, which they disagree on. With chunks
    of 500 offsets, a serves [1000, 1500) and appends its B. b serves [1500, 2000), and b's first
    piece there (about 128 offsets of 2 KB records: b's 4 connections share the chunk, so it is
    cut into pieces of 256 KiB, the least a piece holds) lies wholly inside B. So that piece
    brings only b's B, as its boundary batch, and the next piece starts after B. b's B must
    still be compared with a's B before anything of b's follows it. (With one connection and
    one fetch in flight the chunk would be one piece, and this case would not arise.)"""
    for n in ("a", "b", "local"):
        create_topic(clusters.bootstrap(n), topic, 1)

    def fill(name: str, tiny: bytes) -> None:
        broker = clusters[name]
        with Connection(broker.host, broker.port, cluster=name) as conn:

            def put(recs: list[bytes]) -> None:
                conn.send_produce(topic, {0: raw_batch(recs, len(recs) - 1)}, acks=-1)
                assert conn.receive_produce()[0].error_code == 0

            def big(i: int) -> list[bytes]:
                return [raw_record(d, b"k", bytes([i % 251]) * 2000) for d in range(10)]

            for i in range(100):  # offsets 0..999, 20 KB batches
                put(big(i))
            put([raw_record(d, b"k", tiny) for d in range(700)])  # B: offsets 1000..1699
            for i in range(100, 180):  # offsets 1700..2499
                put(big(i))

    fill("a", b"aaaaaaaa")
    fill("b", b"bbbbbbbb")
    assert ends(clusters["a"], topic, 1) == ends(clusters["b"], topic, 1) == {0: 2500}

    r = _sync(psync, topic, "a,b", "--chunk-offsets", "500", "--connections-per-broker", "4")

    assert r.code == 3, r.stderr[-3000:]
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "unsafe" and "disagree" in e["reason"], e
    assert ends(clusters["local"], topic, 1) == {0: 1700}  # a's B, and nothing of b's after it


def _lat_source(clusters: Clusters, topic: str) -> tuple[str, int, str] | None:
    """A source holding LogAppendTime batches intact: (name, first such offset, its span)."""
    if clusters.kind("a") == "kafka":
        # Apache Kafka stamps every batch of a LogAppendTime topic itself, from offset 0.
        a = clusters.bootstrap("a")
        create_topic(a, topic, 1, {"message.timestamp.type": "LogAppendTime"})
        produce(a, topic, records(40, seed=1), partition=0)
        return "a", 0, "0.."
    for name in ("a", "b"):  # Tansu restamps such a batch without a new CRC; noida keeps it
        src = clusters.bootstrap(name)
        create_topic(src, topic, 1)
        produce(src, topic, records(40, seed=1), partition=0)
        stamped = raw_batch(
            [raw_record(d, b"k%d" % d, b"v%d" % d) for d in range(3)], 2, attributes=0x08
        )
        assert produce_raw(clusters[name], topic, 0, stamped) == 40
        produce(src, topic, records(40, seed=2), partition=0)
        stored = [b for b in fetch_batches(clusters[name], topic, 0) if b.log_append_time]
        if stored and all(b.crc_ok() for b in stored):
            return name, 40, "40..42"
    return None


def test_log_append_time_batches(clusters: Clusters, psync: Run, topic: str) -> None:
    """A source batch with LogAppendTime timestamps cannot be copied as it is (a CreateTime
    local topic restamps it, a LogAppendTime one stamps its own time): refused with where."""
    create_topic(clusters.bootstrap("local"), topic, 1)
    found = _lat_source(clusters, topic)
    if found is None:
        pytest.skip("no source broker here stores a LogAppendTime batch intact")
    name, at, span = found
    r = _sync(psync, topic, name)
    e = by_partition(r.json, topic)[0]
    assert r.code == 3, r.stderr
    assert e["status"] == "unsafe" and e["local_end_after"] == at, r.stdout
    assert "LogAppendTime" in e["reason"] and f"offset {at}" in e["reason"], e["reason"]
    assert span in e["reason"] and f"cluster {name}" in e["reason"], e["reason"]
    assert_prefix_of(clusters.bootstrap(name), clusters.bootstrap("local"), topic, 0, at)
