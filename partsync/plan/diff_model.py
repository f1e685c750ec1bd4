"""The result model of ``partsync diff``: options, per-partition and per-topic findings, the
report and its exit status. Pure data (the JSON contract lives in ``to_dict``)."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from partsync.config import ClusterRef
from partsync.errors import ExitStatus, UsageError
from partsync.plan.comparator import Bounds
from partsync.wire.digest import DEFAULT_CHUNK_OFFSETS
from partsync.wire.holes import HOLE_KEY

__all__ = [
    "DiffOptions",
    "DiffReport",
    "DiffRequest",
    "DiffStatus",
    "Level",
    "PartitionDiff",
    "TopicDiff",
    "common_range",
    "error_partition",
    "lag_reason",
    "lags",
    "merge_slices",
]

# Wait for probes of data known to exist (the adapter's PROBE_WAIT_MS): never 0, since Tansu
# answers max_wait_ms=0 with no partitions at all.
_PROBE_WAIT_MS = 100


class Level(str, enum.Enum):
    BATCH = "batch"
    RECORD = "record"


class DiffStatus(str, enum.Enum):
    IDENTICAL = "identical"
    LAGGING = "lagging"
    DIVERGENT = "divergent"
    ERROR = "error"


@dataclass(frozen=True)
class DiffOptions:
    """Knobs of one diff.

    ``chunk_offsets``: offsets per range-digest chunk (the unit confirmed equal at once).
    ``fetch_bytes``: max bytes per fetch (noida ignores it). ``prefetch_chunks``: chunks each
    cluster's reader may digest ahead of the comparison (the memory bound per cluster).
    ``within``: compare only ``[a, b)`` of the common range (for engines that split partitions).
    ``compaction_holes``: compare as a mirror made with ``sync --compaction-holes fill`` holds
    the data (hole records under ``hole_key`` stand for the offsets compaction removed;
    ``filler_records`` per hole batch, as the sync used).
    """

    level: Level = Level.BATCH
    chunk_offsets: int = DEFAULT_CHUNK_OFFSETS
    fetch_bytes: int = 4 << 20
    fetch_wait_ms: int = _PROBE_WAIT_MS
    prefetch_chunks: int = 2
    within: tuple[int, int] | None = None
    compaction_holes: bool = False
    hole_key: bytes = HOLE_KEY
    filler_records: int = 500_000

    def __post_init__(self) -> None:
        if self.chunk_offsets < 1:
            raise UsageError("chunk size must be at least one offset")
        if self.fetch_bytes < 1024:
            raise UsageError("fetch size must be at least 1024 bytes")
        if self.prefetch_chunks < 1:
            raise UsageError("prefetch must be at least one chunk")


def common_range(bounds: Mapping[str, Bounds]) -> tuple[int, int]:
    """``[max log start, min high watermark)``; empty (start == end) when nothing is shared."""
    start = max(b.log_start for b in bounds.values())
    end = min(b.end for b in bounds.values())
    return start, max(start, end)


def lags(bounds: Mapping[str, Bounds]) -> dict[str, int]:
    """Each cluster's distance behind the furthest high watermark."""
    top = max(b.end for b in bounds.values())
    return {name: top - b.end for name, b in bounds.items()}


@dataclass(frozen=True)
class PartitionDiff:
    """One partition's comparison across clusters (``to_dict`` is the JSON contract)."""

    topic: str
    partition: int
    status: DiffStatus
    level: Level
    clusters: Mapping[str, Bounds | None]
    common_range: tuple[int, int] | None = None
    first_divergent_offset: int | None = None
    disagreeing: tuple[str, ...] = ()
    lag: Mapping[str, int] = field(default_factory=dict)
    reason: str | None = None
    unreachable: tuple[str, ...] = ()
    chunks: int = 0
    bytes_read: Mapping[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    # With compaction_holes: per cluster, the hole records compared as holes (record level) or
    # the batches compared as filled (batch level: re-encoded or hole batches).
    holes: Mapping[str, int] = field(default_factory=dict)
    # Per cluster after the first: the largest difference, in ms, between its transaction
    # markers' timestamps and the first cluster's at the same offsets. Each leader stamps the
    # markers it writes with its own clock, so a mirror's replayed markers differ: a known
    # difference (not compared), which moves Kafka's time lookups (``offsets --to-datetime``).
    marker_skew_ms: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "clusters": {
                name: {
                    "log_start": b.log_start if b else None,
                    "high_watermark": b.end if b else None,
                }
                for name, b in self.clusters.items()
            },
            "common_range": list(self.common_range) if self.common_range is not None else None,
            "status": self.status.value,
            "first_divergent_offset": self.first_divergent_offset,
            "disagreeing": list(self.disagreeing),
            "lag": dict(self.lag),
            "reason": self.reason,
            "unreachable": list(self.unreachable),
            "level": self.level.value,
            "chunks_compared": self.chunks,
            "bytes_read": dict(self.bytes_read),
            "seconds": round(self.seconds, 3),
            "holes": dict(self.holes),
            "marker_time_skew_ms": dict(self.marker_skew_ms),
        }


@dataclass(frozen=True)
class TopicDiff:
    """A topic's partitions, plus a topic-wide finding (partition counts differ, a cluster
    unreachable, the topic missing somewhere)."""

    topic: str
    partitions: tuple[PartitionDiff, ...]
    partition_counts: Mapping[str, int | None] = field(default_factory=dict)
    reason: str | None = None
    topic_status: DiffStatus | None = None

    @property
    def status(self) -> DiffStatus:
        statuses = {p.status for p in self.partitions}
        if self.topic_status is not None:
            statuses.add(self.topic_status)
        for s in (DiffStatus.DIVERGENT, DiffStatus.ERROR, DiffStatus.LAGGING):
            if s in statuses:
                return s
        return DiffStatus.IDENTICAL

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "status": self.status.value,
            "reason": self.reason,
            "partition_counts": dict(self.partition_counts),
            "partitions": [p.to_dict() for p in sorted(self.partitions, key=lambda p: p.partition)],
        }


@dataclass(frozen=True)
class DiffReport:
    topics: tuple[TopicDiff, ...]
    clusters: tuple[str, ...]
    level: Level
    chunk_offsets: int
    seconds: float = 0.0

    def all_partitions(self) -> list[PartitionDiff]:
        return [p for t in self.topics for p in t.partitions]

    @property
    def exit_status(self) -> ExitStatus:
        """3 any divergence (it needs a person, so it wins); 1 any other failure; else 0."""
        statuses = {t.status for t in self.topics}
        if DiffStatus.DIVERGENT in statuses:
            return ExitStatus.UNSAFE
        if DiffStatus.ERROR in statuses:
            return ExitStatus.FAILURE
        return ExitStatus.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "clusters": list(self.clusters),
            "level": self.level.value,
            "chunk_offsets": self.chunk_offsets,
            "topics": [t.to_dict() for t in self.topics],
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class DiffRequest:
    topics: tuple[str, ...]
    clusters: tuple[ClusterRef, ...]
    partitions: frozenset[int] | None = None
    options: DiffOptions = DiffOptions()

    def __post_init__(self) -> None:
        if len(self.clusters) < 2:
            raise UsageError("diff needs at least two clusters")


def lag_reason(lag: Mapping[str, int]) -> str:
    behind = ", ".join(f"{n} by {k}" for n, k in lag.items() if k)
    return f"common range identical; behind the furthest cluster: {behind}"


def error_partition(
    topic: str,
    p: int,
    names: Sequence[str],
    bounds: Mapping[str, Bounds | None],
    level: Level,
    reason: str,
    unreachable: tuple[str, ...],
) -> PartitionDiff:
    known = {n: b for n, b in bounds.items() if b is not None}
    return PartitionDiff(
        topic,
        p,
        DiffStatus.ERROR,
        level,
        {n: bounds.get(n) for n in names},
        lag=lags(known) if known else {},
        reason=reason,
        unreachable=unreachable,
    )


def merge_slices(slices: Sequence[PartitionDiff]) -> PartitionDiff:
    """One partition's result from the results of its ``within`` slices (in offset order):
    the first error wins, else the first divergent slice, else the common verdict."""
    ordered = sorted(
        slices, key=lambda d: (d.first_divergent_offset is None, d.first_divergent_offset or 0)
    )
    first = slices[0]
    chosen = next((d for d in slices if d.status is DiffStatus.ERROR), None)
    if chosen is None:
        chosen = next((d for d in ordered if d.status is DiffStatus.DIVERGENT), first)
    read: dict[str, int] = {}
    holes: dict[str, int] = {}
    skew: dict[str, int] = {}
    for d in slices:
        for n, k in d.bytes_read.items():
            read[n] = read.get(n, 0) + k
        for n, k in d.holes.items():
            holes[n] = holes.get(n, 0) + k
        for n, k in d.marker_skew_ms.items():
            skew[n] = max(skew.get(n, 0), k)
    return replace(
        chosen,
        common_range=first.common_range,
        chunks=sum(d.chunks for d in slices),
        bytes_read=read,
        seconds=sum(d.seconds for d in slices),
        holes=holes,
        marker_skew_ms=skew,
    )
