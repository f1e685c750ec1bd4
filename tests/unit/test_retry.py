"""The one backoff helper: delays grow to a cap, a deadline ends the retries, a cancel event
ends a wait at once."""

from __future__ import annotations

import threading
import time

from partsync.retry import Backoff, retry_until


def test_delays_double_up_to_the_cap_and_reset() -> None:
    b = Backoff(0.5, 4.0)
    assert [b.next_delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert b.attempts == 6
    b.reset()
    assert b.next_delay() == 0.5


def test_a_set_cancel_event_ends_the_wait_at_once() -> None:
    cancel = threading.Event()
    b = Backoff(30.0, 30.0, cancel=cancel)
    threading.Timer(0.05, cancel.set).start()
    started = time.monotonic()
    assert b.wait() is False
    assert time.monotonic() - started < 5  # not the 30 s delay


def test_the_deadline_ends_retries_and_caps_the_last_wait() -> None:
    b = Backoff(10.0, 10.0, deadline=0.05)
    started = time.monotonic()
    assert b.wait() is False  # the deadline passed during the (capped) wait
    assert time.monotonic() - started < 5
    assert b.expired
    assert b.wait() is False


def test_retry_until_returns_the_first_done_value_or_the_last_one() -> None:
    answers = iter([(False, 1), (False, 2), (True, 3), (True, 4)])
    assert retry_until(lambda: next(answers), Backoff(0.0, 0.0)) == 3
    calls = []

    def never() -> tuple[bool, int]:
        calls.append(1)
        return False, len(calls)

    assert retry_until(never, Backoff(0.0, 0.0, deadline=0.0)) == 1
