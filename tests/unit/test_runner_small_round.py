"""The runner never gives a partition a worker while the small first rounds taken together
(``run.small``) may still write it: a KIP-848 assignment that grows calls ``assigned`` with
the whole assignment again, and a worker beside the round would append to the same partition
under another epoch. The round's end starts the workers of what it left, minus what was
revoked meanwhile. Workers here fail at once (a pool that reaches no cluster): only which ones
start is under test; the copy itself is tested against real brokers."""

from __future__ import annotations

from typing import Any

from partsync.config import ClusterRef
from partsync.copy.options import CopyOptions
from partsync.errors import PartsyncError
from partsync.plan.comparator import Bounds, plan_partition
from partsync.plan.topic_rules import LocalTopicRules
from partsync.run.runner import PartitionRunner, RunOptions, _SmallRound
from partsync.run.task import PartitionTask

REF = ClusterRef("x", (("127.0.0.1", 1),))
P0, P1 = ("t", 0), ("t", 1)


class NoClusters:
    def get(self, ref: ClusterRef) -> Any:
        raise PartsyncError("no cluster here")  # not retriable: the worker ends at once


def _runner() -> tuple[PartitionRunner, _SmallRound]:
    tasks = [PartitionTask(plan_partition("t", p, Bounds(0, 0), {"x": Bounds(0, 1)}), (REF,), REF,
                           CopyOptions(), LocalTopicRules(), retries=0) for p in (0, 1)]  # fmt: skip
    runner = PartitionRunner(tasks, NoClusters(), RunOptions())  # type: ignore[arg-type]
    job = runner._small = _SmallRound({P0})
    return runner, job


def _started(runner: PartitionRunner) -> set[tuple[str, int]]:
    for w in runner.workers.values():
        w.thread.join(5)
    return set(runner.workers)


def test_a_partition_of_the_round_under_way_gets_no_worker_of_its_own() -> None:
    runner, job = _runner()
    runner._start_workers([P0, P1])  # the whole assignment again
    assert _started(runner) == {P1}
    runner._start_workers([P0], finishing=job)  # the round ended and left P0
    assert job.done and _started(runner) == {P0, P1}


def test_what_was_revoked_while_the_round_ran_is_not_started_unless_owned_again() -> None:
    runner, job = _runner()
    runner.revoke([P0], wait=False)
    assert job.stop.is_set() and job.revoked == {P0}
    runner._start_workers([P0], finishing=job)
    assert _started(runner) == set()

    runner, job = _runner()
    runner.revoke([P0], wait=False)
    runner._start_workers([P0])  # assigned again while the round still ran
    assert _started(runner) == set()
    runner._start_workers([P0], finishing=job)
    assert _started(runner) == {P0}
