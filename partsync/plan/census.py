"""What a range of a source's log holds that a plain copy cannot append as it is: compaction
holes and transactions (``partsync plan --scan``).

The census reads batch headers only (no decompression), so it costs what fetching the range
costs. It follows the batches as a sync with given options would append them
(``copy.appender``, ``copy.txn_replay``), batch-level rules only:

- a gap between batches or a batch with holes inside is refused without ``fill_holes``, and
  with it needs a compacted local topic; with it, the gap is filled with hole records and the
  batch re-encoded (``wire.holes``);
- ``wire.batch.check_appendable`` refuses markers and transactional data without ``replay``,
  LogAppendTime batches, and markers or control batches with holes;
- a replay streams transactions (``plan.txn_window``): it holds back only those ``hold`` says
  it cannot leave open locally, from their first batch until their markers, refuses more than
  ``slots`` transactions open at once, and stops right before what it holds when the range
  ends or the hold passes ``max_held_bytes``;
- a mirror started at the sources' log start (``bootstrap``) appends fillers up to its first
  batch, which a compacted local topic cannot take.

The counts are of what such a sync copies, up to where it stops; ``ScanStop`` says where and
why it stops short of the range's end. Record-level rules (a keyless record for a compacted
local topic, a record under the hole key) are not followed: they need the records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from partsync.errors import UnsafeError
from partsync.plan.txn_window import HeldBack, TxnWindow, open_txns_text, too_many_open
from partsync.wire.batch import Batch, check_appendable
from partsync.wire.markers import ABORT, marker_type

__all__ = ["Census", "PartitionScan", "RangeCensus", "ScanOptions", "ScanStop"]


@dataclass(frozen=True)
class ScanOptions:
    """What the census follows: the sync's options and the local topic."""

    fill_holes: bool = False  # --compaction-holes fill
    replay: bool = True  # --transactions replay
    # Whether the local topic is compacted (hole records need it, fillers cannot have it);
    # None: not known yet (a topic the sync creates takes its source's cleanup.policy).
    compacted: bool | None = False
    slots: int = 8  # transactions a replay keeps open at once
    max_held_bytes: int = 64 << 20  # --max-in-flight-bytes: what a replay may hold back
    # The sources' log start, where the mirror of an empty local partition starts (the plan's
    # bootstrap): its first batch is copied whole, and fillers, not holes, lead up to it.
    bootstrap_at: int | None = None
    # Which transactions a replay holds back (``HoldRule.hold``); None: every one.
    hold: Callable[[Batch], bool] | None = None


@dataclass(frozen=True)
class RangeCensus:
    """What a sync copies from ``start`` (the local log end) up to ``end`` (where it would
    leave the local log end), and what it saw of the range beyond that."""

    start: int
    end: int
    batches: int = 0
    bytes: int = 0
    # Offsets no batch holds (whole batches the cleaner removed): hole records fill them.
    holes_between: int = 0
    # Offsets cleaned out of batches that were kept (empty batches included).
    holes_inside: int = 0
    batches_with_holes: int = 0  # re-encoded by a fill
    transactional_batches: int = 0
    committed: int = 0
    aborted: int = 0
    # The most transactions open at once, and the most bytes a replay held back at once.
    most_open: int = 0
    most_held_bytes: int = 0
    # Source producer ids whose transaction has no marker by the range's end.
    open_at_end: tuple[int, ...] = ()

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
            "most_held_bytes": self.most_held_bytes,
            "open_at_end": list(self.open_at_end),
        }


@dataclass(frozen=True)
class ScanStop:
    """Where a sync with the scan's options stops short of the plan's target: ``refused``
    (exit 3, nothing written past ``offset``) or waiting for source transactions to end."""

    offset: int
    reason: str
    refused: bool

    def to_dict(self) -> dict[str, object]:
        return {"offset": self.offset, "reason": self.reason, "refused": self.refused}


@dataclass(frozen=True)
class PartitionScan:
    """``plan --scan`` of one partition: the census of its planned ranges and where a sync
    with the scan's options would stop in them, or why the scan failed (with the census of
    what it read before)."""

    census: RangeCensus | None = None
    stop: ScanStop | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            **(self.census.to_dict() if self.census is not None else {}),
            "stop": None if self.stop is None else self.stop.to_dict(),
            "error": self.error,
        }


class Census:
    """Takes the batches of a range in log order (``add``) as a sync would append them, and
    says what it copies and where it stops (``result``). A batch that starts below the offset
    reached (one straddling a chunk's cut, read again with the next chunk) is skipped."""

    def __init__(self, start: int, opts: ScanOptions) -> None:
        self.start = start
        self.opts = opts
        self.refusal: ScanStop | None = None
        self._at = start  # the next offset a batch must start at
        self._copied: Counter[str] = Counter()  # appended: up to where a replay stops
        # What a replay holds back (the counts of each append) until its held ones end.
        self._window: TxnWindow[dict[str, int]] = TxnWindow(
            opts.slots, opts.max_held_bytes, opts.hold
        )
        self._held_back: HeldBack | None = None
        self._quiet = start
        self._first = True

    @property
    def reached(self) -> int:
        """The offset the batches added so far reach."""
        return self._at

    def add(self, b: Batch) -> bool:
        """Take the next batch; False once a sync would have refused (read no further)."""
        if self.refusal is not None or self._held_back is not None:
            return False
        boot = self._first and self.opts.bootstrap_at is not None
        if b.base_offset < self._at and not boot:
            self._at = max(self._at, b.next_offset)
            return True
        try:
            if boot:
                self._start_mirror(b)
            self._take(b)
        except UnsafeError as e:
            offset = b.base_offset if e.offset is None else e.offset
            self.refusal = ScanStop(offset, e.reason, refused=True)
            return False
        except HeldBack as e:
            if self.opts.hold is None:  # everything held: no later run gets past it either
                self.refusal = ScanStop(
                    e.offset,
                    f"{e.reason}; raise --max-in-flight-bytes (and --memory-budget)",
                    refused=True,
                )
            else:
                self._held_back = e
            return False
        self._first = False
        return True

    def add_all(self, batches: Iterable[Batch]) -> bool:
        """``add`` each; False once a sync would have refused."""
        return all(self.add(b) for b in batches)

    def _start_mirror(self, b: Batch) -> None:
        if self.opts.compacted is True:
            raise UnsafeError(
                f"starting the mirror at offset {b.base_offset} needs filler records up to it, "
                "which a compacted local topic rejects",
                offset=self._at,
            )
        self._at = self._quiet = max(self._at, b.base_offset)  # fillers, then deleted

    def _take(self, b: Batch) -> None:
        opts = self.opts
        if b.base_offset > self._at:
            if not opts.fill_holes or opts.compacted is False:
                raise self._holes_refused(self._at, f"offsets {self._at}..{b.base_offset - 1}")
            self._send(b.base_offset, None, 0, between=b.base_offset - self._at)  # hole records
        filled = opts.fill_holes and b.has_holes and not b.is_control
        if filled and opts.compacted is False:
            raise self._holes_refused(b.base_offset, f"batch {b.base_offset}..{b.last_offset}")
        try:
            check_appendable(b, transactions=opts.replay)
        except UnsafeError:
            if not filled or b.log_append_time or (b.is_transactional and not opts.replay):
                raise  # refused for more than its holes
        counts = {"batches": 1, "bytes": b.size}
        if filled:
            counts |= {"inside": b.last_offset_delta + 1 - b.record_count, "with_holes": 1}
        open_now = self._window.open
        if b.is_control:
            if b.producer_id not in open_now and len(open_now) >= opts.slots:
                raise too_many_open(b.base_offset, opts.slots)  # an empty one needs a slot too
            counts["aborted" if marker_type(b) == ABORT else "committed"] = 1
        elif b.is_transactional:
            counts["transactional"] = 1
        self._send(b.next_offset, b, b.size, **counts)
        self._at = b.next_offset

    def _send(self, next_offset: int, batch: Batch | None, size: int, **counts: int) -> None:
        """One append, as ``TxnReplay.send`` takes it: appended at once, or held while a
        held transaction is open and appended with everything held once none is."""
        ready = self._window.take(counts, batch, size)
        for done in ready:
            self._copied.update(done)
        if ready:
            self._quiet = next_offset

    def _holes_refused(self, offset: int, where: str) -> UnsafeError:
        why = (
            "--compaction-holes fill copies them"
            if not self.opts.fill_holes
            else "--compaction-holes fill needs a compacted local topic"
        )
        return UnsafeError(
            f"compaction holes at offset {offset} ({where}: offsets the log "
            f"cleaner emptied); {why}",
            offset=offset,
        )

    def result(self, end: int) -> tuple[RangeCensus, ScanStop | None]:
        """The census, and where a sync stops short of ``end`` (the range's end, every batch
        below it added unless a refusal stopped the reading)."""
        c = self._copied.get
        stop = self.refusal
        if stop is None and self._held_back is not None:
            stop = ScanStop(
                self._quiet,
                f"{self._held_back.reason}: a sync copies up to offset {self._quiet} and is behind",
                refused=False,
            )
        elif stop is None and self._window.held_open:
            held = open_txns_text(self._window.held_open)
            stop = ScanStop(
                self._quiet,
                f"the source transactions of {held} have no marker "
                f"yet and cannot be left open locally: a sync copies up to offset "
                f"{self._quiet} and the rest once the source has ended them",
                refused=False,
            )
        census = RangeCensus(
            start=self.start,
            end=self._quiet if stop is not None else max(self._at, end),
            batches=c("batches", 0),
            bytes=c("bytes", 0),
            holes_between=c("between", 0),
            holes_inside=c("inside", 0),
            batches_with_holes=c("with_holes", 0),
            transactional_batches=c("transactional", 0),
            committed=c("committed", 0),
            aborted=c("aborted", 0),
            most_open=self._window.most_open,
            most_held_bytes=self._window.most_held_bytes,
            open_at_end=tuple(self._window.open),
        )
        return census, stop
