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
from partsync.errors import PartsyncError
from partsync.plan import Condition, PartitionPlan, PlanPolicy, plan_partition
from partsync.result import PartitionResult, Status

__all__ = ["PartitionTask", "ClusterPool", "run_partition_task"]


@dataclass(frozen=True)
class PartitionTask:
    plan: PartitionPlan
    sources: tuple[ClusterRef, ...]
    local: ClusterRef
    options: CopyOptions
    rules: LocalTopicRules
    policy: PlanPolicy = PlanPolicy()

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
        try:
            plan = refresh_plan(task, local, sources)
        except PartsyncError as e:
            p = task.plan
            return PartitionResult(p.topic, p.partition, Status.ERROR, p.local.end, p.local.end,
                                   p.target_end).with_status(Status.ERROR, str(e), e)
        result = copy_partition(plan, sources, local, task.options, task.rules, progress, stop)
        if plan.local.end != task.plan.local.end:
            # Report against the driver's starting point, so a resumed task's numbers add up.
            result = result.with_copy(local_end_before=task.plan.local.end)
            if result.status is Status.IN_SYNC and result.local_end_after != task.plan.local.end:
                result = result.with_copy(status=Status.SYNCED)
        return result
    finally:
        if own:
            pool.close()


def refresh_plan(task: PartitionTask, local: Cluster, sources: dict[str, Cluster]) -> PartitionPlan:
    """Re-read the partition's bounds where the task runs and plan again.

    The driver's plan may be stale by the time a task runs: a retried Spark task, a crashed
    earlier attempt or a slow queue means the local log end (the checkpoint) may have moved.
    Copying from a stale local end would make every append land at the wrong offset, so each
    task starts from the bounds it reads itself.
    """
    p = task.plan
    local_b = local.bounds(p.topic, [p.partition])[p.partition]
    src_b = {}
    for name, c in sources.items():
        src_b[name] = c.bounds(p.topic, [p.partition])[p.partition]
    fresh = plan_partition(p.topic, p.partition, local_b, src_b, task.policy)
    if p.condition is Condition.UNSAFE and fresh.condition is not Condition.IN_SYNC:
        return p
    return fresh
