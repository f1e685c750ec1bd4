"""A link's state at a glance (``partsync status``, and a follower's per-topic metrics): pure
decisions over what the clusters report per partition.

A topic is one of:

* ``caught-up``: every partition's mirror ends where its furthest source ends;
* ``mirroring``: behind, and being copied (a follower of the job's group runs, or nobody said);
* ``paused``: behind, and the job's group has no member, so nothing copies it now;
* ``failed``: refused (unsafe: divergent history, a local log no source continues, a config
  that breaks identity), or not plannable (no source answered, a partition without a leader);
* ``source-gone``: the mirror is there, but no source holds the topic any more;
* ``promoted``: failed over (``partsync promote``): a primary now, nothing is mirrored into it.

Lag in seconds is the source's newest data timestamp minus the mirror's: transaction markers
and filler batches carry the writing cluster's clock, not the data's, so both ends skip them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from partsync.errors import ExitStatus

__all__ = [
    "PartitionLag",
    "TopicState",
    "TopicStatus",
    "lag_seconds",
    "status_exit",
    "topic_state",
]


class TopicState(str, enum.Enum):
    CAUGHT_UP = "caught-up"
    MIRRORING = "mirroring"
    PAUSED = "paused"
    FAILED = "failed"
    SOURCE_GONE = "source-gone"
    PROMOTED = "promoted"


@dataclass(frozen=True)
class PartitionLag:
    """One partition: its plan's condition, records and seconds behind (None: unknown)."""

    partition: int
    condition: str
    lag_records: int
    lag_seconds: float | None
    reason: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "partition": self.partition,
            "condition": self.condition,
            "lag_records": self.lag_records,
            "lag_seconds": self.lag_seconds,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class TopicStatus:
    topic: str
    state: TopicState
    partitions: tuple[PartitionLag, ...] = ()
    # Followed config keys whose local value differs from the source's.
    config_drift: tuple[str, ...] = ()
    reason: str | None = None
    # Refused as a whole (unsafe: a recreated source topic, a config that breaks identity).
    refused: bool = False

    @property
    def lag_records(self) -> int:
        return sum(p.lag_records for p in self.partitions)

    @property
    def lag_seconds(self) -> float | None:
        """The partitions' largest; None where a partition behind has no measure."""
        values = [p.lag_seconds for p in self.partitions]
        if any(v is None for v in values):
            return None
        return max((v for v in values if v is not None), default=0.0)

    def to_dict(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "state": self.state.value,
            "lag_records": self.lag_records,
            "lag_seconds": self.lag_seconds,
            "config_drift": list(self.config_drift),
            "reason": self.reason,
            "partitions": [p.to_dict() for p in self.partitions],
        }


_FAILED = frozenset({"unsafe", "unknown", "error", "source-gone"})


def topic_state(
    conditions: Iterable[str], *, gone: bool = False, failed: bool = False, followed: bool | None
) -> TopicState:
    """A topic's state from its partitions' conditions (``in-sync``, ``behind``, ``unsafe``,
    ``unknown``, ``error``; a follower's statuses map onto them), whether no source holds it
    (``gone``), whether it failed as a whole, and whether a follower of the job runs
    (``followed``; None: not known)."""
    conds = set(conditions)
    if gone:
        return TopicState.SOURCE_GONE
    if failed or conds & _FAILED or not conds:
        return TopicState.FAILED
    if conds <= {"in-sync"}:
        return TopicState.CAUGHT_UP
    return TopicState.PAUSED if followed is False else TopicState.MIRRORING


def lag_seconds(source_ms: int | None, mirror_ms: int | None, lag_records: int) -> float | None:
    """The source's newest data timestamp minus the mirror's, in seconds: 0 when caught up;
    None when behind without both (no data batch found, or an empty mirror)."""
    if lag_records <= 0:
        return 0.0
    if source_ms is None or mirror_ms is None:
        return None
    return max(0, source_ms - mirror_ms) / 1000


def status_exit(topics: Sequence[TopicStatus]) -> ExitStatus:
    """As ``sync``'s codes say it: 3 a topic refused as unsafe, 1 one that failed otherwise,
    5 one whose sources lost it, 4 one paused behind, else 0 (caught up or being mirrored)."""
    states = {t.state for t in topics}
    if any(t.refused or any(p.condition == "unsafe" for p in t.partitions) for t in topics):
        return ExitStatus.UNSAFE
    if TopicState.FAILED in states:
        return ExitStatus.FAILURE
    if TopicState.SOURCE_GONE in states:
        return ExitStatus.SOURCE_GONE
    if TopicState.PAUSED in states:
        return ExitStatus.DEADLINE
    return ExitStatus.OK
