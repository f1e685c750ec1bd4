"""A request pipeline: one connection to one broker, shared by many partitions' copies.

The shared writer (Produce) and the fetch lanes (Fetch) work the same way, so they share this
base. Callers ``_enqueue`` an item (one partition's batch or fetch) and hold its ``Answer``
future. A sender thread packs the waiting items into requests, each partition at most once per
request (a later item of the same partition waits for the next request, so a partition's items
go out in submission order) and up to a byte cap, and keeps up to ``max_in_flight`` requests
outstanding. A receiver thread reads the answers, which Kafka sends in request order on a
connection, and hands each item its part; the request its callbacks made ready (if small) it
sends itself, before it reads on, so a steady stream of answers and next items costs no thread
switch. An item whose ``cancelled()`` is true when its request is built is dropped, never sent.

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

import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeVar

from partsync._kafka import Connection
from partsync.errors import ClusterError, PartsyncError
from partsync.io.answer import as_error
from partsync.io.request_queue import Item, RequestQueue

__all__ = ["Item", "Pipeline"]

ItemT = TypeVar("ItemT", bound="Item[Any]")

# The largest request the receiver sends itself (``_receive_loop``): it fits the sockets'
# buffers, so the send never waits for the broker to read.
RECEIVER_SENDS_BYTES = 64 << 10


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
        self._queue: RequestQueue[ItemT] = RequestQueue(
            max_in_flight=max_in_flight,
            max_request_bytes=max_request_bytes,
            pack_partitions=pack_partitions,
            pack_bytes=pack_bytes,
            eager=eager,
            drain_on_close=self.drain_on_close,
            not_sent=self._not_sent,
            closed_error=lambda: ClusterError(f"{self.label} closed", cluster=self.cluster),
        )
        self.requests = 0
        self.items = 0
        # Held from taking a request off the queue until it is recorded as sent, by whichever
        # thread sends it (the sender, or the receiver right after an answer).
        self._send_lock = threading.Lock()
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
        return self._queue.broken is not None or self._queue.closed

    @property
    def expiring(self) -> bool:
        """Its connection's SASL session is near its end (``Connection.expiring``)."""
        return self._conn.expiring

    def idle_for(self) -> float:
        """Seconds since a request was last sent or answered, with nothing pending since (0
        while busy): a broker closes a connection idle for connections.max.idle.ms."""
        return self._queue.idle_for()

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
        self._queue.put(item)

    # -- sending ---------------------------------------------------------------------------------

    def _send_loop(self) -> None:
        try:
            while self._queue.wait_ready():
                self._send_next()
        except PartsyncError as e:
            self._break(e)
        except Exception as e:  # noqa: BLE001 - a bug; fail everything rather than hang
            self._break(ClusterError(f"{self.label} crashed: {e!r}", cluster=self.cluster))
        finally:
            # After any request the receiver is sending: it reads that answer before the end.
            with self._send_lock:
                self._queue.sending_ended()  # tells the receiver nothing more will be sent

    def _send_next(self, max_waiting_bytes: int | None = None, *, block: bool = True) -> bool:
        """Send the next request if one may go now (False if none went). Under the send lock,
        taken with the request: requests go out in the order the receiver reads answers."""
        if not self._send_lock.acquire(blocking=block):
            return False  # the other thread is sending; it looks for the next request after
        try:
            batch = self._queue.take_ready(max_waiting_bytes)
            if batch is None:
                return False
            try:
                self._send(batch)
            except BaseException as e:
                _fail(batch, as_error(e, self.cluster, f"sending {self.api} failed"))
                raise
            now = time.monotonic()
            for it in batch:
                it.future.sent_at = now
            self._after_send(batch)
            # Handed to the receiver only once sent: answers come in send order. If the
            # connection broke meanwhile (the receiver failed everything it knew of), these
            # answers will never come: fail them now, not after a timeout.
            broken = self._queue.sent(batch)
            if broken is not None:
                _fail(batch, broken)
                return False
            self.requests += 1
            self.items += len(batch)
            return True
        finally:
            self._send_lock.release()

    # -- receiving -------------------------------------------------------------------------------

    def _receive_loop(self) -> None:
        try:
            # None: nothing more will be sent, or broken (the sender's sentinel may be cleared).
            while (batch := self._queue.next_sent()) is not None:
                try:
                    answers = self._receive()
                except BaseException as e:
                    # This request is no longer among the queue's requests sent: fail it
                    # here, or its partitions would wait for an answer that never comes.
                    _fail(batch, as_error(e, self.cluster, f"{self.api} failed"))
                    raise
                throttle_ms = self._throttle_ms()
                try:
                    if throttle_ms > 0:
                        self._queue.quiet_for(throttle_ms)
                    self._hand_out(batch, answers, throttle_ms)
                finally:
                    # Only now: the answers' callbacks have submitted these partitions' next
                    # items, which go out together in the next request.
                    self._queue.answered()
                # That request goes from here, without waking the sender thread and then this
                # one again (two thread switches per request: most of a small batch's cost).
                # Only a small one: while this thread sends it reads nothing, and a broker
                # answering an earlier request may wait for that read before reading on.
                self._send_next(RECEIVER_SENDS_BYTES, block=False)
        except PartsyncError as e:
            self._break(e)
        except Exception as e:  # noqa: BLE001 - a bug; fail everything rather than hang
            self._break(ClusterError(f"{self.label} crashed: {e!r}", cluster=self.cluster))

    # -- ending ----------------------------------------------------------------------------------

    def _break(self, err: PartsyncError) -> None:
        """Fail every item not yet answered; the connection is unusable from here on."""
        for it in self._queue.break_(err):
            if not it.future.done():
                it.future.set(error=err)
        self._conn.close()

    def close(self, timeout: float = 5.0) -> None:
        """Stop. With ``drain_on_close`` what is waiting is sent and answered first (for up to
        ``timeout`` seconds per thread); whatever is still unanswered then fails."""
        self._queue.close()
        if not self.drain_on_close:
            # Closing the connection ends a receive in progress.
            self._break(ClusterError(f"{self.label} closed", cluster=self.cluster))
        self._sender.join(timeout=timeout)
        self._receiver.join(timeout=timeout)
        self._break(ClusterError(f"{self.label} closed", cluster=self.cluster))


def _fail(batch: list[ItemT], err: PartsyncError) -> None:
    """Fail every item of a request that will never be answered."""
    for it in batch:
        it.future.set(error=err)
