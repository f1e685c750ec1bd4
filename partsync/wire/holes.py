"""Compaction holes: offsets a compacted source no longer holds, filled with records a compacted
local topic cleans away again (issue 17, ``--compaction-holes fill``). Pure byte layer.

A client cannot leave an offset out: Kafka assigns offsets to the records it is sent, and
refuses a batch whose ``LastOffsetDelta`` is not ``RecordCount - 1`` or that holds no record
(INVALID_RECORD). A compacted log has both kinds of holes: whole batches cleaned away (between
batches) and records cleaned away inside a batch that keeps its ``LastOffsetDelta`` (the
cleaner keeps the batch's offset range; an empty batch is kept where it holds a producer's last
sequence). So a hole is filled with one *hole record* per missing offset: a tombstone (null
value) under one reserved key, with a marking header. A compacted local topic keeps only the
last record of a key, and drops tombstones ``delete.retention.ms`` after cleaning them, so the
holes it is given are holes again after its own compaction.

Only a batch with inner holes is re-encoded (``fill_inner_holes``): its records section is
decompressed, a hole record is put at each missing offset delta, and the section is compressed
again with the batch's own codec. The source's records keep their bytes (their offset and
timestamp deltas, keys, values and headers), and the header keeps every field but
``RecordCount``, ``BatchLength`` and the CRC, so record and batch timestamps stay the
source's. Every other batch stays shallow.

The reserved key reaches consumers until the local compaction removes it: one with a typed key
deserializer may fail on it, which is why the key is a parameter.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator

from partsync.errors import CorruptBatchError, UnsafeError
from partsync.wire.batch import Batch, client_header, seal
from partsync.wire.digest import batch_digest
from partsync.wire.records import encode_varint, iter_records, read_varint, records_section

__all__ = [
    "HOLE_HEADER",
    "HOLE_KEY",
    "as_filled",
    "compress",
    "disagreement",
    "fill_inner_holes",
    "gap_batches",
    "gap_stamp",
    "holds_hole_records",
    "hole_batch",
    "hole_record",
    "is_hole",
    "missing_deltas",
]

HOLE_KEY = b"__partsync.compaction-hole"
HOLE_HEADER = "partsync-hole"

# Java's SnappyOutputStream (xerial framing, what Kafka's clients write and read).
_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_ZSTD_LEVEL = 3


@functools.lru_cache(maxsize=8)
def _hole_tail(key: bytes) -> bytes:
    """What every hole record under ``key`` ends with: the key, a null value (a tombstone)
    and the one header ``partsync-hole`` with a null value."""
    name = HOLE_HEADER.encode()
    return (
        encode_varint(len(key))
        + key
        + encode_varint(-1)
        + encode_varint(1)
        + encode_varint(len(name))
        + name
        + encode_varint(-1)
    )


@functools.lru_cache(maxsize=1 << 16)
def _zz(n: int) -> bytes:
    return encode_varint(n)  # deltas repeat from batch to batch: encoded once each


def hole_record(offset_delta: int, timestamp_delta: int, key: bytes = HOLE_KEY) -> bytes:
    """One hole record (length prefix included): a tombstone under ``key`` with the header
    ``partsync-hole`` (null value), at ``offset_delta`` of its batch."""
    body = b"\x00" + _zz(timestamp_delta) + _zz(offset_delta) + _hole_tail(key)  # attributes 0
    return _zz(len(body)) + body


def _split(section: bytes) -> list[tuple[int, int, bytes]]:
    """(offset delta, timestamp delta, the record's bytes with its length prefix) of each
    record of a decompressed records section, in order."""
    out = []
    pos, end = 0, len(section)
    while pos < end:
        start = pos
        length, pos = read_varint(section, pos)
        stop = pos + length
        if length < 0 or stop > end:
            raise ValueError("record cut short")
        ts_delta, p = read_varint(section, pos + 1)  # after Attributes
        offset_delta, _ = read_varint(section, p)
        out.append((offset_delta, ts_delta, section[start:stop]))
        pos = stop
    return out


def _records_of(batch: Batch) -> list[tuple[int, int, bytes]]:
    """``_split`` of the batch's records section, malformed records reported as corrupt."""
    try:
        records = _split(records_section(batch))
    except (ValueError, IndexError) as e:
        raise CorruptBatchError(
            f"malformed record in batch {batch.base_offset}..{batch.last_offset}: "
            f"{e or 'record cut short'}",
            offset=batch.base_offset,
        ) from None
    deltas = [d for d, _ts, _raw in records]
    if (
        len(records) != batch.record_count
        or len(set(deltas)) != len(deltas)
        or any(not 0 <= d <= batch.last_offset_delta for d in deltas)
    ):
        raise CorruptBatchError(
            f"batch {batch.base_offset}..{batch.last_offset} declares {batch.record_count} "
            f"records for {batch.last_offset_delta + 1} offsets but holds {len(records)} at "
            "offsets inside them, each once",
            offset=batch.base_offset,
        )
    return records


def missing_deltas(batch: Batch) -> list[int]:
    """The offset deltas in ``0..LastOffsetDelta`` that hold no record (none for a batch as a
    client writes it; all of them for an empty batch)."""
    if batch.record_count == batch.last_offset_delta + 1:
        return []
    held = {d for d, _ts, _raw in _records_of(batch)}
    return [d for d in range(batch.last_offset_delta + 1) if d not in held]


def compress(codec: int, data: bytes) -> bytes:
    """A records section compressed with ``codec`` (attribute bits 0-2) the way Kafka's own
    clients frame it, so every client can read it: xerial-framed snappy, LZ4 frames with
    independent 64 KiB blocks (Kafka's LZ4 reader decodes each block on its own)."""
    # Each codec is imported where it is used: only batches with holes are ever re-encoded.
    if codec == 0:
        return data
    if codec == 1:
        import gzip

        return gzip.compress(data, mtime=0)
    if codec == 2:
        import snappy

        out = bytearray(_XERIAL_HEADER)
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = snappy.compress(data[i : i + _XERIAL_BLOCK])
            out += struct.pack(">i", len(block)) + block
        return bytes(out)
    if codec == 3:
        import lz4.frame

        return bytes(
            lz4.frame.compress(
                data,
                block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                block_linked=False,
                content_checksum=False,
                store_size=False,
            )
        )
    if codec == 4:
        import zstandard

        return bytes(zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(data))
    raise ValueError(f"unknown compression codec {codec}")


def fill_inner_holes(batch: Batch, key: bytes = HOLE_KEY) -> bytes | None:
    """``batch`` with a hole record at every offset delta it lacks (None when it lacks none),
    compressed again with its codec. A hole record takes the timestamp delta of the source
    record before it (of the first record for holes at the start, 0 in an empty batch), so
    the batch's records stay in time order, except the last hole record where the cleaner
    removed the newest record: it takes the header's MaxTimestamp, since Kafka sets a
    CreateTime batch's MaxTimestamp to its newest record's on append and the header must stay
    the source's."""
    if batch.record_count == batch.last_offset_delta + 1:
        return None
    if batch.is_control:
        raise UnsafeError(
            f"control batch {batch.base_offset}..{batch.last_offset} lacks its record; a client "
            "cannot write a control batch, so the hole cannot be filled this way",
            offset=batch.base_offset,
        )
    records = _records_of(batch)
    by_delta = {d: (ts, raw) for d, ts, raw in records}
    newest = max((ts for _d, ts, _raw in records), default=None)
    top = batch.max_timestamp - batch.base_timestamp  # the header's MaxTimestamp as a delta
    last_hole = max(d for d in range(batch.last_offset_delta + 1) if d not in by_delta)
    ts = records[0][1] if records else 0
    parts = []
    for delta in range(batch.last_offset_delta + 1):
        held = by_delta.get(delta)
        if held is None:
            lift = delta == last_hole and (newest is None or newest < top)
            parts.append(hole_record(delta, top if lift else ts, key))
        else:
            ts = held[0]
            parts.append(held[1])
    codec = batch.attributes & 0x07
    return seal(batch.data, compress(codec, b"".join(parts)), len(parts))


def hole_batch(count: int, timestamp_ms: int, key: bytes = HOLE_KEY, codec: int = 4) -> bytes:
    """A batch of ``count`` hole records at base offset 0 (for a hole between batches), no
    producer identity (the writer's rewrite sets it), CreateTime ``timestamp_ms``."""
    if count < 1:
        raise ValueError(f"a hole batch holds at least one record, not {count}")
    section = b"".join(hole_record(d, 0, key) for d in range(count))
    # attributes: the codec, CreateTime, not transactional, not control
    return seal(client_header(codec, count, timestamp_ms), compress(codec, section), count)


def is_hole(
    key: bytes | None,
    value: bytes | None,
    headers: tuple[tuple[str, bytes | None], ...],
    hole_key: bytes = HOLE_KEY,
) -> bool:
    """Whether a record is a hole record (``diff --level record`` treats it as the hole it
    fills)."""
    return key == hole_key and value is None and any(n == HOLE_HEADER for n, _v in headers)


def disagreement(a: Batch, b: Batch, hole_key: bytes = HOLE_KEY) -> int | None:
    """The first offset where two copies of one batch hold different records, compaction
    aside (None where they agree). Copies of a compacted log lose different records as each
    cluster cleans its own, and a mirror holds hole records where its source had lost them,
    so only offsets where both hold a record (not a hole record) are compared; the batches
    must end at the same offset (the cleaner keeps a batch's last offset). A difference in the
    last offset is reported at the lower one."""
    if a.last_offset != b.last_offset:
        return min(a.last_offset, b.last_offset)
    if batch_digest(a) == batch_digest(b):
        return None
    theirs = {
        r.offset: r for r in iter_records(b) if not is_hole(r.key, r.value, r.headers, hole_key)
    }
    for r in iter_records(a):
        other = theirs.get(r.offset)
        if other is not None and other != r and not is_hole(r.key, r.value, r.headers, hole_key):
            return r.offset
    return None


def holds_hole_records(batch: Batch) -> bool:
    """Whether ``batch`` holds a hole record under any key (one a mirror re-encoded or
    appended to fill compaction holes)."""
    if batch.is_control:
        return False
    return any(
        r.value is None and any(n == HOLE_HEADER for n, _v in r.headers)
        for r in iter_records(batch)
    )


def gap_stamp(before: Batch | None, after: Batch) -> int:
    """The timestamp of the hole records filling the gap between ``before`` (None where it is
    not known) and ``after``: the newest record's before the gap, so a lookup by time finds
    the same offset as on the source (the hole's records are never later); else ``after``'s
    ``first_stamp``."""
    if before is not None and before.max_timestamp >= 0:
        return before.max_timestamp
    return after.first_stamp()


def gap_batches(
    start: int, end: int, stamp: int, key: bytes = HOLE_KEY, per_batch: int = 500_000
) -> Iterator[tuple[int, Batch]]:
    """The hole batches covering ``[start, end)``, at most ``per_batch`` records each, as
    (the offset it goes at, the batch at base offset 0): what sync appends for a gap."""
    at = start
    while at < end:
        n = min(per_batch, end - at)
        yield at, Batch.parse(memoryview(hole_batch(n, stamp, key)))
        at += n


def as_filled(
    batches: Iterator[Batch],
    start: int,
    key: bytes = HOLE_KEY,
    per_batch: int = 500_000,
    counter: list[int] | None = None,
) -> Iterator[Batch]:
    """``batches`` (a cluster's from offset ``start``, in order) as a mirror made with
    ``--compaction-holes fill`` holds them: a gap as ``gap_batches`` stamped by ``gap_stamp``,
    a batch with holes inside as re-encoded (``fill_inner_holes``), every other batch as it
    is. ``counter[0]`` counts the batches made. Compression is deterministic for a given
    library version, so their digests equal the mirror's batches; a gap right at ``start`` is
    stamped as a copy into an empty partition stamps it (the batch before is not read)."""
    expected = start
    before: Batch | None = None
    for b in batches:
        for at, hole in gap_batches(expected, b.base_offset, gap_stamp(before, b), key, per_batch):
            raw = bytearray(hole.data)
            struct.pack_into(">q", raw, 0, at)
            yield Batch.parse(memoryview(bytes(raw)))
            if counter is not None:
                counter[0] += 1
        filled = None if b.is_control else fill_inner_holes(b, key)
        if filled is None:
            yield b
        else:
            if counter is not None:
                counter[0] += 1
            yield Batch.parse(memoryview(filled))
        expected, before = b.next_offset, b
