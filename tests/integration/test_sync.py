"""The core sync (issue 2) end to end: ``python -m partsync`` against real broker processes,
results checked offset by offset with an independent consumer.

Clusters are named in a config file: ``a`` and ``b`` are sources, ``local`` the destination
(Tansu / noida-db / noida-db in the default mixed mode). Refusals are in test_refusals.py,
resuming after ``kill -9`` in test_resume.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from partsync.demo.brokers import free_port
from partsync.demo.data import (
    COMPRESSIONS,
    assert_partitions_identical,
    create_topic,
    produce,
)
from partsync.plan.topic_rules import UNLIMITED_MS
from tests.conftest import CliResult
from tests.integration.sync_support import (
    Clusters,
    assert_batches_identical,
    assert_same_below,
    by_partition,
    check_plan,
    check_report,
    consumed,
    ends,
    records,
    topic_configs,
    topic_partitions,
)
from tests.support.data import produce_kafka_python

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.kafka_versions]

Run = Callable[..., CliResult]


def _unwrapped(text: str) -> str:
    """Rich wraps console output at the terminal width (80 columns in a subprocess)."""
    return " ".join(text.split())


def _sync(psync: Run, topic: str, sources: str, *args: str) -> CliResult:
    return psync("sync", "--topic", topic, "--sources", sources, "--json", *args)


def _produce_history(
    clusters: Clusters, topic: str, partitions: int, n: int, compression: str = "none"
) -> None:
    """``n`` records per partition on source a, in batches of a few dozen records."""
    for p in range(partitions):
        produce(
            clusters.bootstrap("a"),
            topic,
            records(n, seed=p, partition=p),
            compression=compression,
            batch_size=4096,
        )


def _two_sources(
    clusters: Clusters, psync: Run, topic: str, partitions: int
) -> tuple[dict[int, int], dict[int, int]]:
    """Source b = source a's history (copied by partsync) plus more records; return both ends."""
    for name in ("a", "b", "local"):
        create_topic(clusters.bootstrap(name), topic, partitions)
    _produce_history(clusters, topic, partitions, 600, compression="snappy")
    r = psync("sync", "--topic", topic, "--sources", "a", "--local", "b", "--json")
    assert r.code == 0, r.stderr
    for p in range(partitions):
        more = records(400, seed=100 + p, partition=p, kafka_python=True)
        produce_kafka_python(
            clusters.bootstrap("b"), topic, more, compression="zstd", batch_size=4096
        )
    a_end, b_end = ends(clusters["a"], topic, partitions), ends(clusters["b"], topic, partitions)
    assert all(b_end[p] == a_end[p] + 400 for p in range(partitions)), (a_end, b_end)
    return a_end, b_end


# --------------------------------------------------------------------------------------------
# Copying
# --------------------------------------------------------------------------------------------


def test_single_source_copies_every_partition(clusters: Clusters, psync: Run, topic: str) -> None:
    create_topic(clusters.bootstrap("a"), topic, 3)
    create_topic(clusters.bootstrap("local"), topic, 3)
    _produce_history(clusters, topic, 3, 1000, compression="lz4")
    target = ends(clusters["a"], topic, 3)

    r = _sync(psync, topic, "a", "--chunk-offsets", "150")

    assert r.code == 0, r.stderr
    res = by_partition(r.json, topic)
    assert set(res) == {0, 1, 2}
    for p, e in res.items():
        assert e["status"] == "synced"
        assert (e["local_end_before"], e["local_end_after"], e["target_end"]) == (
            0,
            target[p],
            target[p],
        )
        assert set(e["bytes_by_source"]) == {"a"}
        assert e["batches"] > 7  # several chunks of several batches
    assert ends(clusters["local"], topic, 3) == target
    assert (
        assert_partitions_identical(clusters.bootstrap("a"), clusters.bootstrap("local"), topic, 3)
        == 3000
    )
    for p in range(3):
        assert (
            assert_batches_identical(clusters["a"], clusters["local"], topic, p)
            == res[p]["batches"]
        )


def test_the_local_cluster_given_as_a_bootstrap_list(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """--local takes a comma-separated bootstrap list, as kcat and Kafka's tools do (it was
    refused as neither a cluster name nor a host:port address); its first address may be down."""
    create_topic(clusters.bootstrap("a"), topic, 1)
    create_topic(clusters.bootstrap("local"), topic, 1)
    produce(clusters.bootstrap("a"), topic, records(50, seed=1), partition=0)
    down = f"127.0.0.1:{free_port()}"  # nothing listens there

    r = psync(
        "sync",
        "--topic",
        topic,
        "--sources",
        "a",
        "--json",
        "--local",
        f"{down},{clusters.bootstrap('local')}",
    )

    assert r.code == 0, r.stdout + r.stderr
    assert by_partition(r.json, topic)[0]["local_end_after"] == 50
    assert ends(clusters["local"], topic, 1) == {0: 50}


def test_two_sources_at_different_ends(clusters: Clusters, psync: Run, topic: str) -> None:
    a_end, b_end = _two_sources(clusters, psync, topic, 2)

    r = _sync(psync, topic, "a,b", "--chunk-offsets", "100", "--connections-per-broker", "2")

    assert r.code == 0, r.stderr
    res = by_partition(r.json, topic)
    for p, e in res.items():
        assert e["status"] == "synced"
        assert e["target_end"] == e["local_end_after"] == b_end[p]
        # Chunks below a's end go round-robin between a and b; the rest only b has.
        assert set(e["bytes_by_source"]) == {"a", "b"}, e
    assert_partitions_identical(clusters.bootstrap("b"), clusters.bootstrap("local"), topic, 2)
    for p in range(2):
        assert_same_below(clusters.bootstrap("a"), clusters.bootstrap("local"), topic, p, a_end[p])
        assert_batches_identical(clusters["b"], clusters["local"], topic, p)


@pytest.mark.parametrize("codec", COMPRESSIONS)
def test_each_codec_from_both_clients(
    clusters: Clusters, psync: Run, topic: str, codec: str
) -> None:
    """Partition 0 from confluent-kafka (librdkafka), partition 1 from kafka-python: headers
    (with null header values where the client allows), null keys, null values."""
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 2)
    create_topic(local, topic, 2)
    produce(a, topic, records(500, seed=1), compression=codec, partition=0, batch_size=8192)
    produce_kafka_python(
        a,
        topic,
        records(500, seed=2, kafka_python=True),
        compression=codec,
        partition=1,
        batch_size=8192,
    )

    r = _sync(psync, topic, "a")

    assert r.code == 0, r.stderr
    assert {e["status"] for e in by_partition(r.json, topic).values()} == {"synced"}
    assert assert_partitions_identical(a, local, topic, 2) == 1000
    for p in range(2):
        got = consumed(local, topic, p)
        assert any(k is None for _, _, _, k, _, _ in got), "no null key copied"
        assert any(v is None for _, _, _, _, v, _ in got), "no null value copied"
        assert all(("seq", str(i).encode()) in h for i, (*_, h) in enumerate(got))
    assert any(("nullable", None) in h for *_, h in consumed(local, topic, 0))
    for p in range(2):
        assert assert_batches_identical(clusters["a"], clusters["local"], topic, p) > 1


def test_every_codec_in_one_partition(clusters: Clusters, psync: Run, topic: str) -> None:
    """Batches of every codec from both clients interleaved in one partition."""
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 1)
    create_topic(local, topic, 1)
    for i, codec in enumerate(COMPRESSIONS):
        produce(a, topic, records(60, seed=i), compression=codec, partition=0)
        produce_kafka_python(
            a, topic, records(60, seed=50 + i, kafka_python=True), compression=codec, partition=0
        )

    r = _sync(psync, topic, "a")

    assert r.code == 0, r.stderr
    assert assert_partitions_identical(a, local, topic, 1) == 600
    assert assert_batches_identical(clusters["a"], clusters["local"], topic, 0) >= 10


def test_running_again_is_a_no_op(clusters: Clusters, psync: Run, topic: str) -> None:
    create_topic(clusters.bootstrap("a"), topic, 2)
    create_topic(clusters.bootstrap("local"), topic, 2)
    _produce_history(clusters, topic, 2, 300, compression="gzip")
    assert _sync(psync, topic, "a").code == 0
    after_first = ends(clusters["local"], topic, 2)

    r = _sync(psync, topic, "a")

    assert r.code == 0, r.stderr
    for p, e in by_partition(r.json, topic).items():
        assert e["status"] == "in-sync"
        assert e["batches"] == e["bytes"] == 0 and e["bytes_by_source"] == {}
        assert e["local_end_before"] == e["local_end_after"] == e["target_end"] == after_first[p]
    assert ends(clusters["local"], topic, 2) == after_first
    # The human-readable form says so too, with the same exit code.
    text = psync("sync", "--topic", topic, "--sources", "a")
    assert text.code == 0, text.stderr
    assert "2 in-sync" in _unwrapped(text.stderr)
    assert ends(clusters["local"], topic, 2) == after_first


def test_selected_partitions_only(clusters: Clusters, psync: Run, topic: str) -> None:
    create_topic(clusters.bootstrap("a"), topic, 3)
    create_topic(clusters.bootstrap("local"), topic, 3)
    _produce_history(clusters, topic, 3, 200)

    r = _sync(psync, topic, "a", "--partitions", "0,2")

    assert r.code == 0, r.stderr
    assert set(by_partition(r.json, topic)) == {0, 2}
    assert ends(clusters["local"], topic, 3)[1] == 0
    assert_partitions_identical(clusters.bootstrap("a"), clusters.bootstrap("local"), topic, [0, 2])


# --------------------------------------------------------------------------------------------
# --create-missing
# --------------------------------------------------------------------------------------------


def test_missing_local_topic_is_an_error_without_create_missing(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    create_topic(clusters.bootstrap("a"), topic, 3)
    _produce_history(clusters, topic, 3, 100)

    r = _sync(psync, topic, "a")

    assert r.code == 1, r.stderr
    [entry] = by_partition(r.json, topic).values()
    assert entry["status"] == "error"
    assert "local" in entry["reason"] and topic in entry["reason"]
    assert "--create-missing" in entry["reason"]
    text = psync("sync", "--topic", topic, "--sources", "a")
    assert text.code == 1
    assert f"topic {topic} does not exist on the local cluster local" in _unwrapped(text.stderr)
    assert topic_partitions(clusters.bootstrap("local"), topic) is None


@pytest.mark.parametrize("source", ["a", "b"])
def test_create_missing_creates_the_topic_like_the_sources(
    clusters: Clusters, psync: Run, topic: str, source: str
) -> None:
    bootstrap, local = clusters.bootstrap(source), clusters.bootstrap("local")
    create_topic(bootstrap, topic, 3, {"cleanup.policy": "delete", "retention.ms": "-1"})
    for p in range(3):
        produce(bootstrap, topic, records(200, seed=p), compression="zstd", partition=p)

    r = _sync(psync, topic, source, "--create-missing")

    assert r.code == 0, r.stderr
    assert topic_partitions(local, topic) == 3
    assert {e["status"] for e in by_partition(r.json, topic).values()} == {"synced"}
    assert_partitions_identical(bootstrap, local, topic, 3)
    warnings = r.json["topics"][0]["warnings"]
    if clusters.kind(source) == "tansu":  # reports only the configs set at creation
        assert any(w.startswith(f"cluster {source}: ") for w in warnings), warnings
    cfg = topic_configs(local, topic)
    assert cfg["compression.type"] == "producer"
    assert cfg["message.timestamp.type"] == "CreateTime"
    assert cfg["cleanup.policy"] == "delete"
    assert cfg["retention.ms"] == "-1"  # the source's retention, as docs/cli.md says
    if clusters.kind(source) != "tansu":
        assert cfg["retention.bytes"] == "-1"


def test_create_missing_takes_every_timestamp_the_source_holds(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Copied batches keep their timestamps: a year old, or two hours ahead (a producer's clock
    ran fast). Kafka 4.0's topic default message.timestamp.after.max.ms (1 hour) would reject
    the latter, so --create-missing creates the topic without timestamp limits."""
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 1, {"message.timestamp.after.max.ms": str(UNLIMITED_MS)})
    now = int(time.time() * 1000)
    produce(a, topic, records(60, seed=1, base_timestamp_ms=now - 400 * 86_400_000), partition=0)
    produce(a, topic, records(60, seed=2, base_timestamp_ms=now + 2 * 3_600_000), partition=0)

    r = _sync(psync, topic, "a", "--create-missing")

    assert r.code == 0, r.stdout + r.stderr
    assert_partitions_identical(a, local, topic, 1)
    cfg = topic_configs(local, topic)
    assert cfg["message.timestamp.before.max.ms"] == str(UNLIMITED_MS)
    assert cfg["message.timestamp.after.max.ms"] == str(UNLIMITED_MS)
    # The source reports no retention here (or its own): never the broker's 7-day default,
    # which would delete the year-old copy as soon as a segment rolls.
    assert cfg["retention.ms"] in ("-1", topic_configs(a, topic).get("retention.ms", "-1"))


# --------------------------------------------------------------------------------------------
# --json contract
# --------------------------------------------------------------------------------------------


def test_json_report_schema(clusters: Clusters, psync: Run, topic: str, broker_mode: str) -> None:
    """One report holding every status: synced, in-sync, unsafe and a whole-topic error."""
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 3)
    create_topic(local, topic, 3)
    produce(a, topic, records(50, seed=0), partition=0)  # p0: behind
    produce(a, topic, records(50, seed=1), partition=1)
    produce(a, topic, records(50, seed=2), partition=2)
    first = _sync(psync, topic, "a", "--partitions", "1")
    assert first.code == 0, first.stderr  # p1: in sync
    produce(local, topic, records(80, seed=3), partition=2)  # p2: local beyond the source
    missing = f"{topic}-missing"
    create_topic(a, missing, 1)

    r = psync("sync", "--topic", topic, "--topic", missing, "--sources", "a", "--json")

    assert r.code == 3, r.stderr
    doc = r.json
    # docs/cli.md documents "topics" and "seconds"; "stopped" (null unless --deadline or a
    # signal stopped the run) came with the cron mode; "group" (a run with work joins the job's
    # group: its name and the protocol it spoke) with issue 15.
    assert set(doc) == {"topics", "seconds", "stopped", "group"}
    job = "partsync." + ",".join(sorted([topic, missing]))
    assert len(job) <= 200  # longer names are hashed (run.sync.default_group)
    # Kafka 4 offers KIP-848's consumer protocol; Kafka 3.9 (off there), Tansu and noida do not.
    protocol = "consumer" if broker_mode == "kafka-4.1.1" else "classic"
    assert doc["group"] == {"name": job, "protocol": protocol}, doc["group"]
    assert isinstance(doc["seconds"], float) and doc["seconds"] >= 0
    assert doc["stopped"] is None
    assert [t["topic"] for t in doc["topics"]] == [topic, missing]
    for t in doc["topics"]:
        assert set(t) == {"topic", "partitions", "warnings", "unreachable"}
        for p in t["partitions"]:
            # "holes_filled" and "batches_reencoded" came with issue 17 (--compaction-holes),
            # "open_transactions" with issue 36 (transactions left open for the next run).
            assert set(p) == {
                "partition",
                "status",
                "local_end_before",
                "local_end_after",
                "target_end",
                "batches",
                "bytes",
                "bytes_by_source",
                "batches_by_source",
                "reason",
                "notes",
                "seconds",
                "holes_filled",
                "batches_reencoded",
                "open_transactions",
            }
    entries = check_report(doc)
    assert {k: e["status"] for k, e in entries.items()} == {
        (topic, 0): "synced",
        (topic, 1): "in-sync",
        (topic, 2): "unsafe",
        (missing, -1): "error",
    }
    assert entries[(topic, 0)]["bytes_by_source"] == {"a": entries[(topic, 0)]["bytes"]}
    assert entries[(topic, 2)]["local_end_after"] == entries[(topic, 2)]["local_end_before"] == 80


# --------------------------------------------------------------------------------------------
# Exit codes
# --------------------------------------------------------------------------------------------


def test_usage_and_config_errors_exit_2(
    clusters: Clusters, psync: Run, cli: Run, topic: str, tmp_path: Path
) -> None:
    create_topic(clusters.bootstrap("a"), topic, 2)
    create_topic(clusters.bootstrap("local"), topic, 2)
    _produce_history(clusters, topic, 2, 50)
    sync = ("sync", "--topic", topic, "--json")

    cases = {
        "descending partition range": (
            psync(*sync, "--sources", "a", "--partitions", "3-1"),
            "3-1",
        ),
        "non-numeric partitions": (psync(*sync, "--sources", "a", "--partitions", "x"), "'x'"),
        "partition the topic lacks": (
            psync(*sync, "--sources", "a", "--partitions", "1,7"),
            "selected partition(s) 7 do not exist",
        ),
        "unknown source name": (psync(*sync, "--sources", "a,nosuch"), "nosuch"),
        "unknown local name": (psync(*sync, "--sources", "a", "--local", "elsewhere"), "elsewhere"),
        "source is the local cluster": (
            psync(*sync, "--sources", "a,local"),
            "both a source and the local",
        ),
    }
    bad = tmp_path / "bad.toml"
    bad.write_text(
        f'local = "local"\n[clusters.local]\nbootstrap_servers = ["{clusters.bootstrap("local")}"]\n'
        f'bootstrap_server = "x:1"\n[clusters.a]\nbootstrap_servers = ["{clusters.bootstrap("a")}"]\n'
    )
    cases["unknown config key"] = (
        cli("--config", str(bad), *sync, "--sources", "a"),
        "bootstrap_server",
    )
    top = tmp_path / "top.toml"
    top.write_text(clusters.config.read_text() + '\nlocall = "a"\n')
    cases["unknown top-level key"] = (cli("--config", str(top), *sync, "--sources", "a"), "locall")

    for what, (r, named) in cases.items():
        assert r.code == 2, f"{what}: exit {r.code}\n{r.stderr}"
        assert named in _unwrapped(r.stderr), f"{what}: {r.stderr!r} does not name {named!r}"
        # --json: exactly one document, the error (it printed nothing before issue 13).
        err = r.json["error"]
        assert set(r.json) == {"error"} and err["exit_code"] == 2, what
        assert err["kind"] in ("usage", "config") and named in err["message"], (what, err)
    assert ends(clusters["local"], topic, 2) == {0: 0, 1: 0}


def test_unreachable_clusters_exit_1(clusters: Clusters, psync: Run, topic: str) -> None:
    create_topic(clusters.bootstrap("a"), topic, 1)
    create_topic(clusters.bootstrap("local"), topic, 1)
    _produce_history(clusters, topic, 1, 50)
    nobody = f"127.0.0.1:{free_port()}"

    r = psync("sync", "--topic", topic, "--sources", "a", "--local", nobody)
    assert r.code == 1, r.stderr
    assert "unreachable" in _unwrapped(r.stderr) and nobody in _unwrapped(r.stderr)

    r = psync("plan", "--topic", topic, "--sources", "a", "--local", nobody)
    assert r.code == 1, r.stderr

    r = _sync(psync, topic, nobody)
    assert r.code == 1, r.stderr
    [entry] = by_partition(r.json, topic).values()
    assert entry["status"] == "error" and topic in entry["reason"]
    assert any(nobody in w and "unreachable" in w for w in r.json["topics"][0]["warnings"])
    assert ends(clusters["local"], topic, 1) == {0: 0}

    # What a reachable source holds is copied, but the run cannot tell whether the source that
    # did not answer is ahead: exit 1 (run again), with that source named. (Before issue 13
    # this exited 0.)
    r = _sync(psync, topic, f"{nobody},a")
    assert r.code == 1, r.stderr
    assert r.json["topics"][0]["unreachable"] == [nobody]
    assert by_partition(r.json, topic)[0]["status"] == "synced"
    assert any(nobody in w for w in r.json["topics"][0]["warnings"])
    assert_partitions_identical(clusters.bootstrap("a"), clusters.bootstrap("local"), topic, 1)


def test_a_refusal_that_a_silent_source_could_overturn_is_not_unsafe(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """The local log is ahead of source a; the other source does not answer and may be ahead
    too. Unsafe (exit 3, "needs a person") only once every source has answered."""
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 1)
    create_topic(local, topic, 1)
    produce(a, topic, records(40, seed=1), partition=0)
    assert _sync(psync, topic, "a").code == 0
    produce(local, topic, records(20, seed=2), partition=0)  # as if copied from the other
    nobody = f"127.0.0.1:{free_port()}"

    r = _sync(psync, topic, f"a,{nobody}")

    assert r.code == 1, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "error" and e["local_end_after"] == 60, e
    assert "beyond every source's end" in e["reason"] and nobody in e["reason"], e["reason"]
    assert "did not answer" in e["reason"], e["reason"]
    p = psync("plan", "--topic", topic, "--sources", f"a,{nobody}", "--json")
    assert p.code == 1 and p.json["topics"][0]["partitions"][0]["condition"] == "unknown"
    assert _sync(psync, topic, "a").code == 3  # every source answered: proven


# --------------------------------------------------------------------------------------------
# partsync plan
# --------------------------------------------------------------------------------------------


def test_plan_shows_ranges_and_sources_and_writes_nothing(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    a_end, b_end = _two_sources(clusters, psync, topic, 2)
    # Partition 1 is already at a's end; partition 0 is empty.
    assert _sync(psync, topic, "a", "--partitions", "1").code == 0
    local = clusters.bootstrap("local")
    before = {p: consumed(local, topic, p) for p in range(2)}
    assert ends(clusters["local"], topic, 2) == {0: 0, 1: a_end[1]}

    r = psync("plan", "--topic", topic, "--sources", "a,b", "--json", "--chunk-offsets", "100")

    assert r.code == 0, r.stderr
    plans = check_plan(r.json)
    p0, p1 = plans[(topic, 0)], plans[(topic, 1)]
    for p, plan in ((0, p0), (1, p1)):
        assert plan["condition"] == "behind"
        assert plan["sources"] == {
            "a": {"log_start": 0, "high_watermark": a_end[p]},
            "b": {"log_start": 0, "high_watermark": b_end[p]},
        }
        assert plan["target_end"] == b_end[p]
    assert p0["local"] == {"log_start": 0, "end": 0} and p0["missing"] == b_end[0]
    assert {x["source"] for x in p0["ranges"]} == {"a", "b"}
    assert all(x["source"] == "b" for x in p0["ranges"] if x["end"] > a_end[0])
    assert p1["local"]["end"] == a_end[1] and p1["missing"] == 400
    assert {x["source"] for x in p1["ranges"]} == {"b"}  # only b holds what p1 lacks

    assert ends(clusters["local"], topic, 2) == {0: 0, 1: a_end[1]}
    assert {p: consumed(local, topic, p) for p in range(2)} == before

    # The human-readable plan writes nothing either, and --create-missing creates nothing.
    assert psync("plan", "--topic", topic, "--sources", "a,b").code == 0
    missing = f"{topic}-new"
    create_topic(clusters.bootstrap("a"), missing, 2)
    r = psync("plan", "--topic", missing, "--sources", "a", "--create-missing", "--json")
    assert r.code == 0, r.stderr
    assert any("would be created" in w for w in r.json["topics"][0]["warnings"])
    assert topic_partitions(local, missing) is None
    assert ends(clusters["local"], topic, 2) == {0: 0, 1: a_end[1]}
