"""The in-flight byte budgets: per copy, and the process-wide one every copy draws on."""

from __future__ import annotations

import threading

from partsync.copy.budget import Budget, SharedBudget


def _blocks(fn: object, *args: object) -> bool:
    """True if ``fn(*args)`` is still waiting after 0.3 s (it is then left to time out)."""
    t = threading.Thread(target=fn, args=args, daemon=True)  # type: ignore[arg-type]
    t.start()
    t.join(0.3)
    return t.is_alive()


def test_prefetches_never_take_the_room_head_chunks_need() -> None:
    shared = SharedBudget(100, reserve=30)
    never = threading.Event()
    assert shared.acquire(70, head=False, closed=never)
    done = threading.Event()
    assert _blocks(lambda: shared.acquire(1, False, done))  # a prefetch waits
    assert shared.acquire(30, head=True, closed=never)  # the head still moves
    assert shared.used == 100
    done.set()  # the waiting prefetch gives up
    assert shared.used == 100


def test_copies_share_the_process_budget() -> None:
    shared = SharedBudget(100, reserve=10)
    a, b = Budget(80, shared), Budget(80, shared)
    assert a.acquire(60, 0)
    assert _blocks(b.acquire, 60, 0)  # b's head waits for a to append
    a.release(60)
    assert b.used == 60 or _wait(lambda: b.used == 60)
    assert shared.used == 60
    b.close()
    a.close()


def _wait(cond: object, timeout: float = 2.0) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def test_close_gives_back_what_a_copy_holds_and_later_releases_are_ignored() -> None:
    shared = SharedBudget(100, reserve=10)
    budget = Budget(100, shared)
    assert budget.acquire(40, 0) and budget.acquire(20, 1)
    budget.close()
    assert shared.used == 0
    budget.release(40)  # the verifier confirming an append after the copy stopped
    assert shared.used == 0 and not budget.acquire(1, 0)


def test_a_head_fetch_larger_than_the_budget_runs_alone() -> None:
    shared = SharedBudget(100, reserve=10)
    assert Budget(1000, shared).acquire(500, 0)
    assert shared.used == 500


def test_a_fetcher_with_answers_to_read_is_told_at_once_that_the_budget_is_full() -> None:
    shared = SharedBudget(1000, reserve=100)
    budget = Budget(300, shared)
    budget.advance(5)
    assert budget.acquire(300, piece=7)
    # A prefetch that does not fit: without wait the answer is immediate, and nothing is held.
    assert not budget.acquire(10, piece=8, wait=False)
    assert budget.used == 300 and shared.used == 300
    assert budget.acquire(10, piece=5, wait=False)  # the head still moves
    # The process budget says no at once too.
    other = Budget(10_000, shared)
    assert not other.acquire(700, piece=1, wait=False)
    assert shared.used == 310


def test_a_prefetch_waiting_for_the_process_budget_gets_the_heads_room_once_it_is_the_head() -> (
    None
):
    shared = SharedBudget(100, reserve=30)
    budget = Budget(1000, shared)
    budget.advance(1)
    assert budget.acquire(70, piece=1)  # the head holds 70: prefetches are at their cap
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(budget.acquire(20, piece=2)), daemon=True)
    t.start()
    t.join(0.3)
    assert t.is_alive()  # piece 2 is a prefetch: 70 + 20 > 100 - 30
    budget.advance(2)  # piece 1 appended (its bytes stay held here): piece 2 is the head now
    t.join(2)
    assert got == [True] and shared.used == 90
