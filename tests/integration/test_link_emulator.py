"""The link emulator (``StrictProxy(shape=LinkShape(rate, delay))``) that long-fat-link tests and
scripts/bench_link.py use, since tc netem is not available here: a connection through it waits
at least the round trip for every answer and at least size/rate for every byte, and partsync
copies through it offset-identically.

Only lower bounds are asserted: a slow machine makes these take longer, never shorter."""

from __future__ import annotations

import time

import pytest

from partsync._kafka import Connection
from partsync.demo.brokers import Broker
from partsync.demo.data import assert_partitions_identical, create_topic, make_records, produce
from tests.conftest import run_cli
from tests.integration.kafka_proxy import LinkShape, StrictProxy
from tests.integration.sync_support import by_partition, write_config

pytestmark = [pytest.mark.integration]

RATE = 1_000_000  # bytes per second, each way, per connection
DELAY = 0.05  # one way


def test_every_answer_waits_the_round_trip_and_every_byte_the_rate(
    source_a: Broker, topic: str
) -> None:
    create_topic(source_a.bootstrap, topic, 1)
    produce(
        source_a.bootstrap, topic, make_records(3000, seed=1, value_size=400), compression="none"
    )
    with StrictProxy(source_a.bootstrap, shape=LinkShape(RATE, DELAY)) as proxy:
        t0 = time.monotonic()
        conn = Connection(proxy.host, proxy.port, cluster="a")  # ApiVersions: one round trip
        assert time.monotonic() - t0 >= 2 * DELAY
        try:
            t0 = time.monotonic()
            got = conn.fetch(topic, [(0, 0, 1 << 20)], max_wait_ms=500, min_bytes=1)
            elapsed = time.monotonic() - t0
        finally:
            conn.close()
    size = len(bytes(got[0].records))
    assert size > 500_000, size  # enough bytes for the rate to show
    assert elapsed >= 2 * DELAY + size / RATE, (elapsed, size)


def test_a_sync_through_the_emulated_link_is_offset_identical(
    source_a: Broker, local_broker: Broker, topic: str, tmp_path
) -> None:
    create_topic(source_a.bootstrap, topic, 2)
    create_topic(local_broker.bootstrap, topic, 2)
    for p in range(2):
        produce(
            source_a.bootstrap, topic, make_records(400, seed=p, partition=p), compression="lz4"
        )
    with StrictProxy(source_a.bootstrap, shape=LinkShape(RATE, DELAY)) as proxy:
        config = write_config(
            tmp_path / "partsync.toml",
            {"a": source_a, "local": local_broker},
            addresses={"a": proxy.bootstrap},
        )
        r = run_cli(
            "--config",
            str(config),
            "sync",
            "--topic",
            topic,
            "--sources",
            "a",
            "--no-group",
            "--connections-per-broker",
            "4",
            "--chunk-offsets",
            "100",
            "--json",
        )
        assert r.code == 0, r.stderr[-3000:]
        assert {p: e["local_end_after"] for p, e in by_partition(r.json, topic).items()} == {
            0: 400,
            1: 400,
        }
        proxy.assert_clean(require_produce=False)
    assert_partitions_identical(source_a.bootstrap, local_broker.bootstrap, topic, 2)


def test_one_chunk_is_cut_into_pieces_that_k_connections_fetch_several_at_a_time(
    source_a: Broker, local_broker: Broker, topic: str, tmp_path
) -> None:
    """Issue 15 goal 3: one partition, one chunk (the default --chunk-offsets), K=4. The copy
    cuts the chunk into byte-sized pieces, so all four connections fetch, and each keeps
    several fetches in flight; the copy is offset-identical however the answers interleave."""
    create_topic(source_a.bootstrap, topic, 1)
    create_topic(local_broker.bootstrap, topic, 1)
    # ~3 MB in 16 KB batches: about 12 pieces of at least 8 batches each.
    produce(
        source_a.bootstrap,
        topic,
        make_records(7000, seed=3, value_size=400),
        compression="none",
        batch_size=16 << 10,
    )
    with StrictProxy(source_a.bootstrap, shape=LinkShape(4 * RATE, DELAY)) as proxy:
        config = write_config(
            tmp_path / "partsync.toml",
            {"a": source_a, "local": local_broker},
            addresses={"a": proxy.bootstrap},
        )
        r = run_cli(
            "--config",
            str(config),
            "sync",
            "--topic",
            topic,
            "--sources",
            "a",
            "--no-group",
            "--connections-per-broker",
            "4",
            "--json",
        )
        assert r.code == 0, r.stderr[-3000:]
        assert by_partition(r.json, topic)[0]["local_end_after"] == 7000
        # With K=1 a one-shot run opens 3 connections to the source (bootstrap and metadata,
        # the boundary check, one fetcher); four fetchers make that at least 6.
        assert proxy.connections_made >= 6, proxy.connections_made
        assert proxy.max_fetches_in_flight >= 2, proxy.max_fetches_in_flight
        proxy.assert_clean(require_produce=False)
    assert_partitions_identical(source_a.bootstrap, local_broker.bootstrap, topic, 1)
