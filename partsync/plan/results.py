"""Result objects returned by the per-partition task (and shipped back from Spark tasks).

Plain frozen dataclasses with ``to_dict()``: the CLI renders them, ``--json`` prints them, and
they pickle for Spark. The JSON shape is a contract other tools script against.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

from partsync.errors import ExitStatus, PartsyncError

__all__ = ["PartitionResult", "Status", "SyncReport", "TopicResult"]


class Status(str, enum.Enum):
    IN_SYNC = "in-sync"
    SYNCED = "synced"
    UNSAFE = "unsafe"
    ERROR = "error"
    # Another partsync writer took the partition over (a newer producer epoch fenced this one,
    # or a group rebalance moved it): this process stopped writing it. Not a failure.
    HANDED_OVER = "handed-over"
    # The run was stopped (--deadline, a signal) before the partition caught up; what was
    # appended is verified and the next run resumes from the local log end.
    STOPPED = "stopped"
    # The copy stopped short of the target at a point it may not pass yet (a source
    # transaction it holds back until its marker); the reason says what it waits for. Not in
    # sync: a one-shot run exits 4, run again later (or follow).
    BEHIND = "behind"
    # Follow mode: the topic was deleted on every source that had it; nothing more is appended
    # and the mirror is kept as it is (exit 5).
    SOURCE_GONE = "source-gone"


@dataclass(frozen=True)
class PartitionResult:
    topic: str
    partition: int
    status: Status
    local_end_before: int
    local_end_after: int
    target_end: int
    batches: int = 0
    bytes: int = 0
    bytes_by_source: dict[str, int] = field(default_factory=dict)
    batches_by_source: dict[str, int] = field(default_factory=dict)
    reason: str | None = None
    # The error behind an error/unsafe/handed-over status, with its structured fields (it
    # pickles, so Spark tasks ship it back).
    error: PartsyncError | None = None
    seconds: float = 0.0
    peak_buffered_bytes: int = 0
    # --compaction-holes fill: offsets given hole records, source batches re-encoded for them.
    holes_filled: int = 0
    batches_reencoded: int = 0
    # Facts worth knowing about a successful copy, e.g. a check that could not be made.
    notes: tuple[str, ...] = ()
    # Where the log would end if this round's last, unanswered append landed (not in JSON).
    unconfirmed_end: int | None = None
    # Where follow mode waits for more source data, when not at the local end: a replay of
    # transactions that held batches back for markers not yet written waits past them.
    wait_from: int | None = None
    # Local transactions a replay left open for source transactions without a marker yet:
    # source_producer_id, first_offset, local_slot, open_until_ms (when the local coordinator
    # aborts it; -1 unknown). The next run resumes them.
    open_transactions: tuple[dict[str, int], ...] = ()

    def with_status(
        self, status: Status, reason: str | None, error: PartsyncError | None = None
    ) -> PartitionResult:
        return dataclasses.replace(self, status=status, reason=reason, error=error)

    @property
    def retriable(self) -> bool:
        """An error that a later attempt may not meet (a broker hiccup, a lost connection)."""
        return self.status is Status.ERROR and self.error is not None and self.error.retriable

    def with_copy(self, **changes: Any) -> PartitionResult:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "status": self.status.value,
            "local_end_before": self.local_end_before,
            "local_end_after": self.local_end_after,
            "target_end": self.target_end,
            "batches": self.batches,
            "bytes": self.bytes,
            "bytes_by_source": dict(self.bytes_by_source),
            "batches_by_source": dict(self.batches_by_source),
            "reason": self.reason,
            "notes": list(self.notes),
            "holes_filled": self.holes_filled,
            "batches_reencoded": self.batches_reencoded,
            "open_transactions": [dict(t) for t in self.open_transactions],
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class TopicResult:
    topic: str
    partitions: tuple[PartitionResult, ...]
    warnings: tuple[str, ...] = ()
    # Sources that did not answer the plan: whether they are ahead is unknown.
    unreachable: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partitions": [p.to_dict() for p in sorted(self.partitions, key=lambda r: r.partition)],
            "warnings": list(self.warnings),
            "unreachable": list(self.unreachable),
        }


@dataclass(frozen=True)
class SyncReport:
    topics: tuple[TopicResult, ...]
    seconds: float = 0.0
    # Why the run stopped before catching up, if it did: "deadline" or "signal".
    stopped: str | None = None
    # Follow mode's --sync-groups: each group's latest offset copy (JSON only when asked for).
    group_offsets: tuple[dict[str, Any], ...] | None = None
    # The local group this run joined and the protocol it spoke ("consumer" or "classic").
    group: str | None = None
    group_protocol: str | None = None

    def all_partitions(self) -> list[PartitionResult]:
        return [p for t in self.topics for p in t.partitions]

    @property
    def exit_status(self) -> ExitStatus:
        """0 all in sync; 3 some partition refused as unsafe (it needs a person, so it wins);
        1 a failure (rerun), a source that did not answer, or a signal stopped the run before
        it caught up; 5 a followed topic was deleted on its sources (its mirror is kept); 4 the
        deadline stopped it before it caught up, or a partition is behind (not caught up: run
        again later). For a one-shot run; follow mode ends by being stopped (``run.sync``)."""
        statuses = {p.status for p in self.all_partitions()}
        if Status.UNSAFE in statuses:
            return ExitStatus.UNSAFE
        if Status.ERROR in statuses or any(t.unreachable for t in self.topics):
            # A source that did not answer may be ahead: "in sync" is not proven.
            return ExitStatus.FAILURE
        if Status.SOURCE_GONE in statuses:
            return ExitStatus.SOURCE_GONE
        if Status.STOPPED in statuses:
            return ExitStatus.DEADLINE if self.stopped == "deadline" else ExitStatus.FAILURE
        if Status.BEHIND in statuses:
            return ExitStatus.DEADLINE
        return ExitStatus.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "topics": [t.to_dict() for t in self.topics],
            "seconds": round(self.seconds, 3),
            "stopped": self.stopped,
            **({} if self.group_offsets is None else {"group_offsets": list(self.group_offsets)}),
            **(
                {"group": {"name": self.group, "protocol": self.group_protocol}}
                if self.group and self.group_protocol
                else {}
            ),
        }
