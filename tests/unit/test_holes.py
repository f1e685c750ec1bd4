"""Compaction holes (``partsync.wire.holes``): hole records with golden bytes, batches with
inner holes re-encoded with every codec (the source's records and header kept, a hole record
at each missing offset), empty batches, and hole batches for holes between batches."""

from __future__ import annotations

import pytest

from partsync.errors import UnsafeError
from partsync.wire.batch import Batch, client_header, seal
from partsync.wire.digest import batch_digest
from partsync.wire.holes import (
    HOLE_HEADER,
    fill_inner_holes,
    hole_batch,
    hole_record,
    is_hole,
    missing_deltas,
)
from partsync.wire.records import decode_records, read_varint
from tests.unit.test_batch import TS, build, parse

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def test_a_hole_record_is_a_keyed_tombstone_with_the_marking_header() -> None:
    # length 22 | attributes 0 | timestamp delta 5 | offset delta 3 | key "k" | value null |
    # one header "partsync-hole" with a null value (zigzag varints throughout).
    assert hole_record(3, 5, b"k") == b"\x2c\x00\x0a\x06\x02k\x01\x02\x1apartsync-hole\x01"
    assert HOLE_HEADER == "partsync-hole"
    length, pos = read_varint(hole_record(300, -1, b"key" * 50), 0)
    assert length == len(hole_record(300, -1, b"key" * 50)) - pos


@pytest.mark.parametrize("codec", list(CODECS))
def test_a_batch_with_inner_holes_gets_a_hole_record_at_each_missing_offset(codec: str) -> None:
    source = parse(
        build(4, base_offset=1000, codec=codec, offsets=[0, 2, 3, 7], producer=(42, 3, 17))
    )
    assert missing_deltas(source) == [1, 4, 5, 6]
    out = fill_inner_holes(source, key=b"hole")
    assert out is not None
    filled = Batch.parse(memoryview(out))
    filled.verify_crc()
    assert (filled.record_count, filled.last_offset_delta) == (8, 7)
    assert missing_deltas(filled) == []
    # Every header field is the source's but the count, the length and the CRC.
    for name in (
        "base_offset",
        "attributes",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "partition_leader_epoch",
    ):
        assert getattr(filled, name) == getattr(source, name), name
    kept = {r.offset: r for r in decode_records(source)}
    records = decode_records(filled)
    assert [r.offset for r in records] == list(range(1000, 1008))
    for r in records:
        if r.offset in kept:
            assert r == kept[r.offset]  # key, value, headers and timestamp as the source's
        else:
            assert is_hole(r.key, r.value, r.headers, hole_key=b"hole"), r
            assert not is_hole(r.key, r.value, r.headers)  # another reserved key
            # The timestamp of the source record before it: the batch stays in time order.
            before = max(o for o in kept if o < r.offset)
            assert r.timestamp == kept[before].timestamp
    assert records[0].timestamp == TS  # build() stamps record i at TS + 10 i


def test_holes_at_the_start_take_the_first_records_timestamp() -> None:
    source = parse(build(2, offsets=[2, 3], codec="lz4"))
    out = fill_inner_holes(source)
    assert out is not None
    records = decode_records(Batch.parse(memoryview(out)))
    assert [is_hole(r.key, r.value, r.headers) for r in records] == [True, True, False, False]
    assert records[0].timestamp == records[1].timestamp == records[2].timestamp


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_an_empty_batch_the_cleaner_kept_becomes_all_hole_records(codec: str) -> None:
    from partsync.wire.holes import compress

    empty = seal(client_header(CODECS[codec], 5, TS), compress(CODECS[codec], b""), 0)
    source = Batch.parse(memoryview(empty))
    assert (source.record_count, source.last_offset_delta) == (0, 4)
    assert missing_deltas(source) == [0, 1, 2, 3, 4]
    out = fill_inner_holes(source)
    assert out is not None
    records = decode_records(Batch.parse(memoryview(out)))
    assert len(records) == 5 and all(is_hole(r.key, r.value, r.headers) for r in records)
    assert {r.timestamp for r in records} == {TS}


def test_a_batch_without_holes_is_left_alone() -> None:
    source = parse(build(5, codec="gzip"))
    assert missing_deltas(source) == []
    assert fill_inner_holes(source) is None


def test_a_control_batch_missing_its_record_is_refused() -> None:
    empty = seal(client_header(0x20, 1, TS), b"", 0)  # the control bit, no record
    with pytest.raises(UnsafeError, match="control batch 0..0 lacks its record"):
        fill_inner_holes(Batch.parse(memoryview(empty)))


@pytest.mark.parametrize("codec", list(CODECS))
def test_a_hole_batch_fills_a_hole_between_batches(codec: str) -> None:
    batch = Batch.parse(memoryview(hole_batch(300, TS + 5, key=b"k", codec=CODECS[codec])))
    batch.verify_crc()
    assert (batch.base_offset, batch.record_count, batch.last_offset_delta) == (0, 300, 299)
    assert (batch.base_timestamp, batch.max_timestamp, batch.codec) == (TS + 5, TS + 5, codec)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    records = decode_records(batch)
    assert [r.offset for r in records] == list(range(300))
    assert all(is_hole(r.key, r.value, r.headers, hole_key=b"k") for r in records)
    with pytest.raises(ValueError):
        hole_batch(0, TS)


def _compacted(raw: bytes, drop: set[int]) -> Batch:
    """``raw`` as a cleaner leaves it: the records at offset deltas ``drop`` removed, its
    last offset kept."""
    from partsync.wire.holes import _split, compress
    from partsync.wire.records import records_section

    batch = Batch.parse(memoryview(raw))
    kept = [rec for d, _ts, rec in _split(records_section(batch)) if d not in drop]
    return Batch.parse(
        memoryview(seal(batch.data, compress(batch.attributes & 7, b"".join(kept)), len(kept)))
    )


def test_copies_of_a_batch_compacted_differently_agree() -> None:
    from partsync.wire.holes import disagreement

    full = build(8, base_offset=50, codec="lz4")
    a, b = _compacted(full, {1, 2}), _compacted(full, {2, 5, 6})
    assert disagreement(a, b) is None and disagreement(b, a) is None
    filled = fill_inner_holes(a)  # the mirror's copy of a: hole records at 51 and 52
    assert filled is not None
    mirror = Batch.parse(memoryview(filled))
    assert disagreement(mirror, b) is None and disagreement(b, mirror) is None
    assert disagreement(mirror, parse(full)) is None  # a source that has not cleaned yet


def test_a_record_that_differs_where_both_hold_one_is_a_disagreement() -> None:
    from partsync.wire.holes import disagreement

    a = _compacted(build(8, base_offset=50, codec="zstd"), {1})
    other = _compacted(build(8, base_offset=50, codec="zstd", value_size=48), {2})
    assert disagreement(a, other) == 50  # offset 50: both hold it, with different values
    shorter = parse(build(7, base_offset=50))
    assert disagreement(a, shorter) == 56  # the batches end apart


def test_a_clusters_batches_read_as_a_filled_mirror_holds_them() -> None:
    import struct

    from partsync.wire.holes import as_filled

    first = parse(build(3, base_offset=2, codec="zstd"))  # offsets 0, 1: a gap at the start
    holey = _compacted(build(5, base_offset=5, codec="lz4"), {1, 3})
    after = parse(build(2, base_offset=20, codec="gzip"))  # 10..19: a gap between batches
    counter = [0]
    out = list(as_filled(iter([first, holey, after]), 0, b"k", 4, counter))

    def hole_at(base: int, n: int, stamp: int) -> bytes:
        raw = bytearray(hole_batch(n, stamp, b"k"))
        struct.pack_into(">q", raw, 0, base)
        return batch_digest(Batch.parse(memoryview(bytes(raw))))

    assert [(b.base_offset, b.last_offset) for b in out] == [
        (0, 1),
        (2, 4),
        (5, 9),
        (10, 13),
        (14, 17),
        (18, 19),
        (20, 21),
    ]
    assert batch_digest(out[0]) == hole_at(0, 2, first.base_timestamp)
    assert out[1] is first and out[6] is after
    filled = fill_inner_holes(holey, b"k")
    assert filled is not None and batch_digest(out[2]) == batch_digest(
        Batch.parse(memoryview(filled))
    )
    # Stamped like the batch before the gap, in batches of at most 4 (as sync's --filler-records).
    assert [batch_digest(b) for b in out[3:6]] == [
        hole_at(10, 4, holey.max_timestamp),
        hole_at(14, 4, holey.max_timestamp),
        hole_at(18, 2, holey.max_timestamp),
    ]
    assert counter == [5]


def test_the_last_hole_keeps_the_headers_max_timestamp_when_the_newest_record_went() -> None:
    # Kafka sets a CreateTime batch's MaxTimestamp to its newest record's on append: the
    # header stays the source's only if a record carries it.
    source = _compacted(build(5, base_offset=0, codec="snappy"), {1, 4})
    assert source.max_timestamp == TS + 40
    out = fill_inner_holes(source)
    assert out is not None
    records = decode_records(Batch.parse(memoryview(out)))
    assert [r.timestamp for r in records] == [TS, TS, TS + 20, TS + 30, TS + 40]
    assert max(r.timestamp for r in records) == Batch.parse(memoryview(out)).max_timestamp


def test_a_malformed_batch_is_reported_corrupt_not_crashed_on() -> None:
    from partsync.errors import CorruptBatchError
    from partsync.wire.holes import compress

    good = Batch.parse(memoryview(build(3, codec="none")))
    records = bytes(good.data[61:])
    # Three records declared over two offsets: one delta twice.
    twice = Batch.parse(memoryview(seal(client_header(0, 2, TS), compress(0, records), 3)))
    with pytest.raises(CorruptBatchError, match="declares 3 records for 2 offsets"):
        fill_inner_holes(twice)
    cut = Batch.parse(memoryview(seal(client_header(0, 5, TS), records[:-3], 3)))
    with pytest.raises(CorruptBatchError, match="malformed record"):
        missing_deltas(cut)


def test_a_delete_horizon_is_no_records_timestamp() -> None:
    # KIP-534: a cleaned batch holding tombstones stores its delete horizon in BaseTimestamp.
    batch = parse(build(3, base_offset=0))
    assert not batch.has_delete_horizon and batch.first_stamp() == batch.base_timestamp
    raw = bytearray(batch.data)
    raw[22] |= 0x40  # attributes, low byte
    horizon = Batch.parse(memoryview(bytes(raw)))
    assert horizon.has_delete_horizon and horizon.first_stamp() == horizon.max_timestamp
