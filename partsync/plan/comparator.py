"""The comparator: from partition bounds to a copy plan. Pure, no I/O.

``plan_partition(topic, partition, local, sources, policy)`` decides, for one partition, whether
the local log is in sync, behind (and which offset ranges to copy from which source) or unsafe
to touch. ``partsync plan`` prints these plans; ``partsync sync`` executes them.

Offsets only stay identical when the copy starts exactly at the local log end and goes on
contiguously, so a plan is always one run of chunks ``[local_end, target_end)``.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from partsync.plan.census import PartitionScan

__all__ = [
    "RECREATED_HINT",
    "Bounds",
    "Chunk",
    "Condition",
    "PartitionPlan",
    "PlanPolicy",
    "earliest_held",
    "plan_partition",
    "unknown_without",
]


# What a source topic deleted and created again looks like from here (its offsets restarted
# under the same name): the local copy is then ahead of it, or differs from it at the local end.
RECREATED_HINT = (
    "if the source topic was deleted and created again, its offsets restarted: partsync never "
    "appends a new topic's records to the old copy (delete the local topic, or mirror into a "
    "new one, to start over)"
)


@dataclass(frozen=True, slots=True)
class Bounds:
    """A partition's log as one cluster reports it: offsets ``[log_start, end)``.

    ``end`` is the high watermark (for the local cluster, which nobody else writes, it is also
    the log end offset, the sync checkpoint).
    """

    log_start: int
    end: int

    def __post_init__(self) -> None:
        if self.log_start < 0 or self.end < self.log_start:
            raise ValueError(f"invalid bounds: log start {self.log_start}, end {self.end}")

    def holds(self, offset: int) -> bool:
        return self.log_start <= offset < self.end


@dataclass(frozen=True, slots=True)
class Chunk:
    """Copy the batches whose base offset lies in ``[start, end)`` from ``source``.

    Chunks are cut on base offsets, not record offsets, so a batch straddling a chunk boundary
    belongs to exactly one chunk whichever source serves it.
    """

    start: int
    end: int
    source: str

    @property
    def span(self) -> int:
        return self.end - self.start


class Condition(str, enum.Enum):
    IN_SYNC = "in-sync"
    BEHIND = "behind"
    UNSAFE = "unsafe"
    # A refusal that a source which did not answer could overturn (it may hold what is
    # missing): not proven, so not unsafe; retried until that source answers.
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class PlanPolicy:
    """Knobs of the comparator.

    ``chunk_offsets``: offsets per chunk; chunks are the unit handed to different sources (and
    connections) in parallel. ``bootstrap``: an empty local partition whose sources start above
    its end is brought to the sources' log start with filler records (then deleted), instead of
    being refused. ``retention_gap``: the same for a non-empty one, only when "skip".
    """

    chunk_offsets: int = 50_000
    bootstrap: bool = True
    # A local partition that fell behind every source's retention (its end below every log
    # start): "refuse" (the default: the offsets in between are lost) or "skip" (start again at
    # the sources' log start like a bootstrap, deleting the local records below it).
    retention_gap: str = "refuse"

    def __post_init__(self) -> None:
        if self.chunk_offsets < 1:
            raise ValueError("chunk_offsets must be at least 1")
        if self.retention_gap not in ("refuse", "skip"):
            raise ValueError("retention_gap must be 'refuse' or 'skip'")


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    topic: str
    partition: int
    local: Bounds
    sources: Mapping[str, Bounds]
    condition: Condition
    target_end: int
    chunks: tuple[Chunk, ...] = ()
    reason: str | None = None
    # Sources serving chunks, in first-use order (each must agree with the local boundary).
    serving: tuple[str, ...] = field(default=())
    # The local partition is empty and the copy starts at the sources' log start, above the
    # local end: the copier first appends fillers up to the first copied batch, then moves the
    # local log start past them (``copy.bootstrap``).
    bootstrap: bool = False
    # ``plan --scan``: what the ranges hold that a plain copy cannot append as it is.
    scan: PartitionScan | None = None

    @property
    def copy_start(self) -> int:
        """The first offset the chunks cover (the local end, or the log start a bootstrap
        copies from)."""
        return self.chunks[0].start if self.chunks else self.local.end

    @property
    def missing(self) -> int:
        return max(0, self.target_end - self.local.end)

    def to_dict(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "condition": self.condition.value,
            "local": {"log_start": self.local.log_start, "end": self.local.end},
            "sources": {
                name: {"log_start": b.log_start, "high_watermark": b.end}
                for name, b in self.sources.items()
            },
            "target_end": self.target_end,
            "missing": self.missing,
            "ranges": [{"start": c.start, "end": c.end, "source": c.source} for c in self.chunks],
            "reason": self.reason,
            "bootstrap": (
                {"fill_from": self.local.end, "log_start": self.copy_start}
                if self.bootstrap
                else None
            ),
            "scan": None if self.scan is None else self.scan.to_dict(),
        }


def earliest_held(sources: Mapping[str, Bounds]) -> int | None:
    """The earliest offset any source still holds (the lowest log start of the sources that
    hold records), or None when none holds any."""
    held = [b.log_start for b in sources.values() if b.end > b.log_start]
    return min(held) if held else None


def _unsafe(
    topic: str,
    partition: int,
    local: Bounds,
    sources: Mapping[str, Bounds],
    target_end: int,
    reason: str,
) -> PartitionPlan:
    return PartitionPlan(
        topic, partition, local, dict(sources), Condition.UNSAFE, target_end, (), reason
    )


def plan_partition(
    topic: str,
    partition: int,
    local: Bounds,
    sources: Mapping[str, Bounds],
    policy: PlanPolicy = PlanPolicy(),
) -> PartitionPlan:
    """Plan one partition. ``sources`` maps reachable source names to their bounds, in
    preference order (ties between sources that can serve a chunk go round-robin in this order).
    """
    if not sources:
        raise ValueError("at least one source is needed to plan")
    target_end = max(b.end for b in sources.values())
    start = local.end

    if start > target_end:
        return _unsafe(
            topic,
            partition,
            local,
            sources,
            target_end,
            f"local log end {start} is beyond every source's end (furthest: {target_end}); "
            f"the local partition has data no source has ({RECREATED_HINT})",
        )
    if start == target_end:
        return PartitionPlan(topic, partition, local, dict(sources), Condition.IN_SYNC, target_end)

    # An empty local partition below every source's log start (a mirror of a topic whose head
    # retention deleted): start at the earliest offset a source holds.
    bootstrap = False
    earliest = earliest_held(sources)
    if earliest is not None and earliest > start:
        empty = local.log_start == local.end
        if (empty and policy.bootstrap) or (not empty and policy.retention_gap == "skip"):
            start, bootstrap = earliest, True

    # Cut points: chunk grid plus every place where the set of sources able to serve changes.
    cuts = set(range(start, target_end, policy.chunk_offsets))
    cuts.add(target_end)
    for b in sources.values():
        for x in (b.log_start, b.end):
            if start < x < target_end:
                cuts.add(x)
    points = sorted(cuts)

    names = list(sources)
    chunks: list[Chunk] = []
    for turn, (lo, hi) in enumerate(itertools.pairwise(points)):
        eligible = [n for n in names if sources[n].log_start <= lo and hi <= sources[n].end]
        if not eligible:
            holders = ", ".join(f"{n} holds {b.log_start}..{b.end}" for n, b in sources.items())
            where = "the local log end" if lo == start else "offset"
            return _unsafe(
                topic,
                partition,
                local,
                sources,
                target_end,
                f"no source holds offsets {lo}..{hi} ({where} {lo}); {holders}",
            )
        chunks.append(Chunk(lo, hi, eligible[turn % len(eligible)]))

    serving: list[str] = []
    for c in chunks:
        if c.source not in serving:
            serving.append(c.source)
    return PartitionPlan(
        topic,
        partition,
        local,
        dict(sources),
        Condition.BEHIND,
        target_end,
        tuple(chunks),
        None,
        tuple(serving),
        bootstrap,
    )


def unknown_without(plan: PartitionPlan, unreachable: Sequence[str]) -> PartitionPlan:
    """``plan`` as far as the sources that answered go. A refusal is only proven if every
    source answered: with ``unreachable`` sources it becomes ``UNKNOWN`` (they may be ahead, or
    hold the missing offsets). An in-sync or behind plan stands (copying what the answering
    sources hold is safe either way)."""
    if plan.condition is not Condition.UNSAFE or not unreachable:
        return plan
    names = ", ".join(unreachable)
    return dataclasses.replace(
        plan,
        condition=Condition.UNKNOWN,
        reason=f"{plan.reason}; but source {names} did not answer and may hold what is "
        "missing: unknown until it answers",
    )
