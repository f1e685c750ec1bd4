"""Transactional sources replayed (``sync --transactions replay``, issue 17): committed,
aborted and interleaved transactions of several producers land with every data batch and
every marker at the source's offset, and read_committed and read_uncommitted consumers (an
independent client, librdkafka) read the same records on both clusters."""

from __future__ import annotations

import functools
import random
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from partsync.demo.brokers import Broker
from partsync.demo.data import UNLIMITED_RETENTION, Rec, consume_all, create_topic, produce
from partsync.wire.batch import Batch
from partsync.wire.digest import batch_digest
from partsync.wire.markers import marker_type
from tests.conftest import CliResult
from tests.integration.sync_support import (
    Clusters,
    bounds,
    by_partition,
    check_plan,
    cluster_ref,
    delete_records,
    ends,
    fetch_batches,
    records,
    wait_for_markers,
)

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.kafka_versions]

Run = Callable[..., CliResult]
REPLAY = ("--transactions", "replay")


class _Txn:
    """A transactional confluent-kafka producer whose every send is flushed, so the test
    decides the order of batches in the partition."""

    def __init__(
        self, bootstrap: str, tid: str, codec: str = "none", timeout_ms: int | None = None
    ) -> None:
        from confluent_kafka import Producer

        conf = {
            "bootstrap.servers": bootstrap,
            "transactional.id": tid,
            "compression.type": codec,
            "linger.ms": 0,
            "log_level": 3,
        }
        if timeout_ms is not None:
            conf["transaction.timeout.ms"] = timeout_ms
        self.p = Producer(conf)
        self.p.init_transactions(30)

    def begin(self) -> _Txn:
        self.p.begin_transaction()
        return self

    def send(self, topic: str, recs: Iterable[Rec]) -> _Txn:
        for r in recs:
            self.p.produce(
                topic,
                key=r.key,
                value=r.value,
                headers=r.headers or None,
                timestamp=r.timestamp_ms or 0,
                partition=0,
            )
        self.p.flush(30)
        return self

    def commit(self) -> None:
        self.p.commit_transaction(30)

    def abort(self) -> None:
        self.p.abort_transaction(30)


def _txn(
    clusters: Clusters, name: str, tid: str, codec: str = "none", timeout_ms: int | None = None
) -> _Txn:
    try:
        return _Txn(clusters.bootstrap(name), tid, codec, timeout_ms)
    except Exception as e:  # noqa: BLE001 - a broker without transactions
        pytest.skip(f"{clusters.kind(name)} does not run transactions for librdkafka: {e}")


def _layout(b: Batch) -> tuple[Any, ...]:
    """What must be the same in a mirror: offsets, kind, and a marker's type."""
    kind = marker_type(b) if b.is_control else None
    return (b.base_offset, b.last_offset, b.is_transactional, b.is_control, kind, batch_digest(b))


def _assert_mirrored(clusters: Clusters, topic: str, source: str = "a") -> None:
    src = [_layout(b) for b in fetch_batches(clusters[source], topic, 0)]
    got = [_layout(b) for b in fetch_batches(clusters["local"], topic, 0)]
    assert got == src
    # noida returns no aborted-transaction list in Fetch answers, so its read_committed
    # consumers read aborted records too (its markers are right: the layouts above agree).
    committed = "noida" not in (clusters.kind(source), clusters.kind("local"))
    for isolation in ("read_committed", "read_uncommitted")[0 if committed else 1 :]:
        seen = [
            [
                (r.offset, r.key, r.value, r.timestamp, r.headers)
                for r in consume_all(
                    clusters.bootstrap(n), topic, 0, timeout=30, isolation=isolation
                )
            ]
            for n in (source, "local")
        ]
        assert seen[0] and seen[1] == seen[0], isolation


def _source_end(clusters: Clusters, topic: str, name: str = "a") -> int:
    """The source partition's end once every marker of its ended transactions has landed
    (librdkafka's commit returns when the coordinator has the decision, before the markers)."""
    src = clusters[name]
    wait_for_markers(src.host, src.port, topic, 0)
    return ends(src, topic, 1)[0]


def _source_topic(clusters: Clusters, topic: str) -> None:
    create_topic(clusters.bootstrap("a"), topic, 1, UNLIMITED_RETENTION)
    create_topic(clusters.bootstrap("local"), topic, 1, UNLIMITED_RETENTION)


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
def test_committed_aborted_and_interleaved_transactions_are_replayed(
    clusters: Clusters, psync: Run, topic: str, codec: str
) -> None:
    _source_topic(clusters, topic)
    a = clusters.bootstrap("a")
    t1 = _txn(clusters, "a", f"{topic}-t1", codec)
    t2 = _txn(clusters, "a", f"{topic}-t2", codec)
    produce(a, topic, records(10, seed=1), partition=0)
    t1.begin().send(topic, records(5, seed=2)).commit()
    t2.begin().send(topic, records(4, seed=3)).abort()
    # Interleaved: t1 and t2 both open, t2 ends first.
    t1.begin().send(topic, records(3, seed=4))
    t2.begin().send(topic, records(3, seed=5))
    t1.send(topic, records(2, seed=6))
    t2.send(topic, records(2, seed=7)).commit()
    t1.abort()
    produce(a, topic, records(10, seed=8), partition=0)
    end = _source_end(clusters, topic)
    kinds = [(b.is_transactional, b.is_control) for b in fetch_batches(clusters["a"], topic, 0)]
    assert kinds.count((True, True)) == 4, kinds

    planned = psync("plan", "--topic", topic, "--sources", "a", "--json", "--scan")
    assert planned.code == 0, planned.stdout + planned.stderr
    scan = check_plan(planned.json)[(topic, 0)]["scan"]
    assert (scan["committed"], scan["aborted"], scan["most_open_transactions"]) == (2, 2, 2)
    assert (scan["open_at_end"], scan["end"], scan["stop"]) == ([], end, None), scan
    planned = psync(
        "plan", "--topic", topic, "--sources", "a", "--json", "--scan", "--transactions", "refuse"
    )
    assert planned.code == 3, planned.stdout + planned.stderr
    stop = check_plan(planned.json)[(topic, 0)]["scan"]["stop"]
    assert stop["refused"] and stop["offset"] == 10, stop
    refused = psync(
        "sync", "--topic", topic, "--sources", "a", "--json", "--transactions", "refuse"
    )
    assert refused.code == 3, refused.stdout + refused.stderr
    assert by_partition(refused.json, topic)[0]["local_end_after"] == 10

    r = psync("sync", "--topic", topic, "--sources", "a", "--json")  # replay: the default

    assert r.code == 0, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "synced" and e["local_end_after"] == end, e
    _assert_mirrored(clusters, topic)
    again = psync("sync", "--topic", topic, "--sources", "a", "--json", *REPLAY)
    assert again.code == 0 and by_partition(again.json, topic)[0]["status"] == "in-sync"
    for level in ("record", "batch"):
        d = psync("diff", "--topic", topic, "--clusters", "a,local", "--level", level, "--json")
        assert d.code == 0, (level, d.stdout + d.stderr)


def _resumable(clusters: Clusters) -> bool:
    """Whether the local cluster can carry a replayed transaction from one run to the next
    (KIP-664 lookups: Apache Kafka 3.0+; the PyPI brokers lack them)."""
    from partsync.io.cluster import Cluster

    with Cluster(cluster_ref(clusters["local"], "local")) as local:
        return local.can_resume_transactions()


def test_a_transaction_still_open_in_the_source_is_left_open_or_holds_the_copy_back(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Where the local cluster can resume a transaction (Kafka), the open source transaction is
    streamed and its local transaction left open for the next run, named in the JSON with the
    time the local coordinator keeps it; elsewhere the copy stops right before it and the
    partition is behind (exit 4), never in sync. Once the source commits, the next run copies
    the rest."""
    _source_topic(clusters, topic)
    a = clusters.bootstrap("a")
    produce(a, topic, records(10, seed=1), partition=0)
    t1 = _txn(clusters, "a", f"{topic}-t1")
    t1.begin().send(topic, records(3, seed=2, base_timestamp_ms=None))  # begun now
    produce(a, topic, records(5, seed=3), partition=0)
    hw = ends(clusters["a"], topic, 1)[0]
    resumable = _resumable(clusters)
    planned = psync("plan", "--topic", topic, "--sources", "a", "--json", "--scan")
    assert planned.code == 0, planned.stdout + planned.stderr
    scan = check_plan(planned.json)[(topic, 0)]["scan"]
    assert len(scan["open_at_end"]) == 1, scan

    r = psync("sync", "--topic", topic, "--sources", "a", "--json", *REPLAY)

    e = by_partition(r.json, topic)[0]
    if resumable:
        assert (scan["end"], scan["stop"]) == (hw, None), scan
        assert r.code == 0, r.stdout + r.stderr
        assert e["status"] == "synced" and e["local_end_after"] == hw, e
        (left,) = e["open_transactions"]
        assert (left["first_offset"], left["source_producer_id"]) == (10, scan["open_at_end"][0])
        assert left["open_until_ms"] > time.time() * 1000 + 60_000, left  # the 900 s default
        assert any("the next run resumes them" in n for n in e["notes"]), e
    else:
        assert (scan["end"], scan["stop"]["offset"], scan["stop"]["refused"]) == (10, 10, False)
        assert r.code == 4, r.stdout + r.stderr
        assert e["status"] == "behind" and e["local_end_after"] == 10, e
        assert e["target_end"] == hw and e["open_transactions"] == [], e
        assert f"producer {scan['open_at_end'][0]} from offset 10" in e["reason"], e
        assert "sync --follow" in e["reason"], e
        assert ends(clusters["local"], topic, 1) == {0: 10}

    t1.send(topic, records(2, seed=4)).commit()
    end = _source_end(clusters, topic)
    r = psync("sync", "--topic", topic, "--sources", "a", "--json", *REPLAY)
    assert r.code == 0, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert (e["local_end_after"], e["open_transactions"]) == (end, []), e
    if resumable:
        assert any(
            "resumed the local transaction left open from offset 10" in n for n in e["notes"]
        ), e
    _assert_mirrored(clusters, topic)


def _overlap(writers: list[_Txn], topic: str, rounds: int, seed: int) -> None:
    """Exactly-once writers as Kafka Streams runs them: each commits and at once begins its
    next transaction while the others' are open, so no offset has every transaction ended."""
    for i in range(rounds):
        for n, w in enumerate(writers):
            w.send(topic, records(2, seed=seed + 10 * i + n, base_timestamp_ms=None)).commit()
            w.begin().send(topic, records(1, seed=seed + 10 * i + n + 5, base_timestamp_ms=None))


def test_overlapping_exactly_once_writers_are_copied_on_every_run(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Two transactional producers, 80 overlapping committed transactions, the newest of each
    open: a replay that waited for a point where every transaction had ended copied nothing and
    reported the partition in sync. Now a run ends at or beyond the source's last stable
    offset with both local transactions left open (Kafka), or reports the partition behind,
    naming both (a local cluster that cannot resume a transaction)."""
    from partsync.io.cluster import Cluster

    _source_topic(clusters, topic)
    writers = [_txn(clusters, "a", f"{topic}-w{n}") for n in (1, 2)]
    for w in writers:
        w.begin().send(topic, records(1, seed=len(topic), base_timestamp_ms=None))
    _overlap(writers, topic, 40, seed=100)
    with Cluster(cluster_ref(clusters["a"], "a")) as src:
        lso = src.last_stable_offset(topic, 0)
    hw = ends(clusters["a"], topic, 1)[0]
    assert 0 < lso < hw or clusters.kind("a") == "tansu", (lso, hw)  # Tansu: no LSO

    r = psync("sync", "--topic", topic, "--sources", "a", "--json", *REPLAY)

    e = by_partition(r.json, topic)[0]
    if _resumable(clusters):
        assert r.code == 0, r.stdout + r.stderr
        assert e["status"] == "synced" and e["local_end_after"] == hw >= lso, e
        assert len(e["open_transactions"]) == 2, e
    else:
        assert r.code == 4, r.stdout + r.stderr
        assert e["status"] == "behind" and e["local_end_after"] == 0 < e["target_end"], e
        assert e["reason"].count("producer ") >= 2, e
    for w in writers:
        w.send(topic, records(2, seed=7)).commit()
    end = _source_end(clusters, topic)
    r = psync("sync", "--topic", topic, "--sources", "a", "--json", *REPLAY)
    assert r.code == 0, r.stdout + r.stderr
    assert by_partition(r.json, topic)[0]["local_end_after"] == end
    _assert_mirrored(clusters, topic)


@pytest.mark.kafka_only
def test_a_transaction_the_source_may_keep_open_longer_holds_the_copy_back(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """The source's coordinator says how long each open transaction may stay open. One whose
    producer's timeout (900 s) is longer than the local --transaction-timeout (120 s here)
    could outlive its local replay, which the local coordinator would abort where the source
    holds more of it: it is held, and the partition is behind (exit 4) right before it. One
    with a 60 s timeout is streamed and left open, though its records are two days old (Kafka
    Streams passes input timestamps on); so is an ended transaction of old records."""
    _source_topic(clusters, topic)
    a = clusters.bootstrap("a")
    old = int(time.time() * 1000) - 2 * 86_400_000
    dated = [Rec(r.key, r.value, r.headers, old) for r in records(3, seed=2)]
    ended = _txn(clusters, "a", f"{topic}-ended")
    ended.begin().send(topic, dated).commit()  # 0..2 and its marker at 3
    events = _txn(clusters, "a", f"{topic}-events", timeout_ms=60_000)
    events.begin().send(topic, dated)  # 4..6, open
    hanging = _txn(clusters, "a", f"{topic}-hanging", timeout_ms=900_000)
    hanging.begin().send(topic, dated)  # 7..9, open
    produce(a, topic, records(5, seed=3), partition=0)
    short = ("--transaction-timeout", "120")

    r = psync("sync", "--topic", topic, "--sources", "a", "--json", *REPLAY, *short)

    assert r.code == 4, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "behind" and e["local_end_after"] == 7, e
    assert "from offset 7" in e["reason"] and "--transaction-timeout" in e["reason"], e
    assert [t["first_offset"] for t in e["open_transactions"]] == [4], e
    planned = psync("plan", "--topic", topic, "--sources", "a", "--json", "--scan")
    stop = check_plan(planned.json)[(topic, 0)]["scan"]["stop"]
    assert (stop["offset"], stop["refused"]) == (7, False), stop
    events.commit()
    hanging.commit()
    end = _source_end(clusters, topic)
    r = psync("sync", "--topic", topic, "--sources", "a", "--json", *REPLAY)
    assert r.code == 0 and by_partition(r.json, topic)[0]["local_end_after"] == end, r.stdout
    _assert_mirrored(clusters, topic)


def test_a_mirror_starts_where_the_sources_log_start_cuts_a_transactions_batch(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Kafka Streams purges its repartition topics with DeleteRecords at committed offsets,
    often inside a transaction's batch: five committed 10-record transactions, the log start
    moved to 25 (inside the third, whose marker is at 32). The mirror starts (every run was
    refused before), at the source's log start, and reads the same at both isolation levels."""
    b = clusters["b"]
    if b.kind == "tansu":
        pytest.skip("source b is Tansu, which has no DeleteRecords to move its log start")
    create_topic(b.bootstrap, topic, 1, UNLIMITED_RETENTION)
    create_topic(clusters.bootstrap("local"), topic, 1, UNLIMITED_RETENTION)
    t = _txn(clusters, "b", f"{topic}-streams")
    for i in range(5):
        t.begin().send(topic, records(10, seed=i)).commit()
    end = _source_end(clusters, topic, "b")  # the last marker landed
    layout = [(x.base_offset, x.last_offset, x.is_control) for x in fetch_batches(b, topic, 0)]
    assert layout[4:6] == [(22, 31, False), (32, 32, True)], layout
    delete_records(b.bootstrap, topic, 0, 25)

    r = psync("sync", "--topic", topic, "--sources", "b", "--json")

    assert r.code == 0, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "synced" and e["local_end_after"] == end, e
    local = clusters["local"]
    served = fetch_batches(b, topic, 0, 25)[0].base_offset  # noida serves from the next batch
    assert bounds(local, topic, 1)[0].log_start == max(25, served)
    src = [_layout(x) for x in fetch_batches(b, topic, 0, 25)]
    assert [_layout(x) for x in fetch_batches(local, topic, 0, 25)] == src
    committed = "noida" not in (clusters.kind("b"), clusters.kind("local"))
    for isolation in ("read_committed", "read_uncommitted")[0 if committed else 1 :]:
        seen = [
            [
                (m.offset, m.key, m.value)
                for m in consume_all(
                    clusters.bootstrap(n), topic, 0, timeout=30, isolation=isolation
                )
            ]
            for n in ("b", "local")
        ]
        assert seen[0] and seen[1] == seen[0] and seen[0][0][0] >= 25, isolation


def _interleaved_history(clusters: Clusters, topic: str, rounds: int) -> None:
    """``rounds`` times: three producers' transactions interleaved in the partition (one
    committed, one aborted, one committed across the other two), with plain records between."""
    a = clusters.bootstrap("a")
    t1, t2, t3 = (_txn(clusters, "a", f"{topic}-t{n}", "lz4") for n in (1, 2, 3))
    for i in range(rounds):
        t3.begin().send(topic, records(4, seed=100 * i + 1))
        t1.begin().send(topic, records(5, seed=100 * i + 2))
        t2.begin().send(topic, records(3, seed=100 * i + 3))
        t1.send(topic, records(4, seed=100 * i + 4)).commit()
        t3.send(topic, records(2, seed=100 * i + 5))
        t2.send(topic, records(2, seed=100 * i + 6)).abort()
        t3.commit()
        produce(a, topic, records(3, seed=100 * i + 7), partition=0)


def _a_last_run_mirrors_it(clusters: Clusters, psync: Run, topic: str, seen: list[int]) -> None:
    """After the killed runs (the local ends each left: ``seen``), one run ends the mirror:
    every batch and marker at the source's offset, and diff agrees at both levels."""
    from tests.integration.test_faults import STALL_BOUND_S

    r = psync("sync", "--topic", topic, "--sources", "a", "--json", *REPLAY, timeout=STALL_BOUND_S)
    assert r.code == 0, r.stdout + r.stderr
    assert seen == sorted(seen), f"the local log went back between kills: {seen}"
    assert by_partition(r.json, topic)[0]["local_end_after"] == ends(clusters["a"], topic, 1)[0]
    _assert_mirrored(clusters, topic)
    for level in ("record", "batch"):
        d = psync("diff", "--topic", topic, "--clusters", "a,local", "--level", level, "--json")
        assert d.code == 0, (level, d.stdout + d.stderr)


@pytest.mark.faults
def test_a_replay_killed_again_and_again_resumes_the_transactions_it_left_open(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """SIGKILL at seeded random moments while transactions are replayed, and once right while
    a local transaction is open (between its data and its marker), seen from outside with
    DescribeProducers. Each next run resumes what the killed one left open instead of
    aborting it (an abort marker would land where the source holds more of the transaction),
    and a last run ends with every batch and marker at the source's offset. Every local
    append crosses a 10 ms link, so kills find transactions half replayed."""
    from tests.integration.kafka_proxy import LinkShape
    from tests.integration.test_faults import STALL_BOUND_S, _sync_process

    if not clusters.kind("local").startswith("kafka"):
        pytest.skip(
            f"the local {clusters.kind('local')} does not describe open transactions "
            "(KIP-664), so a killed replay's are aborted there, not resumed"
        )
    _source_topic(clusters, topic)
    _interleaved_history(clusters, topic, 12)
    local = clusters["local"]
    rng = random.Random(1708)
    seen: list[int] = []
    clusters.proxy.shape = LinkShape(rate=50e6, delay_s=0.005)
    try:
        for n in range(5):
            proc = _sync_process(clusters, topic, "a", "--no-group", *REPLAY)
            if n == 0:
                _wait_for_an_open_local_transaction(local, topic)
            else:
                time.sleep(rng.uniform(0.5, 2.5))
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=STALL_BOUND_S)
            seen.append(ends(local, topic, 1)[0])
    finally:
        clusters.proxy.shape = None

    _a_last_run_mirrors_it(clusters, psync, topic, seen)


# Where a replay is killed: (request, which one of the run's, after its answer reached the run).
_STEPS = [
    ("InitProducerId", 1, False),  # the partition's fencing identity
    ("DescribeTransactions", 1, False),  # the slots, at the first transaction
    ("InitProducerId", 3, False),  # amid fencing the slots
    ("AddPartitionsToTxn", 1, False),  # a local transaction begun, nothing in it
    ("AddPartitionsToTxn", 2, True),  # a second one begun beside it
    ("Produce", 2, False),  # a transaction's data on its way
    ("Produce", 3, True),  # and appended
    ("EndTxn", 1, False),  # the end on its way
    ("EndTxn", 1, True),  # ended; its marker not yet seen
    ("EndTxn", 3, True),
]


def _kill_first(procs: list[Any]) -> None:
    procs[0].send_signal(signal.SIGKILL)


@pytest.mark.faults
def test_a_replay_killed_at_each_of_its_steps_is_taken_up_by_the_next_run(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """SIGKILL at each kind of step of a replay, from outside: as its request passes the proxy
    in front of the local cluster (which still gets it) or right after the answer reached the
    run. Each next run takes over what the killed one left (a transaction begun, half
    appended, being ended) and the last one ends with every batch and marker at the source's
    offset."""
    from tests.integration.test_faults import STALL_BOUND_S, _sync_process

    if not clusters.kind("local").startswith("kafka"):
        pytest.skip(
            f"the local {clusters.kind('local')} does not describe open transactions "
            "(KIP-664), so a killed replay's are aborted there, not resumed"
        )
    _source_topic(clusters, topic)
    _interleaved_history(clusters, topic, 6)
    proxy, local = clusters.proxy, clusters["local"]
    seen: list[int] = []
    for api, nth, answered in _STEPS:
        running: list[Any] = []
        proxy.on_request(api, nth, functools.partial(_kill_first, running), answered=answered)
        running.append(_sync_process(clusters, topic, "a", "--no-group", *REPLAY))
        _out, err = running[0].communicate(timeout=STALL_BOUND_S)
        step = f"{api} #{nth}{' answered' if answered else ''}"
        assert proxy.hook_fired() and running[0].returncode == -signal.SIGKILL, (
            f"the run ended ({running[0].returncode}) before the step {step}: {err[-2000:]}"
        )
        seen.append(ends(local, topic, 1)[0])
    proxy.reset()

    _a_last_run_mirrors_it(clusters, psync, topic, seen)


def _wait_for_an_open_local_transaction(local: Broker, topic: str, *, is_open: bool = True) -> None:
    """Until the local partition has a transaction open (or, not ``is_open``, none), as its
    leader's DescribeProducers tells (KIP-664)."""
    from partsync._kafka import Connection

    deadline = time.monotonic() + 30
    with Connection(local.host, local.port, cluster="local") as conn:
        if not conn.supports("DescribeProducers"):
            pytest.skip(f"{local.kind} does not describe producers (KIP-664)")
        while time.monotonic() < deadline:
            code, producers = conn.describe_producers(topic, 0)
            if not code and any(p.txn_start >= 0 for p in producers) == is_open:
                return
            time.sleep(0.002 if is_open else 0.1)
    pytest.fail(f"no local transaction was seen {'open' if is_open else 'ended'} within 30 s")


def _wait_until_no_local_transaction_is_open(local: Broker, topic: str) -> None:
    _wait_for_an_open_local_transaction(local, topic, is_open=False)


@pytest.mark.faults
@pytest.mark.kafka_only
def test_a_replay_aborted_locally_where_the_source_committed_is_never_reported_in_sync(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """A run killed after appending a committed transaction's data, its EndTxn never reaching
    the local cluster: the local coordinator aborts the transaction after
    --transaction-timeout, its abort marker at the very offset of the source's commit marker,
    so both logs end at the same offset. The next run compares the last batches (the local
    coordinator lists the slot's transaction aborted) and refuses the partition; before, it
    planned the partition in sync and exited 0."""
    from tests.integration.test_faults import STALL_BOUND_S, _sync_process

    _source_topic(clusters, topic)
    a = clusters.bootstrap("a")
    produce(a, topic, records(5, seed=1), partition=0)
    _txn(clusters, "a", f"{topic}-t1").begin().send(topic, records(4, seed=2)).commit()
    end = _source_end(clusters, topic)
    proxy, local = clusters.proxy, clusters["local"]
    running: list[Any] = []
    proxy.on_request("EndTxn", 1, functools.partial(_kill_first, running), dropped=True)
    running.append(
        _sync_process(clusters, topic, "a", "--no-group", *REPLAY, "--transaction-timeout", "1")
    )
    _out, err = running[0].communicate(timeout=STALL_BOUND_S)
    assert proxy.hook_fired() and running[0].returncode == -signal.SIGKILL, err[-2000:]
    proxy.reset()
    _wait_until_no_local_transaction_is_open(local, topic)  # the coordinator aborted it
    assert ends(local, topic, 1)[0] == end
    mine, theirs = fetch_batches(local, topic, 0)[-1], fetch_batches(clusters["a"], topic, 0)[-1]
    assert mine.base_offset == theirs.base_offset == end - 1
    assert (marker_type(mine), marker_type(theirs)) == (0, 1)  # abort here, commit there

    for args in ((), ("--group", f"g-{topic}")):
        r = psync("sync", "--topic", topic, "--sources", "a", "--json", *REPLAY, *args)

        assert r.code == 3, r.stdout + r.stderr
        e = by_partition(r.json, topic)[0]
        assert e["status"] == "unsafe" and f"holds offset {end - 1}" in e["reason"], e
        assert "aborted a replayed transaction" in e["reason"], e
    plan = psync("plan", "--topic", topic, "--sources", "a", "--json", *REPLAY)
    p = check_plan(plan.json)[(topic, 0)]
    assert p["condition"] == "unsafe" and "aborted a replayed transaction" in p["reason"], p


@pytest.mark.faults
@pytest.mark.kafka_only
def test_a_stalled_follower_whose_replay_was_aborted_locally_reports_the_partition_unsafe(
    clusters: Clusters, topic: str, tmp_path: Path
) -> None:
    """A follower streams an open source transaction, then stalls (SIGSTOP) while the source
    commits it and the local coordinator aborts its replay (--transaction-timeout): both logs
    end at the same offset, abort marker here, commit marker there. Resumed, the follower
    compares the last batches instead of taking the partition for in sync, and reports it
    unsafe (exit 3 when stopped)."""
    from tests.integration.test_follow import Follower, _wait

    _source_topic(clusters, topic)
    produce(clusters.bootstrap("a"), topic, records(5, seed=1), partition=0)
    # A source timeout within the local one (less its margin): the transaction is streamed.
    t1 = _txn(clusters, "a", f"{topic}-t1", timeout_ms=1500)
    local = clusters["local"]
    f = Follower(
        clusters.config,
        topic,
        f"g-{topic}",
        tmp_path / "follower.log",
        *REPLAY,
        "--transaction-timeout",
        "2",
    )
    try:
        _wait("the follower to catch up", lambda: ends(local, topic, 1)[0] == 5, 60, f.stderr)
        t1.begin().send(topic, records(4, seed=2, base_timestamp_ms=None))
        _wait_for_an_open_local_transaction(local, topic)
        f.proc.send_signal(signal.SIGSTOP)
        try:
            t1.commit()
            end = _source_end(clusters, topic)
            _wait_until_no_local_transaction_is_open(local, topic)  # the coordinator aborted it
        finally:
            f.proc.send_signal(signal.SIGCONT)
        assert ends(local, topic, 1)[0] == end
        last = fetch_batches(local, topic, 0)[-1]
        assert last.base_offset == end - 1 and marker_type(last) == 0, last
        _wait("the follower to refuse the partition", lambda: _refusals(f) > 0, 60, f.stderr)
        assert ends(local, topic, 1)[0] == end  # nothing appended after it
    finally:
        code = f.stop()
    assert code == 3, f.stderr()[-3000:]
    assert "aborted a replayed transaction" in f.stderr(), f.stderr()[-3000:]


def _refusals(f: Any) -> float:
    """The partitions a follower refused so far, as its metrics tell."""
    return sum(v for (name, _), v in f.scrape().items() if name == "partsync_unsafe_refusals_total")


@pytest.mark.faults
@pytest.mark.kafka_only
def test_a_killed_replay_not_resumed_in_time_is_reported_where_it_diverges(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """The one way a replay can break offset identity: a run killed while a local transaction
    is open, and no run resuming it within --transaction-timeout. The local coordinator then
    aborts it, its marker landing where the source holds more of the transaction; the next
    run refuses the partition saying so, and diff reports that offset."""
    from tests.integration.test_faults import STALL_BOUND_S, _sync_process

    _source_topic(clusters, topic)
    _interleaved_history(clusters, topic, 3)
    local = clusters["local"]
    proc = _sync_process(clusters, topic, "a", "--no-group", *REPLAY, "--transaction-timeout", "1")
    _wait_for_an_open_local_transaction(local, topic)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=STALL_BOUND_S)
    _wait_until_no_local_transaction_is_open(local, topic)  # the coordinator aborted it
    killed_at = ends(local, topic, 1)[0] - 1  # its abort marker, after the appends in flight
    last = fetch_batches(local, topic, 0, killed_at)[-1]
    assert last.is_control and marker_type(last) == 0 and last.base_offset == killed_at
    # Where the local log first parts from the source's: the first abort marker where the
    # source holds data (the run may have had two transactions open, each aborted).
    theirs = {b.base_offset: b for b in fetch_batches(clusters["a"], topic, 0)}
    first = next(
        b
        for b in fetch_batches(local, topic, 0)
        if b.is_control and not theirs[b.base_offset].is_control
    )
    assert marker_type(first) == 0, first

    r = psync("sync", "--topic", topic, "--sources", "a", "--json", *REPLAY)

    assert r.code == 3, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "unsafe" and f"offset {killed_at}" in e["reason"], e
    assert "aborted a replayed transaction" in e["reason"], e
    for level in ("record", "batch"):
        d = psync("diff", "--topic", topic, "--clusters", "a,local", "--level", level, "--json")
        assert d.code == 3, d.stdout + d.stderr
        p = d.json["topics"][0]["partitions"][0]
        assert p["first_divergent_offset"] == first.base_offset, (p, killed_at)
        assert (
            f"local holds the abort marker of producer id {first.producer_id} (epoch "
            f"{first.producer_epoch}) at offset {first.base_offset}"
        ) in p["reason"], p
        assert "a holds data" in p["reason"], p


def test_a_follower_waits_for_the_marker_of_an_open_transaction(
    clusters: Clusters, topic: str, tmp_path: Path
) -> None:
    """Follow mode copies the open transaction's batches where the local cluster can carry it
    open (Kafka), or up to it elsewhere, then waits for source data past what it copied or held
    back (where held batches would wake it again at once), and copies the rest once the source
    commits."""
    from tests.integration.test_follow import Follower, _wait

    _source_topic(clusters, topic)
    a = clusters.bootstrap("a")
    produce(a, topic, records(10, seed=1), partition=0)
    t1 = _txn(clusters, "a", f"{topic}-t1")
    t1.begin().send(topic, records(3, seed=2, base_timestamp_ms=None))  # begun now
    produce(a, topic, records(5, seed=3), partition=0)
    reached = ends(clusters["a"], topic, 1)[0] if _resumable(clusters) else 10
    f = Follower(clusters.config, topic, f"g-{topic}", tmp_path / "follower.log", *REPLAY)
    local = clusters["local"]
    try:
        _wait(
            "the copy up to or through the open transaction",
            lambda: ends(local, topic, 1)[0] == reached,
            60,
            f.stderr,
        )
        time.sleep(1.0)  # its round has ended
        before = sum(clusters.proxy.requests.values())
        time.sleep(2.0)
        idle = sum(clusters.proxy.requests.values()) - before
        # Group heartbeats only; a follower woken by its own held batches ran a round (local
        # bounds, boundary reads) after every one, hundreds in 2 s.
        assert idle < 40, (idle, dict(clusters.proxy.requests))
        assert ends(local, topic, 1)[0] == reached
        t1.send(topic, records(2, seed=4)).commit()
        end = _source_end(clusters, topic)
        _wait("the rest after the commit", lambda: ends(local, topic, 1)[0] == end, 60, f.stderr)
    finally:
        f.stop()
    _assert_mirrored(clusters, topic)


@pytest.mark.kafka_only
def test_a_follower_streams_continuously_overlapping_exactly_once_writers(
    clusters: Clusters, psync: Run, topic: str, tmp_path: Path
) -> None:
    """Two writers that always keep a transaction open: the follower replays each as it goes
    (no point ever has every transaction ended) and keeps within seconds of the source's last
    stable offset; when they stop, the mirror is identical at both isolation levels."""
    from partsync.io.cluster import Cluster
    from tests.integration.test_follow import Follower, _wait

    _source_topic(clusters, topic)
    writers = [_txn(clusters, "a", f"{topic}-w{n}") for n in (1, 2)]
    for w in writers:
        w.begin().send(topic, records(1, seed=1, base_timestamp_ms=None))
    f = Follower(clusters.config, topic, f"g-{topic}", tmp_path / "follower.log", *REPLAY)
    local = clusters["local"]
    lags: list[float] = []
    try:
        with Cluster(cluster_ref(clusters["a"], "a")) as src:
            for burst in range(4):
                _overlap(writers, topic, 10, seed=1000 * burst)
                lso = src.last_stable_offset(topic, 0)
                started = time.monotonic()
                _wait(
                    f"the follower past the source's LSO {lso} (burst {burst})",
                    lambda lso=lso: ends(local, topic, 1)[0] >= lso,
                    30,
                    f.stderr,
                )  # type: ignore[misc]
                lags.append(time.monotonic() - started)
        for w in writers:
            w.send(topic, records(1, seed=9)).commit()
        end = _source_end(clusters, topic)
        _wait(
            "the follower at the source's end",
            lambda: ends(local, topic, 1)[0] == end,
            60,
            f.stderr,
        )
    finally:
        f.stop()
    assert max(lags) < 30, lags
    _assert_mirrored(clusters, topic)
    # How far the follower's replayed markers are from the source's in time (docs/benchmarks.md
    # "Markers' times behind a follower").
    d = psync("diff", "--topic", topic, "--clusters", "a,local", "--json")
    skew = d.json["topics"][0]["partitions"][0]["marker_time_skew_ms"]["local"]
    print(f"follower marker time skew: at most {skew} ms; lags {lags}")
    assert d.code == 0 and skew < 30_000, (skew, d.stdout)


def _java_producer(
    clusters: Clusters, topic: str, tid: str, transactions: int, *, abort_every: int = 4
) -> subprocess.Popen[str]:
    """Apache Kafka's own Java client (kafka-clients 4.1.1, ``tests/support/java``) running
    ``transactions`` transactions of 3 records on source a, every ``abort_every``-th aborted."""
    from tests.support.kafka_jvm import ensure_kafka

    lib = ensure_kafka("4.1.1")
    wanted = ("kafka-clients-", "slf4j-api-", "lz4-java-", "zstd-jni-", "snappy-java-")
    cp = ":".join(str(j) for j in sorted(lib.glob("*.jar")) if j.name.startswith(wanted))
    source = Path(__file__).resolve().parents[1] / "support" / "java" / "TxnProducer.java"
    argv = [
        "java",
        "-cp",
        cp,
        str(source),
        clusters.bootstrap("a"),
        topic,
        tid,
        str(transactions),
        "3",
        str(abort_every),
        "lz4",
    ]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finished(proc: subprocess.Popen[str]) -> None:
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0 and out.startswith("done"), (out, err[-2000:])


def _assert_transaction_version(clusters: Clusters, topic: str) -> None:
    """Transactions v2 (KIP-890) on a Kafka 4 source: every commit or abort bumps the producer
    epoch, so each marker carries an epoch one above its transaction's data; v1 (Kafka 3.9)
    keeps it."""
    v2 = str(getattr(clusters["a"], "version", "")).startswith("4.")
    data: dict[int, int] = {}  # producer id -> epoch of its open transaction's data
    checked = 0
    for b in fetch_batches(clusters["a"], topic, 0):
        if b.is_control:
            # v1 adds the partition before the data is sent: an abort that dropped the data
            # still ends it with a marker.
            epoch = data.pop(b.producer_id, None)
            assert epoch is not None or not v2, b.describe()
            if epoch is not None:
                assert b.producer_epoch == epoch + (1 if v2 else 0), b.describe()
                checked += 1
        elif b.is_transactional:
            data[b.producer_id] = b.producer_epoch
    assert checked and not data


@pytest.mark.kafka_only
def test_transactions_of_kafkas_own_java_client_are_replayed(
    clusters: Clusters, psync: Run, topic: str, tmp_path: Path
) -> None:
    """Source data written by Kafka 4's Java producer, with transactions v2 on a Kafka 4.1
    source (a new epoch per transaction, markers under the bumped epoch), replayed one-shot and
    then by a follower while two such producers write at once."""
    from tests.integration.test_follow import Follower, _wait

    _source_topic(clusters, topic)
    _finished(_java_producer(clusters, topic, f"{topic}-j1", 20))
    end = _source_end(clusters, topic)  # every marker landed, then checked
    _assert_transaction_version(clusters, topic)

    r = psync("sync", "--topic", topic, "--sources", "a", "--json", *REPLAY)

    assert r.code == 0, r.stdout + r.stderr
    assert by_partition(r.json, topic)[0]["local_end_after"] == end
    _assert_mirrored(clusters, topic)

    f = Follower(clusters.config, topic, f"g-{topic}", tmp_path / "follower.log", *REPLAY)
    local = clusters["local"]
    try:
        writers = [_java_producer(clusters, topic, f"{topic}-j{n}", 15) for n in (2, 3)]
        for w in writers:
            _finished(w)
        end = _source_end(clusters, topic)
        _assert_transaction_version(clusters, topic)
        _wait(
            "the follower at the source's end",
            lambda: ends(local, topic, 1)[0] == end,
            90,
            f.stderr,
        )
    finally:
        f.stop()
    _assert_mirrored(clusters, topic)


def _by_time(broker: Broker, topic: str, times: list[int]) -> list[int]:
    """Kafka's own answers to ListOffsets(timestamp) for partition 0."""
    from partsync._kafka import Connection

    with Connection(broker.host, broker.port, cluster=broker.kind) as conn:
        return [conn.list_offsets(topic, [0], t)[0][1] for t in times]


@pytest.mark.kafka_only
def test_seeking_a_mirror_by_time_skips_the_replayed_markers(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Replayed markers carry the local leader's time, written when the replay ran: Kafka's
    time lookup on the mirror stops at the first of them for every later time (the source
    answers each transaction's first offset). ``offsets --to-datetime`` sets a group where the
    source's lookup points, read from the mirror's data records only."""
    from tests.integration.test_offsets import _committed

    _source_topic(clusters, topic)
    t = _txn(clusters, "a", f"{topic}-w")
    for i in range(6):
        t.begin().send(topic, records(5, seed=i, base_timestamp_ms=None)).commit()
        time.sleep(0.05)  # each transaction's records a little newer than the last marker
    end = _source_end(clusters, topic)
    data = [b for b in fetch_batches(clusters["a"], topic, 0) if not b.is_control]
    times = [b.base_timestamp for b in data[1:]]
    want = _by_time(clusters["a"], topic, times)
    assert want == [b.base_offset for b in data[1:]], (want, times)
    time.sleep(1.5)  # the replay's markers are stamped this much later than the source's

    r = psync("sync", "--topic", topic, "--sources", "a", "--json", *REPLAY)

    assert r.code == 0 and by_partition(r.json, topic)[0]["local_end_after"] == end, r.stdout
    first_marker = next(b for b in fetch_batches(clusters["local"], topic, 0) if b.is_control)
    assert set(_by_time(clusters["local"], topic, times)) == {first_marker.base_offset}
    for n, when in enumerate(times):
        iso = datetime.fromtimestamp(when / 1000, tz=UTC).isoformat(timespec="milliseconds")
        group = f"{topic}-g{n}"
        r = psync("offsets", "--topic", topic, "--group", group, "--to-datetime", iso, "--json")
        assert r.code == 0, r.stdout + r.stderr
        (p,) = r.json["groups"][0]["partitions"]
        assert (p["status"], p["local_offset"], p["source_offset"]) == ("reset", want[n], None)
        assert _committed(clusters.bootstrap("local"), group, topic, 1) == {0: want[n]}
    r = psync(
        "offsets",
        "--topic",
        topic,
        "--group",
        f"{topic}-late",
        "--to-datetime",
        "2999-01-01T00:00:00",
        "--json",
    )
    assert r.json["groups"][0]["partitions"][0]["local_offset"] == end  # none that new
    # diff: the markers' times are a known difference, reported, not a divergence.
    d = psync("diff", "--topic", topic, "--clusters", "a,local", "--json")
    assert d.code == 0, d.stdout + d.stderr
    skew = d.json["topics"][0]["partitions"][0]["marker_time_skew_ms"]
    assert set(skew) == {"local"} and skew["local"] >= 1500, skew
    d = psync("diff", "--topic", topic, "--clusters", "a,local")
    assert "transaction markers' times differ by up to local" in d.stderr + d.stdout


@pytest.mark.kafka_only
def test_a_compacted_transactional_topic_is_replayed_with_its_holes_filled(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Apache Kafka's cleaner on a transactional topic: it removes records superseded inside a
    committed transaction's batch, and an aborted transaction's batch altogether, keeping the
    markers (delete.retention.ms). The mirror replays the transactions, re-encodes the holey
    batch inside its local transaction, and fills the removed batch's offsets and the holes
    with hole records; its markers are where the source's are, and both isolation levels read
    the source's records at their offsets."""
    from partsync.wire.holes import HOLE_HEADER, HOLE_KEY
    from tests.integration.sync_support import consumed

    a = clusters.bootstrap("a")
    create_topic(
        a,
        topic,
        1,
        {
            **UNLIMITED_RETENTION,
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "600000",
        },
    )
    create_topic(
        clusters.bootstrap("local"), topic, 1, {**UNLIMITED_RETENTION, "cleanup.policy": "compact"}
    )
    t1 = _txn(clusters, "a", f"{topic}-t1", "lz4")
    t2 = _txn(clusters, "a", f"{topic}-t2", "zstd")

    def keyed(keys: range, n: int) -> list[Rec]:
        return [
            Rec(
                key=b"key-%d" % k,
                value=b"round %d key %d " % (n, k) * 8,
                timestamp_ms=1_700_000_000_000 + 1000 * n + k,
            )
            for k in keys
        ]

    t1.begin().send(topic, keyed(range(10), 0)).commit()
    time.sleep(0.3)  # each round in a segment of its own (segment.ms)
    t2.begin().send(topic, keyed(range(20, 25), 1)).abort()
    time.sleep(0.3)
    t1.begin().send(topic, keyed(range(5), 2)).commit()
    time.sleep(0.3)
    # t2 writes again, so its aborted batch is not its last and the cleaner drops it whole:
    # an offset gap, and an abort marker whose transaction has no record left.
    t2.begin().send(topic, keyed(range(30, 32), 3)).commit()
    time.sleep(0.3)
    produce(a, topic, keyed(range(100, 101), 4), partition=0)  # rolls round 3's segment
    end = _source_end(clusters, topic)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # until the cleaner has removed the superseded
        held = consumed(a, topic, 0)
        stored = fetch_batches(clusters["a"], topic, 0)
        # 5 of round 0, none of the aborted round 1 (its batch gone), 5 + 2 + 1.
        if len(held) == 13 and not any(b.base_offset == 11 for b in stored):
            break
        time.sleep(0.5)
    assert len(held) == 13, f"Kafka's cleaner left {len(held)} records"
    assert any(b.is_transactional and b.has_holes for b in stored), "no holes inside a batch"
    assert not any(b.base_offset <= 11 <= b.last_offset for b in stored), "no gap"
    assert sum(b.is_control for b in stored) == 4, [b.describe() for b in stored]

    r = psync("sync", "--topic", topic, "--sources", "a", "--json", "--compaction-holes", "fill")

    assert r.code == 0, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "synced" and e["local_end_after"] == end, e
    # Kafka removes the aborted batch's records but may keep the batch, empty, for its
    # producer's last sequence: re-encoded like the holey one, or filled as a gap.
    holey = sum(b.has_holes for b in stored)
    assert e["batches_reencoded"] == holey and e["holes_filled"] == end - 13 - 4, e
    markers = [(b.base_offset, marker_type(b)) for b in stored if b.is_control]
    local_batches = fetch_batches(clusters["local"], topic, 0)
    assert [(b.base_offset, marker_type(b)) for b in local_batches if b.is_control] == markers
    for isolation in ("read_committed", "read_uncommitted"):
        src = {r.offset: r for r in consume_all(a, topic, 0, isolation=isolation)}
        got = consume_all(clusters.bootstrap("local"), topic, 0, isolation=isolation)
        assert {r.offset for r in got} >= set(src), isolation
        for rec in got:
            if rec.offset in src:
                assert rec == src[rec.offset], (isolation, rec)
            else:
                assert (rec.key, rec.value) == (HOLE_KEY, None), (isolation, rec)
                assert (HOLE_HEADER, None) in rec.headers, (isolation, rec)
    # Record level only: the local cleaner soon cleans the mirror too (a marker, stamped now,
    # rolls the segment of records stamped in 2023), dropping hole records under the one key
    # from its batches, which then differ from the source's as a batch.
    d = psync(
        "diff",
        "--topic",
        topic,
        "--clusters",
        "a,local",
        "--level",
        "record",
        "--json",
        "--compaction-holes",
        "fill",
    )
    assert d.code == 0, d.stdout + d.stderr


def test_a_transaction_stored_with_holes_as_a_cleaner_leaves_it_is_replayed_filled(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Source batches produced raw exactly as a compacted transactional log holds them (Tansu
    stores them): a transaction's batch with two records cleaned away, then its commit
    marker. The replay fills the holes inside the replayed transaction. (A marker whose
    transaction lost all its records needs a local coordinator that marks a partition added
    to a transaction without data, as Kafka's does: the real-Kafka test above.)"""
    from tests.integration.sync_support import (
        CONTROL_ATTRIBUTES,
        produce_raw,
        raw_batch,
        raw_record,
    )
    from tests.integration.test_compaction_holes import COMPACT, _require_compacted_local

    if clusters.kind("a") != "tansu":
        pytest.skip("Tansu stores client batches as a cleaner leaves them (Kafka refuses them)")
    a = clusters.bootstrap("a")
    create_topic(a, topic, 1, COMPACT)
    create_topic(clusters.bootstrap("local"), topic, 1, COMPACT)
    _require_compacted_local(clusters, topic)
    produce(a, topic, records(10, seed=1, null_keys_every=0), partition=0)
    holey = raw_batch(
        [raw_record(d, b"k%d" % d, b"v%d" % d) for d in (0, 2, 4)],
        4,
        attributes=0x10,
        producer_id=4242,
        producer_epoch=0,
    )
    assert produce_raw(clusters["a"], topic, 0, holey) == 10
    commit = raw_record(0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")
    marker = raw_batch(
        [commit], 0, attributes=CONTROL_ATTRIBUTES, producer_id=4242, producer_epoch=0
    )
    assert produce_raw(clusters["a"], topic, 0, marker) == 15
    produce(a, topic, records(5, seed=3, null_keys_every=0), partition=0)
    stored = fetch_batches(clusters["a"], topic, 0)
    if not any(b.is_control for b in stored):
        pytest.skip(f"{clusters.kind('a')} did not store the raw markers")
    end = ends(clusters["a"], topic, 1)[0]

    r = psync("sync", "--topic", topic, "--sources", "a", "--json", "--compaction-holes", "fill")

    assert r.code == 0, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "synced" and e["local_end_after"] == end, e
    assert (e["holes_filled"], e["batches_reencoded"]) == (2, 1), e
    local = fetch_batches(clusters["local"], topic, 0)
    assert [(b.base_offset, marker_type(b)) for b in local if b.is_control] == [
        (b.base_offset, marker_type(b)) for b in stored if b.is_control
    ]
    txn = next(b for b in local if b.base_offset == 10)
    assert txn.is_transactional and txn.record_count == 5, txn.describe()
