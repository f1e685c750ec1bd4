"""A fetch lane: many partitions' fetches from one source broker in one Fetch request.

Each partition copy's fetchers used to fetch over a connection of their own, one partition per
Fetch: with hundreds of partitions that was hundreds of connections and a request per answer,
where a consumer asks for all its partitions on a broker at once. A lane is one connection to
one broker shared by every partition copy of the process that fetches from it (a copy with
``K`` connections per broker uses lanes ``0..K-1``, so one partition's pieces still travel over
K connections). Fetchers ``submit`` (topic, partition, offset, size) and get a ``FetchAnswer``
future; the lane packs what is waiting into Fetch requests with each partition at most once
(a later ask of the same partition waits for the next request), keeps up to ``max_in_flight``
requests outstanding (Kafka answers a connection's requests in order) and hands every
partition its part of the answer.

The request's response limit is the sum of its partitions' sizes (at most
``max_request_bytes``, which also caps how many large asks share a request). The broker may
still short a later partition: the first partition with data gets at least one whole batch
even when that batch is larger than it asked for (KIP-74), and those bytes come off the
response's room. Such a partition's part holds no whole batch, which its range read treats as
in a one-partition fetch (it asks again for more), so the cost is a fetch, not a wrong read.

Packing: with nothing in flight a request goes out at once, so a lone partition waits for
nothing. On a near broker, while requests are in flight, asks wait until one is answered or
``PACK_PARTITIONS`` of them are waiting; on a far one (the first round trip took
``FAR_RTT_S``) every ask goes as soon as a request slot is free, since there a round trip
costs more than a request. A throttled answer (KIP-219) holds the lane's next request until
the throttle time has passed.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from partsync._kafka import Connection, FetchedPartition
from partsync.errors import ClusterError, PartsyncError
from partsync.io.answer import Answer, as_error

__all__ = ["FAR_RTT_S", "FetchAnswer", "FetchLane", "FetchReply"]

log = logging.getLogger(__name__)

# A connection whose first round trip took this long is on a link where round trips cost
# (a LAN answers in well under a millisecond).
FAR_RTT_S = 0.01
PACK_PARTITIONS = 16


@dataclass(frozen=True, slots=True)
class FetchReply:
    """A partition's part of a Fetch answer (None: the broker left it out, e.g. throttled) and
    the throttle time the whole answer carried."""

    partition: FetchedPartition | None
    throttle_ms: int


FetchAnswer = Answer[FetchReply]


@dataclass(slots=True)
class _Ask:
    topic: str
    partition: int
    offset: int
    size: int
    max_wait_ms: int
    cancelled: Callable[[], bool]
    future: FetchAnswer


class FetchLane:
    """Fetch requests for many partitions over one connection to one broker."""

    def __init__(
        self, conn: Connection, *, max_in_flight: int = 4, max_request_bytes: int = 48 << 20
    ) -> None:
        self._conn = conn
        self.far = conn.setup_rtt >= FAR_RTT_S
        self._max_request_bytes = max_request_bytes
        lock = threading.Lock()
        self._cv = threading.Condition(lock)  # something to send
        self._rcv = threading.Condition(lock)  # something sent, to be answered
        self._waiting: collections.deque[_Ask] = collections.deque()
        self._sent: collections.deque[list[_Ask] | None] = collections.deque()
        self._max_in_flight = max(1, max_in_flight)
        self._in_flight = 0
        self._answered_since_send = False
        self._quiet_until = 0.0  # monotonic time before which the broker asked for no request
        self._broken: PartsyncError | None = None
        self._closed = False
        self._active_at = time.monotonic()  # when a request was last sent or answered
        self.requests = 0
        self.asks = 0
        self._sender = threading.Thread(target=self._send_loop, daemon=True, name="fetch-send")
        self._receiver = threading.Thread(target=self._receive_loop, daemon=True,
                                          name="fetch-recv")  # fmt: skip
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

    @property
    def cluster(self) -> str | None:
        return self._conn.cluster

    def submit(
        self,
        topic: str,
        partition: int,
        offset: int,
        size: int,
        *,
        max_wait_ms: int = 500,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> FetchAnswer:
        fut = FetchAnswer()
        with self._cv:
            if self._broken is not None or self._closed:
                fut.set(
                    error=self._broken or ClusterError("fetch lane closed", cluster=self.cluster)
                )
                return fut
            self._waiting.append(_Ask(topic, partition, offset, size, max_wait_ms, cancelled, fut))
            if self._can_send():  # else the next answer wakes the sender (once, not per ask)
                self._cv.notify()
        return fut

    # -- sending --------------------------------------------------------------------------

    def _ready(self) -> bool:
        """Something waits and should go now (see Packing). Caller holds the condition."""
        return bool(self._waiting) and (
            self._in_flight == 0
            or self.far
            or self._answered_since_send
            or self._closed
            or len(self._waiting) >= PACK_PARTITIONS
        )

    def _can_send(self) -> bool:
        return self._in_flight < self._max_in_flight and self._ready()

    def _next_request(self) -> list[_Ask]:
        """The waiting asks that may share one request: the first of each partition, in
        submission order, up to the byte cap. Caller holds the condition."""
        taken: list[_Ask] = []
        seen: set[tuple[str, int]] = set()
        size = 0
        keep: collections.deque[_Ask] = collections.deque()
        while self._waiting:
            a = self._waiting.popleft()
            key = (a.topic, a.partition)
            if a.cancelled():
                a.future.set(error=ClusterError("fetch not sent: the copy stopped",
                                                cluster=self.cluster))  # fmt: skip
                continue
            if key in seen or (taken and size + a.size > self._max_request_bytes):
                keep.append(a)
                seen.add(key)  # a later ask of this partition must wait behind this one
                continue
            seen.add(key)
            taken.append(a)
            size += a.size
        self._waiting = keep
        return taken

    def _send_loop(self) -> None:
        try:
            while True:
                with self._cv:
                    while (
                        not self._closed
                        and self._broken is None
                        and not (self._in_flight < self._max_in_flight and self._ready())
                    ):
                        self._cv.wait(0.5)
                    if self._broken is not None or self._closed:
                        return
                    quiet = self._quiet_until - time.monotonic()
                    if quiet > 0:
                        self._cv.wait(quiet)  # throttled: the broker reads nothing until then
                        continue
                    batch = self._next_request()
                    if not batch:
                        continue
                    self._in_flight += 1
                    self._answered_since_send = False
                wanted: dict[str, list[tuple[int, int, int]]] = {}
                for a in batch:
                    wanted.setdefault(a.topic, []).append((a.partition, a.offset, a.size))
                try:
                    self._conn.send_fetch_many(
                        wanted,
                        max_wait_ms=min(a.max_wait_ms for a in batch),
                        min_bytes=1,
                        max_bytes=sum(a.size for a in batch),
                    )
                except BaseException as e:
                    err = as_error(e, self.cluster, "sending Fetch failed")
                    for a in batch:
                        a.future.set(error=err)
                    raise
                now = time.monotonic()
                for a in batch:
                    a.future.sent_at = now
                with self._cv:
                    broken = self._broken
                    if broken is None:
                        self._sent.append(batch)
                        self._rcv.notify()
                if broken is not None:  # the receiver failed what it knew of: fail these too
                    for a in batch:
                        a.future.set(error=broken)
                    return
                self.requests += 1
                self.asks += len(batch)
        except PartsyncError as e:
            self._break(e)
        except Exception as e:  # noqa: BLE001 - a bug; fail everything rather than hang
            self._break(ClusterError(f"fetch lane crashed: {e!r}", cluster=self.cluster))
        finally:
            with self._cv:
                self._sent.append(None)  # tells the receiver nothing more will be sent
                self._rcv.notify()

    # -- receiving ------------------------------------------------------------------------

    def _receive_loop(self) -> None:
        try:
            while True:
                with self._cv:
                    while not self._sent:
                        if self._broken is not None:
                            return  # closed or broken: its sentinel may have been cleared
                        self._rcv.wait(0.5)
                    batch = self._sent.popleft()
                if batch is None:
                    return
                try:
                    answers = self._conn.receive_fetch_many()
                except BaseException as e:
                    err = as_error(e, self.cluster, "Fetch failed")
                    for a in batch:
                        a.future.set(error=err)
                    raise
                throttle_ms = self._conn.last_throttle_ms
                try:
                    with self._cv:
                        if throttle_ms > 0:
                            self._quiet_until = time.monotonic() + throttle_ms / 1000
                    for a in batch:
                        a.future.set(FetchReply(answers.get((a.topic, a.partition)), throttle_ms))
                finally:
                    with self._cv:
                        self._in_flight -= 1
                        self._active_at = time.monotonic()
                        self._answered_since_send = True
                        self._cv.notify()
        except PartsyncError as e:
            self._break(e)
        except Exception as e:  # noqa: BLE001 - a bug; fail everything rather than hang
            self._break(ClusterError(f"fetch lane crashed: {e!r}", cluster=self.cluster))

    def _break(self, err: PartsyncError) -> None:
        """Fail every ask not yet answered; the connection is unusable from here on."""
        with self._cv:
            if self._broken is None:
                self._broken = err
            pending = [a for b in self._sent if b for a in b] + list(self._waiting)
            self._sent.clear()
            self._waiting.clear()
            self._cv.notify_all()
            self._rcv.notify_all()
        for a in pending:
            if not a.future.done():
                a.future.set(error=err)
        self._conn.close()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            self._rcv.notify_all()
        # Closing the connection ends a receive in progress; whatever is unanswered fails now.
        self._break(ClusterError("fetch lane closed", cluster=self.cluster))
        self._sender.join(timeout=5)
        self._receiver.join(timeout=5)
