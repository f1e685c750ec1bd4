"""In-flight byte budgets: fetched bytes not yet confirmed appended.

Each partition copy has its own ``Budget`` (``--max-in-flight-bytes``), and every copy in the
process also draws on one ``SharedBudget`` (``--memory-budget``), so the process's buffered
bytes stay bounded however many partitions run at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["Budget", "SharedBudget", "shared_budget"]


class SharedBudget:
    """The process-wide budget all copies draw on.

    Deadlock freedom: a copy's bytes are released as its head piece is appended, which needs no
    budget; bytes for later pieces (prefetch) may only use the budget up to ``limit - reserve``,
    so prefetches can never take the room the head pieces need to move. A head fetch larger
    than the whole budget is let through when nothing else is held (it could never fit)."""

    def __init__(self, limit: int, reserve: int) -> None:
        self.limit = limit
        self.reserve = min(reserve, limit // 2)
        self.used = 0
        self.peak = 0
        self._cv = threading.Condition()

    def acquire(
        self,
        n: int,
        head: bool | Callable[[], bool],
        closed: threading.Event,
        wait: bool = True,
    ) -> bool:
        """Reserve ``n`` bytes (for a head piece or a prefetch); False once ``closed`` is set,
        or at once without ``wait`` if they do not fit now. ``head`` may be asked again while
        waiting: a prefetch that becomes its copy's head meanwhile gets the head's room."""

        def cap() -> int:
            is_head = head() if callable(head) else head
            return self.limit if is_head else self.limit - self.reserve

        with self._cv:
            while not closed.is_set() and self.used + n > cap() and self.used > 0:
                if not wait:
                    return False
                self._cv.wait(0.5)
            if closed.is_set():
                return False
            self.used += n
            self.peak = max(self.peak, self.used)
            return True

    def release(self, n: int) -> None:
        if n:
            with self._cv:
                self.used -= n
                self._cv.notify_all()


_shared: dict[tuple[int, int], SharedBudget] = {}
_shared_lock = threading.Lock()


def shared_budget(limit: int, reserve: int) -> SharedBudget:
    """The process's budget of ``limit`` bytes (one per limit: every copy with the same options
    in this process, including a Spark executor's tasks, shares it)."""
    with _shared_lock:
        key = (limit, reserve)
        if key not in _shared:
            _shared[key] = SharedBudget(limit, reserve)
        return _shared[key]


class Budget:
    """Shared by a copy's fetchers. The piece being appended may always proceed, so a full
    budget held by later pieces can never block the head (no deadlock). With a ``parent``,
    every byte is also drawn from the process-wide budget."""

    def __init__(self, limit: int, parent: SharedBudget | None = None) -> None:
        self.limit = limit
        self.parent = parent
        self.used = 0
        self.peak = 0
        self._cv = threading.Condition()
        self.head = 0  # index of the piece being appended
        self.closed = False
        self._closed = threading.Event()

    def acquire(self, n: int, piece: int, wait: bool = True) -> bool:
        """Reserve ``n`` bytes for a fetch of the piece with index ``piece``; False once closed,
        or at once without ``wait`` if they do not fit now (a fetcher with answers to read
        must not block on them)."""
        with self._cv:
            while not self.closed and piece != self.head and self.used + n > self.limit:
                if not wait:
                    return False
                self._cv.wait(0.5)
            if self.closed:
                return False
            head = piece == self.head
        # Outside our lock: the appender must be able to advance and release meanwhile.
        is_head = (lambda: True) if head else (lambda: piece == self.head)
        if self.parent is not None and not self.parent.acquire(n, is_head, self._closed, wait):
            return False
        with self._cv:
            if self.closed:  # closed meanwhile: close() did not count these bytes
                if self.parent is not None:
                    self.parent.release(n)
                return False
            self.used += n
            self.peak = max(self.peak, self.used)
        return True

    def release(self, n: int) -> None:
        if not n:
            return
        with self._cv:
            if self.closed:
                return  # close() gave everything back already
            self.used -= n
            self._cv.notify_all()
        if self.parent is not None:
            self.parent.release(n)

    def advance(self, head: int) -> None:
        with self._cv:
            self.head = head
            self._cv.notify_all()

    def close(self) -> None:
        """Stop admitting; give back to the process budget whatever this copy still holds
        (its batches are dropped or confirmed by now)."""
        with self._cv:
            if self.closed:
                return
            self.closed = True
            self._closed.set()
            held, self.used = self.used, 0
            self._cv.notify_all()
        if self.parent is not None and held > 0:
            self.parent.release(held)
