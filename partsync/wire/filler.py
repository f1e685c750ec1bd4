"""Filler batches: the cheapest valid records that move an empty local partition's log end up to
where a mirror must start. Pure byte layer.

Kafka gives a client no way to choose the first offset of a partition: appends start at its log
end. A mirror of a source whose log start is N > 0 therefore first appends N filler records and
then moves its own log start past them with DeleteRecords, so no consumer reads one after the
run. Each filler batch holds many records without key, value or headers, timestamped now (inside
any topic's timestamp limits), zstd-compressed: the broker validates every record, so records
are as small as the format allows (8-11 bytes each before compression). The first record of
every filler batch carries the header ``partsync-filler``, so a run killed while filling can
tell its own fillers from data and go on.
"""

from __future__ import annotations

import functools
import struct

import zstandard

from partsync.wire.batch import CRC_OFFSET, HEADER_SIZE, Batch, compute_crc
from partsync.wire.records import iter_records

__all__ = ["FILLER_HEADER", "MAX_FILLER_RECORDS", "filler_batch", "is_filler"]

FILLER_HEADER = "partsync-filler"
# Records per filler batch: about 11 MB of records before zstd, about 800 kB after (the offset
# deltas hardly compress), inside Kafka's default max.message.bytes (1 MiB).
MAX_FILLER_RECORDS = 1_000_000
_ZSTD = 4
_TAIL = struct.Struct(">ibIhiqqqhii")  # PartitionLeaderEpoch .. RecordCount (after BatchLength)
_ZSTD_LEVEL = 3


def _varint(n: int) -> bytes:
    """Zigzag varint (Kafka's record fields)."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _record(delta: int, marker: bool) -> bytes:
    body = bytearray(b"\x00")  # attributes
    body += b"\x00"  # timestamp delta 0
    body += _varint(delta)
    body += b"\x01"  # key length -1 (null)
    body += b"\x01"  # value length -1 (null)
    if marker:
        name = FILLER_HEADER.encode()
        body += _varint(1) + _varint(len(name)) + name + _varint(-1)  # one header, null value
    else:
        body += b"\x00"  # no headers
    return _varint(len(body)) + bytes(body)


def filler_batch(count: int, timestamp_ms: int) -> bytes:
    """A zstd batch of ``count`` filler records at base offset 0, no producer identity (the
    writer's rewrite sets it), CreateTime ``timestamp_ms``."""
    if not 1 <= count <= MAX_FILLER_RECORDS:
        raise ValueError(f"filler batch of {count} records (1..{MAX_FILLER_RECORDS})")
    compressed = _compressed_records(count)
    tail = _TAIL.pack(
        0,  # partition leader epoch
        2,  # magic
        0,  # crc, set below
        _ZSTD,  # attributes: zstd, CreateTime, not transactional, not control
        count - 1,  # last offset delta
        timestamp_ms,
        timestamp_ms,
        -1,  # producer id
        -1,  # producer epoch
        -1,  # base sequence
        count,
    )
    out = bytearray(struct.pack(">qi", 0, len(tail) + len(compressed)) + tail + compressed)
    assert len(out) == HEADER_SIZE + len(compressed)
    struct.pack_into(">I", out, CRC_OFFSET, compute_crc(out))
    return bytes(out)


@functools.lru_cache(maxsize=4)
def _compressed_records(count: int) -> bytes:
    # Every filler batch of one size has the same records (the timestamp is in the header):
    # built and compressed once, then only the header and CRC change.
    records = b"".join(_record(d, d == 0) for d in range(count))
    return bytes(zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(records))


def is_filler(batch: Batch) -> bool:
    """Whether ``batch`` is a filler batch (its first record carries the marker header)."""
    if batch.is_control or batch.is_transactional:
        return False
    for r in iter_records(batch):
        return any(name == FILLER_HEADER for name, _value in r.headers)
    return False
