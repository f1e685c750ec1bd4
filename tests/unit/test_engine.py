"""The copy engine's scheduling (``run.engine``): which partition gets a round when, on how
many threads, and how a stop ends it. The round itself is scripted here (the copy is tested
against real brokers); what is under test is that thousands of partitions cost a few threads,
that a parked follower runs no round until its doorbell rings, that a stop ends a parked
partition at once, and that a failure is retried after its backoff."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from partsync.config import ClusterRef
from partsync.copy.options import CopyOptions
from partsync.errors import ClusterError
from partsync.io.tail import WakeFn
from partsync.plan.comparator import Bounds, plan_partition
from partsync.plan.results import PartitionResult, Status
from partsync.plan.together import TOGETHER_MAX, TOGETHER_MIN
from partsync.plan.topic_rules import LocalTopicRules
from partsync.run.engine import Engine
from partsync.run.task import PartitionTask
from partsync.run.together import TogetherItem, TogetherOutcome

REF = ClusterRef("x", (("127.0.0.1", 1),))
_BOUND_S = 10.0


def _task(p: int, retries: int = 2) -> PartitionTask:
    plan = plan_partition("t", p, Bounds(0, 0), {"x": Bounds(0, 1)})
    return PartitionTask(plan, (REF,), REF, CopyOptions(), LocalTopicRules(), retries=retries)


class Script:
    """A round that answers from a per-partition list of statuses (then: synced at 1)."""

    def __init__(self, answers: dict[int, list[PartitionResult]] | None = None) -> None:
        self.answers = answers or {}
        self.rounds: Counter[int] = Counter()
        self.threads: set[str] = set()
        self.lock = threading.Lock()

    def __call__(
        self, task: PartitionTask, pool: Any, session: Any, **kw: Any
    ) -> tuple[PartitionResult, None]:
        p = task.plan.partition
        with self.lock:
            self.rounds[p] += 1
            self.threads.add(threading.current_thread().name)
            queue = self.answers.get(p)
            if queue:
                return queue.pop(0), None
        return PartitionResult("t", p, Status.SYNCED, 0, 1, 1, batches=1), None


class Bell:
    """A source tail that rings only when told to."""

    def __init__(self) -> None:
        self.watching: dict[tuple[str, int], tuple[int, WakeFn]] = {}
        self.lock = threading.Lock()

    def watch(self, tp: tuple[str, int], offset: int, wake: WakeFn) -> None:
        with self.lock:
            self.watching[tp] = (offset, wake)

    def unwatch(self, tp: tuple[str, int]) -> None:
        with self.lock:
            self.watching.pop(tp, None)

    def ring(self, tp: tuple[str, int]) -> None:
        with self.lock:
            _offset, wake = self.watching.pop(tp)
        wake()


class Pool:
    """Metadata refreshes before a retry are counted, nothing else is reachable."""

    def __init__(self) -> None:
        self.refreshes = 0

    def get(self, ref: ClusterRef) -> Any:
        return self

    def metadata(self, refresh: bool = False) -> None:
        self.refreshes += refresh


def _until(check: Any, what: str) -> None:
    deadline = time.monotonic() + _BOUND_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


class Run:
    """An engine over a scripted round, and the partitions whose rounds ended, in order."""

    def __init__(
        self,
        script: Script,
        *,
        follow: bool,
        tails: Any = None,
        workers: int = 4,
        together: Any = None,
    ):
        self.pool = Pool()
        self.finished: list[tuple[str, int]] = []
        self.engine = Engine(
            self.pool,  # type: ignore[arg-type]
            workers=workers,
            follow=follow,
            tails=tails,
            on_finished=self.finished.append,
            copy=script,
            together=together,
        )


def test_a_thousand_partitions_on_a_few_threads() -> None:
    script = Script()
    run = Run(script, follow=False, workers=4)
    engine = run.engine
    stops = [threading.Event() for _ in range(1000)]
    for p in range(1000):
        assert engine.start(_task(p), stops[p])
    _until(lambda: len(run.finished) == 1000, "every partition's rounds end")
    assert set(script.rounds.values()) == {1}
    assert len(script.threads) <= 4 and engine.threads <= 4
    engine.close()


def test_a_partition_is_not_started_twice_while_its_rounds_go_on() -> None:
    bell = Bell()
    run = Run(Script(), follow=True, tails={"x": bell})
    engine = run.engine
    assert engine.start(_task(0), threading.Event())
    _until(lambda: ("t", 0) in bell.watching, "parked after catching up")
    assert not engine.start(_task(0), threading.Event())
    engine.close()


def test_parked_followers_hold_no_thread_and_run_no_round_until_their_doorbell() -> None:
    script = Script()
    bell = Bell()
    run = Run(script, follow=True, tails={"x": bell}, workers=4)
    engine = run.engine
    for p in range(500):
        engine.start(_task(p), threading.Event())
    _until(lambda: len(bell.watching) == 500, "every follower parks on the tail")
    assert bell.watching[("t", 7)][0] == 1  # waits at the local end its round left
    time.sleep(0.2)
    assert set(script.rounds.values()) == {1}, "no round without a doorbell"
    assert engine.threads <= 4

    bell.ring(("t", 7))
    _until(lambda: script.rounds[7] == 2 and ("t", 7) in bell.watching, "one more round of 7")
    assert sum(script.rounds.values()) == 501
    engine.close()
    assert run.finished and len(run.finished) == 500


def test_a_stop_ends_a_parked_partition_at_once_and_its_doorbell_is_ignored() -> None:
    script = Script()
    bell = Bell()
    run = Run(script, follow=True, tails={"x": bell})
    engine = run.engine
    stop = threading.Event()
    engine.start(_task(0), stop)
    _until(lambda: ("t", 0) in bell.watching, "parked")
    _offset, wake = bell.watching[("t", 0)]
    [ended] = engine.stop([("t", 0)])
    assert ended.is_set() and stop.is_set()
    assert ("t", 0) not in bell.watching  # the tail stops polling it
    wake()  # a doorbell already on its way
    time.sleep(0.1)
    assert script.rounds[0] == 1
    engine.close()


def test_a_partition_stopped_before_its_first_round_still_has_one() -> None:
    """Every partition given gets a result: its first round runs (the stop ends it at once)."""
    script = Script()
    run = Run(script, follow=False)
    engine = run.engine
    stop = threading.Event()
    stop.set()
    engine.start(_task(0), stop)
    _until(lambda: run.finished == [("t", 0)], "ended")
    assert script.rounds[0] == 1
    engine.close()


def test_a_retriable_failure_is_retried_after_the_backoff_with_metadata_read_again() -> None:
    failed = PartitionResult("t", 0, Status.ERROR, 0, 0, 1, error=ClusterError("lost"))
    script = Script({0: [failed]})
    run = Run(script, follow=False)
    engine = run.engine
    t0 = time.monotonic()
    engine.start(_task(0), threading.Event())
    _until(lambda: run.finished == [("t", 0)], "retried and caught up")
    assert script.rounds[0] == 2
    assert time.monotonic() - t0 >= 0.9  # RETRY_FIRST_S: the wait is the backoff's
    assert run.pool.refreshes == 2  # the local cluster's and the source's
    engine.close()


def test_a_stop_during_the_backoff_ends_the_partition_without_another_round() -> None:
    failed = PartitionResult("t", 0, Status.ERROR, 0, 0, 1, error=ClusterError("lost"))
    script = Script({0: [failed]})
    run = Run(script, follow=True)
    engine = run.engine
    engine.start(_task(0), threading.Event())
    _until(lambda: script.rounds[0] == 1, "the first round")
    time.sleep(0.05)
    [ended] = engine.stop([("t", 0)])
    assert ended.wait(_BOUND_S)
    time.sleep(1.2)  # past the backoff
    assert script.rounds[0] == 1
    engine.close()


def test_one_shot_gives_up_after_its_retries() -> None:
    def failed() -> PartitionResult:
        return PartitionResult("t", 0, Status.ERROR, 0, 0, 1, error=ClusterError("lost"))

    script = Script({0: [failed()]})
    run = Run(script, follow=False)
    engine = run.engine
    engine.start(_task(0, retries=0), threading.Event())
    _until(lambda: run.finished == [("t", 0)], "gave up")
    assert script.rounds[0] == 1
    engine.close()


def test_a_burst_of_rounds_after_an_idle_spell_runs_on_as_many_threads() -> None:
    """A waiting worker counts as idle until it takes a job: four rounds queued at once while
    one worker waits run four at a time, not one after another on the one that woke."""
    running = threading.Semaphore(0)
    release = threading.Event()

    class Blocking(Script):
        def __call__(self, task: PartitionTask, pool: Any, session: Any, **kw: Any) -> Any:
            if task.plan.partition > 0:
                running.release()
                assert release.wait(_BOUND_S)
            return super().__call__(task, pool, session, **kw)

    script = Blocking()
    run = Run(script, follow=False, workers=4)
    engine = run.engine
    engine.start(_task(0), threading.Event())
    _until(lambda: run.finished == [("t", 0)], "the first round ends; its worker waits")
    for p in range(1, 5):
        engine.start(_task(p), threading.Event())
    try:
        for _ in range(4):
            assert running.acquire(timeout=_BOUND_S), "four rounds at once"
    finally:
        release.set()
    _until(lambda: len(run.finished) == 5, "every round ends")
    engine.close()


class Together:
    """A round together that records its partitions and answers each from ``answers`` (None:
    handed back), else synced at 1; ``hold`` keeps it from ending until set."""

    def __init__(self, answers: dict[int, PartitionResult | None] | None = None) -> None:
        self.answers = answers or {}
        self.rounds: list[list[int]] = []
        self.items: list[TogetherItem] = []
        self.hold = threading.Event()
        self.hold.set()
        self.lock = threading.Lock()

    def __call__(
        self, items: list[TogetherItem], pool: Any, **kw: Any
    ) -> dict[tuple[str, int], TogetherOutcome]:
        with self.lock:
            self.rounds.append([it.task.plan.partition for it in items])
            self.items.extend(items)
        assert self.hold.wait(_BOUND_S)
        out = {}
        for it in items:
            p = it.task.plan.partition
            default = PartitionResult("t", p, Status.SYNCED, 0, 1, 1, batches=1)
            out[it.key] = TogetherOutcome(self.answers.get(p, default), None)
        return out


def _busy(run: Run, script: Script, p: int) -> threading.Event:
    """Start partition ``p`` and hold the one worker in its round until the event returned is
    set: whatever is queued meanwhile is all ready when the worker takes its next."""
    entered, gate = threading.Event(), threading.Event()

    def held(task: PartitionTask, pool: Any, session: Any, **kw: Any) -> Any:
        if task.plan.partition == p and not gate.is_set():
            entered.set()
            assert gate.wait(_BOUND_S)
        return script(task, pool, session, **kw)

    run.engine.copy = held
    run.engine.start(_task(p), threading.Event())
    assert entered.wait(_BOUND_S), f"the worker is busy with partition {p}"
    return gate


def _burst(run: Run, script: Script, n: int) -> None:
    """Start partitions 1..n while the one worker is busy with partition 0's round."""
    gate = _busy(run, script, 0)
    for p in range(1, n + 1):
        run.engine.start(_task(p), threading.Event())
    gate.set()


def test_a_burst_of_ready_partitions_takes_rounds_together() -> None:
    script, together = Script(), Together()
    run = Run(script, follow=False, workers=1, together=together)
    n = TOGETHER_MAX + 10
    _burst(run, script, n)
    _until(lambda: len(run.finished) == n + 1, "every partition's rounds end")
    # The worker took the first TOGETHER_MAX in one round; the 10 left are fewer than
    # TOGETHER_MIN and get usual rounds.
    assert [len(r) for r in together.rounds] == [TOGETHER_MAX]
    assert sorted(together.rounds[0]) == list(range(1, TOGETHER_MAX + 1))
    assert sum(script.rounds.values()) == 1 + 10
    assert all(it.first and it.session is None for it in together.items)
    run.engine.close()


def test_fewer_ready_partitions_than_the_least_take_their_usual_rounds() -> None:
    script, together = Script(), Together()
    run = Run(script, follow=False, workers=1, together=together)
    _burst(run, script, TOGETHER_MIN - 2)  # with the one taking them: one short
    _until(lambda: len(run.finished) == TOGETHER_MIN - 1, "every partition's rounds end")
    assert together.rounds == []
    run.engine.close()


def test_a_partition_handed_back_gets_its_usual_round_next() -> None:
    script, together = Script(), Together({3: None})
    run = Run(script, follow=False, workers=1, together=together)
    _burst(run, script, TOGETHER_MIN)
    _until(lambda: len(run.finished) == TOGETHER_MIN + 1, "every partition's rounds end")
    assert [len(r) for r in together.rounds] == [TOGETHER_MIN]
    assert script.rounds[3] == 1 and sum(script.rounds.values()) == 2  # 0's and 3's


def test_a_revoke_waits_for_its_partition_to_settle_not_for_the_round_together() -> None:
    script, together = Script(), Together()
    together.hold.clear()  # the round stays under way
    run = Run(script, follow=False, workers=1, together=together)
    _burst(run, script, TOGETHER_MIN)
    _until(lambda: len(together.items) == TOGETHER_MIN, "the round together is under way")
    [ended] = run.engine.stop([("t", 2)])
    item = next(it for it in together.items if it.task.plan.partition == 2)
    assert ended is item.settled and item.stop.is_set() and not ended.is_set()
    item.settled.set()  # the round's copy of 2 has nothing in flight any more
    assert ended.wait(_BOUND_S)
    assert not any(it.stop.is_set() for it in together.items if it is not item)
    together.hold.set()
    _until(lambda: len(run.finished) == TOGETHER_MIN + 1, "every partition's rounds end")
    run.engine.close()


def test_followers_woken_together_take_a_round_together_from_where_they_parked() -> None:
    script, together = Script(), Together()
    bell = Bell()
    run = Run(script, follow=True, tails={"x": bell}, workers=1, together=together)
    _burst(run, script, TOGETHER_MIN)
    _until(lambda: len(bell.watching) == TOGETHER_MIN + 1, "every follower parks")
    together.items.clear()
    gate = _busy(run, script, 99)  # woken while the worker is busy: all ready at once
    for p in range(TOGETHER_MIN + 1):
        bell.ring(("t", p))
    gate.set()
    _until(lambda: len(bell.watching) == TOGETHER_MIN + 2, "parked again, with 99")
    assert [sorted(r) for r in together.rounds[1:]] == [list(range(TOGETHER_MIN + 1))]
    assert all(not it.first and it.last_end == 1 for it in together.items)
    run.engine.close()
