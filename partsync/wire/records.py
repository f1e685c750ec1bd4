"""Records inside a v2 batch: decompress the records section and parse each record.

Pure byte layer: stdlib, the codec modules, partsync.wire.batch and partsync.errors; no sockets.
Used by ``partsync diff --level record`` to compare clusters offset by offset even when their
batch boundaries differ. Never used on the sync copy path, which copies batches shallowly.

Codec = attributes bits 0-2: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd. The records section
(batch bytes 61..end) is compressed as a whole. Java clients write snappy in the xerial framing
(``\\x82SNAPPY\\x00`` header, then length-prefixed raw blocks); other clients write one raw snappy
block. lz4 is the LZ4 frame format; zstd may arrive as one or several frames, with or without
a content size.

Record (v2), varints are zigzag-encoded::

    Length          varint   bytes after this field
    Attributes      int8     unused (0)
    TimestampDelta  varlong  record timestamp - batch BaseTimestamp
    OffsetDelta     varint   record offset - batch BaseOffset
    KeyLength       varint   -1 = null key
    Key             bytes
    ValueLength     varint   -1 = null value
    Value           bytes
    HeaderCount     varint
    Headers         [HeaderKeyLength varint, HeaderKey utf-8, HeaderValueLength varint (-1 null),
                     HeaderValue bytes]

On a LogAppendTime batch every record's timestamp is the batch's MaxTimestamp (the broker's
append time), whatever its delta says, as Kafka's consumers report it.
"""

from __future__ import annotations

import functools
import hashlib
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from partsync.errors import CorruptBatchError
from partsync.wire.batch import HEADER_SIZE, Batch

__all__ = [
    "Header",
    "Record",
    "decode_records",
    "decompress",
    "encode_record",
    "encode_varint",
    "iter_records",
    "read_varint",
    "records_section",
]

Header = tuple[str, "bytes | None"]

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16  # magic (8) + version int32 + min compatible version int32
_BLOCK_SIZE = struct.Struct(">i")
_DIGEST_HEAD = struct.Struct(">qq?")  # offset, timestamp, control
_LEN = struct.Struct(">i")
_NULL = _LEN.pack(-1)


@dataclass(frozen=True, slots=True)
class Record:
    """One record with absolute offset and timestamp. ``control`` marks a transaction marker
    (key = the control key: version and type; value = the marker payload)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    control: bool = False

    def digest(self) -> bytes:
        """16-byte digest of offset, timestamp, key, value, headers and the control flag.

        Independent of the batch the record sits in (boundaries, codec, producer ids), so two
        clusters that hold the same record at the same offset agree whoever wrote the batches.
        Every variable-length field is length-prefixed (-1 for null), so fields cannot blur.
        A transaction marker's covers its offset and control key only: its timestamp and value
        (the coordinator's epoch) are the writing cluster's own (``wire.markers``).
        """
        if self.control:
            key = self.key or b""
            head = _DIGEST_HEAD.pack(self.offset, 0, True) + _LEN.pack(len(key))
            return hashlib.blake2b(head + key, digest_size=16).digest()
        parts = [_DIGEST_HEAD.pack(self.offset, self.timestamp, self.control)]
        for field in (self.key, self.value):
            if field is None:
                parts.append(_NULL)
            else:
                parts += (_LEN.pack(len(field)), field)
        parts.append(_LEN.pack(len(self.headers)))
        for name, value in self.headers:
            raw = name.encode("utf-8", "surrogateescape")
            parts += (_LEN.pack(len(raw)), raw)
            if value is None:
                parts.append(_NULL)
            else:
                parts += (_LEN.pack(len(value)), value)
        # One hash call over the joined fields: cheaper than many small updates.
        return hashlib.blake2b(b"".join(parts), digest_size=16).digest()


# -- decompression -----------------------------------------------------------------------------
# The codecs' modules are imported when first needed: a shallow copy never decompresses, and
# every command would otherwise pay their import (a few ms).


def _snappy(data: bytes) -> bytes:
    import snappy

    if not data.startswith(_XERIAL_MAGIC):
        return bytes(snappy.decompress(data))
    out = bytearray()
    pos = _XERIAL_HEADER_SIZE
    end = len(data)
    while pos < end:
        if end - pos < 4:
            raise ValueError("xerial snappy block length cut short")
        (size,) = _BLOCK_SIZE.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise ValueError(f"xerial snappy block of {size} bytes overruns the data")
        out += snappy.decompress(data[pos : pos + size])
        pos += size
    return bytes(out)


def _zstd(data: bytes) -> bytes:
    # decompressobj copes with frames that do not declare their content size (zstd-jni's
    # streaming output); loop over unused_data for several concatenated frames.
    import zstandard

    out = bytearray()
    rest = data
    while rest:
        obj = zstandard.ZstdDecompressor().decompressobj()
        out += obj.decompress(rest)
        if not obj.eof:
            raise ValueError("zstd frame cut short")
        rest = obj.unused_data
    return bytes(out)


def _lz4(data: bytes) -> bytes:
    import lz4.frame

    return bytes(lz4.frame.decompress(data))


def _gzip(data: bytes) -> bytes:
    import gzip

    return gzip.decompress(data)


_DECOMPRESSORS = {1: _gzip, 2: _snappy, 3: _lz4, 4: _zstd}


@functools.cache
def _codec_errors() -> tuple[type[BaseException], ...]:
    """What the codecs raise on bad input (lz4 raises RuntimeError; snappy its own
    UncompressError)."""
    import snappy
    import zstandard

    return (
        OSError,
        EOFError,
        zlib.error,
        RuntimeError,
        zstandard.ZstdError,
        snappy.UncompressError,
    )


def decompress(codec: int, data: bytes) -> bytes:
    """Decompress a records section written with ``codec`` (attribute bits 0-2).

    Raises ValueError for an unknown codec or bytes the codec rejects.
    """
    if codec == 0:
        return data
    fn = _DECOMPRESSORS.get(codec)
    if fn is None:
        raise ValueError(f"unknown compression codec {codec}")
    try:
        return fn(data)
    except ValueError:
        raise
    except _codec_errors() as e:
        raise ValueError(f"{type(e).__name__}: {e}") from None


def records_section(batch: Batch) -> bytes:
    """The batch's records, decompressed."""
    raw = bytes(batch.data[HEADER_SIZE:])
    try:
        return decompress(batch.attributes & 0x07, raw)
    except ValueError as e:
        raise CorruptBatchError(
            f"cannot decompress {batch.codec} records of batch {batch.base_offset}.."
            f"{batch.last_offset}: {e}",
            offset=batch.base_offset,
        ) from None


# -- record parsing ----------------------------------------------------------------------------


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint at ``pos``: (value, next position). IndexError when cut short."""
    b = buf[pos]
    pos += 1
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos
    result = b & 0x7F
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def encode_varint(n: int) -> bytes:
    """Zigzag varint of ``n`` (the inverse of ``read_varint``)."""
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


def _field(data: bytes | None) -> bytes:
    return encode_varint(-1) if data is None else encode_varint(len(data)) + data


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] = (),
) -> bytes:
    """One record of a v2 batch's records section, length first (what ``iter_records`` reads;
    attributes 0)."""
    body = b"\x00" + encode_varint(timestamp_delta) + encode_varint(offset_delta)
    body += _field(key) + _field(value) + encode_varint(len(headers))
    for name, hvalue in headers:
        body += _field(name.encode("utf-8", "surrogateescape")) + _field(hvalue)
    return encode_varint(len(body)) + body


def _bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n = buf[pos]
    if n < 0x80:  # one-byte length, the common case
        n = (n >> 1) ^ -(n & 1)
        pos += 1
    else:
        n, pos = read_varint(buf, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise IndexError
    return buf[pos:end], end


def iter_records(batch: Batch) -> Iterator[Record]:
    """Yield the batch's records with absolute offsets and timestamps.

    Raises CorruptBatchError when the section does not hold exactly ``RecordCount`` well-formed
    records or a record lies outside the batch's offset range.
    """
    buf = records_section(batch)
    base_offset = batch.base_offset
    base_ts = batch.base_timestamp
    append_time = batch.max_timestamp if batch.log_append_time else None
    control = batch.is_control
    last_delta = batch.last_offset_delta
    pos = 0
    end = len(buf)
    count = 0
    try:
        while pos < end:
            length, pos = read_varint(buf, pos)
            stop = pos + length
            if length < 0 or stop > end:
                raise IndexError
            pos += 1  # Attributes: int8, unused
            ts_delta, pos = read_varint(buf, pos)
            offset_delta, pos = read_varint(buf, pos)
            key, pos = _bytes(buf, pos)
            value, pos = _bytes(buf, pos)
            n_headers, pos = read_varint(buf, pos)
            headers: list[Header] = []
            for _ in range(n_headers):
                name, pos = _bytes(buf, pos)
                if name is None:
                    raise ValueError("null header key")
                hvalue, pos = _bytes(buf, pos)
                headers.append((name.decode("utf-8", "surrogateescape"), hvalue))
            if pos != stop:
                raise ValueError(f"record length {length} does not match its fields")
            if not 0 <= offset_delta <= last_delta:
                raise ValueError(f"offset delta {offset_delta} outside 0..{last_delta}")
            count += 1
            yield Record(
                base_offset + offset_delta,
                append_time if append_time is not None else base_ts + ts_delta,
                key,
                value,
                tuple(headers),
                control,
            )
    except (IndexError, ValueError) as e:
        detail = str(e) or "record cut short"
        raise CorruptBatchError(
            f"malformed record #{count} in batch {base_offset}..{batch.last_offset}: {detail}",
            offset=base_offset,
        ) from None
    if count != batch.record_count:
        raise CorruptBatchError(
            f"batch {base_offset}..{batch.last_offset} declares {batch.record_count} records "
            f"but holds {count}",
            offset=base_offset,
        )


def decode_records(batch: Batch) -> list[Record]:
    """All records of a batch (see ``iter_records``)."""
    return list(iter_records(batch))
