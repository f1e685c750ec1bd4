"""Failback (``partsync failback``): what becomes of each partition of an old primary that is
to mirror the new one (the mirror a promote made primary). Pure.

No client can cut a log's tail on stock Kafka (DeleteRecords moves only the log start), so per
partition there are two cases:

- the old copy is a **prefix** of the new primary's log (every offset both hold is the same
  record, and the old one ends at or before the new one): it is simply mirrored in the new
  direction from where it ends;
- it **diverged** (from its first offset that differs, or the first the new primary does not
  hold): what it holds from there on (records that never reached the mirror before the
  failover, and anything written there since) is exported first, then the whole topic is
  deleted, created again with the same partitions and settings, and mirrored from the new
  primary's log start.

A topic with one diverged partition is created again as a whole (topics, not partitions, are
deleted). A topic the old primary does not hold (deleted by hand, or by a failback killed
before it created it again) is created like the new primary's.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from partsync.plan.comparator import Bounds

__all__ = [
    "Action",
    "ExportCount",
    "PartitionFailback",
    "TxnEvent",
    "classify",
    "moved_since",
    "orphan_markers",
    "topic_action",
    "transaction_starts",
    "transaction_states",
]


class Action(str, enum.Enum):
    MIRROR = "mirror"  # a prefix: mirrored from where it ends
    RECREATE = "recreate"  # diverged: tail exported, topic deleted and created again
    CREATE = "create"  # absent on the old primary: created like the new primary's


@dataclass(frozen=True)
class PartitionFailback:
    partition: int
    old: Bounds | None
    new: Bounds
    # The first offset whose record differs, or the old copy holds and the new one does not.
    diverged_at: int | None
    reason: str

    @property
    def action(self) -> Action:
        if self.old is None:
            return Action.CREATE
        return Action.MIRROR if self.diverged_at is None else Action.RECREATE

    @property
    def export_range(self) -> tuple[int, int] | None:
        """The old primary's offsets to export: ``[diverged_at, its end)``, or None."""
        if self.old is None or self.diverged_at is None or self.old.end <= self.diverged_at:
            return None
        return max(self.diverged_at, self.old.log_start), self.old.end

    @property
    def discarded(self) -> int:
        """Offsets of the old primary's log deleted with the topic (those past the divergence
        point are exported first; the rest are the new primary's too and copied again)."""
        if self.old is None or self.action is not Action.RECREATE:
            return 0
        return self.old.end - self.old.log_start

    def to_dict(self) -> dict[str, object]:
        rng = self.export_range
        return {
            "partition": self.partition,
            "action": self.action.value,
            "old": None if self.old is None else [self.old.log_start, self.old.end],
            "new": [self.new.log_start, self.new.end],
            "diverged_at": self.diverged_at,
            "export_range": None if rng is None else list(rng),
            "discarded_offsets": self.discarded,
            "reason": self.reason,
        }


def classify(
    partition: int, old: Bounds | None, new: Bounds, first_divergent: int | None
) -> PartitionFailback:
    """One partition's case from both clusters' bounds and the first offset where ``diff``
    found their records differ within what both hold (None: none)."""
    if old is None:
        return PartitionFailback(partition, None, new, None, "not on the old primary")
    if first_divergent is not None:
        return PartitionFailback(
            partition, old, new, first_divergent, f"records differ from offset {first_divergent}"
        )
    if old.end > new.end:
        at = max(new.end, old.log_start)
        why = f"the old primary holds offsets {at}..{old.end - 1} the new primary does not"
        return PartitionFailback(partition, old, new, at, why)
    if old.end < new.log_start and old.end > old.log_start:
        # Nothing both hold to compare (the new primary's retention removed what the old one
        # still has), and it cannot be appended to (its end is below the new log start): all
        # of it is exported, since whether the new primary ever held it cannot be told.
        why = (
            f"the old copy ends at {old.end}, before the new primary's log start "
            f"{new.log_start}: nothing to compare, all of it exported"
        )
        return PartitionFailback(partition, old, new, old.log_start, why)
    if old.end == new.end:
        return PartitionFailback(partition, old, new, None, "identical")
    return PartitionFailback(
        partition, old, new, None, f"a prefix: {new.end - old.end} offsets behind"
    )


def moved_since(
    partitions: Iterable[PartitionFailback], now: Mapping[int, tuple[int, int]]
) -> list[str]:
    """What keeps the old primary's topic from being deleted, per partition, from its
    (high watermark, log end offset) ``now``: records written since it was compared and
    exported (the high watermark moved), or records above the high watermark (written, not yet
    replicated: no Fetch reads them, so none of them were exported). Empty: nothing would be
    deleted unexported."""
    out = []
    for p in partitions:
        if p.old is None:
            continue
        hw, leo = now[p.partition]
        if hw != p.old.end:
            out.append(f"{p.partition}: written since, end {p.old.end} -> {hw}")
        elif leo > hw:
            out.append(
                f"{p.partition}: offsets {hw}..{leo - 1} above the high watermark "
                "(not yet replicated, not exported)"
            )
    return out


def topic_action(partitions: Iterable[PartitionFailback]) -> Action:
    """A topic is created again as a whole if any partition diverged."""
    actions = {p.action for p in partitions}
    for a in (Action.RECREATE, Action.CREATE):
        if a in actions:
            return a
    return Action.MIRROR


@dataclass(frozen=True)
class TxnEvent:
    """A batch of the exported tail, as transaction states need it: a data batch (``marker``
    None) or a transaction marker (``commit``/``abort``) of ``producer_id``."""

    base_offset: int
    producer_id: int
    transactional: bool
    marker: str | None = None


COMMITTED, ABORTED, OPEN = "committed", "aborted", "open"


def transaction_states(events: Iterable[TxnEvent]) -> dict[int, str]:
    """The state of each transactional data batch (by base offset): ``committed`` or
    ``aborted`` as the producer's next marker in the log says, ``open`` when the log holds
    none after it (Kafka writes a transaction's marker after all of its data, in each of its
    partitions). Batches outside transactions are not listed."""
    pending: dict[int, list[int]] = {}
    out: dict[int, str] = {}
    for e in events:
        if e.marker is not None:
            state = COMMITTED if e.marker == "commit" else ABORTED
            for base in pending.pop(e.producer_id, []):
                out[base] = state
        elif e.transactional:
            pending.setdefault(e.producer_id, []).append(e.base_offset)
    for bases in pending.values():
        for base in bases:
            out[base] = OPEN
    return out


def orphan_markers(events: Iterable[TxnEvent]) -> set[int]:
    """Producers whose first event in ``events`` is a marker: their transaction began before
    the range (its data below it). Past a divergence point that is a transaction the new
    primary holds the data of but not its end (promote aborted it there): the export takes
    its data too, with the old primary's outcome."""
    seen: set[int] = set()
    out: set[int] = set()
    for e in events:
        if e.producer_id in seen:
            continue
        seen.add(e.producer_id)
        if e.marker is not None:
            out.add(e.producer_id)
    return out


def transaction_starts(
    events: Iterable[TxnEvent], producers: set[int], *, from_log_start: bool
) -> tuple[dict[int, int], set[int]]:
    """Where each of ``producers``' transaction open at the end of ``events`` (a window of the
    log just below a divergence point) began: its first data batch after the producer's last
    marker in the window. A producer with no marker in the window is resolved only when the
    window starts at the log start (else its transaction may have begun below: the caller
    widens the window). Returns (producer -> first offset, the unresolved)."""
    first: dict[int, int | None] = {}
    ended: set[int] = set()
    for e in events:
        if e.producer_id not in producers:
            continue
        if e.marker is not None:
            first[e.producer_id] = None  # what came before is ended: start after it
            ended.add(e.producer_id)
        elif e.transactional and first.get(e.producer_id) is None:
            first[e.producer_id] = e.base_offset
    starts = {p: o for p, o in first.items() if o is not None}
    unresolved = set() if from_log_start else {p for p in producers if p not in ended}
    return {p: o for p, o in starts.items() if p not in unresolved}, unresolved


@dataclass
class ExportCount:
    """What one partition's export holds."""

    records: int = 0  # data records
    markers: int = 0
    bytes: int = 0  # of the batches as the old primary stores them
    states: dict[str, int] = field(default_factory=dict)  # transaction state -> records
    # Records below the divergence point in the export: a transaction's data whose marker
    # lies past it (the new primary holds them, aborted by promote).
    straddling: int = 0

    def add(
        self,
        records: int,
        size: int,
        state: str | None,
        marker: bool = False,
        straddling: bool = False,
    ) -> None:
        self.bytes += size
        if straddling:
            self.straddling += records
        if marker:
            self.markers += records
            return
        self.records += records
        key = state or "none"
        self.states[key] = self.states.get(key, 0) + records

    def to_dict(self) -> dict[str, object]:
        return {
            "records": self.records,
            "markers": self.markers,
            "bytes": self.bytes,
            "transactions": dict(sorted(self.states.items())),
            "straddling": self.straddling,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> ExportCount:
        states = d.get("transactions") or {}
        assert isinstance(states, dict)
        return cls(
            int(str(d.get("records", 0))),
            int(str(d.get("markers", 0))),
            int(str(d.get("bytes", 0))),
            {str(k): int(v) for k, v in states.items()},
            int(str(d.get("straddling", 0))),
        )
