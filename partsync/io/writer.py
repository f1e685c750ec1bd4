"""A shared writer per local broker: many partitions' batches in one Produce request.

Partition copies submit rewritten batches; the writer packs whatever is waiting into Produce
requests with at most one batch per partition (Apache Kafka's rule for client appends), keeps a
few requests in flight on one connection, and hands each partition's answer back through a
``ProduceFuture`` whose callback checks it for the partition (base offset, error code). Each
partition's batches go out in submission order, one request after another, so the idempotent
sequence still orders them; a partition that has stopped (``cancelled()``) has its waiting
batches dropped, never sent.

Packing: a request goes out at once when none is in flight, so a lone partition waits for
nothing. While requests are in flight, waiting batches go out once the next answer has been
handed to its partitions, or at once when they already fill ``PACK_BYTES`` or come from
``PACK_PARTITIONS`` partitions. A partition has one append in flight, and its next batch is
usually submitted by the callback of the answer before (see the appender), so the partitions
answered together are sent together again, with no extra round trip. Sending every batch the
moment it arrived made requests of about two batches each: twice the local broker's work per
batch, and the client's.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from partsync._kafka import Connection, ProducedPartition
from partsync._kafka.raw import Buffer, Parts
from partsync.errors import Cancelled, ClusterError, PartsyncError
from partsync.io.answer import Answer, as_error

__all__ = ["ProduceFuture", "SharedWriter"]

log = logging.getLogger(__name__)

# While requests are in flight, waiting batches go out as soon as they reach either bound.
PACK_BYTES = 1 << 20
PACK_PARTITIONS = 16


# One partition's answer in a Produce response (its callback runs in the writer's receiver).
ProduceFuture = Answer[ProducedPartition]


def _as_error(e: BaseException, cluster: str | None, what: str = "Produce failed") -> PartsyncError:
    return as_error(e, cluster, what)


@dataclass
class _Submission:
    topic: str
    partition: int
    data: Buffer | Parts
    cancelled: Callable[[], bool]
    future: ProduceFuture


class SharedWriter:
    """Produce requests for many partitions over one connection to one broker."""

    def __init__(
        self,
        conn: Connection,
        *,
        max_in_flight: int = 5,
        max_request_bytes: int = 16 << 20,
        timeout_ms: int = 30_000,
    ) -> None:
        self._conn = conn
        self._timeout_ms = timeout_ms
        self._max_request_bytes = max_request_bytes
        # One lock, two conditions: a submission wakes the sender only, a sent request the receiver.
        lock = threading.Lock()
        self._cv = threading.Condition(lock)  # something to send
        self._rcv = threading.Condition(lock)  # something sent, to be answered
        self._waiting: collections.deque[_Submission] = collections.deque()
        self._sent: collections.deque[list[_Submission] | None] = collections.deque()
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._in_flight = 0  # requests sent and not yet answered
        self._answered_since_send = False  # an answer was handed out since the last request
        self._waiting_bytes = 0
        self._broken: PartsyncError | None = None
        self._closed = False
        self._active_at = time.monotonic()  # when a request was last sent or answered
        self.requests = 0
        self.batches = 0
        self._sender = threading.Thread(target=self._send_loop, daemon=True, name="writer-send")
        self._receiver = threading.Thread(
            target=self._receive_loop, daemon=True, name="writer-recv"
        )
        self._sender.start()
        self._receiver.start()

    @property
    def broken(self) -> bool:
        return self._broken is not None or self._closed

    def idle_for(self) -> float:
        """Seconds since a request was last sent or answered, with nothing pending since (0
        while busy): a broker closes a connection idle for connections.max.idle.ms."""
        with self._cv:
            if self._in_flight or self._waiting:
                return 0.0
            return time.monotonic() - self._active_at

    def submit(
        self, topic: str, partition: int, data: Buffer | Parts, cancelled: Callable[[], bool]
    ) -> ProduceFuture:
        fut = ProduceFuture()
        with self._cv:
            if self._broken is not None or self._closed:
                fut.set(
                    error=self._broken or ClusterError("writer closed", cluster=self._conn.cluster)
                )
                return fut
            self._waiting.append(_Submission(topic, partition, data, cancelled, fut))
            self._waiting_bytes += len(data)
            # Only when it should go now: most submissions come from answer callbacks in the
            # receiver, which wakes the sender once the whole answer is handed out, and a futile
            # wake-up per batch costs a thread switch each.
            if self._ready():
                self._cv.notify()
        return fut

    def _next_request(self) -> list[_Submission]:
        """Take the waiting batches that may share one request: the first of each partition, in
        submission order, up to the size cap. Caller holds the condition."""
        taken: list[_Submission] = []
        seen: set[tuple[str, int]] = set()
        size = 0
        keep: collections.deque[_Submission] = collections.deque()
        while self._waiting:
            s = self._waiting.popleft()
            key = (s.topic, s.partition)
            if s.cancelled():
                s.future.set(error=Cancelled("partition stopped; batch not sent"))
                continue
            if key in seen or (taken and size + len(s.data) > self._max_request_bytes):
                keep.append(s)
                seen.add(key)  # later batches of this partition must wait behind this one
                continue
            seen.add(key)
            taken.append(s)
            size += len(s.data)
        self._waiting = keep
        self._waiting_bytes = sum(len(s.data) for s in keep)
        return taken

    def _ready(self) -> bool:
        """Something waits and should go now (see Packing). Caller holds the condition."""
        return bool(self._waiting) and (
            self._in_flight == 0
            or self._answered_since_send
            or self._closed
            or len(self._waiting) >= PACK_PARTITIONS
            or self._waiting_bytes >= PACK_BYTES
        )

    def _send_loop(self) -> None:
        try:
            while True:
                if not self._slots.acquire(timeout=0.5):
                    if self.broken:
                        return
                    continue
                with self._cv:
                    while not self._ready() and not self._closed and self._broken is None:
                        self._cv.wait(0.5)
                    if self._broken is not None or (self._closed and not self._waiting):
                        self._slots.release()
                        return
                    batch = self._next_request()
                    if batch:
                        # Counted now, not once sent: an answer handed out during the send
                        # must still let what it brought go out next.
                        self._in_flight += 1
                        self._answered_since_send = False
                if not batch:
                    self._slots.release()
                    continue
                by_topic: dict[str, dict[int, Buffer | Parts]] = {}
                for s in batch:
                    by_topic.setdefault(s.topic, {})[s.partition] = s.data
                try:
                    self._conn.send_produce_many(by_topic, acks=-1, timeout_ms=self._timeout_ms)
                except BaseException as e:
                    err = _as_error(e, self._conn.cluster, "sending Produce failed")
                    for s in batch:
                        s.future.set(error=err)
                    raise
                # Sent (never sent again): drop the batches, which are views that keep whole
                # fetch responses alive, rather than hold them until the next request.
                del by_topic
                now = time.monotonic()
                for s in batch:
                    s.data = b""
                    s.future.sent_at = now
                # Handed to the receiver only once sent: the connection matches answers to
                # requests in send order. If the connection broke meanwhile (the receiver saw
                # it die and failed everything it knew of), these answers will never come:
                # fail them now, not after a timeout.
                with self._cv:
                    broken = self._broken
                    if broken is None:
                        self._sent.append(batch)
                        self._rcv.notify()
                if broken is not None:
                    for s in batch:
                        s.future.set(error=broken)
                    return
                self.requests += 1
                self.batches += len(batch)
        except PartsyncError as e:
            self._break(e)
        except Exception as e:  # noqa: BLE001 - a bug; fail everything rather than hang
            self._break(ClusterError(f"writer crashed: {e!r}", cluster=self._conn.cluster))
        finally:
            with self._cv:
                self._sent.append(None)  # tells the receiver nothing more will be sent
                self._rcv.notify()

    def _receive_loop(self) -> None:
        try:
            while True:
                with self._cv:
                    while not self._sent:
                        self._rcv.wait(0.5)
                    batch = self._sent.popleft()
                if batch is None:
                    return
                try:
                    answers = self._conn.receive_produce_many()
                except BaseException as e:
                    # The request being answered is no longer in _sent: fail it here, or its
                    # partitions would wait for an answer that never comes.
                    err = _as_error(e, self._conn.cluster)
                    for s in batch:
                        s.future.set(error=err)
                    raise
                finally:
                    self._slots.release()
                try:
                    for s in batch:
                        res = answers.get((s.topic, s.partition))
                        if res is None:
                            s.future.set(
                                error=ClusterError(
                                    "Produce response lacks the partition",
                                    cluster=self._conn.cluster,
                                    topic=s.topic,
                                    partition=s.partition,
                                )
                            )
                        else:
                            s.future.set(res)
                finally:
                    # Only now: the answers' callbacks have handed this request's partitions
                    # their next batches, which go out together in the next request.
                    with self._cv:
                        self._in_flight -= 1
                        self._active_at = time.monotonic()
                        self._answered_since_send = True
                        self._cv.notify()
        except PartsyncError as e:
            self._break(e)
        except Exception as e:  # noqa: BLE001 - a bug; fail everything rather than hang
            self._break(ClusterError(f"writer crashed: {e!r}", cluster=self._conn.cluster))

    def _break(self, err: PartsyncError) -> None:
        """Fail every batch not yet answered; the connection is unusable from here on."""
        with self._cv:
            if self._broken is None:
                self._broken = err
            pending = [s for b in self._sent if b for s in b] + list(self._waiting)
            self._sent.clear()
            self._waiting.clear()
            self._waiting_bytes = 0
            self._cv.notify_all()
            self._rcv.notify_all()
        for s in pending:
            if not s.future.done():
                s.future.set(error=err)
        self._conn.close()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            self._rcv.notify_all()
        self._sender.join(timeout=self._timeout_ms / 1000 + 5)
        self._receiver.join(timeout=self._timeout_ms / 1000 + 5)
        # Whatever is still waiting or unanswered gets an answer now, not at a timeout.
        self._break(ClusterError("writer closed", cluster=self._conn.cluster))
