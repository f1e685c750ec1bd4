"""What a request pipeline's sender and receiver threads share (``io.pipeline``), under one
lock: the items waiting to be sent and how they are packed into requests, the requests sent and
not yet answered, the broker's throttle, and whether the pipeline is broken or closed.

Nothing here touches the connection: the pipeline's threads do the sending and reading, and
ask this when a request may go, what it holds, and which answer comes next.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from partsync.errors import PartsyncError
from partsync.io.answer import Answer

__all__ = ["Item", "RequestQueue"]

T = TypeVar("T")
ItemT = TypeVar("ItemT", bound="Item[Any]")


@dataclass(slots=True)
class Item(Generic[T]):
    topic: str
    partition: int
    size: int  # bytes this item adds to a request (or asks the broker for)
    cancelled: Callable[[], bool]
    future: Answer[T]


class RequestQueue(Generic[ItemT]):
    """Items waiting, requests in flight, and the rules for when the next request goes (the
    pipeline's Packing)."""

    def __init__(
        self,
        *,
        max_in_flight: int,
        max_request_bytes: int,
        pack_partitions: int,
        pack_bytes: int | None,
        eager: bool,
        drain_on_close: bool,
        not_sent: Callable[[], PartsyncError],
        closed_error: Callable[[], PartsyncError],
    ) -> None:
        self._max_in_flight = max(1, max_in_flight)
        self._max_request_bytes = max_request_bytes
        self._pack_partitions = pack_partitions
        self._pack_bytes = pack_bytes
        self._eager = eager
        self._drain_on_close = drain_on_close
        self._not_sent = not_sent  # the error of an item dropped because it was cancelled
        self._closed_error = closed_error  # the error of an item submitted once closed
        # One lock, two conditions: an item wakes the sender only, a sent request the receiver.
        lock = threading.Lock()
        self._cv = threading.Condition(lock)  # something to send
        self._rcv = threading.Condition(lock)  # something sent, to be answered
        self._waiting: collections.deque[ItemT] = collections.deque()
        self._waiting_bytes = 0
        # Requests sent and not yet answered, in order; None: nothing more will be sent.
        self._sent: collections.deque[list[ItemT] | None] = collections.deque()
        self._in_flight = 0  # counted from when a request is built until its answer is handed out
        self._answered_since_send = False
        self._quiet_until = 0.0  # monotonic time before which the broker asked for no request
        self.broken: PartsyncError | None = None
        self.closed = False
        self._active_at = time.monotonic()  # when a request was last sent or answered

    def idle_for(self) -> float:
        """Seconds since a request was last sent or answered, with nothing pending since (0
        while busy)."""
        with self._cv:
            if self._in_flight or self._waiting:
                return 0.0
            return time.monotonic() - self._active_at

    # -- submitting ----------------------------------------------------------------------------

    def put(self, item: ItemT) -> None:
        """Queue ``item``, or fail it at once where the pipeline is broken or closed."""
        with self._cv:
            if self.broken is not None or self.closed:
                item.future.set(error=self.broken or self._closed_error())
                return
            self._waiting.append(item)
            self._waiting_bytes += item.size
            # Only when it should go now: most items are submitted by answer callbacks in the
            # receiver, which wakes the sender once the whole answer is handed out, and a
            # futile wake-up per item costs a thread switch each.
            if self._can_send():
                self._cv.notify()

    # -- sending ---------------------------------------------------------------------------------

    def _ready(self) -> bool:
        """Something waits and should go now (see Packing). Caller holds the condition."""
        return bool(self._waiting) and (
            self._in_flight == 0
            or self._eager
            or self._answered_since_send
            or self.closed
            or len(self._waiting) >= self._pack_partitions
            or (self._pack_bytes is not None and self._waiting_bytes >= self._pack_bytes)
        )

    def _can_send(self) -> bool:
        return self._in_flight < self._max_in_flight and self._ready()

    def _next_request(self) -> list[ItemT]:
        """The waiting items that may share one request (``_pack``). Caller holds the
        condition."""
        taken, self._waiting = _pack(self._waiting, self._max_request_bytes, self._not_sent)
        self._waiting_bytes = sum(it.size for it in self._waiting)
        return taken

    def _ended(self) -> bool:
        """Nothing more will be sent: broken, or closed with nothing left to drain."""
        return self.broken is not None or (
            self.closed and not (self._drain_on_close and self._waiting)
        )

    def wait_ready(self) -> bool:
        """Wait until a request may go now; False once nothing more will be sent."""
        with self._cv:
            while not self._ended():
                if not self._can_send():
                    self._cv.wait(0.5)
                elif (quiet := self._quiet_until - time.monotonic()) > 0:
                    self._cv.wait(quiet)  # throttled: the broker reads nothing until then
                else:
                    return True
            return False

    def take_ready(self, max_waiting_bytes: int | None = None) -> list[ItemT] | None:
        """The next request's items, if one may go now; None otherwise. Given
        ``max_waiting_bytes`` (the receiver asks) and more than that waiting, or throttled, the
        sender thread is woken to send it (or wait it out) instead."""
        with self._cv:
            if self._ended() or not self._can_send():
                return None
            if self._quiet_until > time.monotonic() or (
                max_waiting_bytes is not None and self._waiting_bytes > max_waiting_bytes
            ):
                self._cv.notify()
                return None
            batch = self._next_request()
            if not batch:
                return None  # every item waiting was cancelled
            # Counted now, not once sent: an answer handed out during the send must still let
            # what its callbacks submitted go out next.
            self._in_flight += 1
            self._answered_since_send = False
            if self._can_send():
                self._cv.notify()  # more may go at once (a far lane's asks): the sender sends it
            return batch

    def sent(self, batch: list[ItemT]) -> PartsyncError | None:
        """``batch`` went out: the receiver reads its answer next after those before it. The
        pipeline's error where it broke meanwhile (that answer will never be read)."""
        with self._cv:
            broken = self.broken
            if broken is None:
                self._sent.append(batch)
                self._rcv.notify()
        return broken

    def sending_ended(self) -> None:
        """Tell the receiver nothing more will be sent."""
        with self._cv:
            self._sent.append(None)
            self._rcv.notify()

    # -- receiving -------------------------------------------------------------------------------

    def next_sent(self) -> list[ItemT] | None:
        """Wait for the next request sent, whose answer is read next; None once nothing more
        will be sent, or the pipeline broke."""
        with self._cv:
            while not self._sent:
                if self.broken is not None:
                    return None  # broken: the sender's sentinel may have been cleared
                self._rcv.wait(0.5)
            return self._sent.popleft()

    def quiet_for(self, throttle_ms: int) -> None:
        """The answer just read asked for ``throttle_ms`` without a request (KIP-219)."""
        with self._cv:
            self._quiet_until = time.monotonic() + throttle_ms / 1000

    def answered(self) -> None:
        """An answer was handed out: what its callbacks submitted may go out now."""
        with self._cv:
            self._in_flight -= 1
            self._active_at = time.monotonic()
            self._answered_since_send = True
            # No wake-up here: the receiver sends what the answer's callbacks submitted itself
            # (``Pipeline._receive_loop``), or has ``take_ready`` wake the sender thread.

    # -- ending ----------------------------------------------------------------------------------

    def break_(self, err: PartsyncError) -> list[ItemT]:
        """The pipeline is broken (by ``err``, unless it was already): the items not yet
        answered, taken off the queue."""
        with self._cv:
            if self.broken is None:
                self.broken = err
            pending = [it for b in self._sent if b for it in b] + list(self._waiting)
            self._sent.clear()
            self._waiting.clear()
            self._waiting_bytes = 0
            self._cv.notify_all()
            self._rcv.notify_all()
        return pending

    def close(self) -> None:
        with self._cv:
            self.closed = True
            self._cv.notify_all()
            self._rcv.notify_all()


def _pack(
    waiting: collections.deque[ItemT], max_bytes: int, not_sent: Callable[[], PartsyncError]
) -> tuple[list[ItemT], collections.deque[ItemT]]:
    """The first waiting item of each partition, in submission order, up to ``max_bytes`` (at
    least one), and the items left waiting; a cancelled item fails with ``not_sent()``."""
    taken: list[ItemT] = []
    seen: set[tuple[str, int]] = set()
    size = 0
    keep: collections.deque[ItemT] = collections.deque()
    for it in waiting:
        key = (it.topic, it.partition)
        if it.cancelled():
            it.future.set(error=not_sent())
            continue
        if key in seen or (taken and size + it.size > max_bytes):
            keep.append(it)
            seen.add(key)  # a later item of this partition must wait behind this one
            continue
        seen.add(key)
        taken.append(it)
        size += it.size
    return taken, keep
