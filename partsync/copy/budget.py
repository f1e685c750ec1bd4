"""The in-flight byte budget of one partition copy: fetched bytes not yet confirmed appended."""

from __future__ import annotations

import threading

__all__ = ["Budget"]


class Budget:
    """Shared by a copy's fetchers. The chunk being appended may always proceed, so a full
    budget held by later chunks can never block the head (no deadlock)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        self._cv = threading.Condition()
        self.head = 0  # index of the chunk being appended
        self.closed = False

    def acquire(self, n: int, chunk_index: int) -> bool:
        """Reserve ``n`` bytes for a fetch of chunk ``chunk_index``; False once closed."""
        with self._cv:
            while not self.closed and chunk_index != self.head and self.used + n > self.limit:
                self._cv.wait(0.5)
            if self.closed:
                return False
            self.used += n
            self.peak = max(self.peak, self.used)
            return True

    def release(self, n: int) -> None:
        if n:
            with self._cv:
                self.used -= n
                self._cv.notify_all()

    def advance(self, head: int) -> None:
        with self._cv:
            self.head = head
            self._cv.notify_all()

    def close(self) -> None:
        with self._cv:
            self.closed = True
            self._cv.notify_all()
