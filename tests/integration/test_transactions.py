"""Transactional sources replayed (``sync --transactions replay``, issue 17): committed,
aborted and interleaved transactions of several producers land with every data batch and
every marker at the source's offset, and read_committed and read_uncommitted consumers (an
independent client, librdkafka) read the same records on both clusters."""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from partsync.demo.brokers import Broker
from partsync.demo.data import UNLIMITED_RETENTION, Rec, consume_all, create_topic, produce
from partsync.wire.batch import Batch
from partsync.wire.markers import marker_type
from tests.conftest import CliResult
from tests.integration.sync_support import (
    Clusters,
    by_partition,
    ends,
    fetch_batches,
    records,
)

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

Run = Callable[..., CliResult]
REPLAY = ("--transactions", "replay")


class _Txn:
    """A transactional confluent-kafka producer whose every send is flushed, so the test
    decides the order of batches in the partition."""

    def __init__(self, bootstrap: str, tid: str, codec: str = "none") -> None:
        from confluent_kafka import Producer

        self.p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                           "compression.type": codec, "linger.ms": 0, "log_level": 3})  # fmt: skip
        self.p.init_transactions(30)

    def begin(self) -> _Txn:
        self.p.begin_transaction()
        return self

    def send(self, topic: str, recs: Iterable[Rec]) -> _Txn:
        for r in recs:
            self.p.produce(topic, key=r.key, value=r.value, headers=r.headers or None,
                           timestamp=r.timestamp_ms or 0, partition=0)  # fmt: skip
        self.p.flush(30)
        return self

    def commit(self) -> None:
        self.p.commit_transaction(30)

    def abort(self) -> None:
        self.p.abort_transaction(30)


def _txn(clusters: Clusters, name: str, tid: str, codec: str = "none") -> _Txn:
    try:
        return _Txn(clusters.bootstrap(name), tid, codec)
    except Exception as e:  # noqa: BLE001 - a broker without transactions
        pytest.skip(f"{clusters.kind(name)} does not run transactions for librdkafka: {e}")


def _layout(b: Batch) -> tuple[Any, ...]:
    """What must be the same in a mirror: offsets, kind, and a marker's type."""
    kind = marker_type(b) if b.is_control else None
    return (b.base_offset, b.last_offset, b.is_transactional, b.is_control, kind, b.digest())


def _assert_mirrored(clusters: Clusters, topic: str, source: str = "a") -> None:
    src = [_layout(b) for b in fetch_batches(clusters[source], topic, 0)]
    got = [_layout(b) for b in fetch_batches(clusters["local"], topic, 0)]
    assert got == src
    # noida returns no aborted-transaction list in Fetch answers, so its read_committed
    # consumers read aborted records too (its markers are right: the layouts above agree).
    committed = "noida" not in (clusters.kind(source), clusters.kind("local"))
    for isolation in ("read_committed", "read_uncommitted")[0 if committed else 1 :]:
        seen = [
            [(r.offset, r.key, r.value, r.timestamp, r.headers)
             for r in consume_all(clusters.bootstrap(n), topic, 0, timeout=30,
                                  isolation=isolation)]
            for n in (source, "local")
        ]  # fmt: skip
        assert seen[0] and seen[1] == seen[0], isolation


def _source_end(clusters: Clusters, topic: str) -> int:
    """The source partition's end once every marker of its ended transactions has landed
    (librdkafka's commit returns when the coordinator has the decision, before the markers)."""
    from partsync._kafka import Connection

    src = clusters["a"]
    with Connection(src.host, src.port, cluster="a") as conn:
        deadline = time.monotonic() + 30
        while conn.supports("DescribeProducers") and time.monotonic() < deadline:
            code, producers = conn.describe_producers(topic, 0)
            if code or not any(p.txn_start >= 0 for p in producers):
                break
            time.sleep(0.02)
        else:
            time.sleep(1.0)  # a broker that cannot tell: its markers are written by now
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

    refused = psync("sync", "--topic", topic, "--sources", "a", "--json", "--transactions",
                    "refuse")  # fmt: skip
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


def test_a_transaction_still_open_in_the_source_waits_for_its_marker(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    """Data after an open transaction is not copied: a replay never leaves a local transaction
    open. Once the source commits, the next run copies the rest."""
    _source_topic(clusters, topic)
    a = clusters.bootstrap("a")
    produce(a, topic, records(10, seed=1), partition=0)
    t1 = _txn(clusters, "a", f"{topic}-t1")
    t1.begin().send(topic, records(3, seed=2))
    produce(a, topic, records(5, seed=3), partition=0)

    r = psync("sync", "--topic", topic, "--sources", "a", "--json", *REPLAY)

    assert r.code == 0, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "synced" and e["local_end_after"] == 10, e
    assert any("have no marker in the range yet" in n for n in e["notes"]), e
    assert ends(clusters["local"], topic, 1) == {0: 10}

    t1.send(topic, records(2, seed=4)).commit()
    end = _source_end(clusters, topic)
    r = psync("sync", "--topic", topic, "--sources", "a", "--json", *REPLAY)
    assert r.code == 0, r.stdout + r.stderr
    assert by_partition(r.json, topic)[0]["local_end_after"] == end
    _assert_mirrored(clusters, topic)


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
        pytest.skip(f"the local {clusters.kind('local')} does not describe open transactions "
                    "(KIP-664), so a killed replay's are aborted there, not resumed")  # fmt: skip
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

    r = psync("sync", "--topic", topic, "--sources", "a", "--json", *REPLAY,
              timeout=STALL_BOUND_S)  # fmt: skip

    assert r.code == 0, r.stdout + r.stderr
    assert seen == sorted(seen), f"the local log went back between kills: {seen}"
    assert by_partition(r.json, topic)[0]["local_end_after"] == ends(clusters["a"], topic, 1)[0]
    _assert_mirrored(clusters, topic)


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

    r = psync("sync", "--topic", topic, "--sources", "a", "--json", *REPLAY)

    assert r.code == 3, r.stdout + r.stderr
    e = by_partition(r.json, topic)[0]
    assert e["status"] == "unsafe" and f"offset {killed_at}" in e["reason"], e
    assert "aborted a replayed transaction" in e["reason"], e
    d = psync("diff", "--topic", topic, "--clusters", "a,local", "--level", "record", "--json")
    assert d.code == 3, d.stdout + d.stderr
    assert str(killed_at) in d.stdout, d.stdout


def test_a_follower_waits_for_the_marker_of_an_open_transaction(
    clusters: Clusters, topic: str, tmp_path: Path
) -> None:
    """Follow mode copies up to the open transaction, then waits for source data past what it
    held back (not at its local end, where the held batches would wake it again at once), and
    copies the rest once the source commits."""
    from tests.integration.test_follow import Follower, _wait

    _source_topic(clusters, topic)
    a = clusters.bootstrap("a")
    produce(a, topic, records(10, seed=1), partition=0)
    t1 = _txn(clusters, "a", f"{topic}-t1")
    t1.begin().send(topic, records(3, seed=2))
    produce(a, topic, records(5, seed=3), partition=0)
    f = Follower(clusters.config, topic, f"g-{topic}", tmp_path / "follower.log", *REPLAY)
    local = clusters["local"]
    try:
        _wait("the copy up to the open transaction", lambda: ends(local, topic, 1)[0] == 10, 60,
              f.stderr)  # fmt: skip
        time.sleep(1.0)  # its round has ended
        before = sum(clusters.proxy.requests.values())
        time.sleep(2.0)
        idle = sum(clusters.proxy.requests.values()) - before
        # Group heartbeats only; a follower woken by its own held batches ran a round (local
        # bounds, boundary reads) after every one, hundreds in 2 s.
        assert idle < 40, (idle, dict(clusters.proxy.requests))
        assert ends(local, topic, 1)[0] == 10
        t1.send(topic, records(2, seed=4)).commit()
        end = _source_end(clusters, topic)
        _wait("the rest after the commit", lambda: ends(local, topic, 1)[0] == end, 60, f.stderr)
    finally:
        f.stop()
    _assert_mirrored(clusters, topic)
