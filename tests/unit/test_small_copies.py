"""Which partitions' first rounds are taken together (``copy.bulk.fits_small``,
``fits_together``, ``run.small.choose_small``): only copies that need no check against the
local log, planned moments ago, and enough of them to pay; bigger than one fetch only where
the copy reads over one connection per broker. The copy itself is tested against real brokers
(tests/integration/test_many_small.py)."""

from __future__ import annotations

import os
import time
from concurrent.futures import Future

from partsync.config import ClusterRef
from partsync.copy.bulk import SMALL_OFFSETS, fits_small, fits_together
from partsync.copy.options import CopyOptions
from partsync.copy.producer import ProducerSession
from partsync.plan.comparator import Bounds, PlanPolicy, plan_partition
from partsync.plan.topic_rules import LocalTopicRules
from partsync.run.small import MIN_PARTITIONS, choose_small
from partsync.run.task import PartitionTask

EMPTY = Bounds(0, 0)


def _plan(local: Bounds, **sources: Bounds):  # type: ignore[no-untyped-def]
    return plan_partition("t", 0, local, sources, PlanPolicy(chunk_offsets=100))


def test_a_few_offsets_into_an_empty_local_partition_fit() -> None:
    assert fits_small(_plan(EMPTY, a=Bounds(0, 3)))
    assert fits_small(_plan(Bounds(40, 40), a=Bounds(0, 45)))  # local log start moved up
    assert fits_small(_plan(EMPTY, a=Bounds(0, 3), b=Bounds(0, 2)))  # one source serves
    assert fits_small(_plan(EMPTY, a=Bounds(0, 150)))  # in two chunks, from one source


def test_copies_that_need_more_than_one_fetch_or_a_check_do_not_fit() -> None:
    assert not fits_small(_plan(Bounds(0, 2), a=Bounds(0, 3)))  # a local batch to compare with
    assert not fits_small(_plan(EMPTY, a=Bounds(5, 8)))  # a bootstrap (fillers first)
    # Two sources serve: they must be compared at the chunks' boundary first.
    two = plan_partition(
        "t", 0, EMPTY, {"a": Bounds(0, 150), "b": Bounds(0, 150)}, PlanPolicy(chunk_offsets=100)
    )
    assert len(two.serving) == 2 and not fits_small(two)
    big = plan_partition(
        "t", 0, EMPTY, {"a": Bounds(0, SMALL_OFFSETS + 1)}, PlanPolicy(chunk_offsets=10**6)
    )
    assert not fits_small(big)
    assert not fits_small(_plan(Bounds(0, 3), a=Bounds(0, 3)))  # in sync


def test_copies_bigger_than_one_fetch_fit_together_over_one_connection_per_broker() -> None:
    big = plan_partition("t", 0, EMPTY, {"a": Bounds(0, 10**6)})
    assert not fits_small(big) and fits_together(big, CopyOptions())
    # K connections per broker are for a long fat link: the usual rounds' pieces use them.
    assert not fits_together(big, CopyOptions(connections_per_broker=4))
    assert fits_together(_plan(EMPTY, a=Bounds(0, 3)), CopyOptions(connections_per_broker=4))
    assert not fits_together(_plan(Bounds(0, 2), a=Bounds(0, 10**6)), CopyOptions())


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


def test_taken_together_only_when_enough_fit_and_were_planned_moments_ago() -> None:
    enough = [_task(p) for p in range(MIN_PARTITIONS)]
    assert choose_small(enough) == enough
    assert choose_small(enough[:-1]) == []
    stale = [_task(p, fresh=p != 0) for p in range(MIN_PARTITIONS + 1)]
    assert [t.key for t in choose_small(stale)] == [("t", p) for p in range(1, MIN_PARTITIONS + 1)]
    mixed = [*enough, _task(99, end=SMALL_OFFSETS + 10)]
    assert len(choose_small(mixed)) == MIN_PARTITIONS + 1
    far = CopyOptions(connections_per_broker=2)
    mixed = [*enough, _task(99, end=SMALL_OFFSETS + 10, opts=far)]
    assert len(choose_small(mixed)) == MIN_PARTITIONS


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


def test_a_partition_stopped_before_its_round_is_neither_fenced_nor_copied() -> None:
    import threading

    from partsync.run.small import first_round_small

    tasks = [_task(p) for p in range(2)]
    stops = {t.key: threading.Event() for t in tasks}
    for e in stops.values():
        e.set()  # both revoked: the pool (none here) is never asked for a cluster
    results, rest = first_round_small(tasks, None, stops=stops)  # type: ignore[arg-type]
    assert results == [] and rest == tasks


def test_a_stopped_partition_settles_only_once_its_fence_has_answered() -> None:
    # A revoke waits for ``settled``: an InitProducerId still on its way would fence the
    # partition's next owner, so handing the partition back is not enough.
    import threading

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
