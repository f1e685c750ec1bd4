"""Transactional sources replayed (``sync --transactions replay``, issue 17): committed,
aborted and interleaved transactions of several producers land with every data batch and
every marker at the source's offset, and read_committed and read_uncommitted consumers (an
independent client, librdkafka) read the same records on both clusters."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

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
    end = ends(clusters["a"], topic, 1)[0]
    kinds = [(b.is_transactional, b.is_control) for b in fetch_batches(clusters["a"], topic, 0)]
    assert kinds.count((True, True)) == 4, kinds

    refused = psync("sync", "--topic", topic, "--sources", "a", "--json")
    assert refused.code == 3, refused.stdout + refused.stderr
    assert by_partition(refused.json, topic)[0]["local_end_after"] == 10

    r = psync("sync", "--topic", topic, "--sources", "a", "--json", *REPLAY)

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
    end = ends(clusters["a"], topic, 1)[0]
    r = psync("sync", "--topic", topic, "--sources", "a", "--json", *REPLAY)
    assert r.code == 0, r.stdout + r.stderr
    assert by_partition(r.json, topic)[0]["local_end_after"] == end
    _assert_mirrored(clusters, topic)
