"""The pure byte layer, ``partsync.wire.batch``: walking, checking and shallowly rewriting batches.

Batches are built with kafka-python's ``DefaultRecordBatchBuilder`` (an independent
implementation of the v2 format; imported here in tests only), then parsed by partsync.
"""

from __future__ import annotations

import struct
import warnings

import crc32c
import pytest

from partsync.errors import CorruptBatchError, UnsafeError
from partsync.wire.batch import (
    CODECS,
    HEADER_SIZE,
    Batch,
    check_appendable,
    compute_crc,
    iter_batches,
    rewrite_for_append,
)
from partsync.wire.digest import batch_digest

with warnings.catch_warnings():
    # kafka-python 3.0 warns (DeprecationWarning) while loading its JSON protocol schemas,
    # which filterwarnings = error would turn into an import error.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

CODEC_IDS = {name: cid for cid, name in CODECS.items()}
TS = 1_700_000_000_000

# Byte ranges of the v2 header (Kafka's DefaultRecordBatch).
BASE_OFFSET = slice(0, 8)
BATCH_LENGTH = slice(8, 12)
LEADER_EPOCH = slice(12, 16)
MAGIC = 16
CRC = slice(17, 21)
ATTRIBUTES = slice(21, 23)
PRODUCER = slice(43, 57)  # ProducerId, ProducerEpoch, BaseSequence
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
TIMESTAMP_TYPE_BIT = 0x08


def build(
    n: int = 3,
    *,
    base_offset: int = 0,
    codec: str = "none",
    offsets: list[int] | None = None,
    producer: tuple[int, int, int] = (-1, -1, -1),
    transactional: bool = False,
    leader_epoch: int = 0,
    value_size: int = 40,
    timestamp: int = TS,
) -> bytes:
    """A v2 batch of ``n`` records (offset deltas ``offsets``, default 0..n-1) stored at
    ``base_offset``, as a broker would return it; record i is stamped ``timestamp`` + 10 i."""
    pid, epoch, seq = producer
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODEC_IDS[codec],
        is_transactional=transactional,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=1 << 20,
    )
    for i, delta in enumerate(offsets if offsets is not None else range(n)):
        key = None if i % 3 == 2 else b"key-%d" % i
        value = None if i % 4 == 3 else (b"value-%d " % i) * (value_size // 8)
        headers = [("h", b"v%d" % i), ("empty", b"")]
        assert builder.append(
            delta, timestamp=timestamp + 10 * i, key=key, value=value, headers=headers
        )
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    struct.pack_into(">i", data, 12, leader_epoch)  # not CRC-covered: no CRC fix-up needed
    return bytes(data)


def set_attribute_bits(data: bytes, bits: int) -> bytes:
    """Set attribute bits and recompute the CRC (so only the attributes differ)."""
    out = bytearray(data)
    (attrs,) = struct.unpack_from(">h", out, 21)
    struct.pack_into(">h", out, 21, attrs | bits)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def parse(data: bytes | bytearray) -> Batch:
    return Batch.parse(memoryview(data))


def concat(*batches: bytes) -> bytes:
    return b"".join(batches)


def three_batches() -> bytes:
    return concat(
        build(3, base_offset=0), build(3, base_offset=3, codec="gzip"), build(3, base_offset=6)
    )


# -- iter_batches ---------------------------------------------------------------------------


def test_iter_batches_walks_every_batch() -> None:
    buf = three_batches()
    got = list(iter_batches(buf))
    assert [(b.base_offset, b.last_offset, b.record_count) for b in got] == [
        (0, 2, 3),
        (3, 5, 3),
        (6, 8, 3),
    ]
    assert sum(b.size for b in got) == len(buf)
    assert [b.codec for b in got] == ["none", "gzip", "none"]


def test_iter_batches_is_zero_copy() -> None:
    buf = bytearray(three_batches())
    first = next(iter_batches(buf))
    assert first.data.obj is buf
    buf[60] ^= 0xFF  # a change in the buffer shows through the view
    assert first.data[60] == buf[60]


def test_iter_batches_empty_buffer() -> None:
    assert list(iter_batches(b"")) == []


@pytest.mark.parametrize("cut", [1, 5, 11, 12, 13, HEADER_SIZE, 100])
def test_truncated_tail_is_dropped(cut: int) -> None:
    """A fetch response may end with a partial batch (max bytes): silently dropped."""
    whole = concat(build(3, base_offset=0), build(3, base_offset=3))
    last = build(3, base_offset=6)
    assert cut < len(last)
    got = list(iter_batches(whole + last[:cut]))
    assert [b.base_offset for b in got] == [0, 3]


@pytest.mark.parametrize(
    "start,expected",
    [
        (0, [0, 3, 6]),
        (2, [0, 3, 6]),
        (3, [3, 6]),
        (4, [3, 6]),
        (5, [3, 6]),
        (6, [6]),
        (8, [6]),
        (9, []),
    ],
)
def test_batches_below_start_are_skipped(start: int, expected: list[int]) -> None:
    """A fetch begins at the batch that *contains* the fetch offset; batches wholly below it go."""
    assert [b.base_offset for b in iter_batches(three_batches(), start=start)] == expected


@pytest.mark.parametrize("length", [-1, 0, 48])
def test_impossible_length_is_corrupt(length: int) -> None:
    bad = bytearray(build(3, base_offset=7))
    struct.pack_into(">i", bad, 8, length)
    with pytest.raises(CorruptBatchError, match=f"impossible length {length}") as exc:
        list(iter_batches(concat(build(3, base_offset=4), bytes(bad))))
    assert exc.value.offset == 7


def test_corrupt_batch_after_good_ones_yields_the_good_ones_first() -> None:
    bad = bytearray(build(2, base_offset=3))
    struct.pack_into(">i", bad, 8, 10)
    it = iter_batches(concat(build(3), bytes(bad)))
    assert next(it).base_offset == 0
    with pytest.raises(CorruptBatchError):
        next(it)


@pytest.mark.parametrize("magic", [0, 1])
def test_old_message_format_is_refused_as_such_not_as_corruption(magic: int) -> None:
    bad = bytearray(build(3, base_offset=11))
    bad[MAGIC] = magic
    with pytest.raises(UnsafeError, match=f"old message format \\(magic {magic}") as exc:
        list(iter_batches(bytes(bad)))
    assert exc.value.offset == 11 and "offset 11" in str(exc.value)
    assert not isinstance(exc.value, CorruptBatchError)


def test_unknown_magic_is_corruption() -> None:
    bad = bytearray(build(3, base_offset=11))
    bad[MAGIC] = 3
    with pytest.raises(CorruptBatchError, match="magic 3") as exc:
        list(iter_batches(bytes(bad)))
    assert exc.value.offset == 11


def test_parse_too_short() -> None:
    with pytest.raises(CorruptBatchError, match="shorter than its header"):
        parse(build(1)[: HEADER_SIZE - 1])


# -- Batch fields ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_fields(codec: str) -> None:
    data = build(
        5, base_offset=1000, codec=codec, producer=(4242, 7, 99), leader_epoch=12, value_size=400
    )
    b = parse(data)
    assert b.base_offset == 1000
    assert b.partition_leader_epoch == 12
    assert b.magic == 2
    assert b.crc == struct.unpack_from(">I", data, 17)[0]
    assert b.attributes == CODEC_IDS[codec]
    assert b.codec == codec
    assert b.last_offset_delta == 4
    assert b.base_timestamp == TS
    assert b.max_timestamp == TS + 40
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (4242, 7, 99)
    assert b.record_count == 5
    assert b.size == len(data) == 12 + struct.unpack_from(">i", data, 8)[0]
    assert (b.last_offset, b.next_offset) == (1004, 1005)
    assert not b.is_transactional and not b.is_control and not b.has_holes
    assert not b.log_append_time
    assert b.crc_ok()
    assert b.describe() == f"data batch 1000..1004 (5 records, {codec}, {len(data)} bytes)"


def test_attribute_flags() -> None:
    txn = parse(build(2, producer=(1, 0, 0), transactional=True))
    assert txn.is_transactional and not txn.is_control
    assert txn.describe().startswith("transactional batch")
    control = parse(
        set_attribute_bits(build(1, producer=(1, 0, 0), transactional=True), CONTROL_BIT)
    )
    assert control.is_control and control.is_transactional
    assert control.describe().startswith("control batch")
    lat = parse(set_attribute_bits(build(1), TIMESTAMP_TYPE_BIT))
    assert lat.log_append_time and lat.codec == "none"


def test_unknown_codec_is_named() -> None:
    assert parse(set_attribute_bits(build(1), 0x07)).codec == "unknown(7)"


def test_holes() -> None:
    b = parse(build(offsets=[0, 2, 5]))
    assert (b.record_count, b.last_offset_delta, b.next_offset) == (3, 5, 6)
    assert b.has_holes


# -- CRC ------------------------------------------------------------------------------------


def test_crc_matches_an_independent_crc32c() -> None:
    data = build(4, codec="lz4")
    assert compute_crc(data) == crc32c.crc32c(data[21:]) == parse(data).crc


@pytest.mark.parametrize("pos", [21, 22, 30, 50, 60, 61, -1])
def test_crc_detects_changes_in_covered_bytes(pos: int) -> None:
    data = bytearray(build(3, base_offset=40))
    data[pos] ^= 0x01
    b = parse(data)
    assert not b.crc_ok()
    with pytest.raises(CorruptBatchError, match="CRC32C mismatch in batch 40..") as exc:
        b.verify_crc()
    assert exc.value.offset == 40


@pytest.mark.parametrize("field", [BASE_OFFSET, BATCH_LENGTH, LEADER_EPOCH])
def test_crc_does_not_cover_the_prefix(field: slice) -> None:
    data = bytearray(build(3))
    data[field.stop - 1] ^= 0x01
    b = parse(data)
    assert b.crc_ok()
    b.verify_crc()


def test_bad_stored_crc() -> None:
    data = bytearray(build(3))
    data[17] ^= 0x80
    assert not parse(data).crc_ok()


# -- rewrite_for_append ---------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_rewrite_for_append_changes_only_the_append_fields(codec: str) -> None:
    original = build(6, base_offset=123_456, codec=codec, producer=(77, 3, 500), leader_epoch=9)
    src = parse(original)
    out = rewrite_for_append(src, producer_id=1_000_001, producer_epoch=12, sequence=2048)

    assert isinstance(out, bytearray)
    assert len(out) == len(original)
    assert bytes(src.data) == original  # the source buffer is untouched
    assert out[BASE_OFFSET] == bytes(8)
    assert out[PRODUCER] == struct.pack(">qhi", 1_000_001, 12, 2048)
    # Everything else is byte-identical: length, leader epoch, magic, attributes through
    # max timestamp, record count and the (possibly compressed) records.
    assert out[8:17] == original[8:17]
    assert out[21:43] == original[21:43]
    assert out[57:] == original[57:]
    # ... and the CRC is valid for the new producer fields.
    new = parse(out)
    assert new.crc_ok()
    assert new.crc == crc32c.crc32c(bytes(out[21:]))
    assert (new.base_offset, new.producer_id, new.producer_epoch, new.base_sequence) == (
        0,
        1_000_001,
        12,
        2048,
    )
    assert (new.record_count, new.last_offset_delta, new.attributes) == (6, 5, src.attributes)


def test_rewrite_for_append_of_a_batch_inside_a_fetch_buffer() -> None:
    buf = three_batches()
    first, middle, _ = iter_batches(buf)
    out = rewrite_for_append(middle, 5, 0, 0)
    assert len(out) == middle.size
    start = first.size  # the middle batch's position in the buffer
    assert out[57:] == buf[start + 57 : start + middle.size]
    assert parse(out).crc_ok()


def test_rewrite_then_restore_base_offset_keeps_the_digest() -> None:
    """What the copier verifies: the local copy, read back at the same offset with the broker's
    own leader epoch, has the source batch's digest."""
    src = parse(build(4, base_offset=900, codec="zstd", producer=(8, 1, 40), leader_epoch=3))
    out = rewrite_for_append(src, 555, 2, 0)
    struct.pack_into(">q", out, 0, 900)  # the broker assigns the same offset
    struct.pack_into(">i", out, 12, 71)  # and its own leader epoch
    assert batch_digest(parse(out)) == batch_digest(src)


# -- digest ---------------------------------------------------------------------------------


def _observe(buf: bytes | bytearray) -> object:
    """What partsync sees of a buffer: the digests of the batches it yields, or "rejected"
    (corrupt, or an old message format)."""
    try:
        return tuple(batch_digest(b) for b in iter_batches(buf))
    except (CorruptBatchError, UnsafeError):
        return "rejected"


def _ignored_bit(pos: int, bit: int) -> bool:
    """Bits a shallow copy may legitimately change: leader epoch, CRC, producer fields and the
    transactional attribute bit (low byte of the big-endian attributes, index 22). The control
    bit makes a different batch: a transaction marker, digested as one."""
    if LEADER_EPOCH.start <= pos < LEADER_EPOCH.stop or CRC.start <= pos < CRC.stop:
        return True
    if PRODUCER.start <= pos < PRODUCER.stop:
        return True
    return pos == 22 and (1 << bit) == TRANSACTIONAL_BIT


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_digest_ignores_exactly_the_copy_fields(codec: str) -> None:
    """Flip every bit of a small batch: the digest (as seen through iter_batches) stays the same
    for exactly the ignored fields and changes, or the batch is rejected, for every other bit."""
    original = build(
        2, base_offset=77, codec=codec, producer=(9, 1, 4), leader_epoch=5, value_size=16
    )
    reference = _observe(original)
    assert isinstance(reference, tuple) and len(reference) == 1
    unexpected: list[str] = []
    for pos in range(len(original)):
        for bit in range(8):
            mutated = bytearray(original)
            mutated[pos] ^= 1 << bit
            same = _observe(mutated) == reference
            if same != _ignored_bit(pos, bit):
                unexpected.append(
                    f"byte {pos} bit {bit}: digest {'unchanged' if same else 'changed'}"
                )
    assert unexpected == []


def test_digest_ignores_the_transactional_bit_not_the_control_bit() -> None:
    plain = build(2, producer=(3, 0, 0))
    txn = set_attribute_bits(plain, TRANSACTIONAL_BIT)
    both = set_attribute_bits(plain, TRANSACTIONAL_BIT | CONTROL_BIT)
    assert batch_digest(parse(plain)) == batch_digest(parse(txn)) != batch_digest(parse(both))
    assert batch_digest(parse(plain)) != batch_digest(
        parse(set_attribute_bits(plain, TIMESTAMP_TYPE_BIT))
    )


def test_digest_covers_the_absolute_base_offset() -> None:
    assert batch_digest(parse(build(2, base_offset=10))) != batch_digest(
        parse(build(2, base_offset=11))
    )


def test_digest_is_16_bytes_and_deterministic() -> None:
    a, b = parse(build(3)), parse(build(3))
    assert batch_digest(a) == batch_digest(b)
    assert len(batch_digest(a)) == 16


# -- check_appendable -----------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_log_append_time_batch_is_refused(codec: str) -> None:
    """A LogAppendTime batch would be restamped by any local topic: refused before writing."""
    b = parse(
        set_attribute_bits(
            build(3, base_offset=40, codec=codec, producer=(1, 0, 0)), TIMESTAMP_TYPE_BIT
        )
    )
    with pytest.raises(UnsafeError, match="LogAppendTime") as exc:
        check_appendable(b)
    assert exc.value.offset == 40 and "40..42" in str(exc.value)


def test_plain_batch_is_appendable() -> None:
    for codec in CODEC_IDS:
        check_appendable(parse(build(3, codec=codec, producer=(1, 0, 0))))
    check_appendable(parse(build(1)))  # non-idempotent source batches too


def test_control_batch_is_refused() -> None:
    data = set_attribute_bits(
        build(1, base_offset=42, producer=(1, 0, 0), transactional=True), CONTROL_BIT
    )
    with pytest.raises(UnsafeError, match="control batch") as exc:
        check_appendable(parse(data))
    assert exc.value.offset == 42


def test_transactional_batch_is_refused() -> None:
    with pytest.raises(UnsafeError, match="transactional batch 8..9") as exc:
        check_appendable(parse(build(2, base_offset=8, producer=(1, 0, 0), transactional=True)))
    assert exc.value.offset == 8


@pytest.mark.parametrize("offsets", [[0, 2], [1], [0, 1, 5], [3, 4]])
def test_holey_batch_is_refused(offsets: list[int]) -> None:
    b = parse(build(offsets=offsets, base_offset=20))
    with pytest.raises(UnsafeError, match="compacted") as exc:
        check_appendable(b)
    assert exc.value.offset == 20
    assert f"holds {len(offsets)} records for {offsets[-1] + 1} offsets" in str(exc.value)


def test_refusals_are_unsafe_errors_with_exit_status_3() -> None:
    with pytest.raises(UnsafeError) as exc:
        check_appendable(parse(build(offsets=[0, 9])))
    assert int(exc.value.exit_status) == 3
    assert not exc.value.retriable


def test_the_crc_function_is_crc32c_without_its_package() -> None:
    import crc32c

    from partsync.wire.crc import crc32c as loaded

    assert loaded(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert loaded(b"6789", value=loaded(b"12345")) == loaded(b"123456789")
    assert loaded(memoryview(b"xx123456789")[2:]) == crc32c.crc32c(b"123456789")
