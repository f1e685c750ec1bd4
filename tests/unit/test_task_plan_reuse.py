"""When a task's first round may reuse the driver's bounds (``PartitionTask.plan_is_fresh``),
and how coalesced reads name each partition once per request (``io.bounds``)."""

from __future__ import annotations

import dataclasses
import os
import time

from partsync.config import ClusterRef
from partsync.copy.options import CopyOptions
from partsync.io.bounds import _one_per_partition
from partsync.plan.comparator import Bounds, PlanPolicy, plan_partition
from partsync.plan.topic_rules import LocalTopicRules
from partsync.run.task import PLAN_REUSE_S, PartitionTask


def _task(**kw: object) -> PartitionTask:
    plan = plan_partition("t", 0, Bounds(0, 10), {"a": Bounds(0, 20)}, PlanPolicy())
    ref = ClusterRef("a", (("127.0.0.1", 9092),))
    local = ClusterRef("local", (("127.0.0.1", 9093),))
    task = PartitionTask(plan, (ref,), local, CopyOptions(), LocalTopicRules())
    return dataclasses.replace(task, **kw)  # type: ignore[arg-type]


def test_only_a_plan_this_process_just_read_is_reused() -> None:
    now = time.monotonic()
    assert _task(planned_at=now, planned_in=os.getpid()).plan_is_fresh()
    # Never planned here (a task built by hand), planned by another process (a Spark driver
    # for an executor), or planned too long ago (a partition reassigned in follow mode).
    assert not _task().plan_is_fresh()
    assert not _task(planned_at=now, planned_in=os.getpid() + 1).plan_is_fresh()
    assert not _task(planned_at=now - PLAN_REUSE_S - 1, planned_in=os.getpid()).plan_is_fresh()


def test_a_partition_asked_under_two_epochs_at_once_takes_two_requests() -> None:
    keys = [(0, 5), (1, 5), (0, 6), (2, -1), (0, 5)]
    rounds = _one_per_partition(keys)
    assert rounds == [[(0, 5), (1, 5), (2, -1)], [(0, 6)], [(0, 5)]]
    for r in rounds:
        assert len({p for p, _e in r}) == len(r)
