"""The engine's threads: a few workers for all partitions, and one timer.

A job (the engine's record of one partition) is ``ready`` (queued for a worker), ``running``,
``parked`` (waiting for a timer or for someone to ``wake`` it, holding no thread) or ``done``.
Each parking has a number: a wake-up for an older parking (a doorbell or a timer that fired
after the job moved on) is stale and ignored, so a job is never queued twice.

Workers are started as jobs queue up, up to ``workers``; the timer thread when the first
timer is set. Callers share the scheduler's ``lock`` for their own state transitions.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

__all__ = ["Job", "Scheduler"]


class Job(Protocol):
    state: str  # "ready", "running", "parked", "done"
    parking: int


J = TypeVar("J", bound=Job)


class Scheduler(Generic[J]):
    def __init__(self, workers: int, run: Callable[[J], None], name: str = "rounds") -> None:
        self.max_workers = max(1, workers)
        self.run = run
        self.name = name
        # One lock; workers wait on ``_cv`` for ready jobs, the timer thread on ``_timer_cv``
        # for its next due time (a notify meant for a worker must not wake it).
        self.lock = threading.Lock()
        self._cv = threading.Condition(self.lock)
        self._timer_cv = threading.Condition(self.lock)
        self._ready: collections.deque[J] = collections.deque()
        self._timers: list[tuple[float, int, J, int]] = []
        self._seq = itertools.count()
        self._threads: list[threading.Thread] = []
        self._timer_thread: threading.Thread | None = None
        self._idle = 0
        self.closed = False

    @property
    def threads(self) -> int:
        return len(self._threads) + (self._timer_thread is not None)

    def ready(self, job: J) -> None:
        """Queue ``job`` for a worker (the lock held), starting one if none is idle."""
        job.state = "ready"
        self._ready.append(job)
        # A waiting worker counts as idle until it wakes and takes a job: compare with the
        # queue, or a burst of jobs would wake one worker and start no other.
        if len(self._ready) > self._idle and len(self._threads) < self.max_workers:
            t = threading.Thread(
                target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True
            )
            self._threads.append(t)
            t.start()
        else:
            self._cv.notify()

    def park(self, job: J, delay: float | None = None) -> int:
        """Park ``job`` (the lock held), with a timer that wakes it after ``delay`` seconds if
        given. Returns the parking's number, for ``wake``."""
        job.parking += 1
        job.state = "parked"
        if delay is not None:
            due = time.monotonic() + delay
            heapq.heappush(self._timers, (due, next(self._seq), job, job.parking))
            if self._timer_thread is None:
                self._timer_thread = threading.Thread(
                    target=self._tick, name=f"{self.name}-timer", daemon=True
                )
                self._timer_thread.start()
            self._timer_cv.notify()  # it may sleep past this one's due time
        return job.parking

    def wake(self, job: J, parking: int) -> None:
        """Queue ``job`` if it is still parked in that parking (takes the lock)."""
        with self.lock:
            if job.state == "parked" and job.parking == parking and not self.closed:
                self.ready(job)

    def close(self) -> None:
        """End the threads (jobs still queued are not run)."""
        with self.lock:
            self.closed = True
            self._cv.notify_all()
            self._timer_cv.notify_all()
        for t in self._threads:
            t.join(timeout=5)

    def _tick(self) -> None:
        with self.lock:
            while not self.closed:
                now = time.monotonic()
                while self._timers and self._timers[0][0] <= now:
                    _due, _seq, job, parking = heapq.heappop(self._timers)
                    if job.state == "parked" and job.parking == parking:
                        self.ready(job)
                wait = self._timers[0][0] - now if self._timers else None
                self._timer_cv.wait(wait)

    def _work(self) -> None:
        while True:
            with self.lock:
                self._idle += 1
                while not self._ready and not self.closed:
                    self._cv.wait()
                self._idle -= 1
                if self.closed:
                    return
                job = self._ready.popleft()
                job.state = "running"
            self.run(job)
