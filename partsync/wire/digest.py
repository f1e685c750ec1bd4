"""Range digests and the N-way comparison behind ``partsync diff``. Pure, no I/O.

A *unit* is what one level compares: a whole batch (batch level, ``batch_digest``) or one
record (record level, ``Record.digest()``), with the offsets it covers. Units are grouped into
offset-aligned *chunks*: chunk ``k`` holds the units whose first offset (clamped up to the start
of the compared range) lies in ``[k * size, (k + 1) * size)``. A batch thus belongs to exactly one
chunk however far it reaches (the rule ``plan.Chunk`` uses too), and a record to the chunk of its
offset. A chunk's digest covers its units' offsets and digests, so equal chunk digests mean
equal units: clusters are compared one chunk digest at a time and only a chunk whose digests
differ is opened, to find the first divergent unit (Merkle style, one level deep; the caller
narrows a divergent batch to its records).

Who disagrees: at the first divergent unit the clusters are grouped by what they hold there (a
unit's offsets and digest, or nothing). The largest group agrees; every cluster outside it
disagrees. A tie goes to the group holding the earliest-listed cluster, so the first cluster
given is the reference: with two clusters that differ, the second one is named.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from partsync.errors import CorruptBatchError
from partsync.wire.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_BIT,
    PRODUCER_OFFSET,
    RECORD_COUNT_OFFSET,
    TRANSACTIONAL_BIT,
    Batch,
)
from partsync.wire.markers import control_key
from partsync.wire.records import Record

__all__ = [
    "DEFAULT_CHUNK_OFFSETS",
    "ChunkDigest",
    "Comparison",
    "Divergence",
    "Unit",
    "batch_digest",
    "batch_unit",
    "chunk_digest",
    "chunk_index",
    "compare_chunks",
    "describe_record_difference",
    "first_divergence",
    "iter_chunks",
    "record_unit",
    "same_batch",
    "split_majority",
]

DEFAULT_CHUNK_OFFSETS = 10_000

_UNIT_HEAD = struct.Struct(">qq")  # first, last offset
_BASE_OFFSET = struct.Struct(">q")
# A batch digest ignores the bits a copy could legitimately differ in (see batch_digest).
_DIGEST_ATTRIBUTE_MASK = ~(TRANSACTIONAL_BIT | CONTROL_BIT) & 0xFFFF


def batch_digest(batch: Batch) -> bytes:
    """Content digest of a batch that ignores exactly what a shallow copy may change.

    Ignored: PartitionLeaderEpoch, CRC, ProducerId/Epoch/BaseSequence (rewritten by the
    copy) and the transactional attribute bit. Covered: the absolute BaseOffset,
    every other attribute bit, LastOffsetDelta, both timestamps, RecordCount and the record
    bytes as stored (compressed or not). Two batches with equal digests hold the same records
    at the same offsets.

    A transaction marker covers only its offset and control key (version and type): its
    timestamp and coordinator epoch are the writing cluster's own (``wire.markers``).
    """
    h = hashlib.blake2b(digest_size=16)
    h.update(_BASE_OFFSET.pack(batch.base_offset))
    if batch.is_control:
        h.update(b"control")
        try:
            h.update(control_key(batch))
            return h.digest()
        except CorruptBatchError:
            pass  # not a marker: a control batch unlike any data batch, digested in full
    h.update(struct.pack(">H", batch.attributes & _DIGEST_ATTRIBUTE_MASK))
    h.update(batch.data[ATTRIBUTES_OFFSET + 2 : PRODUCER_OFFSET])
    h.update(batch.data[RECORD_COUNT_OFFSET:])
    return h.digest()


def same_batch(a: Batch, b: Batch) -> bool:
    """The same batch at the same offsets on two clusters: what a shallow copy keeps is equal
    (``batch_digest``)."""
    return a.base_offset == b.base_offset and batch_digest(a) == batch_digest(b)


@dataclass(frozen=True, slots=True)
class Unit:
    """A compared unit: a batch covering offsets ``first..last`` or one record (first == last)."""

    first: int
    last: int
    digest: bytes

    @property
    def span(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}..{self.last}"


def batch_unit(batch: Batch) -> Unit:
    return Unit(batch.base_offset, batch.last_offset, batch_digest(batch))


def record_unit(record: Record) -> Unit:
    return Unit(record.offset, record.offset, record.digest())


@dataclass(frozen=True, slots=True)
class ChunkDigest:
    """The units of one chunk of one cluster's log, and their combined digest."""

    index: int
    digest: bytes
    units: tuple[Unit, ...]


def chunk_index(offset: int, size: int) -> int:
    return offset // size


def chunk_digest(units: Iterable[Unit]) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for u in units:
        h.update(_UNIT_HEAD.pack(u.first, u.last))
        h.update(u.digest)
    return h.digest()


def iter_chunks(units: Iterable[Unit], size: int, *, start: int = 0) -> Iterator[ChunkDigest]:
    """Group ascending units into chunks of ``size`` offsets; empty chunks are not yielded.

    ``start`` is the first compared offset: a batch that begins below it (the fetch returns the
    batch *containing* the start) counts in the chunk of ``start``.
    """
    if size < 1:
        raise ValueError("chunk size must be at least one offset")
    current: list[Unit] = []
    index = -1
    for u in units:
        k = chunk_index(max(u.first, start), size)
        if k != index:
            if current:
                yield ChunkDigest(index, chunk_digest(current), tuple(current))
            current = []
            index = k
        current.append(u)
    if current:
        yield ChunkDigest(index, chunk_digest(current), tuple(current))


def split_majority(held: Sequence[tuple[str, Hashable]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(agreeing, disagreeing) cluster names from (cluster, what it holds) pairs in listed order.

    The largest group of equal values agrees; ties go to the group of the earliest-listed
    cluster. Both tuples keep the listed order.
    """
    groups: dict[Hashable, list[str]] = {}
    for name, value in held:
        groups.setdefault(value, []).append(name)
    # dicts keep insertion order, so max() picks the earliest-listed group among equals.
    winner = max(groups.values(), key=len)
    agreeing = tuple(n for n, _ in held if n in winner)
    disagreeing = tuple(n for n, _ in held if n not in winner)
    return agreeing, disagreeing


@dataclass(frozen=True)
class Divergence:
    """Where the clusters first disagree.

    ``offset`` is the lowest offset of the first divergent unit (clamped to the compared range);
    ``units`` is what each cluster holds there (None: nothing).
    """

    offset: int
    chunk: int
    agreeing: tuple[str, ...]
    disagreeing: tuple[str, ...]
    units: Mapping[str, Unit | None]

    @property
    def boundaries_differ(self) -> bool:
        """True when the clusters' units do not cover the same offsets (or one has none)."""
        spans = {None if u is None else (u.first, u.last) for u in self.units.values()}
        return len(spans) > 1 or None in spans


def _held(u: Unit | None) -> Hashable:
    return None if u is None else (u.first, u.last, u.digest)


def first_divergence(
    units: Mapping[str, Sequence[Unit]], *, start: int = 0, chunk: int = -1
) -> Divergence | None:
    """The first position where the clusters' unit sequences differ, or None if they are equal.

    Clusters are taken in the mapping's order (the first one is the reference for ties).
    """
    names = list(units)
    longest = max((len(s) for s in units.values()), default=0)
    for i in range(longest):
        at = {n: units[n][i] if i < len(units[n]) else None for n in names}
        held = [(n, _held(u)) for n, u in at.items()]
        if len({h for _, h in held}) == 1:
            continue
        agreeing, disagreeing = split_majority(held)
        offset = min(max(u.first, start) for u in at.values() if u is not None)
        return Divergence(offset, chunk, agreeing, disagreeing, at)
    return None


@dataclass(frozen=True)
class Comparison:
    """Outcome of comparing chunk streams: how much was confirmed equal, and the divergence."""

    chunks: int
    units: int
    divergence: Divergence | None

    @property
    def identical(self) -> bool:
        return self.divergence is None


_DONE = object()


def compare_chunks(streams: Mapping[str, Iterable[ChunkDigest]], *, start: int = 0) -> Comparison:
    """Walk every cluster's chunk stream in lockstep and stop at the first divergent unit.

    Holds one chunk per cluster at a time (bounded memory when the streams are lazy). A chunk
    present on some clusters and absent (empty) on others is a divergence too.
    """
    names = list(streams)
    iters = {n: iter(s) for n, s in streams.items()}
    heads: dict[str, ChunkDigest | None] = {n: next(iters[n], None) for n in names}
    chunks = 0
    units = 0
    while True:
        present = [h.index for h in heads.values() if h is not None]
        if not present:
            return Comparison(chunks, units, None)
        index = min(present)
        at = {n: h if h is not None and h.index == index else None for n, h in heads.items()}
        digests = {None if c is None else c.digest for c in at.values()}
        if len(digests) > 1:
            per = {n: (c.units if c is not None else ()) for n, c in at.items()}
            div = first_divergence(per, start=start, chunk=index)
            if div is None:  # pragma: no cover - equal units always give equal digests
                raise AssertionError(f"chunk {index}: digests differ but units are equal")
            return Comparison(chunks, units, div)
        chunks += 1
        units += max(len(c.units) for c in at.values() if c is not None)
        for n in names:
            if at[n] is not None:
                heads[n] = next(iters[n], None)


_FIELDS = ("offset", "timestamp", "key", "value", "headers", "control")


def _marker(r: Record) -> str:
    kind = int.from_bytes(r.key[2:4], "big", signed=True) if r.key and len(r.key) >= 4 else None
    return (
        {0: "an abort", 1: "a commit"}.get(kind, f"of type {kind}")
        if kind is not None
        else "malformed"
    )


def describe_record_difference(records: Mapping[str, Record | None], reference: str) -> str:
    """Which record fields differ from the reference cluster's record, in words.

    ``records`` maps each cluster to its record at the divergent offset (None: no record there,
    e.g. a compaction hole or the end of its data).
    """
    ref = records[reference]
    parts: list[str] = []
    for name, rec in records.items():
        if name == reference:
            continue
        if rec is None and ref is None:
            continue
        if rec is None or ref is None:
            missing = name if rec is None else reference
            parts.append(f"{missing} has no record there")
            continue
        if rec.control and ref.control:
            # Markers: only their type is the source's (``Record.digest``).
            if rec.key != ref.key:
                parts.append(
                    f"{name}'s transaction marker is {_marker(rec)}, {reference}'s {_marker(ref)}"
                )
            continue
        fields = [f for f in _FIELDS if getattr(rec, f) != getattr(ref, f)]
        if fields:
            parts.append(f"{name} differs from {reference} in {', '.join(fields)}")
    return "; ".join(dict.fromkeys(parts)) or "records are equal"
