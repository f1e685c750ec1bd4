"""What ``partsync failback`` found and did: whether the old primary is still in use, and per
topic and partition the case (``plan.failback``), the export and the re-seed. Pure data (the
JSON contract lives in ``to_dict``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from partsync.errors import ExitStatus
from partsync.plan.failback import Action, ExportCount, PartitionFailback, topic_action
from partsync.plan.results import SyncReport

__all__ = ["UNSEEN", "FailbackReport", "InUse", "TopicFailback"]

# What no Kafka API shows, said with every refusal check (a person must rule these out).
UNSEEN = (
    "consumers that assign() partitions without a group (they commit nothing and join nothing)",
    (
        "producers that write only between two reads of the log ends (a non-idempotent "
        "producer leaves no state a client can list)"
    ),
)


@dataclass
class InUse:
    """Signs that clients still use the old primary's topics."""

    # Groups with live members (classic or KIP-848), by member count.
    groups: dict[str, int] = field(default_factory=dict)
    # Groups whose coordinator would not say whether they have members.
    unknown_groups: list[str] = field(default_factory=list)
    # "topic-partition" -> (end before, end after) for ends that moved while watched.
    moved: dict[str, tuple[int, int]] = field(default_factory=dict)
    # "topic-partition" -> (last stable offset, end) where a transaction is still open.
    open_transactions: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Transactional ids the old primary's coordinators list as Ongoing or Prepare*.
    transactional_ids: list[str] = field(default_factory=list)
    watched_s: float = 0.0

    @property
    def in_use(self) -> bool:
        return bool(self.groups or self.unknown_groups or self.moved or self.open_transactions)

    def refusal(self, cluster: str) -> str:
        seen = []
        if self.groups:
            seen.append(
                "groups with live members: "
                + ", ".join(f"{g} ({n})" for g, n in sorted(self.groups.items()))
            )
        if self.unknown_groups:
            seen.append(
                "groups whose coordinator did not say whether they have members: "
                + ", ".join(sorted(self.unknown_groups))
            )
        if self.moved:
            seen.append(
                f"log ends that moved within {self.watched_s:g}s: "
                + ", ".join(f"{tp} {a}->{b}" for tp, (a, b) in sorted(self.moved.items()))
            )
        if self.open_transactions:
            seen.append(
                "transactions still open (last stable offset below the end): "
                + ", ".join(
                    f"{tp} at {lso} (end {end})"
                    for tp, (lso, end) in sorted(self.open_transactions.items())
                )
            )
            if self.transactional_ids:
                seen[-1] += "; transactional ids: " + ", ".join(sorted(self.transactional_ids))
        return (
            f"cluster {cluster} (the old primary) is still in use: "
            + "; ".join(seen)
            + ": stop its clients (and its producers' transactions), then run failback again"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "in_use": self.in_use,
            "groups": dict(sorted(self.groups.items())),
            "unknown_groups": sorted(self.unknown_groups),
            "moved": {tp: list(v) for tp, v in sorted(self.moved.items())},
            "open_transactions": {tp: list(v) for tp, v in sorted(self.open_transactions.items())},
            "transactional_ids": sorted(self.transactional_ids),
            "watched_s": self.watched_s,
            "not_visible": list(UNSEEN),
        }


@dataclass
class TopicFailback:
    topic: str
    partitions: list[PartitionFailback] = field(default_factory=list)
    exported: dict[int, ExportCount] = field(default_factory=dict)
    # Bytes the new primary holds for the partitions to copy again (None: not reported).
    copy_again_bytes: dict[int, int | None] = field(default_factory=dict)
    # What was done: "planned" (dry run), "exported", "recreated", "mirrored".
    done: str = "planned"
    error: str | None = None
    # When the new primary was promoted (names this failback in its export).
    promoted_ms: int = 0

    @property
    def action(self) -> Action:
        return topic_action(self.partitions)

    def to_dict(self) -> dict[str, Any]:
        parts = []
        for p in self.partitions:
            d = p.to_dict()
            count = self.exported.get(p.partition)
            d["exported"] = None if count is None else count.to_dict()
            if self.action is not Action.MIRROR:
                d["copy_again_bytes"] = self.copy_again_bytes.get(p.partition)
            parts.append(d)
        return {
            "topic": self.topic,
            "action": self.action.value,
            "done": self.done,
            "error": self.error,
            "partitions": parts,
        }


@dataclass
class FailbackReport:
    old: str
    new: str
    dry_run: bool
    in_use: InUse | None = None
    topics: list[TopicFailback] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    # Topics of ``failed`` stopped to keep offsets identical or to lose nothing (exit 3).
    unsafe: list[str] = field(default_factory=list)
    export: Mapping[str, str | None] = field(default_factory=dict)
    promotions_cleared: list[str] = field(default_factory=list)
    reseed: SyncReport | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def exported_records(self) -> int:
        return sum(c.records for t in self.topics for c in t.exported.values())

    @property
    def exit_status(self) -> ExitStatus:
        if self.unsafe:
            return ExitStatus.UNSAFE
        if self.failed or (self.in_use is not None and self.in_use.in_use):
            return ExitStatus.FAILURE
        return self.reseed.exit_status if self.reseed is not None else ExitStatus.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "old_primary": self.old,
            "new_primary": self.new,
            "dry_run": self.dry_run,
            "in_use": None if self.in_use is None else self.in_use.to_dict(),
            "topics": [t.to_dict() for t in self.topics],
            "exported_records": self.exported_records,
            "export": dict(self.export),
            "failed": dict(self.failed),
            "unsafe": list(self.unsafe),
            "promotions_cleared": list(self.promotions_cleared),
            "reseed": None if self.reseed is None else self.reseed.to_dict(),
            "warnings": list(self.warnings),
        }
