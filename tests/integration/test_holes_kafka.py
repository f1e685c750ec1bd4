"""Hole records on Apache Kafka (issue 17's pure layer against the real broker): batches whose
inner holes were filled, in every codec, an empty batch the cleaner kept, and a hole batch are
all accepted by a compacted topic as sent, land at the offsets they cover, and read back
through an independent client (librdkafka) as the source's records plus keyed tombstones."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from partsync._kafka import Connection
from partsync.demo.brokers import Broker
from partsync.demo.data import UNLIMITED_RETENTION, consume_all, create_topic
from partsync.wire.batch import Batch, client_header, rewrite_for_append, seal
from partsync.wire.holes import compress, fill_inner_holes, hole_batch, is_hole
from partsync.wire.records import decode_records
from tests.unit.test_batch import TS, build

pytestmark = [pytest.mark.integration, pytest.mark.kafka_only]

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def test_filled_batches_are_stored_as_sent_by_a_compacted_kafka_topic(
    broker_factory: Callable[[str], Broker], topic: str
) -> None:
    local = broker_factory("local")
    batches: list[bytes] = []
    for codec in CODECS:  # records 0 and 1 have keys: a compacted topic refuses keyless ones
        filled = fill_inner_holes(Batch.parse(memoryview(build(2, codec=codec, offsets=[0, 3]))))
        assert filled is not None
        batches.append(filled)
    empty = seal(client_header(CODECS["lz4"], 4, TS), compress(CODECS["lz4"], b""), 0)
    filled_empty = fill_inner_holes(Batch.parse(memoryview(empty)))
    assert filled_empty is not None
    batches += [filled_empty, hole_batch(3, TS, codec=CODECS["snappy"])]
    create_topic(
        local.bootstrap, topic, len(batches), {**UNLIMITED_RETENTION, "cleanup.policy": "compact"}
    )

    with Connection(local.host, local.port, cluster="local") as conn:
        for p, raw in enumerate(batches):
            conn.send_produce(
                topic, {p: rewrite_for_append(Batch.parse(memoryview(raw)), -1, -1, -1)}, acks=-1
            )
            answer = conn.receive_produce()[p]
            assert (answer.error_code, answer.base_offset) == (0, 0), (p, answer)

    for p, raw in enumerate(batches):
        sent = decode_records(Batch.parse(memoryview(raw)))
        got = consume_all(local.bootstrap, topic, p)
        assert [r.offset for r in got] == [r.offset for r in sent], p
        for a, b in zip(sent, got, strict=True):
            assert (b.key, b.value, b.timestamp) == (a.key, a.value, a.timestamp), (p, a, b)
            assert b.headers == list(a.headers), (p, a, b)
        holes = [is_hole(r.key, r.value, r.headers) for r in sent]
        assert holes == ([False, True, True, False] if p < len(CODECS) else [True] * len(sent))
