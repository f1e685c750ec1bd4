"""The partitions a group member owns, held as a lease (``io.group``).

The lease runs out when the last heartbeat that succeeded is older than most of the session
timeout; a watchdog then stops the writes, before the coordinator (which waits the whole session
timeout) can give the partitions to another member.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["LEASE_FRACTION", "GroupListener", "Lease", "LeasedStop", "TopicPartition"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# Stop writing when this much of the session timeout has passed since the last heartbeat that
# succeeded: the coordinator only gives the partitions away after all of it has passed.
LEASE_FRACTION = 0.8


class GroupListener(Protocol):
    def assigned(self, parts: list[TopicPartition], generation: int) -> None:
        """This member now owns ``parts`` (start writing those not written yet)."""

    def revoke(self, parts: list[TopicPartition], wait: bool) -> None:
        """Stop writing ``parts``; with ``wait``, return only once the in-flight appends of
        every partition stopped so far are confirmed and nothing more will be sent."""


class Lease:
    def __init__(
        self,
        group: str,
        listener: GroupListener,
        session_timeout_ms: int,
        stopping: threading.Event,
        on_lost: Callable[[], None],
    ) -> None:
        self.group = group
        self.listener = listener
        self._span = LEASE_FRACTION * session_timeout_ms / 1000
        self._stopping = stopping
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._owned: list[TopicPartition] = []
        self._until = 0.0
        # Set by the watchdog when the lease ran out: rejoin to get partitions back.
        self.lost = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name=f"lease-{group}", daemon=True)

    @property
    def owned(self) -> list[TopicPartition]:
        with self._lock:
            return list(self._owned)

    @property
    def span(self) -> float:
        return self._span

    def expired(self) -> bool:
        """Whether the lease has run out now (read without waiting for the watchdog)."""
        return time.monotonic() > self._until

    def shorten(self, session_timeout_ms: int) -> None:
        """The coordinator may expire this member sooner than we were told: lease less."""
        with self._lock:
            self._span = min(self._span, LEASE_FRACTION * session_timeout_ms / 1000)

    def grant(self, parts: list[TopicPartition], sent: float) -> bool:
        """Own ``parts`` from an answer to a request sent at ``sent`` (monotonic clock). False
        (nothing granted) if that answer came too late: the lease it gives has already run out."""
        with self._lock:
            if time.monotonic() >= sent + self._span:
                return False
            self._owned = parts
            self._until = sent + self._span
            return True

    def renew(self, sent: float) -> None:
        with self._lock:
            self._until = sent + self._span

    def revoke(self, parts: list[TopicPartition], wait: bool) -> None:
        """Stop writing ``parts``; they leave ``owned`` once stopped (with ``wait``: once their
        in-flight appends are confirmed)."""
        self.listener.revoke(parts, wait)
        gone = set(parts)
        with self._lock:
            self._owned = [tp for tp in self._owned if tp not in gone]

    def revoke_all(self, wait: bool) -> None:
        parts = self.owned
        if parts or wait:
            self.listener.revoke(parts, wait)
        gone = set(parts)
        with self._lock:
            self._owned = [tp for tp in self._owned if tp not in gone]

    def start(self) -> None:
        self._watchdog.start()

    def join(self, timeout: float) -> None:
        self._watchdog.join(timeout)

    def _watch(self) -> None:
        while not self._stopping.wait(0.1):
            with self._lock:
                expired = bool(self._owned) and time.monotonic() > self._until
            if expired and not self.lost.is_set():
                log.warning(
                    "group %s: no successful heartbeat for %.0f%% of the session timeout; "
                    "stopping writes until the group answers again",
                    self.group,
                    LEASE_FRACTION * 100,
                )
                self._on_lost()
                self.lost.set()
                # Stop the writers now, but leave the partitions in ``owned``: appends may still
                # be in flight, so the member must not report them released. The member's
                # thread waits for the writers (``revoke_all(wait=True)``) and only then lets go.
                self.listener.revoke(self.owned, wait=False)


class LeasedStop(threading.Event):
    """A partition's stop request that also reads as set once the member's lease has run out.

    The watchdog stops the writes when the lease runs out, but only when it next runs: a
    process that was paused (SIGSTOP, a frozen VM, swapping) past its lease resumes all its
    threads at once, and a writer could send a Produce before the watchdog looks. Kafka's epoch
    fencing does not cover that for data older than ``producer.id.expiration.ms`` (the leader
    forgets the producer's epoch once the copied batches' timestamps are that old), so every
    Produce request checks ownership itself, right before it is built (``Pipeline``'s
    ``cancelled()``, through ``copy.sender.Sender``): no append of a partition is sent after
    its owner's lease ran out. ``wait()`` still waits for an explicit ``set()``."""

    def __init__(self, lease: Lease) -> None:
        super().__init__()
        self._lease = lease

    def is_set(self) -> bool:
        return super().is_set() or self._lease.expired()
