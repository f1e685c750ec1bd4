"""What a range of a source's log holds that a plain copy cannot append as it is: compaction
holes and transactions (``partsync plan --scan``).

The census reads batch headers only (no decompression), so it costs what fetching the range
costs. It counts what a sync would do there: the offsets ``--compaction-holes fill`` fills (hole
records between batches and inside the batches the cleaner thinned), the batches it re-encodes,
the transactions ``--transactions replay`` replays, and where a replay would stop because a
transaction has no marker yet (the last *quiet point*: an offset where no transaction seen is
open, as ``copy.txn_replay`` holds batches back from a transaction's first batch until every
transaction seen has its marker). ``stop`` then says where a sync with given options would
refuse the partition or wait, and why.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from partsync.wire.batch import Batch
from partsync.wire.markers import ABORT, marker_type

__all__ = ["Census", "PartitionScan", "RangeCensus", "ScanStop", "scan_stop"]


@dataclass(frozen=True)
class RangeCensus:
    """The census of ``[start, end)`` of one partition (``end``: where the scan stopped)."""

    start: int
    end: int
    batches: int = 0
    bytes: int = 0
    # Offsets no batch holds (whole batches the cleaner removed): hole records fill them.
    holes_between: int = 0
    # Offsets cleaned out of batches that were kept (empty batches included).
    holes_inside: int = 0
    batches_with_holes: int = 0  # re-encoded by a fill
    first_hole: int | None = None
    transactional_batches: int = 0
    committed: int = 0
    aborted: int = 0
    first_transactional: int | None = None
    first_log_append_time: int | None = None
    # The most transactions open at once, and where that many first were.
    most_open: int = 0
    most_open_at: int | None = None
    # Source producer ids whose transaction has no marker by ``end``, and the last quiet point.
    open_at_end: tuple[int, ...] = ()
    quiet_end: int = 0
    # The most bytes a replay holds back at once (from a transaction's first batch), and the
    # quiet point that hold starts at.
    most_held_bytes: int = 0
    most_held_from: int = 0

    @property
    def holes(self) -> int:
        return self.holes_between + self.holes_inside

    @property
    def markers(self) -> int:
        return self.committed + self.aborted

    def to_dict(self) -> dict[str, object]:
        return {
            "start": self.start,
            "end": self.end,
            "batches": self.batches,
            "bytes": self.bytes,
            "holes": self.holes,
            "holes_between_batches": self.holes_between,
            "holes_inside_batches": self.holes_inside,
            "batches_with_holes": self.batches_with_holes,
            "transactional_batches": self.transactional_batches,
            "committed": self.committed,
            "aborted": self.aborted,
            "most_open_transactions": self.most_open,
            "open_at_end": list(self.open_at_end),
            "quiet_end": self.quiet_end,
            "most_held_bytes": self.most_held_bytes,
        }


@dataclass
class Census:
    """Builds a ``RangeCensus`` from the batches of ``[start, ...)`` in log order. A batch that
    starts below the offset reached so far (the batch straddling the range's start, already in
    the local log, or one a second read of a straddling batch returns again) is skipped."""

    start: int
    _at: int = field(init=False)
    _c: dict[str, int] = field(init=False, default_factory=dict)
    _open: dict[int, int] = field(init=False, default_factory=dict)  # producer id -> first
    _first_hole: int | None = field(init=False, default=None)
    _first_txn: int | None = field(init=False, default=None)
    _first_lat: int | None = field(init=False, default=None)
    _most_open: int = field(init=False, default=0)
    _most_open_at: int | None = field(init=False, default=None)
    _quiet: int = field(init=False)
    _held: int = field(init=False, default=0)
    _most_held: int = field(init=False, default=0)
    _most_held_from: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._at = self._quiet = self.start

    def _add(self, key: str, n: int = 1) -> None:
        self._c[key] = self._c.get(key, 0) + n

    def add(self, b: Batch) -> None:
        if b.base_offset < self._at:
            self._at = max(self._at, b.next_offset)
            return
        if not self._open:
            self._quiet = b.base_offset  # a gap before it is filled at once
        if b.base_offset > self._at:
            self._add("between", b.base_offset - self._at)
            self._hole(self._at)
        self._add("batches")
        self._add("bytes", b.size)
        inside = b.last_offset_delta + 1 - b.record_count
        if inside and not b.is_control:
            self._add("inside", inside)
            self._add("with_holes")
            self._hole(b.base_offset)
        if b.is_transactional and self._first_txn is None:
            self._first_txn = b.base_offset
        if b.log_append_time and self._first_lat is None:
            self._first_lat = b.base_offset
        if b.is_control:
            self._add("aborted" if marker_type(b) == ABORT else "committed")
            self._open.pop(b.producer_id, None)
        elif b.is_transactional:
            self._add("transactional")
            self._open.setdefault(b.producer_id, b.base_offset)
            if len(self._open) > self._most_open:
                self._most_open, self._most_open_at = len(self._open), b.base_offset
        if self._open or self._held:
            self._held += b.size
            if self._held > self._most_held:
                self._most_held, self._most_held_from = self._held, self._quiet
        if not self._open:
            self._quiet, self._held = b.next_offset, 0
        self._at = b.next_offset

    def _hole(self, offset: int) -> None:
        if self._first_hole is None:
            self._first_hole = offset

    def result(self, end: int | None = None) -> RangeCensus:
        """The census so far; ``end``: the range's end, when every batch below it was added
        (a gap up to it counts as holes only if a batch followed it, which a read stops at)."""
        reached = self._at if end is None else max(self._at, end)
        c = self._c.get
        return RangeCensus(
            start=self.start,
            end=reached,
            batches=c("batches", 0),
            bytes=c("bytes", 0),
            holes_between=c("between", 0),
            holes_inside=c("inside", 0),
            batches_with_holes=c("with_holes", 0),
            first_hole=self._first_hole,
            transactional_batches=c("transactional", 0),
            committed=c("committed", 0),
            aborted=c("aborted", 0),
            first_transactional=self._first_txn,
            first_log_append_time=self._first_lat,
            most_open=self._most_open,
            most_open_at=self._most_open_at,
            open_at_end=tuple(sorted(self._open, key=self._open.__getitem__)),
            quiet_end=reached if not self._open else self._quiet,
            most_held_bytes=self._most_held,
            most_held_from=self._most_held_from,
        )

    def add_all(self, batches: Iterable[Batch]) -> Census:
        for b in batches:
            self.add(b)
        return self


@dataclass(frozen=True)
class ScanStop:
    """Where a sync with the scan's options stops short of the plan's target: ``refused``
    (exit 3, nothing written past ``offset``) or waiting for source transactions to end."""

    offset: int
    reason: str
    refused: bool

    def to_dict(self) -> dict[str, object]:
        return {"offset": self.offset, "reason": self.reason, "refused": self.refused}


def scan_stop(
    c: RangeCensus,
    *,
    fill_holes: bool,
    replay: bool,
    compacted: bool,
    slots: int,
    max_held_bytes: int,
) -> ScanStop | None:
    """The first place a sync would stop within the census's range, or None if it copies it
    all. ``compacted``: whether the local topic is (fills need it); ``slots``: how many
    transactions a replay keeps open at once; ``max_held_bytes``: --max-in-flight-bytes."""
    stops: list[ScanStop] = []
    hole = (f"offset {c.first_hole}: compaction holes start there (offsets the log cleaner "
            "emptied)")  # fmt: skip
    if c.first_hole is not None and not fill_holes:
        stops.append(ScanStop(c.first_hole, f"{hole}; --compaction-holes fill copies them",
                              refused=True))  # fmt: skip
    elif c.first_hole is not None and not compacted:
        stops.append(ScanStop(c.first_hole, f"{hole}, and --compaction-holes fill needs a "
                              "compacted local topic (cleanup.policy has compact)",
                              refused=True))  # fmt: skip
    if c.first_transactional is not None and not replay:
        stops.append(ScanStop(c.first_transactional, f"offset {c.first_transactional} holds "
                              "transactional data or a marker; --transactions replay copies "
                              "them", refused=True))  # fmt: skip
    if c.first_log_append_time is not None:
        stops.append(ScanStop(c.first_log_append_time, f"offset {c.first_log_append_time}: "
                              "a batch with LogAppendTime timestamps, which no copy keeps as "
                              "it is", refused=True))  # fmt: skip
    if replay and c.most_open > slots and c.most_open_at is not None:
        stops.append(ScanStop(c.most_open_at, f"{c.most_open} source transactions are open at "
                              f"once at offset {c.most_open_at}; a replay keeps at most "
                              f"{slots} open per partition", refused=True))  # fmt: skip
    if replay and c.most_held_bytes > max_held_bytes:
        stops.append(ScanStop(c.most_held_from, f"a replay would hold {c.most_held_bytes} "
                              "bytes of open transactions back, more than --max-in-flight-bytes "
                              f"({max_held_bytes})", refused=True))  # fmt: skip
    if replay and c.open_at_end:
        ids = ", ".join(str(p) for p in c.open_at_end)
        stops.append(ScanStop(c.quiet_end, f"the source transactions of producer ids {ids} "
                              f"have no marker yet: a sync copies up to offset {c.quiet_end} "
                              "and the rest once the source has ended them",
                              refused=False))  # fmt: skip
    return min(stops, key=lambda s: (s.offset, not s.refused), default=None)


@dataclass(frozen=True)
class PartitionScan:
    """``plan --scan`` of one partition: the census of its planned ranges and where a sync
    with the scan's options would stop in them, or why the scan failed."""

    census: RangeCensus | None = None
    stop: ScanStop | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            **(self.census.to_dict() if self.census is not None else {}),
            "stop": None if self.stop is None else self.stop.to_dict(),
            "error": self.error,
        }
