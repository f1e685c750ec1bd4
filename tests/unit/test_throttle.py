"""The token bucket behind --max-bytes-per-sec, on a fake clock (no real sleeping)."""

from __future__ import annotations

import pytest

from partsync.copy.throttle import RateLimiter, limiter_for


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_rate_holds_over_many_acquires() -> None:
    t = FakeTime()
    lim = RateLimiter(1000, clock=t.clock, sleep=t.sleep)
    for _ in range(100):
        lim.acquire(250)
    # 25,000 bytes at 1,000 B/s with a one-second burst: at least 24 s must have passed.
    assert t.now == pytest.approx(24.0)
    assert lim.granted == 25_000 and lim.waited == pytest.approx(24.0)
    assert lim.granted <= lim.burst + lim.rate * (lim.released_until - lim.first_at)


def test_idle_time_refills_only_up_to_the_burst() -> None:
    t = FakeTime()
    lim = RateLimiter(100, burst=200, clock=t.clock, sleep=t.sleep)
    t.now = 1000.0  # long idle
    assert lim.acquire(200) == 0.0
    assert lim.acquire(100) == pytest.approx(1.0)


def test_a_request_bigger_than_the_burst_goes_into_debt_instead_of_blocking_forever() -> None:
    t = FakeTime()
    lim = RateLimiter(10, clock=t.clock, sleep=t.sleep)
    assert lim.acquire(100) == pytest.approx(9.0)
    assert lim.acquire(10) == pytest.approx(1.0)


def test_limiters_are_shared_per_key_and_rate() -> None:
    assert limiter_for("x", None) is None
    assert limiter_for("x", 5) is limiter_for("x", 5)
    assert limiter_for("x", 5) is not limiter_for("y", 5)
    with pytest.raises(ValueError):
        RateLimiter(0)
