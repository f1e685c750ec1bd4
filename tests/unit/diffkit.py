"""Build v2 record batches by hand for the records/digest tests (test code only).

An independent encoder (not partsync's decoder run backwards): zigzag varints, records, the
61-byte header with a real CRC32C, and each codec with the framing choices real clients make
(xerial-framed or raw snappy, zstd frames with or without a content size, several frames).
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import crc32c
import lz4.frame
import snappy
import zstandard

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
BASE_TS = 1_700_000_000_000

_HEADER = struct.Struct(">qiibIhiqqqhii")


@dataclass(frozen=True)
class R:
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = field(default_factory=tuple)
    ts: int = BASE_TS
    offset_delta: int | None = None  # None: position in the batch


def varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _field(b: bytes | None) -> bytes:
    return varint(-1) if b is None else varint(len(b)) + b


def encode_record(offset_delta: int, ts_delta: int, r: R) -> bytes:
    body = (
        b"\x00"
        + varint(ts_delta)
        + varint(offset_delta)
        + _field(r.key)
        + _field(r.value)
        + varint(len(r.headers))
        + b"".join(_field(k.encode()) + _field(v) for k, v in r.headers)
    )
    return varint(len(body)) + body


def xerial(data: bytes, block: int = 32 * 1024) -> bytes:
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for i in range(0, len(data), block):
        c = snappy.compress(data[i : i + block])
        out += struct.pack(">i", len(c)) + c
    return bytes(out)


def compress(
    codec: str, data: bytes, *, snappy_framing: str = "xerial", zstd_frames: int = 1
) -> bytes:
    if codec == "none":
        return data
    if codec == "gzip":
        return gzip.compress(data)
    if codec == "snappy":
        return xerial(data) if snappy_framing == "xerial" else snappy.compress(data)
    if codec == "lz4":
        return bytes(lz4.frame.compress(data))
    if codec == "zstd":
        # Streaming compression writes no content size, like zstd-jni; split into frames.
        step = max(1, len(data) // zstd_frames + 1)
        out = b""
        for i in range(0, len(data), step):
            obj = zstandard.ZstdCompressor().compressobj()
            out += obj.compress(data[i : i + step]) + obj.flush()
        return out
    raise ValueError(codec)


def make_batch(
    records: Sequence[R],
    *,
    base_offset: int = 0,
    codec: str = "none",
    log_append_time: int | None = None,
    control: bool = False,
    transactional: bool = False,
    producer: tuple[int, int, int] = (-1, -1, -1),
    leader_epoch: int = 0,
    last_offset_delta: int | None = None,
    record_count: int | None = None,
    snappy_framing: str = "xerial",
    zstd_frames: int = 1,
) -> bytes:
    base_ts = min(r.ts for r in records)
    deltas = [r.offset_delta if r.offset_delta is not None else i for i, r in enumerate(records)]
    payload = b"".join(encode_record(d, r.ts - base_ts, r) for d, r in zip(deltas, records))
    payload = compress(codec, payload, snappy_framing=snappy_framing, zstd_frames=zstd_frames)
    attributes = CODEC_IDS[codec]
    max_ts = max(r.ts for r in records)
    if log_append_time is not None:
        attributes |= 0x08
        max_ts = log_append_time
    if transactional:
        attributes |= 0x10
    if control:
        attributes |= 0x20
    lod = last_offset_delta if last_offset_delta is not None else max(deltas)
    count = record_count if record_count is not None else len(records)
    fields = (base_offset, 49 + len(payload), leader_epoch, 2, 0, attributes, lod, base_ts, max_ts)
    head = bytearray(_HEADER.pack(*fields, *producer, count))
    buf = head + payload
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def records(n: int, *, seed: int = 0, start: int = 0) -> list[R]:
    """Deterministic records with keys, values and headers (value i differs per seed)."""
    return [
        R(
            f"key-{start + i}".encode(),
            f"value-{seed}-{start + i} ".encode() * 4,
            (("seq", str(start + i).encode()), ("src", b"diffkit")),
            BASE_TS + start + i,
        )
        for i in range(n)
    ]


def log_of(recs: Sequence[R], sizes: Sequence[int], *, codec: str = "none", base: int = 0) -> bytes:
    """Concatenated batches holding ``recs`` at offsets base.. in batches of the given sizes."""
    out = b""
    pos = 0
    for size in sizes:
        part = recs[pos : pos + size]
        if not part:
            break
        out += make_batch(part, base_offset=base + pos, codec=codec)
        pos += size
    assert pos >= len(recs), "sizes do not cover every record"
    return out
