"""A request pipeline: one connection to one broker, shared by many partitions' copies.

The shared writer (Produce) and the fetch lanes (Fetch) work the same way, so they share this
base. Callers ``_enqueue`` an item (one partition's batch or fetch) and hold its ``Answer``
future. A sender thread packs the waiting items into requests, each partition at most once per
request (a later item of the same partition waits for the next request, so a partition's items
go out in submission order) and up to a byte cap, and keeps up to ``max_in_flight`` requests
outstanding. A receiver thread reads the answers, which Kafka sends in request order on a
connection, and hands each item its part. An item whose ``cancelled()`` is true when its
request is built is dropped, never sent.

Packing: with nothing in flight a request goes out at once, so a lone partition waits for
nothing. While requests are in flight, waiting items go out once the next answer has been
handed out (whatever its callbacks submitted then shares one request), or at once when they
come from ``pack_partitions`` partitions or hold ``pack_bytes``, or always where ``eager``
(a far broker, where a round trip costs more than a request). A throttled answer (KIP-219)
holds the next request until the throttle time has passed.

Once the connection fails, every item not yet answered fails with that error and the pipeline
is ``broken``: its owner replaces it (``SharedPipelines._shared``).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from partsync._kafka import Connection
from partsync.errors import ClusterError, PartsyncError
from partsync.io.answer import Answer, as_error

__all__ = ["Item", "Pipeline"]

T = TypeVar("T")
ItemT = TypeVar("ItemT", bound="Item[Any]")


@dataclass(slots=True)
class Item(Generic[T]):
    topic: str
    partition: int
    size: int  # bytes this item adds to a request (or asks the broker for)
    cancelled: Callable[[], bool]
    future: Answer[T]


class Pipeline(Generic[ItemT]):
    """Requests for many partitions over one connection; subclasses say how a request is sent
    and its answer read (``_send``, ``_receive``, ``_hand_out``)."""

    api: ClassVar[str] = "request"  # the request's name, for errors and thread names
    label: ClassVar[str] = "pipeline"  # what the pipeline is called in errors
    # On close: send what is waiting first (appends a copy is counting on), or fail it at once.
    drain_on_close: ClassVar[bool] = False

    def __init__(
        self,
        conn: Connection,
        *,
        max_in_flight: int,
        max_request_bytes: int,
        pack_partitions: int,
        pack_bytes: int | None = None,
        eager: bool = False,
    ) -> None:
        self._conn = conn
        self._max_in_flight = max(1, max_in_flight)
        self._max_request_bytes = max_request_bytes
        self._pack_partitions = pack_partitions
        self._pack_bytes = pack_bytes
        self._eager = eager
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
        self._broken: PartsyncError | None = None
        self._closed = False
        self._active_at = time.monotonic()  # when a request was last sent or answered
        self.requests = 0
        self.items = 0
        name = self.api.lower()
        self._sender = threading.Thread(target=self._send_loop, daemon=True, name=f"{name}-send")
        self._receiver = threading.Thread(
            target=self._receive_loop, daemon=True, name=f"{name}-recv"
        )

    def _start(self) -> None:
        """Start the threads (the subclass's ``__init__`` calls this last)."""
        self._sender.start()
        self._receiver.start()

    @property
    def cluster(self) -> str | None:
        return self._conn.cluster

    @property
    def broken(self) -> bool:
        return self._broken is not None or self._closed

    @property
    def expiring(self) -> bool:
        """Its connection's SASL session is near its end (``Connection.expiring``)."""
        return self._conn.expiring

    def idle_for(self) -> float:
        """Seconds since a request was last sent or answered, with nothing pending since (0
        while busy): a broker closes a connection idle for connections.max.idle.ms."""
        with self._cv:
            if self._in_flight or self._waiting:
                return 0.0
            return time.monotonic() - self._active_at

    # -- what subclasses say -----------------------------------------------------------------

    def _send(self, batch: list[ItemT]) -> None:
        """Send one request holding ``batch``."""
        raise NotImplementedError

    def _receive(self) -> Mapping[tuple[str, int], Any]:
        """Read the next answer: each partition's part, by (topic, partition)."""
        raise NotImplementedError

    def _hand_out(
        self, batch: list[ItemT], answers: Mapping[tuple[str, int], Any], throttle_ms: int
    ) -> None:
        """Set each item's future from its part of the answer (which asked for ``throttle_ms``
        of quiet)."""
        raise NotImplementedError

    def _not_sent(self) -> PartsyncError:
        """The error of an item dropped because its ``cancelled()`` said so."""
        return ClusterError(f"{self.api.lower()} not sent: the copy stopped", cluster=self.cluster)

    def _throttle_ms(self) -> int:
        """How long the answer just read asked this client to send nothing (KIP-219)."""
        return 0

    def _after_send(self, batch: list[ItemT]) -> None:
        """Called once ``batch`` went out (e.g. to drop buffers it no longer needs)."""

    # -- submitting ----------------------------------------------------------------------------

    def _enqueue(self, item: ItemT) -> None:
        with self._cv:
            if self._broken is not None or self._closed:
                item.future.set(
                    error=self._broken or ClusterError(f"{self.label} closed", cluster=self.cluster)
                )
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
            or self._closed
            or len(self._waiting) >= self._pack_partitions
            or (self._pack_bytes is not None and self._waiting_bytes >= self._pack_bytes)
        )

    def _can_send(self) -> bool:
        return self._in_flight < self._max_in_flight and self._ready()

    def _next_request(self) -> list[ItemT]:
        """The waiting items that may share one request: the first of each partition, in
        submission order, up to the byte cap. Caller holds the condition."""
        taken: list[ItemT] = []
        seen: set[tuple[str, int]] = set()
        size = 0
        keep: collections.deque[ItemT] = collections.deque()
        for it in self._waiting:
            key = (it.topic, it.partition)
            if it.cancelled():
                it.future.set(error=self._not_sent())
                continue
            if key in seen or (taken and size + it.size > self._max_request_bytes):
                keep.append(it)
                seen.add(key)  # a later item of this partition must wait behind this one
                continue
            seen.add(key)
            taken.append(it)
            size += it.size
        self._waiting = keep
        self._waiting_bytes = sum(it.size for it in keep)
        return taken

    def _take_request(self) -> list[ItemT] | None:
        """Wait until a request should go and build it; None once the pipeline ends."""
        with self._cv:
            while True:
                if self._broken is not None:
                    return None
                if self._closed and not (self.drain_on_close and self._waiting):
                    return None
                if self._can_send():
                    quiet = self._quiet_until - time.monotonic()
                    if quiet <= 0:
                        batch = self._next_request()
                        if batch:
                            # Counted now, not once sent: an answer handed out during the send
                            # must still let what its callbacks submitted go out next.
                            self._in_flight += 1
                            self._answered_since_send = False
                            return batch
                        continue
                    self._cv.wait(quiet)  # throttled: the broker reads nothing until then
                    continue
                self._cv.wait(0.5)

    def _send_loop(self) -> None:
        try:
            while (batch := self._take_request()) is not None:
                try:
                    self._send(batch)
                except BaseException as e:
                    err = as_error(e, self.cluster, f"sending {self.api} failed")
                    for it in batch:
                        it.future.set(error=err)
                    raise
                now = time.monotonic()
                for it in batch:
                    it.future.sent_at = now
                self._after_send(batch)
                # Handed to the receiver only once sent: answers come in send order. If the
                # connection broke meanwhile (the receiver failed everything it knew of), these
                # answers will never come: fail them now, not after a timeout.
                with self._cv:
                    broken = self._broken
                    if broken is None:
                        self._sent.append(batch)
                        self._rcv.notify()
                if broken is not None:
                    for it in batch:
                        it.future.set(error=broken)
                    return
                self.requests += 1
                self.items += len(batch)
        except PartsyncError as e:
            self._break(e)
        except Exception as e:  # noqa: BLE001 - a bug; fail everything rather than hang
            self._break(ClusterError(f"{self.label} crashed: {e!r}", cluster=self.cluster))
        finally:
            with self._cv:
                self._sent.append(None)  # tells the receiver nothing more will be sent
                self._rcv.notify()

    # -- receiving -------------------------------------------------------------------------------

    def _receive_loop(self) -> None:
        try:
            while True:
                with self._cv:
                    while not self._sent:
                        if self._broken is not None:
                            return  # broken: the sender's sentinel may have been cleared
                        self._rcv.wait(0.5)
                    batch = self._sent.popleft()
                if batch is None:
                    return
                try:
                    answers = self._receive()
                except BaseException as e:
                    # This request is no longer in ``_sent``: fail it here, or its partitions
                    # would wait for an answer that never comes.
                    err = as_error(e, self.cluster, f"{self.api} failed")
                    for it in batch:
                        it.future.set(error=err)
                    raise
                throttle_ms = self._throttle_ms()
                try:
                    if throttle_ms > 0:
                        with self._cv:
                            self._quiet_until = time.monotonic() + throttle_ms / 1000
                    self._hand_out(batch, answers, throttle_ms)
                finally:
                    # Only now: the answers' callbacks have submitted these partitions' next
                    # items, which go out together in the next request.
                    with self._cv:
                        self._in_flight -= 1
                        self._active_at = time.monotonic()
                        self._answered_since_send = True
                        self._cv.notify()
        except PartsyncError as e:
            self._break(e)
        except Exception as e:  # noqa: BLE001 - a bug; fail everything rather than hang
            self._break(ClusterError(f"{self.label} crashed: {e!r}", cluster=self.cluster))

    # -- ending ----------------------------------------------------------------------------------

    def _break(self, err: PartsyncError) -> None:
        """Fail every item not yet answered; the connection is unusable from here on."""
        with self._cv:
            if self._broken is None:
                self._broken = err
            pending = [it for b in self._sent if b for it in b] + list(self._waiting)
            self._sent.clear()
            self._waiting.clear()
            self._waiting_bytes = 0
            self._cv.notify_all()
            self._rcv.notify_all()
        for it in pending:
            if not it.future.done():
                it.future.set(error=err)
        self._conn.close()

    def close(self, timeout: float = 5.0) -> None:
        """Stop. With ``drain_on_close`` what is waiting is sent and answered first (for up to
        ``timeout`` seconds per thread); whatever is still unanswered then fails."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            self._rcv.notify_all()
        if not self.drain_on_close:
            # Closing the connection ends a receive in progress.
            self._break(ClusterError(f"{self.label} closed", cluster=self.cluster))
        self._sender.join(timeout=timeout)
        self._receiver.join(timeout=timeout)
        self._break(ClusterError(f"{self.label} closed", cluster=self.cluster))
