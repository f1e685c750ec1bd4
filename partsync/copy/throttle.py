"""Byte-rate limits for copies over shared WAN links: a token bucket per process.

``--max-bytes-per-sec`` caps a whole run; ``max_bytes_per_sec`` in a ``[clusters.NAME]`` table
caps what is fetched from that cluster. Every fetcher of the process draws from the same bucket
(``limiter_for``), so the cap holds whatever the number of partitions and connections. With the
Spark engine each executor process has its own bucket: divide the rate by the executor count.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["RateLimiter", "limiter_for"]


class RateLimiter:
    """Token bucket: ``acquire(n)`` returns once ``n`` bytes fit under ``rate`` bytes/s.

    The bucket holds at most ``burst`` bytes (default: one second's worth), so an idle period
    does not let a later burst exceed the rate by more than that. ``granted`` and ``waited``
    account for what went through and how long callers slept; ``first_at``/``released_until``
    bound the time span the grants were spread over.
    """

    def __init__(
        self,
        rate: float,
        burst: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else rate)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = self.burst
        self._last = clock()
        self.granted = 0
        self.waited = 0.0
        # Clock time of the first grant and the latest moment a grant was released: a correct
        # bucket keeps granted <= burst + rate * (released_until - first_at).
        self.first_at: float | None = None
        self.released_until = 0.0

    def acquire(self, n: int, cancel: threading.Event | None = None) -> float:
        """Take ``n`` bytes from the bucket, sleeping as needed; returns the seconds slept.

        Requests larger than the burst are allowed (the bucket goes into debt), so one big
        batch never blocks forever; the debt is paid by later callers' waits. A set ``cancel``
        event ends the wait early (a stopping run must not sleep out its debt).
        """
        if n <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= n
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
            self.granted += n
            self.waited += wait
            if self.first_at is None:
                self.first_at = now
            self.released_until = max(self.released_until, now + wait)
        if wait > 0:
            if cancel is not None:
                cancel.wait(wait)
            else:
                self._sleep(wait)
        return wait


_LIMITERS: dict[tuple[str, int], RateLimiter] = {}
_LIMITERS_LOCK = threading.Lock()


def limiter_for(key: str, rate: int | None) -> RateLimiter | None:
    """The process-wide limiter for ``key`` at ``rate`` bytes/s (None: unlimited)."""
    if not rate:
        return None
    with _LIMITERS_LOCK:
        lim = _LIMITERS.get((key, rate))
        if lim is None:
            lim = _LIMITERS[(key, rate)] = RateLimiter(rate)
        return lim
