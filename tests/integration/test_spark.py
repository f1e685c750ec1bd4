"""The Spark engine against real brokers: same results as the local engine, retries stay
offset-identical. One SparkSession (local[2]) is shared by the module."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from partsync.config import ClusterRef, Config
from partsync.demo import data
from partsync.demo.brokers import Broker
from partsync.engines.spark import SparkEngine
from partsync.io.pool import ClusterPool
from partsync.plan.comparator import PlanPolicy
from partsync.plan.results import Status
from partsync.run.planner import SyncRequest
from partsync.run.sync import default_group, run_sync
from tests.integration.kafka_proxy import StrictProxy
from tests.support.faults import FaultInjection

pytestmark = [pytest.mark.integration, pytest.mark.spark]

MASTER = "local[2]"


@pytest.fixture(scope="module")
def spark_engine() -> SparkEngine:
    engine = SparkEngine(master=MASTER)
    engine.session()  # start the shared session once
    return engine


@pytest.fixture(scope="module")
def second_local(broker_factory) -> Broker:
    return broker_factory("extra")


def ref(b: Broker | StrictProxy) -> ClusterRef:
    return Config(clusters={}).resolve(b.bootstrap)


def _fill(bootstrap: str, topic: str, partitions: int, n: int, compression: str) -> None:
    data.create_topic(bootstrap, topic, partitions)
    for p in range(partitions):
        recs = data.make_records(n, seed=p + len(topic), partition=p, null_keys_every=13)
        data.produce(bootstrap, topic, recs, compression=compression)


def _request(topics: tuple[str, ...], source: Broker, local: Broker | StrictProxy) -> SyncRequest:
    return SyncRequest(
        topics,
        (ref(source),),
        ref(local),
        create_missing=True,
        policy=PlanPolicy(chunk_offsets=700),
    )


def _shape(report) -> list[tuple]:
    return [
        (
            t.topic,
            p.partition,
            p.status.value,
            p.local_end_before,
            p.local_end_after,
            p.target_end,
            p.batches,
            p.bytes,
        )
        for t in report.topics
        for p in sorted(t.partitions, key=lambda r: r.partition)
    ]


def test_spark_and_local_engines_give_identical_results(
    spark_engine, source_a, local_broker, local_proxy, second_local, topic
) -> None:
    topics = (f"{topic}-x", f"{topic}-y")
    _fill(source_a.bootstrap, topics[0], 3, 1500, "lz4")
    _fill(source_a.bootstrap, topics[1], 2, 1200, "zstd")

    with ClusterPool() as pool:
        spark_report = run_sync(_request(topics, source_a, local_proxy), pool, engine=spark_engine)
        local_report = run_sync(_request(topics, source_a, second_local), pool)

    assert spark_report.exit_status == 0, spark_report.to_dict()
    assert {p.status for p in spark_report.all_partitions()} == {Status.SYNCED}
    assert _shape(spark_report) == _shape(local_report)
    # Same JSON document shape whichever engine ran, but for the local group the local run
    # joined as `partsync sync` does (a Spark job holds no group membership).
    assert local_report.to_dict()["group"]["name"] == default_group(topics)
    assert spark_report.to_dict().keys() == local_report.to_dict().keys() - {"group"}
    assert [t.to_dict().keys() for t in spark_report.topics] == [
        t.to_dict().keys() for t in local_report.topics
    ]
    for t, parts in ((topics[0], 3), (topics[1], 2)):
        data.assert_partitions_identical(source_a.bootstrap, local_broker.bootstrap, t, parts)
        data.assert_partitions_identical(source_a.bootstrap, second_local.bootstrap, t, parts)

    with ClusterPool() as pool:
        again = run_sync(_request(topics, source_a, local_proxy), pool, engine=spark_engine)
    assert {p.status for p in again.all_partitions()} == {Status.IN_SYNC}


def test_task_killed_mid_partition_is_retried_and_stays_offset_identical(
    source_a, local_broker, local_proxy, topic
) -> None:
    _fill(source_a.bootstrap, topic, 2, 4000, "none")
    # The first attempt of partition 0's task kills its Python worker after 3 confirmed appends;
    # Spark retries the task, which must resume from the local log end.
    engine = SparkEngine(master=MASTER, progress_for=FaultInjection(topic, 0, after_batches=3))
    req = SyncRequest(
        (topic,),
        (ref(source_a),),
        ref(local_proxy),
        create_missing=True,
        policy=PlanPolicy(chunk_offsets=500),
    )
    with ClusterPool() as pool:
        report = run_sync(req, pool, engine=engine, retries=0)
    by_part = {p.partition: p for p in report.all_partitions()}
    assert by_part[0].status is Status.SYNCED, by_part[0]
    assert by_part[0].local_end_after == by_part[0].target_end == 4000
    # The retried attempt started where the killed one stopped: it reports fewer batches than a
    # full copy (the first attempt's appends stayed, at the right offsets).
    full = by_part[1].batches
    assert 0 < by_part[0].batches < full
    data.assert_partitions_identical(source_a.bootstrap, local_broker.bootstrap, topic, 2)


def test_task_that_keeps_failing_comes_back_as_partition_errors(
    source_a, local_broker, local_proxy, topic
) -> None:
    # Enough batches (~60) that four killed attempts cannot finish the partition between them.
    _fill(source_a.bootstrap, topic, 1, 40000, "none")
    engine = SparkEngine(
        master=MASTER, progress_for=FaultInjection(topic, 0, after_batches=2, every_attempt=True)
    )
    req = SyncRequest(
        (topic,),
        (ref(source_a),),
        ref(local_proxy),
        create_missing=True,
        policy=PlanPolicy(chunk_offsets=500),
    )
    with ClusterPool() as pool:
        report = run_sync(req, pool, engine=engine, retries=0)
    (result,) = report.all_partitions()
    assert result.status is Status.ERROR
    assert result.reason and result.reason.startswith("Spark job failed:")
    assert "Traceback" not in result.reason and "\n" not in result.reason
    assert report.exit_status == 1
    # Whatever the killed attempts appended is a prefix of the source, at the same offsets, and
    # an ordinary rerun completes it.
    with ClusterPool() as pool:
        rerun = run_sync(req, pool)
    assert rerun.exit_status == 0
    data.assert_partitions_identical(source_a.bootstrap, local_broker.bootstrap, topic, 1)


def test_cli_engine_spark(cli, source_a, local_broker, local_proxy, topic) -> None:
    _fill(source_a.bootstrap, topic, 2, 300, "gzip")
    res = cli(
        "sync",
        "--topic",
        topic,
        "--sources",
        source_a.bootstrap,
        "--local",
        local_proxy.bootstrap,
        "--create-missing",
        "--engine",
        "spark",
        "--spark-master",
        MASTER,
        "--json",
    )
    assert res.code == 0, res.stderr
    doc = res.json
    assert [p["status"] for p in doc["topics"][0]["partitions"]] == ["synced", "synced"]
    # Spark's own console noise stays quiet: no INFO/WARN log lines from Spark on stderr.
    noisy = [l for l in res.stderr.splitlines() if " INFO " in l or " WARN " in l]
    assert not noisy, noisy[:5]
    data.assert_partitions_identical(source_a.bootstrap, local_broker.bootstrap, topic, 2)


# -- diff on Spark -----------------------------------------------------------------------------


def _diff_shape(report) -> list[tuple]:
    return [
        (
            p["partition"],
            p["status"],
            p["common_range"],
            p["first_divergent_offset"],
            p["disagreeing"],
            p["lag"],
        )
        for t in report.to_dict()["topics"]
        for p in t["partitions"]
    ]


def test_spark_diff_matches_local_diff(spark_engine, source_a, local_broker, topic) -> None:
    from partsync.plan.diff_model import DiffOptions, DiffRequest, Level
    from partsync.run.diff import diff_topics
    from tests.integration.test_diff import batches_of, put_batches
    from tests.unit import diffkit

    # Partition 0: identical 3000 offsets; partition 1: one key differs at offset 2345.
    for b in (source_a, local_broker):
        data.create_topic(b.bootstrap, topic, 2)
    recs = diffkit.records(3000, seed=6)
    changed = list(recs)
    changed[2345] = diffkit.R(b"other", recs[2345].value, recs[2345].headers, recs[2345].ts)
    for b, part1 in ((source_a, recs), (local_broker, changed)):
        put_batches(b, topic, batches_of(recs, [100] * 30, "lz4"), partition=0)
        put_batches(b, topic, batches_of(part1, [100] * 30, "lz4"), partition=1)

    clusters = (
        ClusterRef("dc1", ((source_a.host, source_a.port),)),
        ClusterRef("dc2", ((local_broker.host, local_broker.port),)),
    )
    for level in (Level.BATCH, Level.RECORD):
        req = DiffRequest((topic,), clusters, None, DiffOptions(level=level, chunk_offsets=250))
        with ClusterPool() as pool:
            local = diff_topics(req, pool)
            # 500-offset slices: six Spark tasks per partition, merged on the driver.
            spark = diff_topics(req, pool, runner=spark_engine.diff_runner(slice_offsets=500))
        assert _diff_shape(spark) == _diff_shape(local), level
        by_part = {p.partition: p for p in spark.all_partitions()}
        assert by_part[0].status.value == "identical"
        assert by_part[1].status.value == "divergent" and by_part[1].first_divergent_offset == 2345
        assert by_part[1].disagreeing == ("dc2",)
        assert spark.exit_status == 3


def test_cli_diff_engine_spark(cli, source_a, local_broker, topic) -> None:
    _fill(source_a.bootstrap, topic, 2, 500, "zstd")
    res = cli(
        "sync",
        "--topic",
        topic,
        "--sources",
        source_a.bootstrap,
        "--local",
        local_broker.bootstrap,
        "--create-missing",
        "--json",
    )
    assert res.code == 0, res.stderr
    res = cli(
        "diff",
        "--topic",
        topic,
        "--clusters",
        f"{source_a.bootstrap},{local_broker.bootstrap}",
        "--engine",
        "spark",
        "--spark-master",
        MASTER,
        "--slice-offsets",
        "200",
        "--chunk-offsets",
        "100",
        "--json",
    )
    assert res.code == 0, res.stderr
    parts = res.json["topics"][0]["partitions"]
    assert [p["status"] for p in parts] == ["identical", "identical"]
    assert all(p["common_range"] == [0, 500] for p in parts)
