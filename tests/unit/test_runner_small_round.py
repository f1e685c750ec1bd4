"""The runner never gives a partition a worker while the small first rounds taken together
(``run.small``) may still write it: a KIP-848 assignment that grows calls ``assigned`` with
the whole assignment again, and a worker beside the round would append to the same partition
under another epoch. The round's end hands the engine what it left, minus what was revoked
meanwhile. Rounds here fail at once (a pool that reaches no cluster): only which ones
start is under test; the copy itself is tested against real brokers."""

from __future__ import annotations

import threading
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


class Owned:
    """An observer that keeps only what the runner says it owns."""

    owned: list[tuple[str, int]] | None = None

    def set_owned(self, parts: Any) -> None:
        self.owned = sorted(parts)

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def _runner(
    round_parts: tuple[tuple[str, int], ...] = (P0,), observer: Any = None
) -> tuple[PartitionRunner, _SmallRound]:
    tasks = [
        PartitionTask(
            plan_partition("t", p, Bounds(0, 0), {"x": Bounds(0, 1)}),
            (REF,),
            REF,
            CopyOptions(),
            LocalTopicRules(),
            retries=0,
        )
        for p in (0, 1)
    ]
    runner = PartitionRunner(tasks, NoClusters(), RunOptions(), observer=observer)  # type: ignore[arg-type]
    job = _SmallRound(
        set(round_parts),
        {tp: threading.Event() for tp in round_parts},
        {tp: threading.Event() for tp in round_parts},
    )
    runner._small = job
    return runner, job


def _started(runner: PartitionRunner) -> set[tuple[str, int]]:
    """The partitions handed to the engine (their rounds end at once here)."""
    return set(runner.engine.keys())


def test_a_partition_of_the_round_under_way_gets_no_worker_of_its_own() -> None:
    runner, job = _runner()
    runner._start_workers([P0, P1])  # the whole assignment again
    assert _started(runner) == {P1}
    runner._start_workers([P0], finishing=job)  # the round ended and left P0
    assert job.done and _started(runner) == {P0, P1}


def test_what_was_revoked_while_the_round_ran_is_not_started_unless_owned_again() -> None:
    runner, job = _runner()
    runner.revoke([P0], wait=False)
    assert job.stops[P0].is_set() and job.revoked == {P0}
    runner._start_workers([P0], finishing=job)
    assert _started(runner) == set()

    runner, job = _runner()
    runner.revoke([P0], wait=False)
    runner._start_workers([P0])  # assigned again while the round still ran
    assert _started(runner) == set()
    runner._start_workers([P0], finishing=job)
    assert _started(runner) == {P0}


def test_a_revoke_stops_only_the_partitions_it_takes_from_the_round() -> None:
    # The others' rounds go on: stopped too, a failed one would lose its retry's wait.
    runner, job = _runner((P0, P1))
    runner.revoke([P1], wait=False)
    assert job.stops[P1].is_set() and not job.stops[P0].is_set() and job.revoked == {P1}


def test_the_partitions_the_round_finished_stay_owned() -> None:
    # The metrics' owned partitions: the round finished P0 (no worker), then P1 was revoked.
    observer = Owned()
    runner, job = _runner((P0,), observer)
    runner.assigned([P0, P1], 1)
    assert observer.owned == [P0, P1]
    runner._start_workers([], finishing=job)  # P0 done by the round: nothing left
    runner.revoke([P1], wait=True)
    assert observer.owned == [P0]


def test_a_revoke_waits_for_the_partitions_it_takes_to_settle_not_for_the_round() -> None:
    # The round copies partitions of any size now: waiting for its end would hold a
    # rebalance for as long as its biggest copy takes.
    runner, job = _runner((P0, P1))
    revoking = threading.Thread(target=runner.revoke, args=([P1],), kwargs={"wait": True})
    revoking.start()
    revoking.join(0.3)
    assert revoking.is_alive()  # P1 may still have an append in flight
    job.settled[P1].set()
    revoking.join(5)
    assert not revoking.is_alive() and not job.settled[P0].is_set()
