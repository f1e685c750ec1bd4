"""The facts a follower's live metrics are made of, updated by its workers as they go (counters
since start, lag as last seen, the liveness and readiness facts ``ui.health`` decides on).
``ui.live_metrics`` turns a snapshot of them into metric families.

Lag in seconds is measured with the batches the sources' long poll sees (``source_batch``): the
source's newest data timestamp is the max timestamp of the newest batch the poll saw, the
mirror's is the max timestamp of the newest such batch that the local log end has since passed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Protocol

from partsync.plan.comparator import PartitionPlan
from partsync.plan.results import PartitionResult, Status
from partsync.ui.health import Health, HealthFacts, decide
from partsync.ui.metric_families import bytes_per_offset

__all__ = ["GroupState", "LiveState"]

# A follower's worker stops for good.
_ENDED = (Status.UNSAFE.value, Status.HANDED_OVER.value, Status.SOURCE_GONE.value)


class GroupState(Protocol):
    """What the live metrics read of a group member (``partsync.io.group.GroupMember``)."""

    @property
    def group(self) -> str: ...

    @property
    def generation(self) -> int: ...

    @property
    def rebalances(self) -> int: ...

    @property
    def joined(self) -> threading.Event: ...


class LiveState:
    """What a long-running process (follow mode) tells its metrics as it goes: its workers'
    plans, rounds, appends and long polls, its assignment and group. Every update and every read
    (``health``, and ``LiveMetrics``' snapshot) holds ``_lock``, since workers update from their
    own threads while the server reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = time.time()
        self.local_end: dict[tuple[str, int], int] = {}
        self.source_end: dict[tuple[str, int], dict[str, int]] = {}
        self.bytes_per_offset: dict[tuple[str, int], float] = {}
        self.copied_bytes: dict[tuple[str, int, str], int] = {}
        self.copied_batches: dict[tuple[str, int, str], int] = {}
        self.appends_verified: dict[tuple[str, int], int] = {}
        self.unsafe: dict[str, int] = {}
        self.handed_over: dict[tuple[str, int], int] = {}
        self.status: dict[tuple[str, int], str] = {}
        self.last_success: dict[tuple[str, int], float] = {}
        self.owned: set[tuple[str, int]] = set()
        self._member: GroupState | None = None  # for generation / rebalances
        # Lag in seconds: the newest data batch the sources' long poll saw, as (last offset,
        # max timestamp ms), and the max timestamp of the newest one the mirror's end passed.
        self.seen: dict[tuple[str, int], tuple[int, int]] = {}
        self.mirror_timestamp: dict[tuple[str, int], int] = {}
        # Health (monotonic clock): the runner's tick, the latest progress, the first assignment.
        self._mono_started = time.monotonic()
        self._last_tick: float | None = None
        self._last_progress: float | None = None
        self._assigned = False
        self._was_ready = False

    def watch_group(self, member: GroupState) -> None:
        """Report the generation and rebalances of the group ``member`` (as they change)."""
        with self._lock:
            self._member = member

    def observe_plan(self, plan: PartitionPlan) -> None:
        with self._lock:
            key = (plan.topic, plan.partition)
            self.local_end[key] = plan.local.end
            ends = self.source_end.setdefault(key, {})
            for name, b in plan.sources.items():
                ends[name] = b.end
            self._copied_seen(key)
            self._last_progress = time.monotonic()

    def source_high_watermark(self, source: str, topic: str, partition: int, hw: int) -> None:
        """A source's long poll answered (an idle one too: progress for liveness)."""
        with self._lock:
            self.source_end.setdefault((topic, partition), {})[source] = hw
            self._last_progress = time.monotonic()

    def source_batch(
        self, source: str, topic: str, partition: int, last_offset: int, max_timestamp: int
    ) -> None:
        """The newest data batch a source's long poll saw (beyond the mirror's end then)."""
        key = (topic, partition)
        with self._lock:
            old = self.seen.get(key)
            if old is None or last_offset > old[0]:
                self.seen[key] = (last_offset, max_timestamp)
            self._copied_seen(key)

    def _copied_seen(self, key: tuple[str, int]) -> None:
        """The batch the poll saw is on the mirror once the local end passed it (under the lock)."""
        seen, end = self.seen.get(key), self.local_end.get(key)
        if seen is not None and end is not None and end > seen[0]:
            self.mirror_timestamp[key] = max(seen[1], self.mirror_timestamp.get(key, seen[1]))

    def set_owned(self, parts: Iterable[tuple[str, int]]) -> None:
        with self._lock:
            self.owned = set(parts)
            self._assigned = True
            self._last_progress = time.monotonic()

    def heartbeat(self, last_progress: float) -> None:
        """The runner's control loop ticks, with its latest verified append (monotonic)."""
        with self._lock:
            self._last_tick = time.monotonic()
            self._last_progress = max(self._last_progress or last_progress, last_progress)

    def health(self, now: float | None = None) -> Health:
        """Live and ready now (``ui.health``); readiness latches once answered."""
        with self._lock:
            m = self._member
            facts = HealthFacts(
                now=time.monotonic() if now is None else now,
                started=self._mono_started,
                in_group=m is not None,
                joined=m is not None and m.joined.is_set(),
                assigned=self._assigned,
                unplanned=len(self.owned - self.local_end.keys()),
                # A partition refused as unsafe, handed over or gone from its sources is owned
                # but no longer worked on: it makes no progress, and restarting the process
                # would not change that.
                owned=sum(1 for k in self.owned if self.status.get(k) not in _ENDED),
                last_tick=self._last_tick,
                last_progress=self._last_progress,
                was_ready=self._was_ready,
            )
            verdict = decide(facts)
            self._was_ready = self._was_ready or verdict.ready
        return verdict

    def observe(self, r: PartitionResult) -> None:
        key = (r.topic, r.partition)
        with self._lock:
            self._last_progress = time.monotonic()
            self.local_end[key] = r.local_end_after
            self._copied_seen(key)
            self.status[key] = r.status.value
            for s, n in r.bytes_by_source.items():
                self.copied_bytes[(*key, s)] = self.copied_bytes.get((*key, s), 0) + n
            for s, n in r.batches_by_source.items():
                self.copied_batches[(*key, s)] = self.copied_batches.get((*key, s), 0) + n
            self.appends_verified[key] = self.appends_verified.get(key, 0) + r.batches
            if r.status is Status.UNSAFE:
                self.unsafe[r.topic] = self.unsafe.get(r.topic, 0) + 1
            if r.status is Status.HANDED_OVER:
                self.handed_over[key] = self.handed_over.get(key, 0) + 1
            if r.status in (Status.IN_SYNC, Status.SYNCED):
                self.last_success[key] = time.time()
            bpo = bytes_per_offset(r)
            if bpo:
                old = self.bytes_per_offset.get(key)
                self.bytes_per_offset[key] = bpo if old is None else 0.8 * old + 0.2 * bpo
