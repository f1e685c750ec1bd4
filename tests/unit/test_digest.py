"""partsync.wire.digest: chunk digests and the N-way comparison, on constructed batches and units."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from partsync.wire.batch import Batch, iter_batches, rewrite_for_append
from partsync.wire.digest import (
    ChunkDigest,
    Unit,
    batch_unit,
    chunk_digest,
    compare_chunks,
    describe_record_difference,
    first_divergence,
    iter_chunks,
    record_unit,
    split_majority,
)
from partsync.wire.records import Record, iter_records
from tests.unit import diffkit
from tests.unit.diffkit import BASE_TS


def u(first: int, last: int | None = None, tag: str = "a") -> Unit:
    last = first if last is None else last
    return Unit(first, last, f"{tag}:{first}:{last}".encode())


def batch_units(raw: bytes) -> list[Unit]:
    return [batch_unit(b) for b in iter_batches(raw)]


def record_units(raw: bytes) -> list[Unit]:
    return [record_unit(r) for b in iter_batches(raw) for r in iter_records(b)]


def chunks(units: Sequence[Unit], size: int, start: int = 0) -> list[ChunkDigest]:
    return list(iter_chunks(units, size, start=start))


# -- chunking ----------------------------------------------------------------------------------


def test_chunks_are_offset_aligned_and_skip_empty_ones() -> None:
    units = [u(0, 4), u(5, 9), u(10, 14), u(35, 39)]
    got = chunks(units, 10)
    assert [(c.index, [x.first for x in c.units]) for c in got] == [
        (0, [0, 5]),
        (1, [10]),
        (3, [35]),
    ]
    assert got[0].digest == chunk_digest(units[:2])


def test_a_batch_belongs_to_the_chunk_of_its_base_offset() -> None:
    # 8..23 reaches into chunks 1 and 2 but counts once, in chunk 0 (its base offset's).
    got = chunks([u(0, 7), u(8, 23), u(24, 29)], 10)
    assert [(c.index, len(c.units)) for c in got] == [(0, 2), (2, 1)]


def test_a_batch_starting_below_the_range_counts_at_the_range_start() -> None:
    got = chunks([u(95, 104), u(105, 110)], 10, start=100)
    assert [c.index for c in got] == [10]


def test_chunk_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least one offset"):
        chunks([u(0)], 0)


def test_chunk_digest_covers_offsets_and_digests() -> None:
    base = chunk_digest([Unit(0, 4, b"x"), Unit(5, 9, b"y")])
    assert chunk_digest([Unit(0, 4, b"x"), Unit(5, 9, b"y")]) == base
    assert chunk_digest([Unit(0, 4, b"x"), Unit(5, 8, b"y")]) != base
    assert chunk_digest([Unit(0, 4, b"x"), Unit(5, 9, b"z")]) != base
    assert chunk_digest([Unit(0, 4, b"x")]) != base


# -- who disagrees -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("held", "agreeing", "disagreeing"),
    [
        ([("dc1", 1), ("dc2", 1), ("dc3", 2)], ("dc1", "dc2"), ("dc3",)),
        ([("dc1", 2), ("dc2", 1), ("dc3", 1)], ("dc2", "dc3"), ("dc1",)),  # majority beats order
        ([("dc1", 1), ("dc2", 2)], ("dc1",), ("dc2",)),  # tie: the first listed is the reference
        ([("dc1", 1), ("dc2", 2), ("dc3", 2), ("dc4", 1)], ("dc1", "dc4"), ("dc2", "dc3")),
        ([("dc1", 1), ("dc2", 2), ("dc3", 3)], ("dc1",), ("dc2", "dc3")),
        ([("dc1", None), ("dc2", 1), ("dc3", 1)], ("dc2", "dc3"), ("dc1",)),
    ],
)
def test_split_majority(
    held: list[tuple[str, object]], agreeing: tuple[str, ...], disagreeing: tuple[str, ...]
) -> None:
    assert split_majority(held) == (agreeing, disagreeing)


def test_first_divergence_equal_sequences() -> None:
    same = [u(0, 4), u(5, 9)]
    assert first_divergence({"a": same, "b": list(same), "c": list(same)}) is None


def test_first_divergence_names_the_minority_and_the_offset() -> None:
    good = [u(0, 4), u(5, 9), u(10, 14)]
    bad = [u(0, 4), u(5, 9, tag="b"), u(10, 14)]
    div = first_divergence({"dc1": good, "dc2": bad, "dc3": good}, chunk=0)
    assert div is not None
    assert (div.offset, div.agreeing, div.disagreeing, div.chunk) == (
        5,
        ("dc1", "dc3"),
        ("dc2",),
        0,
    )
    assert not div.boundaries_differ


def test_first_divergence_on_different_boundaries() -> None:
    div = first_divergence({"a": [u(0, 4), u(5, 9)], "b": [u(0, 2), u(3, 9)]})
    assert div is not None and div.offset == 0 and div.boundaries_differ
    assert div.disagreeing == ("b",)


def test_first_divergence_when_one_sequence_ends() -> None:
    div = first_divergence({"a": [u(0), u(1)], "b": [u(0)]})
    assert div is not None and div.offset == 1 and div.units["b"] is None and div.boundaries_differ


def test_first_divergence_clamps_to_the_range_start() -> None:
    div = first_divergence({"a": [u(95, 104)], "b": [u(95, 104, tag="b")]}, start=100)
    assert div is not None and div.offset == 100


# -- comparing chunk streams -------------------------------------------------------------------


def test_identical_streams() -> None:
    units = [u(i * 5, i * 5 + 4) for i in range(20)]
    res = compare_chunks({"a": iter_chunks(units, 10), "b": iter_chunks(list(units), 10)})
    assert res.identical and res.chunks == 10 and res.units == 20


def test_divergence_in_a_later_chunk_and_no_reading_past_it() -> None:
    good = [u(i) for i in range(100)]
    bad = [*good[:57], u(57, tag="x"), *good[58:]]
    pulled = []

    def lazy(units: list[Unit]) -> Iterator[Unit]:
        for x in units:
            pulled.append(x.first)
            yield x

    res = compare_chunks({"a": iter_chunks(lazy(good), 10), "b": iter_chunks(bad, 10)})
    assert res.divergence is not None
    assert (res.divergence.offset, res.divergence.chunk, res.chunks) == (57, 5, 5)
    assert max(pulled) <= 60  # stopped in chunk 5 (plus the unit that closed it)


def test_a_chunk_missing_on_one_cluster() -> None:
    a = [u(0), u(1), u(25)]
    b = [u(0), u(1), u(35)]
    res = compare_chunks({"a": iter_chunks(a, 10), "b": iter_chunks(b, 10)})
    assert res.divergence is not None
    assert res.divergence.offset == 25 and res.divergence.units["b"] is None


def test_empty_streams_are_identical() -> None:
    assert compare_chunks({"a": [], "b": []}).identical


# -- real batch layouts (the two levels) ----------------------------------------------------


def _shallow_copy(raw: bytes) -> bytes:
    """What partsync's copy does to each batch, then what the local broker stores."""
    out = b""
    for b in iter_batches(raw):
        appended = rewrite_for_append(b, producer_id=4242, producer_epoch=3, sequence=17)
        appended[0:8] = b.base_offset.to_bytes(8, "big")  # broker assigns the same offset
        appended[12:16] = (7).to_bytes(4, "big")  # and its own leader epoch
        out += bytes(appended)
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_shallow_copies_compare_equal_at_batch_level(codec: str) -> None:
    src = diffkit.log_of(diffkit.records(30), [10, 10, 10], codec=codec)
    copy = _shallow_copy(src)
    assert copy != src
    res = compare_chunks(
        {"src": iter_chunks(batch_units(src), 15), "copy": iter_chunks(batch_units(copy), 15)}
    )
    assert res.identical and res.units == 3


def test_transactional_bit_is_ignored_by_the_batch_digest() -> None:
    recs = diffkit.records(3)
    plain = diffkit.make_batch(recs)
    txn = diffkit.make_batch(recs, transactional=True, producer=(9, 0, 0))
    assert batch_units(plain) == batch_units(txn)


def _flip_in_batch(raw: bytes, index: int, from_end: int) -> bytes:
    """Flip one bit ``from_end`` bytes before the end of batch ``index`` and recompute its CRC,
    so the change looks like legitimately different data (a valid batch)."""
    from partsync.wire.batch import compute_crc

    batches = list(iter_batches(raw))
    start = sum(b.size for b in batches[:index])
    end = start + batches[index].size
    out = bytearray(raw)
    out[end - from_end] ^= 0x01
    out[start + 17 : start + 21] = compute_crc(out[start:end]).to_bytes(4, "big")
    return bytes(out)


def test_a_single_changed_byte_is_found() -> None:
    src = diffkit.log_of(diffkit.records(30), [10, 10, 10], codec="none")
    changed = _flip_in_batch(src, 1, 3)  # inside the last record's header value
    res = compare_chunks(
        {"a": iter_chunks(batch_units(src), 100), "b": iter_chunks(batch_units(changed), 100)}
    )
    assert res.divergence is not None and res.divergence.offset == 10
    assert not res.divergence.boundaries_differ
    rec = first_divergence({"a": record_units(src), "b": record_units(changed)})
    assert rec is not None and rec.offset == 19  # the last record of batch 10..19


def test_different_boundaries_same_records() -> None:
    recs = diffkit.records(30)
    a = diffkit.log_of(recs, [10, 10, 10], codec="gzip")
    b = diffkit.log_of(recs, [7, 7, 7, 9], codec="lz4")
    at_batch = compare_chunks(
        {"a": iter_chunks(batch_units(a), 100), "b": iter_chunks(batch_units(b), 100)}
    )
    assert at_batch.divergence is not None and at_batch.divergence.boundaries_differ
    at_record = compare_chunks(
        {"a": iter_chunks(record_units(a), 8), "b": iter_chunks(record_units(b), 8)}
    )
    assert at_record.identical and at_record.units == 30 and at_record.chunks == 4


def test_record_level_finds_the_exact_offset_across_layouts() -> None:
    recs = diffkit.records(40)
    other = [
        *recs[:23],
        diffkit.R(b"key-23", b"changed", recs[23].headers, recs[23].ts),
        *recs[24:],
    ]
    a = diffkit.log_of(recs, [10, 10, 10, 10], codec="zstd")
    b = diffkit.log_of(other, [16, 16, 8], codec="snappy")
    c = diffkit.log_of(recs, [40], codec="none")
    res = compare_chunks(
        {n: iter_chunks(record_units(x), 8) for n, x in (("a", a), ("b", b), ("c", c))}
    )
    assert res.divergence is not None
    assert (res.divergence.offset, res.divergence.disagreeing, res.chunks) == (23, ("b",), 2)


# -- describing a record difference ------------------------------------------------------------


def test_describe_record_difference() -> None:
    ref = Record(5, BASE_TS, b"k", b"v", (("h", b"1"),))
    got = describe_record_difference(
        {"dc1": ref, "dc2": Record(5, BASE_TS + 1, b"k", b"w", ()), "dc3": None, "dc4": ref}, "dc1"
    )
    assert got == "dc2 differs from dc1 in timestamp, value, headers; dc3 has no record there"
    assert describe_record_difference({"a": None, "b": ref}, "b") == "a has no record there"
    assert describe_record_difference({"a": ref, "b": ref}, "a") == "records are equal"


def test_units_of_real_batches_are_plain_data() -> None:
    raw = diffkit.make_batch(diffkit.records(4), base_offset=40)
    (b,) = list(iter_batches(raw))
    assert isinstance(b, Batch)
    unit = batch_unit(b)
    assert (unit.first, unit.last, len(unit.digest), unit.span) == (40, 43, 16, "40..43")
    assert record_unit(next(iter_records(b))).span == "40"
