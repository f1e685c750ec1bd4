"""Issue 15 goal 2: a one-shot run's first round for many small partitions is taken together
(``run.together``, ``copy.bulk``): every partition fenced under its own transactional id, its
local bounds read again after the fence, its range fetched and appended with many partitions
per request, and every append verified. Whatever that path cannot finish goes through the usual
per-partition rounds, which also report it.

The strict proxy in front of the local cluster checks every Produce against Kafka's append
rules (tests/integration/conftest.py): one append in flight per partition, no append behind an
unanswered one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from partsync.demo.data import assert_partitions_identical, create_topic, make_records, produce
from partsync.plan.together import TOGETHER_MIN
from tests.conftest import CliResult
from tests.integration.sync_support import (
    Clusters,
    by_partition,
    ends,
    fetch_batches,
    produce_transactional,
    records,
)

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

Run = Callable[..., CliResult]

N = 2 * TOGETHER_MIN + 8
NOT_ENOUGH_REPLICAS = 19
INVALID_RECORD = 87


def _small(clusters: Clusters, topic: str, *, seed: int) -> None:
    """``N`` partitions of two batches each (so each partition's second append must wait for
    its first one's answer)."""
    a = clusters.bootstrap("a")
    create_topic(a, topic, N)
    create_topic(clusters.bootstrap("local"), topic, N)
    for n, s in ((2, seed), (1, seed + 1000)):  # one producer per round of batches
        recs = [r for p in range(N) for r in records(n, seed=s + p, partition=p)]
        produce(a, topic, recs, linger_ms=100)


def _sync(
    psync: Run, topic: str, *args: str, group: bool = False, timeout: float = 300
) -> CliResult:
    no_group = () if group else ("--no-group",)
    return psync(
        "sync", "--topic", topic, "--sources", "a", "--json", *no_group, *args, timeout=timeout
    )


@pytest.mark.parametrize("group", [False, True], ids=["no-group", "group"])
def test_many_small_partitions_are_copied_in_a_few_requests(
    clusters: Clusters, psync: Run, topic: str, group: bool
) -> None:
    """With or without the local group (a one-shot run joins it by default: the copy then runs
    beside the member's heartbeats)."""
    _small(clusters, topic, seed=100)
    proxy = clusters.proxy
    before = dict(proxy.requests)

    r = _sync(psync, topic, "--parallelism", "2", group=group)

    assert r.code == 0, r.stdout + r.stderr
    parts = by_partition(r.json, topic)
    assert {e["status"] for e in parts.values()} == {"synced"}, r.stdout
    for p, e in parts.items():
        assert e["local_end_after"] == 3, e
        assert e["batches"] == len(fetch_batches(clusters["a"], topic, p)) >= 2, e
    assert_partitions_identical(clusters.bootstrap("a"), clusters.bootstrap("local"), topic, N)
    sent = {api: n - before.get(api, 0) for api, n in proxy.requests.items()}
    # Every partition fenced under its own id (a coordinator still loading is asked again);
    # with --parallelism 2 the usual rounds would need about a Produce per batch (2N) and a
    # ListOffsets per partition.
    assert sent["InitProducerId"] >= N, sent
    assert sent["Produce"] <= N // 2, sent
    assert sent["ListOffsets"] <= 8, sent
    if group:
        assert r.json["group"], r.json


def test_a_partition_bigger_than_one_fetch_is_read_on_with_the_others(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Partition 3 holds ~300 KB in 200 offsets: its first fetch does not bring the whole
    range, so its next fetches ride along with the round (no round of its own: one fence per
    partition, no bounds read per partition)."""
    _small(clusters, topic, seed=200)
    a = clusters.bootstrap("a")
    produce(a, topic, make_records(200, seed=7, partition=3, value_size=1500), batch_size=16384)
    before = dict(clusters.proxy.requests)

    r = _sync(psync, topic, "--parallelism", "2")

    assert r.code == 0, r.stdout + r.stderr
    parts = by_partition(r.json, topic)
    assert {e["status"] for e in parts.values()} == {"synced"}, r.stdout
    assert parts[3]["local_end_after"] == 203 and parts[3]["batches"] > 2, parts[3]
    assert_partitions_identical(a, clusters.bootstrap("local"), topic, N)
    sent = {api: n - before.get(api, 0) for api, n in clusters.proxy.requests.items()}
    assert sent["ListOffsets"] <= 8, sent  # a usual round reads its partition's bounds


BIG = 120  # records of 2 KB per partition, in batches of 16 KiB: ~15 batches, ~250 KB


def _big(clusters: Clusters, topic: str, *, seed: int) -> int:
    """``N`` partitions of ``BIG`` records each: with an 8 MiB memory budget a partition takes
    several fetches (each of 64 KiB). Returns the number of batches."""
    a = clusters.bootstrap("a")
    create_topic(a, topic, N)
    create_topic(clusters.bootstrap("local"), topic, N)
    recs = [r for p in range(N) for r in records(BIG, seed=seed + p, partition=p, value_size=2000)]
    produce(a, topic, recs, batch_size=16384, linger_ms=50)
    return sum(len(fetch_batches(clusters["a"], topic, p)) for p in range(N))


BUDGET = ("--memory-budget", str(8 << 20))


def test_partitions_of_many_fetches_are_copied_together(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Every partition fenced once, fetched a piece at a time with the others (many partitions
    per Fetch), appended with one batch in flight per partition (the proxy checks it) and many
    partitions per Produce request."""
    batches = _big(clusters, topic, seed=700)
    before = dict(clusters.proxy.requests)

    r = _sync(psync, topic, "--parallelism", "2", *BUDGET)

    assert r.code == 0, r.stdout + r.stderr
    parts = by_partition(r.json, topic)
    assert {e["status"] for e in parts.values()} == {"synced"}, r.stdout
    assert all(e["local_end_after"] == BIG for e in parts.values()), r.stdout
    assert sum(e["batches"] for e in parts.values()) == batches
    assert_partitions_identical(clusters.bootstrap("a"), clusters.bootstrap("local"), topic, N)
    sent = {api: n - before.get(api, 0) for api, n in clusters.proxy.requests.items()}
    # The usual rounds, two partitions at a time, would send a Produce request per batch or
    # two and read each partition's bounds (a few ListOffsets requests per two partitions).
    assert sent["Produce"] <= batches // 4, (sent, batches)
    assert sent["ListOffsets"] <= 12, sent


def test_a_transaction_past_the_first_fetch_is_left_to_the_usual_rounds(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """The last partition (last in each Fetch request: a broker that fills answers greedily
    still gives it one piece at a time) goes on with a committed transaction after its plain
    batches: what comes before it is appended here, the rest (the replayed transaction and its
    marker at the source's offset) by the partition's usual rounds."""
    _big(clusters, topic, seed=800)
    a = clusters.bootstrap("a")
    try:
        produce_transactional(a, topic, LAST, records(5, seed=801))
    except Exception as e:  # noqa: BLE001 - a broker without transactions
        pytest.skip(f"{clusters.kind('a')} does not run transactions for librdkafka: {e}")
    produce(a, topic, records(5, seed=802), partition=LAST)
    end = _settled_end(clusters, topic)
    before = dict(clusters.proxy.requests)

    # No retries to spend: handing the partition on to its own rounds is not a failure.
    r = _sync(psync, topic, "--retries", "0", *BUDGET)

    assert r.code == 0, r.stdout + r.stderr
    sent = {api: n - before.get(api, 0) for api, n in clusters.proxy.requests.items()}
    assert sent.get("EndTxn") == 1, sent  # the transaction was replayed, not copied as data
    parts = by_partition(r.json, topic)
    assert {e["status"] for e in parts.values()} == {"synced"}, r.stdout
    assert parts[LAST]["local_end_after"] == end, parts[LAST]
    src, got = (fetch_batches(clusters[n], topic, LAST) for n in ("a", "local"))
    assert [(b.base_offset, b.is_transactional, b.is_control) for b in got] == [
        (b.base_offset, b.is_transactional, b.is_control) for b in src
    ]
    assert_partitions_identical(a, clusters.bootstrap("local"), topic, range(LAST))


LAST = N - 1


def _settled_end(clusters: Clusters, topic: str) -> int:
    """The last partition's end once the source's transaction marker has landed (librdkafka's
    commit returns before the coordinator wrote it)."""
    deadline = time.monotonic() + 30
    while True:
        batches = fetch_batches(clusters["a"], topic, LAST)
        if any(b.is_control for b in batches) or time.monotonic() > deadline:
            return batches[-1].next_offset
        time.sleep(0.05)


def test_a_refusal_past_the_first_fetch_stops_that_partition_there(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """INVALID_RECORD on the last partition's 10th batch (well past its first fetch): unsafe at
    that batch's offset, with the nine before it copied; every other partition is copied."""
    _big(clusters, topic, seed=900)
    tenth = fetch_batches(clusters["a"], topic, LAST)[9].base_offset
    clusters.kafka.reject_produce(topic, LAST, INVALID_RECORD, skip=9)

    r = _sync(psync, topic, *BUDGET)

    assert r.code == 3, r.stdout + r.stderr
    parts = by_partition(r.json, topic)
    e = parts[LAST]
    assert e["status"] == "unsafe" and e["local_end_after"] == tenth, e
    assert "INVALID_RECORD" in e["reason"] and f"offset {tenth}" in e["reason"], e["reason"]
    assert ends(clusters["local"], topic, N)[LAST] == tenth
    assert {s["status"] for p, s in parts.items() if p != LAST} == {"synced"}, r.stdout


def test_cut_connections_while_copying_many_fetches_converge_in_one_run(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    _big(clusters, topic, seed=1000)
    clusters.kafka.cut_after_produce(0.2, seed=16, limit=2)

    r = _sync(psync, topic, *BUDGET)

    assert clusters.kafka.injected["cut-after-produce"] >= 1
    assert r.code == 0, r.stdout + r.stderr
    assert {e["status"] for e in by_partition(r.json, topic).values()} == {"synced"}, r.stdout
    assert_partitions_identical(clusters.bootstrap("a"), clusters.bootstrap("local"), topic, N)


def test_a_retriable_refusal_is_retried_by_the_usual_rounds(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Partition 5's first append is refused (NOT_ENOUGH_REPLICAS, answered late): its second
    batch is never sent behind it (the proxy's check), and the partition is retried in the run."""
    _small(clusters, topic, seed=300)
    clusters.kafka.reject_produce(topic, 5, NOT_ENOUGH_REPLICAS, hold_s=0.5)

    r = _sync(psync, topic)

    assert r.code == 0, r.stdout + r.stderr
    assert clusters.kafka.injected[f"produce-error-{NOT_ENOUGH_REPLICAS}"] == 1
    assert by_partition(r.json, topic)[5]["status"] == "synced"
    assert_partitions_identical(clusters.bootstrap("a"), clusters.bootstrap("local"), topic, N)


def test_a_refused_batch_stops_its_partition_and_no_other(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """INVALID_RECORD on partition 7's second batch is not retriable: the partition is unsafe at
    that batch's offset with the first batch copied; every other partition is copied."""
    _small(clusters, topic, seed=400)
    clusters.kafka.reject_produce(topic, 7, INVALID_RECORD, skip=1)

    r = _sync(psync, topic)

    assert r.code == 3, r.stdout + r.stderr
    parts = by_partition(r.json, topic)
    e = parts[7]
    assert e["status"] == "unsafe" and e["local_end_after"] == 2, e
    assert "INVALID_RECORD" in e["reason"] and "offset 2" in e["reason"], e["reason"]
    assert ends(clusters["local"], topic, N)[7] == 2
    assert {s["status"] for p, s in parts.items() if p != 7} == {"synced"}


def test_cut_connections_while_appending_converge_in_one_run(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Produce connections are cut right after a request went out: the answers of every
    partition in it are lost, and each of those partitions goes on from the local log end the
    broker really has (an append the cut hid counts as this run's)."""
    _small(clusters, topic, seed=500)
    clusters.kafka.cut_after_produce(0.5, seed=15, limit=2)

    r = _sync(psync, topic)

    assert clusters.kafka.injected["cut-after-produce"] >= 1
    assert r.code == 0, r.stdout + r.stderr
    assert {e["status"] for e in by_partition(r.json, topic).values()} == {"synced"}, r.stdout
    assert_partitions_identical(clusters.bootstrap("a"), clusters.bootstrap("local"), topic, N)


def test_a_batch_bigger_than_the_in_flight_limit_is_still_fetched(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """With --max-in-flight-bytes 64 KiB and batches of ~100 KB, a partition's next fetch must
    grow past the copy's own limit to hold one whole batch: it goes as the copy's head fetch
    instead of waiting forever for room its limit can never give. (Kafka gives a partition after
    the first with data in a Fetch answer no batch bigger than it asked for, KIP-74: this hung
    on Kafka; the PyPI brokers return whole batches.)"""
    a = clusters.bootstrap("a")
    create_topic(a, topic, N)
    create_topic(clusters.bootstrap("local"), topic, N)
    recs = [r for p in range(N) for r in records(60, seed=1100 + p, partition=p, value_size=2000)]
    produce(a, topic, recs, batch_size=128 << 10, linger_ms=200)
    assert max(b.size for b in fetch_batches(clusters["a"], topic, N - 1)) > 64 << 10

    r = _sync(psync, topic, "--max-in-flight-bytes", str(64 << 10), *BUDGET, timeout=120)

    assert r.code == 0, r.stdout + r.stderr
    assert {e["status"] for e in by_partition(r.json, topic).values()} == {"synced"}, r.stdout
    assert_partitions_identical(a, clusters.bootstrap("local"), topic, N)


@pytest.mark.parametrize("size", ["small", "big"])
def test_a_small_memory_budget_takes_fewer_partitions_together_and_never_hangs(
    clusters: Clusters, psync: Run, topic: str, size: str
) -> None:
    """1 MiB holds 16 of the 64 KiB fetches the partitions taken together reserve: the waves are
    a few partitions each (and one that finds no room goes the usual way), the partitions of
    many fetches wait for room their own appends make, and the run ends."""
    if size == "small":
        _small(clusters, topic, seed=600)
    else:
        _big(clusters, topic, seed=600)

    r = _sync(psync, topic, "--memory-budget", str(1 << 20), timeout=120)

    assert r.code == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr  # e.g. a wave with nothing more to read
    assert {e["status"] for e in by_partition(r.json, topic).values()} == {"synced"}, r.stdout
    assert_partitions_identical(clusters.bootstrap("a"), clusters.bootstrap("local"), topic, N)
