"""``Answer``: one partition's part of a pipelined request's response, delivered by the thread
that reads the responses (a shared writer's or fetch lane's receiver)."""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from partsync.errors import ClusterError, PartsyncError

__all__ = ["Answer", "as_error"]

log = logging.getLogger(__name__)

T = TypeVar("T")


# Guards every answer's hand-over (answer, callback, waiter): sections of a few operations, so
# one lock serves them all and an answer costs no lock or event of its own (one per batch).
_LOCK = threading.Lock()


class Answer(Generic[T]):
    """A future for one partition's answer. ``on_done`` runs a callback in the thread that sets
    the answer, so no thread per partition has to wait for it; a thread that does wait gets an
    event made for it."""

    __slots__ = ("_answered", "_callback", "_done", "_error", "_event", "_value", "sent_at")

    def __init__(self) -> None:
        self._value: T | None = None
        self._error: PartsyncError | None = None
        self._callback: Callable[[Answer[T]], None] | None = None
        self._answered = False  # the answer is in (its callback may still be running)
        self._done = False  # ... and its callback has run
        self._event: threading.Event | None = None
        self.sent_at: float | None = None  # time.monotonic() when its request was sent

    def set(self, value: T | None = None, error: PartsyncError | None = None) -> None:
        with _LOCK:
            if self._answered:
                return  # answered once (a failure racing an answer): the first one stands
            self._answered = True
            self._value, self._error = value, error
            callback, self._callback = self._callback, None
        if callback is not None:
            _run_callback(callback, self)
        # Done only after the callback ran: whoever sees it done sees the callback's effects.
        with _LOCK:
            self._done = True
            event = self._event
        if event is not None:
            event.set()

    def on_done(self, callback: Callable[[Answer[T]], None]) -> None:
        """Run ``callback(self)`` once answered: at once in this thread if it already is."""
        with _LOCK:
            if not self._answered:
                self._callback = callback
                return
        _run_callback(callback, self)

    def done(self) -> bool:
        return self._done

    def wait(self, timeout: float) -> bool:
        """Whether it was answered within ``timeout`` seconds."""
        with _LOCK:
            if self._done:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def result(self, timeout: float) -> T | None:
        """The answer; raises the failure, or ClusterError on timeout."""
        if not self.wait(timeout):
            raise ClusterError(f"no answer within {timeout:.0f}s")
        return self.outcome()

    def outcome(self) -> T | None:
        """The answer of a future that is answered (raises its failure)."""
        if self._error is not None:
            # One lost connection fails many partitions' requests with one error: each waiter
            # gets a copy of its own, to locate at its partition.
            raise copy.copy(self._error)
        return self._value


def _run_callback(callback: Callable[[Answer[T]], None], fut: Answer[T]) -> None:
    try:
        callback(fut)
    except Exception:  # a bug in a partition's callback must not take the receiver down
        log.exception("answer callback failed")


def as_error(e: BaseException, cluster: str | None, what: str) -> PartsyncError:
    return e if isinstance(e, PartsyncError) else ClusterError(f"{what}: {e!r}", cluster=cluster)
