"""One retry/backoff helper for every loop that waits and asks again.

Exponential backoff with a cap and an optional deadline; every wait is on an event, so a run
that is asked to stop (signal, deadline, lost ownership) does not sleep out its backoff.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["Backoff", "retry_on", "retry_until"]

_T = TypeVar("_T")


class Backoff:
    """Delays ``first, first*factor, ...`` up to ``cap``; ``wait()`` sleeps the next one.

    ``wait`` returns False (without sleeping past it) once ``deadline`` seconds have passed since
    the Backoff was made, or when ``cancel`` is set: the caller should give up.
    """

    def __init__(
        self,
        first: float = 0.1,
        cap: float = 5.0,
        *,
        factor: float = 2.0,
        deadline: float | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.first = first
        self.cap = cap
        self.factor = factor
        self.cancel = cancel
        self.attempts = 0
        self._delay = first
        self._until = None if deadline is None else time.monotonic() + deadline

    @property
    def expired(self) -> bool:
        return self._until is not None and time.monotonic() >= self._until

    @property
    def remaining(self) -> float | None:
        return None if self._until is None else max(0.0, self._until - time.monotonic())

    def reset(self) -> None:
        self.attempts = 0
        self._delay = self.first

    def next_delay(self) -> float:
        delay = min(self.cap, self._delay)
        self._delay = min(self.cap, self._delay * self.factor)
        self.attempts += 1
        return delay

    def wait(self) -> bool:
        """Sleep the next delay; False if the deadline passed or ``cancel`` was set."""
        if self.expired or (self.cancel is not None and self.cancel.is_set()):
            return False
        delay = self.next_delay()
        left = self.remaining
        if left is not None:
            delay = min(delay, left)
        if self.cancel is not None:
            return not self.cancel.wait(delay) and not self.expired
        time.sleep(delay)
        return not self.expired


def retry_until(
    attempt: Callable[[], tuple[bool, _T]],
    backoff: Backoff,
) -> _T:
    """Call ``attempt`` until it reports done (``(True, value)``) or ``backoff`` gives up; the last
    value is returned either way, so the caller decides what a final failure means."""
    while True:
        done, value = attempt()
        if done or not backoff.wait():
            return value


def retry_on(
    call: Callable[[], _T],
    backoff: Backoff | Callable[[], Backoff],
    retriable: Callable[[Exception], bool],
    *,
    again: Callable[[Exception], object] | None = None,
) -> _T:
    """``call()``'s value; an exception ``retriable`` accepts is followed by a wait and another
    call (``again(error)`` first, e.g. to read fresh metadata) until ``backoff`` gives up, and
    then raised as it is, as is any other exception at once.

    ``backoff`` may be a function making one: it is then made at the first retriable error, so
    its deadline counts from there rather than from the first call."""
    while True:
        try:
            return call()
        except Exception as e:
            if not retriable(e):
                raise
            if not isinstance(backoff, Backoff):
                backoff = backoff()
            if not backoff.wait():
                raise
            if again is not None:
                again(e)
