"""Record batch v2: walk, check and shallowly rewrite batches without decompressing them.

Pure byte layer: stdlib, crc32c and partsync.errors only; no sockets.

RecordBatch (magic 2) header, 61 bytes, big-endian::

    0  BaseOffset            int64    not CRC-covered; a client must send 0
    8  BatchLength           int32    bytes after this field
    12 PartitionLeaderEpoch  int32    broker overwrites
    16 Magic                 int8     2
    17 CRC                   uint32   CRC32C of bytes 21..end
    21 Attributes            int16    bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control
    23 LastOffsetDelta       int32    must be RecordCount - 1 for a client append
    27 BaseTimestamp         int64
    35 MaxTimestamp          int64
    43 ProducerId            int64    rewritten to the writer's idempotent identity
    51 ProducerEpoch         int16    rewritten
    53 BaseSequence          int32    rewritten
    57 RecordCount           int32
    61 Records               (compressed as a whole when codec != none; never touched here)

A shallow copy rewrites BaseOffset, ProducerId/Epoch/BaseSequence and the CRC, nothing else, so the
broker stores the batch byte-for-byte as the source did and assigns the same offsets.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from partsync.errors import CorruptBatchError, UnsafeError
from partsync.wire.crc import crc32c

__all__ = [
    "CODECS",
    "CONTROL_BIT",
    "HEADER_SIZE",
    "TRANSACTIONAL_BIT",
    "Batch",
    "Rewritten",
    "check_appendable",
    "client_header",
    "compute_crc",
    "iter_batches",
    "rewrite_for_append",
    "rewrite_parts",
    "seal",
]

HEADER_SIZE = 61
# Bytes before BatchLength's payload: BaseOffset (8) + BatchLength (4).
LOG_OVERHEAD = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
PRODUCER_OFFSET = 43
RECORD_COUNT_OFFSET = 57

_HEADER = struct.Struct(
    ">q"  # BaseOffset => Int64
    "i"  # BatchLength => Int32
    "i"  # PartitionLeaderEpoch => Int32
    "b"  # Magic => Int8
    "I"  # CRC => Uint32
    "h"  # Attributes => Int16
    "i"  # LastOffsetDelta => Int32
    "q"  # BaseTimestamp => Int64
    "q"  # MaxTimestamp => Int64
    "q"  # ProducerId => Int64
    "h"  # ProducerEpoch => Int16
    "i"  # BaseSequence => Int32
    "i"  # RecordCount => Int32
)
_PREFIX = struct.Struct(">qi")  # BaseOffset, BatchLength
_PRODUCER = struct.Struct(">qhi")  # ProducerId, ProducerEpoch, BaseSequence
_BASE_OFFSET = struct.Struct(">q")
_CRC = struct.Struct(">I")

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_CODEC_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
_DELETE_HORIZON_BIT = 0x40


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    """CRC32C of a whole batch's CRC-covered part (Attributes to the end)."""
    return int(crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))


def client_header(attributes: int, record_count: int, timestamp_ms: int) -> bytes:
    """The header of a batch as a client writes it: base offset 0, no producer identity (the
    writer's rewrite sets it), offsets 0..record_count-1, both timestamps ``timestamp_ms``;
    BatchLength and CRC are set by ``seal``."""
    return _HEADER.pack(
        0,
        0,
        0,
        2,
        0,
        attributes,
        record_count - 1,
        timestamp_ms,
        timestamp_ms,
        -1,
        -1,
        -1,
        record_count,
    )


def seal(header: bytes | memoryview, section: bytes, record_count: int) -> bytes:
    """A batch of ``header`` (its first 61 bytes: every field kept but BatchLength,
    RecordCount and the CRC, which are set here) and a records section (compressed as the
    header's codec says) holding ``record_count`` records."""
    out = bytearray(header[:HEADER_SIZE])
    out += section
    struct.pack_into(">i", out, 8, len(out) - LOG_OVERHEAD)
    struct.pack_into(">i", out, RECORD_COUNT_OFFSET, record_count)
    _CRC.pack_into(out, CRC_OFFSET, compute_crc(out))
    return bytes(out)


@dataclass(frozen=True, slots=True)
class Batch:
    """One record batch inside a fetched buffer; ``data`` is a zero-copy view of its bytes."""

    data: memoryview
    base_offset: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @classmethod
    def parse(cls, data: memoryview) -> Batch:
        if len(data) < HEADER_SIZE:
            raise CorruptBatchError(f"record batch of {len(data)} bytes is shorter than its header")
        fields = _HEADER.unpack_from(data, 0)
        if fields[3] in (0, 1):
            # Byte 16 is the magic in the old message formats too (offset, size, CRC, magic).
            raise UnsafeError(
                f"message set at offset {fields[0]} is in the old message format (magic "
                f"{fields[3]}, written by Kafka < 0.11 or a down-converting broker); partsync "
                "copies only record batch v2",
                offset=fields[0],
            )
        if fields[3] != 2:
            raise CorruptBatchError(
                f"record batch magic {fields[3]} is not supported (only v2 batches, Kafka >= 0.11)",
                offset=fields[0],
            )
        return cls(
            data,
            fields[0],
            fields[2],
            fields[3],
            fields[4],
            fields[5],
            fields[6],
            fields[7],
            fields[8],
            fields[9],
            fields[10],
            fields[11],
            fields[12],
        )

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> str:
        return CODECS.get(
            self.attributes & _CODEC_MASK, f"unknown({self.attributes & _CODEC_MASK})"
        )

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & _TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        """KIP-534: the log cleaner stored a delete horizon in BaseTimestamp (attribute bit 6);
        the records' timestamps stay BaseTimestamp + delta, but BaseTimestamp is no record's."""
        return bool(self.attributes & _DELETE_HORIZON_BIT)

    def first_stamp(self) -> int:
        """A timestamp of a record of this batch that comes no later than its first record's
        where the header says (BaseTimestamp), else its newest record's (MaxTimestamp)."""
        return self.max_timestamp if self.has_delete_horizon else self.base_timestamp

    @property
    def has_holes(self) -> bool:
        """True when compaction removed records: offsets inside the batch a client cannot recreate."""
        return self.last_offset_delta != self.record_count - 1

    def crc_ok(self) -> bool:
        return compute_crc(self.data) == self.crc

    def verify_crc(self) -> None:
        actual = compute_crc(self.data)
        if actual != self.crc:
            raise CorruptBatchError(
                f"CRC32C mismatch in batch {self.base_offset}..{self.last_offset}: "
                f"stored {self.crc:#010x}, computed {actual:#010x}",
                offset=self.base_offset,
            )

    def describe(self) -> str:
        kind = (
            "control" if self.is_control else "transactional" if self.is_transactional else "data"
        )
        return (
            f"{kind} batch {self.base_offset}..{self.last_offset} ({self.record_count} records, "
            f"{self.codec}, {self.size} bytes)"
        )


def iter_batches(buf: bytes | bytearray | memoryview, *, start: int = 0) -> Iterator[Batch]:
    """Yield the whole batches in a fetched buffer, zero-copy.

    A fetch response may end with a batch cut short by the broker's max bytes; that partial tail
    is silently dropped (the next fetch returns it whole). Batches whose last offset is below
    ``start`` are skipped: a fetch begins at the batch that *contains* the fetch offset.
    """
    view = memoryview(buf)
    pos = 0
    end = len(view)
    while end - pos >= LOG_OVERHEAD:
        base_offset, length = _PREFIX.unpack_from(view, pos)
        if length < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptBatchError(
                f"record batch at offset {base_offset} declares impossible length {length}",
                offset=base_offset,
            )
        total = LOG_OVERHEAD + length
        if pos + total > end:
            break  # truncated tail
        batch = Batch.parse(view[pos : pos + total])
        pos += total
        if batch.last_offset < start:
            continue
        yield batch


def check_appendable(batch: Batch, *, transactions: bool = False) -> None:
    """Refuse batches whose offsets a client append cannot reproduce (Apache Kafka's rules).
    With ``transactions`` (a replay, ``copy.txn_replay``) transactional batches and markers
    pass: the replay writes them with a local transaction each."""
    if batch.is_control and not transactions:
        raise UnsafeError(
            f"control batch (transaction marker) at offset {batch.base_offset}: markers are "
            "written by a transaction coordinator, not by a client, so only a replay of the "
            "transaction puts one there (--transactions replay)",
            offset=batch.base_offset,
        )
    if batch.is_transactional and not transactions:
        raise UnsafeError(
            f"transactional batch {batch.base_offset}..{batch.last_offset}: its commit/abort "
            "marker cannot be reproduced by a client without replaying the transaction "
            "(--transactions replay)",
            offset=batch.base_offset,
        )
    if batch.log_append_time:
        raise UnsafeError(
            f"batch {batch.base_offset}..{batch.last_offset} has LogAppendTime timestamps (its "
            "source topic stamps the broker's append time): a CreateTime local topic would "
            "restamp it and a LogAppendTime one stamps its own time, so no copy keeps it as is",
            offset=batch.base_offset,
        )
    if batch.has_holes:
        raise UnsafeError(
            f"batch {batch.base_offset}..{batch.last_offset} holds {batch.record_count} records "
            f"for {batch.last_offset_delta + 1} offsets (compacted); the holes cannot be "
            "reproduced by producing",
            offset=batch.base_offset,
        )


@dataclass(frozen=True, slots=True)
class Rewritten:
    """A batch ready for a client Produce, in two parts: its rewritten header (new) and the rest,
    a view of the fetched bytes. Sent with a scatter/gather write, the batch is never copied."""

    head: bytes
    tail: memoryview

    def parts(self) -> tuple[bytes, memoryview]:
        return (self.head, self.tail)

    def __len__(self) -> int:
        return len(self.head) + len(self.tail)

    def __bytes__(self) -> bytes:
        return self.head + bytes(self.tail)


def rewrite_parts(batch: Batch, producer_id: int, producer_epoch: int, sequence: int) -> Rewritten:
    """The shallow rewrite of ``batch`` for a client Produce, without copying its records.

    BaseOffset becomes 0 (Kafka rejects anything else from a client), the producer identity
    becomes the writer's own idempotent one, and the CRC is recomputed over the new header
    fields and the untouched rest. Nothing else changes.
    """
    head = bytearray(batch.data[:HEADER_SIZE])
    tail = batch.data[HEADER_SIZE:]
    _BASE_OFFSET.pack_into(head, 0, 0)
    _PRODUCER.pack_into(head, PRODUCER_OFFSET, producer_id, producer_epoch, sequence)
    crc = crc32c(memoryview(head)[ATTRIBUTES_OFFSET:])
    _CRC.pack_into(head, CRC_OFFSET, crc32c(tail, value=crc))
    return Rewritten(bytes(head), tail)


def rewrite_for_append(
    batch: Batch, producer_id: int, producer_epoch: int, sequence: int
) -> bytearray:
    """``rewrite_parts`` as one new buffer (a copy of the whole batch)."""
    r = rewrite_parts(batch, producer_id, producer_epoch, sequence)
    out = bytearray(r.head)
    out += r.tail
    return out
