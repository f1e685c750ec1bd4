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
import contextlib
import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar

__all__ = ["Job", "Scheduler"]


class Job(Protocol):
    state: str  # "ready", "running", "parked", "done"
    parking: int


J = TypeVar("J", bound=Job)


class Scheduler(Generic[J]):
    def __init__(
        self,
        workers: int,
        run: Callable[[list[J]], None],
        name: str = "rounds",
        *,
        gather: Callable[[J], list[J]] | None = None,
    ) -> None:
        self.max_workers = max(1, workers)
        # A worker runs the job it took together with the queued jobs ``gather`` picks for it
        # (taken in the same hold of the lock, so two workers never split a burst between
        # them; ``take``); by default alone.
        self.run = run
        self.gather = gather or (lambda job: [job])
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
        self._held = 0  # ``hold``s under way: queued jobs wait for the last to end
        self._held_jobs = 0  # jobs queued during them
        self._starting = 0  # workers started that have not looked at the queue yet
        self.closed = False

    @property
    def threads(self) -> int:
        return len(self._threads) + (self._timer_thread is not None)

    def ready(self, job: J) -> None:
        """Queue ``job`` for a worker (the lock held), starting one if none is idle."""
        job.state = "ready"
        self._ready.append(job)
        if self._held:
            self._held_jobs += 1
        else:
            self._kick(1)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Jobs queued inside go to the workers only when it ends, all at once (so a worker's
        ``gather`` sees them all: a source's answer that woke many partitions)."""
        with self.lock:
            self._held += 1
        try:
            yield
        finally:
            with self.lock:
                self._held -= 1
                if not self._held:
                    self._kick(self._held_jobs)
                    self._held_jobs = 0

    def _kick(self, new: int) -> None:
        """Start or wake workers for ``new`` jobs just queued (the lock held). A worker that
        waits or is starting counts as idle until it takes a job: compare with the queue, or a
        burst of jobs would wake one worker and start no other."""
        if not new:
            return
        free = self._idle + self._starting
        start = min(new, max(0, len(self._ready) - free), self.max_workers - len(self._threads))
        for _ in range(start):
            t = threading.Thread(
                target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True
            )
            self._threads.append(t)
            self._starting += 1
            t.start()
        if new > start:
            self._cv.notify(new - start)

    def take(self, fits: Callable[[J], bool], most: int, *, least: int = 1) -> list[J]:
        """Take up to ``most`` queued jobs that ``fits`` accepts, oldest first (the lock held:
        a ``gather``), or none unless there are at least ``least`` of them."""
        found = []
        for job in self._ready:
            if fits(job):
                found.append(job)
                if len(found) == most:
                    break
        if len(found) < max(1, least):
            return []
        taken = set(map(id, found))
        self._ready = collections.deque(j for j in self._ready if id(j) not in taken)
        return found

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
        with self.lock:
            self._starting -= 1  # idle from here, in the same hold of the lock
            while True:
                self._idle += 1
                while not self._ready and not self.closed:
                    self._cv.wait()
                self._idle -= 1
                if self.closed:
                    return
                job = self._ready.popleft()
                job.state = "running"
                jobs = self.gather(job)
                for j in jobs:
                    j.state = "running"
                self.lock.release()
                try:
                    self.run(jobs)
                finally:
                    self.lock.acquire()
