"""What the parts of one partition copy share: the plan, the clusters, the byte budget, the
first error, the stop signals, the counters and the connections to close at the end."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from partsync.copy.budget import Budget, shared_budget
from partsync.copy.options import CopyOptions
from partsync.errors import PartsyncError, StoppedError
from partsync.io.cluster import Cluster
from partsync.io.kafka_types import Connection
from partsync.plan.comparator import PartitionPlan
from partsync.plan.topic_rules import LocalTopicRules

__all__ = ["CopyContext", "ProgressFn", "Stop"]

ProgressFn = Callable[[str, int, int, int], None]  # (topic, partition, bytes, next offset)


class Stop(Exception):
    """Unwinds a copy thread once the copy failed or was asked to stop (the reason is in
    ``CopyContext.error``)."""


class _AnyEvent(threading.Event):
    """An event that is set when any of two others is; polled, for waits of up to seconds."""

    def __init__(self, a: threading.Event, b: threading.Event) -> None:
        super().__init__()
        self._a, self._b = a, b

    def is_set(self) -> bool:
        return self._a.is_set() or self._b.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self._a.wait(0.05 if left is None else min(0.05, left))
        return True


class CopyContext:
    def __init__(
        self,
        plan: PartitionPlan,
        sources: Mapping[str, Cluster],
        local: Cluster,
        opts: CopyOptions,
        rules: LocalTopicRules,
        progress: ProgressFn | None,
        stop: threading.Event | None,
    ) -> None:
        self.plan = plan
        self.topic = plan.topic
        self.partition = plan.partition
        self.sources = sources
        self.local = local
        self.opts = opts
        self.rules = rules
        self.progress = progress
        self.external_stop = stop or threading.Event()
        # Room for a few head fetches that prefetches may never take (see SharedBudget).
        shared = shared_budget(opts.memory_budget, 4 * opts.fetch_bytes)
        self.budget = Budget(opts.max_in_flight_bytes, shared)
        self.failed = threading.Event()
        # Set once an append failed or landed elsewhere: batches not yet sent are dropped.
        self.append_failed = threading.Event()
        # Set when this copy must wind down (failure or a stop request): ends throttle waits.
        self.stopping = _AnyEvent(self.failed, self.external_stop)
        self.error: PartsyncError | None = None
        self._error_lock = threading.Lock()
        self.bytes_by_source: dict[str, int] = {}
        self.batches_by_source: dict[str, int] = {}
        self.batches = 0
        self.bytes = 0
        self.confirmed_end = plan.local.end
        # What the result should tell beyond its status (e.g. a check that could not be made).
        self.notes: list[str] = []
        # The first and last offsets of copied batches already past the local topic's time
        # retention (``LocalTopicRules.expires``): told in the result's notes.
        self.expired: tuple[int, int] | None = None
        # --compaction-holes fill: offsets given hole records, and source batches re-encoded
        # to hold them (counted as each append is verified).
        # Where a replay of transactions ended the copy short of the target, right before a
        # transaction it held back (``txn_replay``), and why: the partition is behind.
        self.stopped_at: int | None = None
        self.behind: str | None = None
        # Local transactions left open for source transactions without a marker yet (JSON).
        self.open_txns: list[dict[str, int]] = []
        self.holes_filled = 0
        self.batches_reencoded = 0
        # The end of an append whose answer was lost (a cut connection, a timeout): it may be
        # in the log, and if the next round finds the log ending exactly there, it was ours.
        self.unconfirmed_end: int | None = None
        self._conns: list[tuple[Cluster, Connection]] = []
        self._conns_lock = threading.Lock()

    def fail(self, err: PartsyncError) -> None:
        """Record the first error (located on this partition) and wind the copy down."""
        with self._error_lock:
            if self.error is None:
                if err.topic is None:
                    err.topic = self.topic
                if err.partition is None:
                    err.partition = self.partition
                self.error = err
        self.failed.set()
        self.budget.close()

    def check_running(self) -> None:
        if self.failed.is_set():
            raise Stop()
        if self.external_stop.is_set():
            self.fail(StoppedError("stopped on request before catching up"))
            raise Stop()

    def open(self, cluster: Cluster) -> Connection:
        """A dedicated connection to the partition's leader on ``cluster``, closed (or given
        back, ``release_all``) at the end."""
        conn = cluster.connect_leader(self.topic, self.partition)
        with self._conns_lock:
            self._conns.append((cluster, conn))
        return conn

    def close_all(self) -> None:
        """Close every connection of the copy (which also wakes any thread blocked on one)."""
        with self._conns_lock:
            for _cluster, c in self._conns:
                c.close()
            self._conns.clear()

    def release_all(self) -> None:
        """Give the copy's connections back to their clusters for the next copy (once no
        thread uses them); any with a request in flight is closed."""
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for cluster, c in conns:
            cluster.release(c)

    def confirmed(self, source: str, size: int, next_offset: int) -> None:
        """Count one verified append."""
        self.confirmed_end = next_offset
        self.batches += 1
        self.bytes += size
        self.bytes_by_source[source] = self.bytes_by_source.get(source, 0) + size
        self.batches_by_source[source] = self.batches_by_source.get(source, 0) + 1
        if self.progress:
            self.progress(self.topic, self.partition, size, next_offset)
