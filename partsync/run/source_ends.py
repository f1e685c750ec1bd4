"""The sources' ends a follower sees, kept on the local cluster (``partsync.source-ends``), so
that a promotion after a source went dark can say what that source held beyond the mirror when
last seen (``plan.promotion.at_risk``). Fed by what the follower reads anyway (each round's
plan, the tails' high watermarks: no request of its own) and written at each topic check, one
record per partition whose ends moved (the members of a group each own some partitions)."""

from __future__ import annotations

import logging
import threading

from partsync.errors import PartsyncError
from partsync.io.cluster import Cluster
from partsync.io.link_records import write_source_ends
from partsync.plan.comparator import PartitionPlan

__all__ = ["SourceEnds"]

log = logging.getLogger(__name__)


class SourceEnds:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ends: dict[str, dict[int, dict[str, int]]] = {}
        self._moved: set[tuple[str, int]] = set()

    def saw(self, source: str, topic: str, partition: int, hw: int) -> None:
        """A source's end (high watermark) of a partition, as a plan or a tail read it."""
        with self._lock:
            ends = self._ends.setdefault(topic, {}).setdefault(partition, {})
            if ends.get(source, -1) < hw:
                ends[source] = hw
                self._moved.add((topic, partition))

    def saw_plan(self, plan: PartitionPlan) -> None:
        for source, b in plan.sources.items():
            self.saw(source, plan.topic, plan.partition, b.end)

    def flush(self, local: Cluster) -> None:
        """Write the partitions whose ends moved since the last flush (a failure is logged and
        they are written at the next one)."""
        with self._lock:
            keys = set(self._moved)
            self._moved.clear()
            moved: dict[str, dict[int, dict[str, int]]] = {}
            for t, p in keys:
                moved.setdefault(t, {})[p] = dict(self._ends[t][p])
        if not moved:
            return
        try:
            write_source_ends(local, moved)
        except PartsyncError as e:
            log.warning("recording the sources' ends on %s: %s", local.name, e)
            with self._lock:
                self._moved |= keys
