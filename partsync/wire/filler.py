"""Filler batches: the cheapest valid records that move an empty local partition's log end up to
where a mirror must start. Pure byte layer.

Kafka gives a client no way to choose the first offset of a partition: appends start at its log
end. A mirror of a source whose log start is N > 0 therefore first appends N filler records and
then moves its own log start past them with DeleteRecords, so no consumer reads one after the
run. Each filler batch holds many records without key, value or headers, timestamped as old as
the local topic accepts (so no time lookup stops at them: ``LocalTopicRules.filler_stamp``),
zstd-compressed: the broker validates every record, so records
are as small as the format allows (8-11 bytes each before compression). The first record of
every filler batch carries the header ``partsync-filler``, so a run killed while filling can
tell its own fillers from data and go on.
"""

from __future__ import annotations

import functools

from partsync.wire.batch import Batch, client_header, seal
from partsync.wire.records import encode_varint, iter_records

__all__ = ["FILLER_HEADER", "MAX_FILLER_RECORDS", "filler_batch", "is_filler"]

FILLER_HEADER = "partsync-filler"
# Records per filler batch: about 11 MB of records before zstd, about 800 kB after (the offset
# deltas hardly compress), inside Kafka's default max.message.bytes (1 MiB).
MAX_FILLER_RECORDS = 1_000_000
_ZSTD = 4
_ZSTD_LEVEL = 3


def _record(delta: int, marker: bool) -> bytes:
    body = bytearray(b"\x00")  # attributes
    body += b"\x00"  # timestamp delta 0
    body += encode_varint(delta)
    body += b"\x01"  # key length -1 (null)
    body += b"\x01"  # value length -1 (null)
    if marker:
        name = FILLER_HEADER.encode()
        body += (
            encode_varint(1) + encode_varint(len(name)) + name + encode_varint(-1)
        )  # one header, null value
    else:
        body += b"\x00"  # no headers
    return encode_varint(len(body)) + bytes(body)


def filler_batch(count: int, timestamp_ms: int) -> bytes:
    """A zstd batch of ``count`` filler records at base offset 0, no producer identity (the
    writer's rewrite sets it), CreateTime ``timestamp_ms``."""
    if not 1 <= count <= MAX_FILLER_RECORDS:
        raise ValueError(f"filler batch of {count} records (1..{MAX_FILLER_RECORDS})")
    # attributes: zstd, CreateTime, not transactional, not control
    return seal(client_header(_ZSTD, count, timestamp_ms), _compressed_records(count), count)


@functools.lru_cache(maxsize=4)
def _compressed_records(count: int) -> bytes:
    # Every filler batch of one size has the same records (the timestamp is in the header):
    # built and compressed once, then only the header and CRC change.
    records = b"".join(_record(d, d == 0) for d in range(count))
    import zstandard  # here: only compacted copies fill

    return bytes(zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(records))


def is_filler(batch: Batch) -> bool:
    """Whether ``batch`` is a filler batch (its first record carries the marker header)."""
    if batch.is_control or batch.is_transactional:
        return False
    for r in iter_records(batch):
        return any(name == FILLER_HEADER for name, _value in r.headers)
    return False
