"""Rounds taken together (``plan.together``, ``run.together``, ``copy.bulk``): which copies may
be, as a table; and what the round does with a bug, a stop and a fence, without brokers (the
copy itself is tested against real brokers: tests/integration/test_many_small.py)."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future

import pytest

from partsync.config import ClusterRef
from partsync.copy.options import CopyOptions
from partsync.copy.producer import ProducerSession
from partsync.plan.comparator import Bounds, PartitionPlan, PlanPolicy, plan_partition
from partsync.plan.together import SMALL_OFFSETS, TogetherRule, together_ok
from partsync.plan.topic_rules import LocalTopicRules
from partsync.run.task import PartitionTask
from partsync.run.together import TogetherItem, copy_together

EMPTY = Bounds(0, 0)
ONE = TogetherRule()
FAR = TogetherRule(connections_per_broker=4)
HOLES = TogetherRule(fill_holes=True)


def _plan(local: Bounds, **sources: Bounds) -> PartitionPlan:
    return plan_partition("t", 0, local, sources, PlanPolicy(chunk_offsets=100))


TWO = plan_partition(
    "t", 0, EMPTY, {"a": Bounds(0, 150), "b": Bounds(0, 150)}, PlanPolicy(chunk_offsets=100)
)
BIG = plan_partition("t", 0, EMPTY, {"a": Bounds(0, 10**6)})
JUST_SMALL = plan_partition("t", 0, EMPTY, {"a": Bounds(0, SMALL_OFFSETS)})
JUST_BIG = plan_partition("t", 0, EMPTY, {"a": Bounds(0, SMALL_OFFSETS + 1)})


@pytest.mark.parametrize(
    ("plan", "rule", "first", "ok", "why"),
    [
        (_plan(EMPTY, a=Bounds(0, 3)), ONE, True, True, "a few offsets into an empty partition"),
        (_plan(Bounds(40, 40), a=Bounds(0, 45)), ONE, True, True, "empty, its log start moved"),
        (_plan(EMPTY, a=Bounds(0, 3), b=Bounds(0, 2)), ONE, True, True, "one source serves"),
        (_plan(EMPTY, a=Bounds(0, 150)), ONE, True, True, "two chunks, one source"),
        (TWO, ONE, True, False, "two sources serve: compared with each other first"),
        (_plan(EMPTY, a=Bounds(5, 8)), ONE, True, False, "a bootstrap: fillers first"),
        (_plan(Bounds(0, 3), a=Bounds(0, 3)), ONE, False, False, "in sync: nothing to copy"),
        (BIG, ONE, True, True, "big, over one connection per broker"),
        (BIG, FAR, True, False, "big, over K connections: the usual pieces"),
        (JUST_SMALL, FAR, True, True, "small enough for K connections"),
        (JUST_BIG, FAR, True, False, "one offset too many for K connections"),
        # A local log to continue: its last batch is compared in the round, but not in the
        # process's first round of the partition (which may finish a stopped mirror start).
        (_plan(Bounds(0, 2), a=Bounds(0, 3)), ONE, True, False, "continues, first round"),
        (_plan(Bounds(0, 2), a=Bounds(0, 3)), ONE, False, True, "continues, a later round"),
        (_plan(Bounds(0, 2), a=Bounds(0, 3)), HOLES, False, False, "holes filled: usual"),
        (_plan(Bounds(0, 2), a=Bounds(1, 3)), ONE, False, True, "the source holds offset 1"),
        (_plan(Bounds(0, 2), a=Bounds(2, 3)), ONE, False, False, "the source lost the batch"),
        (_plan(Bounds(0, 2), a=Bounds(0, 10**6)), FAR, False, False, "big, continues, K"),
    ],
)
def test_which_copies_are_taken_together(
    plan: PartitionPlan, rule: TogetherRule, first: bool, ok: bool, why: str
) -> None:
    assert together_ok(plan, rule, first_round=first) is ok, why


def _task(
    p: int, *, fresh: bool = True, end: int = 1, opts: CopyOptions = CopyOptions()
) -> PartitionTask:
    plan = plan_partition("t", p, EMPTY, {"a": Bounds(0, end)})
    ref = ClusterRef("x", (("127.0.0.1", 1),))
    return PartitionTask(
        plan,
        (ref,),
        ref,
        opts,
        LocalTopicRules(),
        planned_at=time.monotonic() if fresh else None,
        planned_in=os.getpid(),
    )


def _item(task: PartitionTask, stop: threading.Event | None = None) -> TogetherItem:
    return TogetherItem(
        task, None, stop or threading.Event(), threading.Event(), True, task.plan.local.end
    )


class _Bug:
    """A source whose fetch lane raises what no Kafka error is (a bug in partsync)."""

    def fetch_lane(self, *a: object, **k: object) -> object:
        raise RuntimeError("a bug")


def test_a_bug_while_copying_hands_every_partition_back_and_frees_its_memory() -> None:
    # Nothing was appended: each partition goes the usual way, and the wave's fetch memory
    # is given back (a leak would shrink --memory-budget for the rest of the run).
    from partsync.copy.budget import shared_budget
    from partsync.copy.bulk import SmallCopy, copy_small

    opts = CopyOptions(memory_budget=(3 << 20) + 4099)  # a budget of this test's own
    fenced: Future[ProducerSession | None] = Future()
    fenced.set_result(None)
    copies = [
        SmallCopy(plan_partition("t", p, EMPTY, {"a": Bounds(0, 3)}), LocalTopicRules(), fenced)
        for p in range(3)
    ]
    out = copy_small(copies, {"a": _Bug()}, None, opts)  # type: ignore[arg-type, dict-item]
    assert out == {("t", 0): None, ("t", 1): None, ("t", 2): None}
    assert shared_budget(opts.memory_budget, 4 * opts.fetch_bytes).used == 0


class _Pool:
    """No cluster answers: ``get`` hands out an object whose every call fails the test."""

    def get(self, ref: ClusterRef) -> object:
        return self

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"{name} asked of a cluster")


def test_a_partition_stopped_before_its_round_is_neither_fenced_nor_copied() -> None:
    stopped = threading.Event()
    stopped.set()  # revoked: handed back untouched, settled at once
    items = [_item(_task(p), stopped) for p in range(2)]
    out = copy_together(items, _Pool())  # type: ignore[arg-type]
    assert {k: (o.result, o.session) for k, o in out.items()} == {
        ("t", 0): (None, None),
        ("t", 1): (None, None),
    }
    assert all(it.settled.is_set() for it in items)


def test_a_stopped_partition_settles_only_once_its_fence_has_answered() -> None:
    # A revoke waits for ``settled``: an InitProducerId still on its way would fence the
    # partition's next owner, so handing the partition back is not enough.
    from partsync.copy.bulk import SmallCopy, copy_small

    fence: Future[ProducerSession | None] = Future()
    stop = threading.Event()
    stop.set()
    copy = SmallCopy(
        plan_partition("t", 0, EMPTY, {"a": Bounds(0, 3)}), LocalTopicRules(), fence, stop
    )
    out = copy_small([copy], {}, None, CopyOptions())  # type: ignore[arg-type]
    assert out == {("t", 0): None} and not copy.settled.is_set()
    fence.set_result(None)
    assert copy.settled.is_set()
