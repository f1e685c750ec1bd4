"""The per-partition task every engine runs, and the cluster pool it connects through.

A ``PartitionTask`` is plain picklable data (plan, cluster references, options), so the local
engine can run it on a thread and the Spark engine on an executor, with the same code and the
same ``PartitionResult``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from partsync.cluster import Cluster
from partsync.config import ClusterRef
from partsync.copier import CopyOptions, LocalTopicRules, ProgressFn, copy_partition
from partsync.plan import PartitionPlan
from partsync.result import PartitionResult

__all__ = ["PartitionTask", "ClusterPool", "run_partition_task"]


@dataclass(frozen=True)
class PartitionTask:
    plan: PartitionPlan
    sources: tuple[ClusterRef, ...]
    local: ClusterRef
    options: CopyOptions
    rules: LocalTopicRules

    @property
    def key(self) -> tuple[str, int]:
        return (self.plan.topic, self.plan.partition)


class ClusterPool:
    """Connected ``Cluster`` objects by name, shared by the tasks of one process."""

    def __init__(self, refs: Iterable[ClusterRef] = ()) -> None:
        self._lock = threading.Lock()
        self._clusters: dict[str, Cluster] = {}
        for r in refs:
            self.get(r)

    def get(self, ref: ClusterRef) -> Cluster:
        with self._lock:
            c = self._clusters.get(ref.name)
            if c is None:
                c = self._clusters[ref.name] = Cluster(ref)
            return c

    def close(self) -> None:
        with self._lock:
            for c in self._clusters.values():
                c.close()
            self._clusters.clear()

    def __enter__(self) -> ClusterPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_partition_task(
    task: PartitionTask,
    pool: ClusterPool | None = None,
    progress: ProgressFn | None = None,
    stop: threading.Event | None = None,
) -> PartitionResult:
    """Copy one partition as planned. Never raises for Kafka or data problems: they come back
    as the result's status and reason."""
    own = pool is None
    pool = pool or ClusterPool()
    try:
        local = pool.get(task.local)
        sources = {r.name: pool.get(r) for r in task.sources if r.name in task.plan.sources}
        return copy_partition(task.plan, sources, local, task.options, task.rules, progress, stop)
    finally:
        if own:
            pool.close()
