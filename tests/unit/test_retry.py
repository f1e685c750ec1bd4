"""The one backoff helper: delays grow to a cap, a deadline ends the retries, a cancel event
ends a wait at once."""

from __future__ import annotations

import threading
import time

import pytest

from partsync.retry import Backoff, retry_on, retry_until


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


class _Refused(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@pytest.mark.parametrize(
    ("outcomes", "deadline", "expected", "calls", "agains"),
    [
        ([7], None, 7, 1, []),  # a value at once
        ([_Refused(1), _Refused(1), 7], None, 7, 3, [1, 1]),  # retriable errors, then a value
        ([_Refused(1), _Refused(2), 7], None, _Refused, 2, [1]),  # not retriable: raised at once
        ([_Refused(1), _Refused(1), 7], 0.0, _Refused, 1, []),  # the backoff gave up: raised
        ([ValueError("bug"), 7], None, ValueError, 1, []),  # not the retried kind at all
    ],
)
def test_retry_on_retries_only_what_it_is_told_and_raises_the_last_error(
    outcomes: list[object],
    deadline: float | None,
    expected: object,
    calls: int,
    agains: list[int],
) -> None:
    left = iter(outcomes)
    called: list[int] = []
    seen: list[int] = []

    def call() -> object:
        called.append(1)
        out = next(left)
        if isinstance(out, Exception):
            raise out
        return out

    def again(e: Exception) -> None:
        assert isinstance(e, _Refused)
        seen.append(e.code)

    def run() -> object:
        return retry_on(
            call,
            Backoff(0.0, 0.0, deadline=deadline),
            lambda e: isinstance(e, _Refused) and e.code == 1,
            again=again,
        )

    if isinstance(expected, type):
        with pytest.raises(expected) as raised:
            run()
        assert raised.value is outcomes[calls - 1]  # the error itself, not a new one
    else:
        assert run() == expected
    assert (len(called), seen) == (calls, agains)


def test_retry_on_makes_a_lazy_backoff_at_the_first_retriable_error() -> None:
    made: list[float] = []
    outcomes = iter([_Refused(1), 7])

    def make() -> Backoff:
        made.append(time.monotonic())
        return Backoff(0.0, 0.0, deadline=0.0)  # gives up at once, once made

    def call() -> int:
        out = next(outcomes)
        if isinstance(out, Exception):
            raise out
        return out

    assert retry_on(lambda: 7, make, lambda e: True) == 7
    assert made == []  # no error, no backoff
    with pytest.raises(_Refused):
        retry_on(call, make, lambda e: True)
    assert len(made) == 1
